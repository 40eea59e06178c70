"""The mini study driver, and that the committed mini results match the code that made them."""

import json
from dataclasses import asdict
from pathlib import Path

import pytest

from saah_lab.studies.mini import planned_runs, write_answer_kinds
from saah_lib.models.warmstart import WARMSTART_VERSION, WarmStartSettings
from saah_lib.paths import REPO_ROOT

COMMITTED = REPO_ROOT / "results" / "mini"


def _write_samples(path: Path, answers: list[str], gold: str = "19") -> None:
    working = "<start_working_out>\n1. 3 * 4 = 12\n2. 12 + 7 = 19\n</start_working_out>\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"completion": f"{working}<SOLUTION>{a}</SOLUTION>", "gold": gold}) + "\n"
                            for a in answers))


def test_planned_runs_cover_methods_seeds_the_sweep_and_the_paper_matched_alpha():
    main = [(m, a, s) for s in (0, 1, 2) for m, a in (("grpo", 0.0), ("ah", 0.5), ("sa", 0.5))]
    sweeps = [(m, a, 0) for m in ("ah", "sa") for a in (-0.25, 0.1, 0.25)]  # 0 and 0.5 are main runs
    assert planned_runs((0, 1, 2)) == main + sweeps  # before the alpha is measured
    assert planned_runs((0, 1, 2), 5.9) == main + sweeps + [("ah", 5.9, 0), ("sa", 5.9, 0)]
    assert planned_runs((0, 1, 2), 0.25) == main + sweeps  # a matched alpha on the sweep adds nothing


def test_the_plan_reads_the_matched_alpha_from_the_root_and_names_the_primary_comparison(tmp_path):
    from saah_lab.analysis.plan import read_plan, write_plan
    from saah_lab.studies.mini import planned_configs, study_plan
    from saah_lib.rundir.layout import MATCHED_ALPHA_FILE

    assert len(planned_configs(tmp_path)) == 15
    (tmp_path / MATCHED_ALPHA_FILE).write_text(json.dumps({"alpha": 5.9}))
    ids = [c.run_id for c in planned_configs(tmp_path)]
    assert ids[-2:] == ["tiny-ah-a5.9-s0", "tiny-sa-a5.9-s0"] and len(ids) == 17
    write_plan(tmp_path, study_plan((0, 1, 2), 5.9))
    plan = read_plan(tmp_path)
    assert plan.study == "mini" and plan.describe() == \
        "SA-AH-GRPO (α=0.5) vs GRPO on final Pass@1 and training-reward variance"
    assert plan.extra["paper_matched_alpha"] == 5.9


def test_answer_kinds_summary_reads_first_and_last_evaluation(tmp_path):
    samples = tmp_path / "runs" / "r1" / "eval_samples"
    _write_samples(samples / "step_0000.jsonl", ["12", "12", "19"])
    _write_samples(samples / "step_0020.jsonl", ["5", "5", "5"])
    _write_samples(samples / "step_0040.jsonl", ["19", "19", "12"])
    (samples.parent / "config.json").write_text('{"steps": 40}')  # the last evaluation is the last step's
    summary = write_answer_kinds(tmp_path)
    expected = {"r1": {"0": {"correct": 1, "intermediate": 2, "other": 0},
                       "40": {"correct": 2, "intermediate": 1, "other": 0}}}
    assert summary == expected
    assert json.loads((tmp_path / "answer_kinds.json").read_text()) == expected


needs_committed = pytest.mark.skipif(not (COMMITTED / "runs").is_dir(), reason="no committed mini study")


@needs_committed
def test_committed_warm_start_record_matches_the_default_settings():
    build = json.loads((COMMITTED / "warmstart_build.json").read_text())
    assert build["version"] == WARMSTART_VERSION
    assert build["settings"] == asdict(WarmStartSettings())


@needs_committed
def test_committed_answer_kinds_are_what_the_code_computes(tmp_path):
    import shutil

    shutil.copytree(COMMITTED / "runs", tmp_path / "runs", ignore=shutil.ignore_patterns("checkpoints"))
    recomputed = write_answer_kinds(tmp_path)
    assert recomputed == json.loads((COMMITTED / "answer_kinds.json").read_text())


