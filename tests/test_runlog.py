import json
import logging
import math

import pytest

from saah_lib.runlog import RunLog, append_jsonl, atomic_write_json, read_jsonl, trained_and_evaluated


def test_nan_is_written_as_null(tmp_path):
    append_jsonl(tmp_path / "a.jsonl", {"step": 1, "weight_neg_mean": float("nan"), "kl": math.inf})
    assert read_jsonl(tmp_path / "a.jsonl") == [{"step": 1, "weight_neg_mean": None, "kl": None}]


def test_torn_last_line_is_ignored_but_a_torn_middle_line_is_an_error(tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_text('{"step": 1}\n{"step": 2}\n{"ste')
    assert [r["step"] for r in read_jsonl(path)] == [1, 2]
    path.write_text('{"step": 1}\n{"ste\n{"step": 3}\n')
    with pytest.raises(ValueError, match="line 2"):
        read_jsonl(path)


def test_a_finished_file_has_no_torn_tail_and_tolerant_reading_warns(tmp_path, caplog):
    path = tmp_path / "x.jsonl"
    path.write_text('{"a": 1}\n\n{"a": 2}\n{"a": 3, "b"')
    assert read_jsonl(path) == [{"a": 1}, {"a": 2}]  # a log still being written
    with pytest.raises(ValueError, match=r"x.jsonl: line 4: not valid JSON"):
        read_jsonl(path, finished=True)
    path.write_text('{"a": 1}\nnot json\n\n{"a": 2}\n{"a": 3, "b"')
    with caplog.at_level(logging.WARNING):
        assert read_jsonl(path, strict=False) == [{"a": 1}, {"a": 2}]
    assert sum("line 2" in r.message for r in caplog.records) == 1  # only the middle line warns
    assert read_jsonl(tmp_path / "missing.jsonl") == []


def test_complete_means_trained_to_steps_and_evaluated_there():
    assert trained_and_evaluated([1, 2, 3], [0, 3], 3)
    assert not trained_and_evaluated([1, 2, 3], [0, 2], 3)  # no final evaluation
    assert not trained_and_evaluated([1, 2], [0, 3], 3)  # not trained to the end
    assert not trained_and_evaluated([], [3], 3)


def test_atomic_write_leaves_no_temporary_file(tmp_path):
    atomic_write_json(tmp_path / "c.json", {"a": (1, 2)})
    assert json.loads((tmp_path / "c.json").read_text()) == {"a": [1, 2]}
    assert [p.name for p in tmp_path.iterdir()] == ["c.json"]


def test_failed_atomic_write_keeps_the_old_file(tmp_path):
    atomic_write_json(tmp_path / "c.json", {"a": 1})
    with pytest.raises(TypeError):
        atomic_write_json(tmp_path / "c.json", {"a": 2, "b": object()})
    assert json.loads((tmp_path / "c.json").read_text()) == {"a": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["c.json"]


def test_truncate_after_drops_later_steps_everywhere(tmp_path):
    log = RunLog(tmp_path / "run")
    for step in range(1, 6):
        log.log_step({"step": step, "reward_mean": step})
    for step in (0, 2, 4):
        log.log_eval({"step": step, "pass_at_1": 0.5}, [{"id": "x", "correct": True}])
    log.truncate_after(3)
    assert [r["step"] for r in log.train_log()] == [1, 2, 3]
    assert log.evaluated_steps() == {0, 2}
    assert sorted(p.name for p in log.samples_dir.iterdir()) == ["step_0000.jsonl", "step_0002.jsonl"]


def test_config_reuse_with_other_settings_is_refused(tmp_path):
    log = RunLog(tmp_path / "run")
    log.write_config({"method": "sa", "alpha": 0.5, "results_dir": "a"}, {"git_commit": "x"})
    log.write_config({"method": "sa", "alpha": 0.5, "results_dir": "b"}, {"git_commit": "y"})  # same run
    with pytest.raises(ValueError, match="alpha: 0.5 -> 0.25"):
        log.write_config({"method": "sa", "alpha": 0.25, "results_dir": "b"}, {})
    assert log.read_config()["alpha"] == 0.5


def test_last_checkpoint_needs_a_trainer_state(tmp_path):
    log = RunLog(tmp_path / "run")
    assert log.last_checkpoint() is None
    for step, complete in ((10, True), (20, True), (30, False)):
        d = log.checkpoints_dir / f"checkpoint-{step}"
        d.mkdir(parents=True)
        if complete:
            (d / "trainer_state.json").write_text("{}")
    assert log.last_checkpoint().name == "checkpoint-20"


def test_is_complete_needs_the_last_step_and_its_evaluation(tmp_path):
    log = RunLog(tmp_path / "run")
    for step in (1, 2):
        log.log_step({"step": step})
    assert not log.is_complete(2)
    log.log_eval({"step": 2, "pass_at_1": 0.1}, [])
    assert log.is_complete(2)
