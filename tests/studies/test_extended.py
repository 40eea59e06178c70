"""The powered extended study: its plan, time estimate, --plan command and the order of its stages."""

import json

import pytest

from saah_lab.analysis.plan import read_plan
from saah_lab.studies import extended as E
from saah_lib.jsonio import write_jsonl
from saah_lib.rundir.folder import RunDir
from saah_lib.rundir.layout import MATCHED_ALPHA_FILE
from saah_lib.training.config import make_config


def test_plan_runs_every_arm_from_every_warm_start_seed_by_seed(tmp_path):
    configs = E.planned_configs(tmp_path, warm_starts=(0, 1), seeds=(0, 1, 2), topk_ks=(5,), matched_alpha=5.9)
    ids = [c.run_id for c in configs]
    assert len(ids) == len(set(ids)) == 2 * 3 * 4 + 1
    assert ids[:8] == ["tiny-grpo-a0-s0", "tiny-sa-a5.9-s0", "tiny-ah-a5.9-s0", "tiny-sa-a0.5-s0",
                       "tiny-grpo-a0-s0-w1", "tiny-sa-a5.9-s0-w1", "tiny-ah-a5.9-s0-w1", "tiny-sa-a0.5-s0-w1"]
    assert ids[-1] == "tiny-sa-a0.5-k5-s0"
    by_id = {c.run_id: c for c in configs}
    assert by_id["tiny-grpo-a0-s2-w1"].model_name == "tiny-warmstart-s1"
    assert by_id["tiny-grpo-a0-s2-w1"].model_label == "tiny-w1"
    assert by_id["tiny-grpo-a0-s2"].model_name == "tiny-warmstart" and by_id["tiny-grpo-a0-s2"].model_label == "tiny"
    # the mini study's runs of the same settings have the same run ids (and, on one CPU, the same logs)
    assert {"tiny-grpo-a0-s0", "tiny-sa-a0.5-s1", "tiny-sa-a5.9-s0", "tiny-ah-a5.9-s0"} <= set(ids)
    without_main = E.planned_configs(tmp_path, (0, 1), (0,), topk_ks=(), main_alpha_sa=False, matched_alpha=5.9)
    assert len(without_main) == 2 * 3


def test_before_the_alpha_is_measured_the_matched_runs_are_placeholders(tmp_path):
    configs = E.planned_configs(tmp_path, warm_starts=(0, 1), seeds=(0, 1), topk_ks=())
    assert {c.trainer.alpha for c in configs} == {0.0, 0.5}
    text = E.describe_plan(tmp_path, configs, configs, 2, (0, 1), (0, 1), measure=False)
    assert "paper-matched alpha: not measured yet" in text
    assert "16 runs planned, 0 already complete, 16 to train" in text
    assert "tiny-ah-a<matched>-s1-w1" in text
    (tmp_path / MATCHED_ALPHA_FILE).write_text(json.dumps({"alpha": 5.9}))
    configs = E.planned_configs(tmp_path, warm_starts=(0, 1), seeds=(0, 1), topk_ks=())
    assert len(configs) == 16 and "tiny-sa-a5.9-s1-w1" in {c.run_id for c in configs}


def test_complete_runs_are_skipped(tmp_path):
    configs = E.planned_configs(tmp_path, warm_starts=(0,), seeds=(0,), topk_ks=(), matched_alpha=5.9)
    done = configs[0]
    log = RunDir(done.run_dir)
    write_jsonl(log.train_log_path, [{"step": done.trainer.max_steps}])
    write_jsonl(log.eval_path, [{"step": done.trainer.max_steps, "pass_at_1": 0.5}])
    assert [c.run_id for c in E.pending(configs)] == [c.run_id for c in configs[1:]]


def test_time_estimate_by_hand_from_a_timings_file(tmp_path):
    timings = tmp_path / "extended_timings.json"
    timings.write_text(json.dumps({"stages": [
        {"stage": "warm start", "wall_s": 0.0, "build_seconds": 300.0}, {"stage": "baseline", "wall_s": 5.0},
        {"stage": "paper-matched alpha", "wall_s": 30.0}, {"stage": "top-K entropy error", "wall_s": 20.0},
        {"stage": "train 3 runs", "wall_s": 200.0, "runs": [{"wall_s": w} for w in (70.0, 72.0, 90.0)]}]}))
    # 12 runs, 2 at a time: 6 rounds of 72 s (the median run)
    assert E.estimate_seconds(12, 2, measure=False, timings_file=timings) == 6 * 72 + 5
    # a warm start to build, two baselines, the alpha measured once, 3 runs of 30 steps, the top-K measurement
    assert E.estimate_seconds(3, 2, steps=30, builds=1, warm_starts=2, alpha_measured=False,
                              timings_file=timings) == 300 + 2 * 5 + 30 + 2 * 36 + 20
    timings.write_text('{"stages": []}')
    with pytest.raises(ValueError, match="extended_timings.json: no stage times"):
        E.estimate_seconds(1, 1, timings_file=timings)


