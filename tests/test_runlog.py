import json
import logging
import math

import pytest

from saah_lib.runlog import RunLog, append_jsonl, atomic_write_json, checkpoint_problem, read_jsonl, trained_and_evaluated


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


def make_checkpoint(folder, step):
    """A small checkpoint with the files a trainer writes, each loadable."""
    import random

    import numpy as np
    import torch
    from safetensors.torch import save_file

    folder.mkdir(parents=True)
    save_file({"w": torch.ones(4, 4)}, str(folder / "model.safetensors"))
    (folder / "config.json").write_text('{"model_type": "qwen2"}')
    torch.save({"state": {0: {"exp_avg": torch.zeros(4)}}, "param_groups": [{"lr": 1e-3, "params": [0]}]},
               folder / "optimizer.pt")
    torch.save({"last_epoch": step}, folder / "scheduler.pt")
    torch.save({"python": random.getstate(), "numpy": np.random.get_state(), "cpu": torch.random.get_rng_state()},
               folder / "rng_state.pth")
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    return folder


def tear(path, keep=0.5):
    """Cut a file short, as a crash during writing or a failed copy leaves it."""
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


def test_last_checkpoint_needs_a_trainer_state(tmp_path):
    log = RunLog(tmp_path / "run")
    assert log.last_checkpoint() is None
    make_checkpoint(log.checkpoints_dir / "checkpoint-10", 10)
    make_checkpoint(log.checkpoints_dir / "checkpoint-20", 20)
    (make_checkpoint(log.checkpoints_dir / "checkpoint-30", 30) / "trainer_state.json").unlink()
    assert log.last_checkpoint().name == "checkpoint-20"
    assert log.resume_point() == (log.checkpoints_dir / "checkpoint-20",
                                  {log.checkpoints_dir / "checkpoint-30": "no trainer_state.json (the save was interrupted)"})


def test_an_intact_checkpoint_has_no_problem(tmp_path):
    assert checkpoint_problem(make_checkpoint(tmp_path / "checkpoint-3", 3), 3) is None


@pytest.mark.parametrize("damage, problem", [
    (lambda d: tear(d / "model.safetensors"), "model.safetensors does not load"),
    (lambda d: tear(d / "model.safetensors", keep=0.01), "model.safetensors does not load"),
    (lambda d: (d / "model.safetensors").unlink(), "no model or adapter weights"),
    (lambda d: tear(d / "trainer_state.json"), "trainer_state.json does not parse"),
    (lambda d: (d / "trainer_state.json").write_text('{"global_step": 2}'), "records step 2, not 3"),
    (lambda d: tear(d / "config.json"), "config.json does not parse"),
    (lambda d: tear(d / "optimizer.pt"), "optimizer.pt does not load"),
    (lambda d: tear(d / "optimizer.pt", keep=0.999), "optimizer.pt does not load"),
    (lambda d: tear(d / "scheduler.pt"), "scheduler.pt does not load"),
    (lambda d: tear(d / "rng_state.pth"), "rng_state.pth does not load"),
    (lambda d: (d / "optimizer.pt").write_bytes(b"not a torch file"), "optimizer.pt does not load"),
])
def test_damaged_checkpoint_files_are_named(tmp_path, damage, problem):
    folder = make_checkpoint(tmp_path / "checkpoint-3", 3)
    damage(folder)
    assert problem in checkpoint_problem(folder, 3)


def test_resume_point_falls_back_past_every_damaged_checkpoint(tmp_path):
    log = RunLog(tmp_path / "run")
    folders = {step: make_checkpoint(log.checkpoints_dir / f"checkpoint-{step}", step) for step in (2, 4, 6, 8)}
    tear(folders[8] / "model.safetensors")
    tear(folders[6] / "trainer_state.json")
    tear(folders[2] / "optimizer.pt")  # older than the intact one: not opened, not reported
    checkpoint, damaged = log.resume_point()
    assert checkpoint == folders[4]
    assert list(damaged) == [folders[8], folders[6]]
    tear(folders[4] / "scheduler.pt")
    assert log.resume_point()[0] is None and len(log.resume_point()[1]) == 4


def test_set_aside_moves_a_damaged_checkpoint_out_of_reach_of_rotation(tmp_path):
    from transformers.trainer_utils import sort_checkpoints

    log = RunLog(tmp_path / "run")
    make_checkpoint(log.checkpoints_dir / "checkpoint-2", 2)
    first = make_checkpoint(log.checkpoints_dir / "checkpoint-4", 4)
    tear(first / "model.safetensors")
    moved = log.set_aside(first)
    assert moved == log.checkpoints_dir / "damaged" / "checkpoint-4" and (moved / "model.safetensors").is_file()
    # the same step damaged again later: both copies are kept
    second = make_checkpoint(log.checkpoints_dir / "checkpoint-4", 4)
    assert log.set_aside(second) == log.checkpoints_dir / "damaged" / "checkpoint-4.2"
    # transformers' rotation (save_total_limit) and our own listing see only checkpoint-2
    assert sort_checkpoints(str(log.checkpoints_dir)) == [str(log.checkpoints_dir / "checkpoint-2")]
    assert list(log.checkpoints()) == [2]


def test_is_complete_needs_the_last_step_and_its_evaluation(tmp_path):
    log = RunLog(tmp_path / "run")
    for step in (1, 2):
        log.log_step({"step": step})
    assert not log.is_complete(2)
    log.log_eval({"step": 2, "pass_at_1": 0.1}, [])
    assert log.is_complete(2)
