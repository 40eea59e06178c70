"""The SmolLM2 study's plan, its progress line, and its check of a committed run's first steps (on fake runs: the
study itself trains a real model for an hour, see docs/real_study.md)."""

import re
import time

import pytest
from transformers import TrainerControl, TrainerState

from saah_lab.studies import real_study
from saah_lab.studies.verify.bits import compare_run_start
from saah_lib.method.methods import MAIN_ALPHA
from saah_lib.paths import SMOLLM2_WARMSTART_DIR, repo_relative
from saah_lib.rundir.folder import RunDir


def test_the_plan_is_grpo_then_ah_and_sa_at_the_papers_alpha_and_the_matched_one(tmp_path):
    plan = real_study.make_plan(tmp_path, 1.9)
    assert [j.name.removeprefix("smollm2-135m-") for j in plan.runs] == [
        "grpo-a0-s0", "grpo-a0-s1", "ah-a0.5-s0", "sa-a0.5-s0", "ah-a1.9-s0", "sa-a1.9-s0"]
    assert [j.id for j in plan.jobs if j.kind != "run"] == ["baseline:smollm2-warmstart"]
    assert MAIN_ALPHA == 0.5 and all(j.num_cpus == 1 and not j.num_gpus for j in plan.jobs)  # bfloat16, on a CPU
    config = plan.runs[0].kwargs["config"]
    assert config["model_name"] == repo_relative(SMOLLM2_WARMSTART_DIR) and config["use_lora"]
    assert (config["dtype"], config["n_eval"], config["max_steps"]) == ("bfloat16", 200, 24)


def test_the_matched_alpha_has_two_significant_digits_and_its_absence_is_an_error():
    found = {"matched_alphas": {"1.5b_mean": {"alpha": 1.8734, "target": 0.36}}}
    assert real_study.matched_alpha(found) == 1.9
    missing = {"matched_alphas": {"1.5b_mean": {"alpha": None, "reason": "no negative rollout"}}}
    with pytest.raises(ValueError, match="no negative rollout"):
        real_study.matched_alpha(missing)


def test_training_stops_after_the_asked_steps():
    stop, control = real_study.StopAfter(3), TrainerControl()
    for step in (1, 2):
        assert not stop.on_step_end(None, TrainerState(global_step=step), control).should_training_stop
    assert stop.on_step_end(None, TrainerState(global_step=3), control).should_training_stop


def test_the_heartbeat_counts_logged_steps_and_gives_the_eta_at_the_pace_so_far(tmp_path, capsys):
    plan = real_study.make_plan(tmp_path, 1.9, steps=4)
    for job in plan.runs[:2]:
        for step in (1, 2):
            RunDir(job.folder).log_step({"step": step, "reward_mean": 1.0})
    beat = real_study.Heartbeat(plan, 0.02)
    assert (beat.logged(), beat.total) == (4, 24)
    assert beat.line(60.0, 4).endswith("4/24 steps trained in 1 min; ETA after the first step")
    RunDir(plan.runs[2].folder).log_step({"step": 1, "reward_mean": 1.0})
    assert beat.line(120.0, 4).endswith("5/24 steps trained in 2 min; ETA 38 min")  # 2 min a step, 19 steps left
    with beat:
        time.sleep(0.2)
    assert re.fullmatch(r"\[\d\d:\d\d\] 5/24 steps trained in 0 min; ETA after the first step",
                        capsys.readouterr().out.strip().splitlines()[-1])


def fake_run(folder, rewards=(1.0, 2.0, 3.0), completion="x", pass_at_1=0.5):
    run = RunDir(folder)
    run.write_config({"method": "sa"}, {})
    run.log_eval({"step": 0, "pass_at_1": pass_at_1, "ci95": 0.07, "n": 200},
                 [{"id": "p0", "correct": True, "completion": completion}])
    for step, reward in enumerate(rewards, 1):
        run.log_step({"step": step, "reward_mean": reward, "step_time": 1.0 + step})


def test_the_check_compares_only_the_steps_rerun(tmp_path):
    fake_run(tmp_path / "committed", rewards=(1.0, 2.0, 3.0))
    fake_run(tmp_path / "rerun", rewards=(1.0, 2.0))
    report = compare_run_start(tmp_path / "committed", tmp_path / "rerun", 2)
    assert report["identical"] and report["close"] and report["verdict"].startswith("identical")


def test_the_check_finds_a_planted_difference_and_judges_the_start_by_its_interval(tmp_path):
    fake_run(tmp_path / "committed")
    fake_run(tmp_path / "changed-step", rewards=(1.0, 2.5))
    report = compare_run_start(tmp_path / "committed", tmp_path / "changed-step", 2)
    assert not report["identical"] and report["train_log"]["largest"]["reward_mean"]["difference"] == 0.5
    assert report["close"]  # the start agrees: another CPU's rounding, not another model
    fake_run(tmp_path / "changed-start", rewards=(1.0, 2.0), completion="y", pass_at_1=0.6)
    report = compare_run_start(tmp_path / "committed", tmp_path / "changed-start", 2)
    assert not report["identical"] and not report["close"] and "outside its 95% interval" in report["verdict"]
    assert report["eval_samples"]["completion_differs"] == {0: 1}