def test_the_estimate_of_the_committed_plan_is_near_what_the_committed_study_took():
    took = sum(s["wall_s"] for s in json.loads(E.MEASURED_TIMINGS.read_text())["stages"])
    n = len(E.WARM_STARTS) * len(E.SEEDS) * 4 + len(E.TRAINING_KS)
    estimate = E.estimate_seconds(n, 2, builds=1, warm_starts=len(E.WARM_STARTS), alpha_measured=False)
    assert abs(estimate - took) < 0.15 * took


def test_the_plan_command_prints_the_primary_comparison_and_trains_nothing(tmp_path, capsys):
    E.main(["--root", str(tmp_path), "--warm-starts", "0", "1", "--seeds", "0", "--topk-ks", "5", "--plan",
            "--pilot", str(tmp_path / "none")])
    out = capsys.readouterr().out
    assert "primary comparison (fixed in advance): SA-AH-GRPO at the paper-matched alpha vs GRPO" in out
    assert "over 2 seed pairs (1 seeds x 2 warm starts)" in out
    assert "9 runs planned, 0 already complete, 9 to train" in out and "tiny-sa-a0.5-k5-s0" in out
    assert "estimated wall time" in out and "projected" not in out  # no pilot root
    assert not (tmp_path / "runs").exists()


def test_projected_mde_uses_the_pilot_spread():
    from saah_lib.paths import MINI_ROOT

    if not (MINI_ROOT / "runs").is_dir():
        pytest.skip("committed mini study absent")
    mde, se, source = E.projected_mde(20, MINI_ROOT)
    # 80% power at 2.5% two-sided: about (t quantile + 0.85) standard errors
    assert 2.5 * se < mde < 4 * se and "3 healthy seed pairs of results/mini" == source


def test_every_warm_start_is_a_job_and_the_matched_runs_wait_for_the_alpha(tmp_path, monkeypatch):
    from saah_lab.studies.execution import runner

    order = []

    def engine(tasks, *, on_finish, **kw):  # in-process stand-in: each task in the given order, deps first
        for task in tasks:
            assert set(task.deps) <= set(order), (task.id, task.deps, order)
            order.append(task.id)
            if task.id == "alpha:paper-matched":
                (tmp_path / MATCHED_ALPHA_FILE).write_text(json.dumps({"alpha": 5.9}))
            config = task.kwargs.get("config", {})
            run_id = (make_config(**config, alpha=5.9).run_id if "matched_alpha_from" in task.kwargs
                      else config.get("run_id"))
            on_finish(task, {"run_id": run_id, "wall_s": 1.0, "peak_rss_mb": 1.0}, "127.0.0.1")

    monkeypatch.setattr(runner, "run_tasks", engine)
    monkeypatch.setattr(runner, "warm_start_record", lambda folder: {"folder": folder.name})
    monkeypatch.setattr(runner, "read_build_info", lambda folder: None)  # no warm start built yet
    monkeypatch.setattr(E, "write_manifest", lambda root: order.append("manifest"))
    E.run_extended_study(tmp_path, warm_starts=(0, 1), seeds=(0, 1), topk_ks=(), measure=False)
    assert order[:5] == ["warmstart:tiny-warmstart", "warmstart:tiny-warmstart-s1", "baseline:tiny-warmstart",
                         "baseline:tiny-warmstart-s1", "alpha:paper-matched"]
    assert order[-1] == "manifest" and len(order) == 5 + 2 * 2 * 4 + 1
    plan = E.make_plan(tmp_path, warm_starts=(0, 1), seeds=(0, 1), topk_ks=())  # the alpha is recorded now
    assert "tiny-ah-a5.9-s1-w1" in [j.name for j in plan.runs]
    # the warm start ships (results/warm_starts): its runs load that copy and do not wait for its rebuild ...
    assert [j.deps for j in plan.runs if j.name == "tiny-ah-a5.9-s1-w1"] == [()]
    # ... while a run from a warm start that ships nowhere waits for its build
    monkeypatch.setattr(runner, "shipped_warm_start_dir", lambda seed: tmp_path / "none")
    plan = E.make_plan(tmp_path, warm_starts=(0, 1), seeds=(0, 1), topk_ks=())
    assert [j.deps for j in plan.runs if j.name == "tiny-ah-a5.9-s1-w1"] == [("warmstart:tiny-warmstart-s1",)]
    study = read_plan(tmp_path)
    assert study.study == "extended" and study.describe().startswith("SA-AH-GRPO (α=5.9) vs GRPO")
    assert study.extra["warm_starts"] == ["tiny-warmstart", "tiny-warmstart-s1"]
    records = json.loads((tmp_path / "warmstart_builds.json").read_text())
    assert set(records) == {"tiny-warmstart", "tiny-warmstart-s1"}
    with pytest.raises(ValueError, match="must include seed 0"):
        E.run_extended_study(tmp_path, warm_starts=(1, 2))


def test_the_plan_warns_about_runs_that_are_not_in_it(tmp_path):
    (tmp_path / "runs" / "tiny-ah-a0.25-s0").mkdir(parents=True)  # e.g. the earlier extended study's sweep
    configs = E.planned_configs(tmp_path, warm_starts=(0,), seeds=(0,), topk_ks=())
    text = E.describe_plan(tmp_path, configs, configs, 2, (0,), (0,), measure=False)
    assert "1 run folder(s)" in text and "tiny-ah-a0.25-s0" in text and "fresh --root" in text