def test_promote_replaces_the_committed_study_keeps_other_runs_and_refuses_unfinished_reruns(tmp_path):
    from saah_lab.analysis.plan import write_plan
    from saah_lab.rundir.manifest import check_manifest
    from saah_lab.studies.mini import PROMOTED_FILES, planned_configs, promote, study_plan
    from saah_lib.rundir.folder import RunDir

    rerun, committed = tmp_path / "rerun", tmp_path / "committed"
    rerun.mkdir()
    (rerun / "paper_matched_alpha.json").write_text('{"alpha": 5.9}\n')  # measured before training
    for cfg in planned_configs(rerun):
        log = RunDir(cfg.run_dir)
        log.log_step({"step": cfg.trainer.max_steps, "reward_mean": 1.0})
        log.log_eval({"step": cfg.trainer.max_steps, "pass_at_1": 0.5}, [{"id": "p", "correct": True}])
        (log.checkpoints_dir / "checkpoint-60").mkdir(parents=True)
    (rerun / "baselines" / "b").mkdir(parents=True)
    write_plan(rerun, study_plan(matched_alpha=5.9))
    for name in PROMOTED_FILES:
        if not (rerun / name).exists():
            (rerun / name).write_text("{}\n")
    with pytest.raises(ValueError, match="not a finished rerun"):
        promote(rerun, committed, figures=False)  # no reproduction report yet
    (rerun / "reproduction.json").write_text("{}\n")

    (committed / "runs" / "tiny-old-run").mkdir(parents=True)  # e.g. a run make mini does not plan
    promote(rerun, committed, figures=False)
    runs = sorted(p.name for p in (committed / "runs").iterdir())
    assert runs == sorted([c.run_id for c in planned_configs(rerun)] + ["tiny-old-run"])
    assert not any((committed / "runs").glob("*/checkpoints"))
    check_manifest(committed)  # written by promote
    assert sorted(p.name for p in tmp_path.iterdir()) == ["committed", "rerun"]  # no staging folder left


PINNED_AMD = {"mode": "pinned", "pin_holds": True, "mkl_kernels": "generic", "comparable_bit_for_bit": True,
              "capability": "AVX2", "torch_threads": 2, "cpu_model": "AMD EPYC", "machine": "x86_64",
              "pinned_settings": {"ATEN_CPU_CAPABILITY": "avx2"}}


@pytest.mark.parametrize("outcome, numerics, status, reason", [
    ("bits reproduced", PINNED_AMD, 0, "bits reproduced"),
    ("conclusions reproduced", {**PINNED_AMD, "mode": "native", "pin_holds": None, "comparable_bit_for_bit": False},
     0, "bits differ, as expected here (SAAH_CPU_NUMERICS=native: torch runs this CPU's widest kernels, unpinned); "
        "the conclusions reproduced"),
    ("conclusions reproduced", {**PINNED_AMD, "capability": "SVE256", "pin_holds": False, "machine": "aarch64",
                                "comparable_bit_for_bit": False, "pin_obstacle": "this CPU is aarch64"},
     0, "bits differ, as expected here (this CPU is aarch64); the conclusions reproduced"),
    ("conclusions reproduced", {**PINNED_AMD, "mkl_kernels": "Intel", "comparable_bit_for_bit": False},
     0, "bits differ, as expected here (MKL runs its Intel kernels on this CPU"),
    ("conclusions reproduced", PINNED_AMD, 1, "bits differ although this CPU runs the committed study's kernels"),
    ("conclusions changed", {**PINNED_AMD, "mode": "native"}, 1, "conclusions changed: the rerun does not support"),
    ("conclusions not checked", {**PINNED_AMD, "mode": "native"}, 1, "conclusions not checked"),
    ("study files differ", PINNED_AMD, 1, "every run is identical, yet a study file differs"),
])
def test_make_mini_fails_unless_the_bits_or_where_they_may_differ_the_conclusions_reproduce(outcome, numerics,
                                                                                          status, reason):
    from saah_lab.studies.mini import judge

    got_status, got_reason = judge({"outcome": outcome}, numerics)
    assert got_status == status and got_reason.startswith(reason), got_reason


def test_the_log_says_why_the_warm_start_has_two_scores(tmp_path):
    from saah_lab.studies.mini import two_warm_start_scores
    from saah_lib.paths import MINI_ROOT

    # results/mini: warmstart_build.json holds 0.315 on 200 held-out problems; the baseline scored 54/200
    assert two_warm_start_scores(MINI_ROOT) == ("warm start: Pass@1 0.315 on the 200 held-out problems of its "
                                                "build, 0.270 on the study's 200 evaluation problems (the baseline, "
                                                "and every run's step 0): two problem sets, two numbers")
    assert "score different problems" in two_warm_start_scores(tmp_path)
