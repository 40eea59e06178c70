
import json
import re

import pytest

from saah_lib.rundir.folder import RunDir, trained_and_evaluated


def test_complete_means_trained_to_steps_and_evaluated_there():
    assert trained_and_evaluated([1, 2, 3], [0, 3], 3)
    assert not trained_and_evaluated([1, 2, 3], [0, 2], 3)  # no final evaluation
    assert not trained_and_evaluated([1, 2], [0, 3], 3)  # not trained to the end
    assert not trained_and_evaluated([], [3], 3)


def test_truncate_after_drops_later_steps_everywhere(tmp_path):
    log = RunDir(tmp_path / "run")
    for step in range(1, 6):
        log.log_step({"step": step, "reward_mean": step})
    for step in (0, 2, 4):
        log.log_eval({"step": step, "pass_at_1": 0.5}, [{"id": "x", "correct": True}])
    log.truncate_after(3)
    assert [r["step"] for r in log.train_log()] == [1, 2, 3]
    assert log.evaluated_steps() == {0, 2}
    assert sorted(p.name for p in log.samples_dir.iterdir()) == ["step_0000.jsonl", "step_0002.jsonl"]


def test_config_reuse_with_other_settings_is_refused(tmp_path):
    log = RunDir(tmp_path / "run")
    log.write_config({"method": "sa", "alpha": 0.5, "results_dir": "a"}, {"git_commit": "x"})
    log.write_config({"method": "sa", "alpha": 0.5, "results_dir": "b"}, {"git_commit": "y"})  # same run
    with pytest.raises(ValueError, match="alpha: 0.5 -> 0.25"):
        log.write_config({"method": "sa", "alpha": 0.25, "results_dir": "b"}, {})
    assert log.read_config()["alpha"] == 0.5


def test_is_complete_needs_the_last_step_and_its_evaluation(tmp_path):
    log = RunDir(tmp_path / "run")
    for step in (1, 2):
        log.log_step({"step": step})
    assert not log.is_complete(2)
    log.log_eval({"step": 2, "pass_at_1": 0.1}, [])
    assert log.is_complete(2)


def test_compile_health_keeps_one_record_per_training_process(tmp_path):
    run = RunDir(tmp_path / "run")
    run.write_compile_health({"from_step": 0, "rollouts": 3})
    run.write_compile_health({"from_step": 0, "rollouts": 5})  # the same process, later: replaced
    run.write_compile_health({"from_step": 10, "rollouts": 2})  # resumed at step 10: added
    assert [p["rollouts"] for p in json.loads(run.compile_health_path.read_text())["processes"]] == [5, 2]
    run.write_compile_health({"from_step": 5, "rollouts": 1})  # resumed earlier: steps 10.. are redone
    assert json.loads(run.compile_health_path.read_text())["processes"] == [
        {"from_step": 0, "rollouts": 5}, {"from_step": 5, "rollouts": 1}]


@pytest.mark.parametrize("alias", ["step_0000060.jsonl", "step_60.jsonl"])
@pytest.mark.parametrize("both", [True, False])
def test_a_second_name_for_a_steps_sample_file_is_an_error_naming_both(tmp_path, run_maker, alias, both):
    from saah_lab.rundir.reader import DamagedResultsError, read_folders

    root = tmp_path / "r"
    run = run_maker(root, "tiny-sa-s1", "tiny", "sa", 0.5, 1, steps=60, eval_every=20)
    samples = run / "eval_samples"
    (samples / alias).write_text((samples / "step_0060.jsonl").read_text().replace("true", "false"))
    if not both:
        (samples / "step_0060.jsonl").unlink()
    with pytest.raises(ValueError) as error:
        RunDir(run).sample_files()
    assert f"{samples / alias}: another name for the samples of step 60, whose file is {samples / 'step_0060.jsonl'}" \
        in str(error.value)
    assert ("(also present)" in str(error.value)) == both
    with pytest.raises(DamagedResultsError, match=re.escape(f"{samples / alias}: another name")):
        read_folders(root)
