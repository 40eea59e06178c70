"""The SmolLM2 study's plan, its progress line, and its check of a committed run's first steps (on fake runs: the
study itself trains a real model for an hour, see docs/real_study.md)."""

import json
import re
import shutil
import time
from dataclasses import asdict
from pathlib import Path

import pytest
from transformers import TrainerControl, TrainerState

from saah_lab.studies import real_study
from saah_lab.studies.verify.bits import compare_run_start
from saah_lab.training.run import load_split
from saah_lib.jsonio import read_json, sha256_of
from saah_lib.method.methods import MAIN_ALPHA
from saah_lib.models.warmstart import BUILD_INFO_FILE, FILES_RECORD, record_files
from saah_lib.paths import SHIPPED_WARM_STARTS, SMOLLM2_WARMSTART_DIR, repo_relative
from saah_lib.rundir.folder import RunDir
from saah_lib.tasks.held_out import content_overlaps, overlap_counts
from saah_lib.tasks.problems import records_sha256
from saah_lib.tasks.synthetic import generate_problems
from tests.models.test_warmstart import invert_tensor_bytes

SHIPPED = SHIPPED_WARM_STARTS / "tiny-warmstart"  # a small model folder the fake warm-up build copies
SHIPPED_WEIGHTS = sha256_of(SHIPPED / "model.safetensors")


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
    assert beat.line(60.0, 4).endswith("4/24 steps trained in 01:00; ETA after the first step")
    RunDir(plan.runs[2].folder).log_step({"step": 1, "reward_mean": 1.0})
    assert beat.line(120.0, 4).endswith("5/24 steps trained in 02:00; ETA 38:00")  # 2 min a step, 19 steps left
    with beat:
        time.sleep(0.2)
    assert re.fullmatch(r"\[\d\d:\d\d\] 5/24 steps trained in 00:00; ETA after the first step",
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


# ---------------------------------------------------------------------- the warm-up cache is checked before use

@pytest.fixture
def fake_build(monkeypatch):
    """The warm-up's build replaced by a copy of the shipped tiny warm start's files; returns the folders built."""
    built = []

    def build_into(folder, settings, progress):
        built.append(folder)
        shutil.copytree(SHIPPED, folder, ignore=shutil.ignore_patterns(BUILD_INFO_FILE, FILES_RECORD))
        return {"build_seconds": 0.0}

    monkeypatch.setattr(real_study, "_build_into", build_into)
    return built


def _committed(tmp_path, weights_sha256: str) -> Path:
    record = {"version": real_study.BUILD_VERSION, "settings": asdict(real_study.WarmUpSettings()),
              "weights_sha256": weights_sha256}
    (tmp_path / "committed.json").write_text(json.dumps(record))
    return tmp_path / "committed.json"


def _invert_and_record(folder: Path) -> None:
    """4,096 bytes of the embeddings inverted, then files.json written from the damaged files (as the code did
    before: a cache without files.json was recorded from what was on disk)."""
    invert_tensor_bytes(folder / "model.safetensors")
    (folder / FILES_RECORD).write_text(json.dumps(record_files(folder)))


def test_a_damaged_warm_up_without_its_record_is_rebuilt_not_recorded(tmp_path, capsys, fake_build):
    out = tmp_path / "smollm2-warmstart"
    assert real_study.build_warm_start(out, progress=False, committed=None)["weights_sha256"] == SHIPPED_WEIGHTS
    (out / FILES_RECORD).unlink()
    invert_tensor_bytes(out / "model.safetensors")
    real_study.build_warm_start(out, progress=False, committed=None)
    assert len(fake_build) == 2
    assert f"{out} is damaged ({FILES_RECORD}, the build's record" in capsys.readouterr().out
    assert real_study.warm_up_weights_sha256(out) == SHIPPED_WEIGHTS


@pytest.mark.parametrize("committed", [False, True], ids=["own record", "committed record"])
def test_a_warm_up_whose_weights_no_record_names_is_rebuilt_naming_the_file(tmp_path, capsys, fake_build,
                                                                              committed):
    out = tmp_path / "smollm2-warmstart"
    real_study.build_warm_start(out, progress=False, committed=None)
    _invert_and_record(out)
    if committed:  # a cache built before build.json recorded its weights: the committed record decides
        info = read_json(out / BUILD_INFO_FILE)
        (out / BUILD_INFO_FILE).write_text(json.dumps({k: v for k, v in info.items() if k != "weights_sha256"}))
    record = _committed(tmp_path, SHIPPED_WEIGHTS) if committed else None
    real_study.build_warm_start(out, progress=False, committed=record)
    assert len(fake_build) == 2
    assert f"{out} is not as built (model.safetensors has sha256 " in capsys.readouterr().out
    assert real_study.warm_up_weights_sha256(out) == SHIPPED_WEIGHTS


def test_a_warm_up_built_here_with_other_weights_than_committed_is_said_to_differ_and_kept(tmp_path, capsys,
                                                                                           fake_build):
    out, other = tmp_path / "smollm2-warmstart", "0" * 64
    for _ in range(2):
        real_study.build_warm_start(out, progress=False, committed=_committed(tmp_path, other))
    assert len(fake_build) == 1  # built once: its own record names its weights
    lines = capsys.readouterr().out
    assert lines.count(f"differ from the committed ones ({tmp_path / 'committed.json'}: {other})") == 2
    # an old cache (no weights hash in its build.json) that the committed record names is used as it is
    info = read_json(out / BUILD_INFO_FILE)
    (out / BUILD_INFO_FILE).write_text(json.dumps({k: v for k, v in info.items() if k != "weights_sha256"}))
    real_study.build_warm_start(out, progress=False, committed=_committed(tmp_path, SHIPPED_WEIGHTS))
    assert len(fake_build) == 1 and "differ" not in capsys.readouterr().out


def test_the_studys_evaluation_problems_are_held_out_by_text_but_not_by_content():
    """The sets the study draws (its warm-up, the matched alpha's prompts, the runs' split) as they are: no
    evaluation question occurs elsewhere, but 87 of the 200 evaluation problems repeat another set's template
    and numbers or calculation chain (issue 61); a future study draws with held_out_by="chain"."""
    settings = real_study.WarmUpSettings()
    warm_up = generate_problems(settings.sft_steps * settings.batch_size, real_study.SFT_SEED_OFFSET + settings.seed,
                                partition="train", id_prefix="sft")
    measured = generate_problems(settings.measure_prompts, real_study.MEASURE_SEED_OFFSET + settings.seed,
                                 partition="train", id_prefix="measure")
    split = load_split(real_study.planned_configs(Path("unused"), 1.9)[0])
    committed = read_json(real_study.REAL_STUDY_ROOT / "baselines" / real_study.BASELINE_NAME / "config.json")["data"]
    assert (records_sha256(split.train), records_sha256(split.eval)) == (
        committed["train_sha256"], committed["eval_sha256"])  # the committed study's sets, unchanged
    overlaps = content_overlaps(split.eval, warm_up=warm_up, measure=measured, train=split.train)
    assert not {p.question for p in split.eval} & {p.question for p in warm_up + measured + split.train}
    assert overlap_counts(overlaps) == {
        "warm_up": {"template and numbers": 36, "calculation chain": 61},
        "measure": {"template and numbers": 0, "calculation chain": 1},
        "train": {"template and numbers": 46, "calculation chain": 68}}
    assert len({o.evaluation.id for o in overlaps}) == 87