# ---------------------------------------------------------------------- make extended: rerun and verify

SMALL = dict(warm_starts=(0, 1), seeds=(0, 1), topk_ks=(), measure=False)  # 4 seed pairs, 16 runs


def _rerun_by_copying_the_committed_study(changed_loss: float = 0.0):
    """A stand-in for training: the rerun root gets the committed runs of its plan (a CPU that reproduces
    the bits), with one run's loss at step 1 moved by ``changed_loss``."""
    import shutil

    from saah_lib.paths import EXTENDED_ROOT

    calls = []

    def fake_study(root, **study):
        calls.append(study)
        for name in ("paper_matched_alpha.json", "warmstart_build.json", "warmstart_builds.json"):
            shutil.copy2(EXTENDED_ROOT / name, root / name)
        shutil.copytree(EXTENDED_ROOT / "baselines", root / "baselines")
        options = {k: study[k] for k in ("warm_starts", "seeds", "topk_ks")}
        for config in E.planned_configs(root, **options):
            shutil.copytree(EXTENDED_ROOT / "runs" / config.run_id, root / "runs" / config.run_id)
        if changed_loss:
            log = root / "runs" / "tiny-grpo-a0-s1-w1" / "train_log.jsonl"
            records = [json.loads(line) for line in log.read_text().splitlines()]
            records[0]["loss"] += changed_loss
            write_jsonl(log, records)
        return {}

    return fake_study, calls


def test_make_extended_reruns_into_its_own_root_and_finds_the_bits_reproduced(tmp_path, monkeypatch):
    fake, calls = _rerun_by_copying_the_committed_study()
    monkeypatch.setattr(E, "run_extended_study", fake)
    rerun = tmp_path / "rerun" / "extended"
    report = E.rerun_and_verify(rerun=rerun, **SMALL)
    assert calls == [SMALL]
    assert report["verdict"] == "16/16 runs reproduced exactly; warm start, baseline, answer kinds and tables identical"
    assert report["outcome"] == "bits reproduced" and report["committed_root"] == "results/extended"
    assert (rerun / "reproduction.md").is_file() and (rerun / ".rerun-of-study.json").is_file()
    # run again: the earlier rerun (and only that) is cleared first
    (rerun / "runs" / "stale-run").mkdir()
    E.rerun_and_verify(rerun=rerun, **SMALL)
    assert not (rerun / "runs" / "stale-run").exists()


def test_make_extended_where_bits_differ_checks_the_conclusions_at_the_paper_matched_alpha(tmp_path, monkeypatch):
    from saah_lab.studies.mini import judge

    fake, _ = _rerun_by_copying_the_committed_study(changed_loss=1e-6)
    monkeypatch.setattr(E, "run_extended_study", fake)
    report = E.rerun_and_verify(rerun=tmp_path / "rerun", **SMALL)
    assert report["verdict"].startswith("bits differ on 1/16 runs; conclusions reproduced: ")
    level2 = report["conclusions"]
    # every run against its committed twin; the extended study's primary comparison (at the committed paper-matched
    # alpha, 5.9), its unit a seed of a warm start; the yardstick pooled with the mini study's runs (same design)
    assert (level2["primary"]["a"], level2["primary"]["b"]) == ("SA-AH-GRPO (α=5.9)", "GRPO")
    assert {"tiny-warmstart-s1/s0", "tiny-warmstart/s1"} <= set(level2["primary"]["units"])
    assert level2["runs_compared"] == 16 and level2["df"] > 70
    assert all(t["shift"] == 0 for t in level2["tests"])  # only a loss moved, no Pass@1
    intel = {"mode": "pinned", "pin_holds": True, "mkl_kernels": "Intel"}
    assert judge(report, intel)[0] == 0  # on an Intel CPU bits may differ; the conclusions decide
    assert judge(report, intel, committed_kernels="Intel")[0] == 1  # a study made with Intel's kernels: they must match


def test_make_extended_never_clears_a_folder_it_did_not_write(tmp_path, monkeypatch):
    from saah_lab.studies.mini import NotARerunRoot

    monkeypatch.setattr(E, "run_extended_study", lambda root, **study: pytest.fail("trained"))
    (tmp_path / "mine.txt").write_text("keep")
    with pytest.raises(NotARerunRoot, match="mine.txt"):
        E.rerun_and_verify(rerun=tmp_path, **SMALL)
    assert (tmp_path / "mine.txt").read_text() == "keep"
    with pytest.raises(ValueError, match="is or holds the committed study"):
        E.rerun_and_verify(rerun=E.EXTENDED_ROOT, **SMALL)


def test_make_extended_is_the_rerun_and_verify():
    import re
    import subprocess

    from saah_lib.paths import REPO_ROOT

    done = subprocess.run(["make", "-n", "--no-print-directory", "extended"], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=60)
    assert re.search(r"-m saah_lab\.studies\.extended --verify\b", done.stdout), done.stdout
