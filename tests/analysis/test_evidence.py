"""Paired comparisons read from run folders with the seed as the unit, and a root's evidence summary.
References: hand-worked cases and scipy's paired t test."""

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from saah_lab.analysis.evidence import (
    adjust,
    compare_arms,
    compare_pairs,
    load_root_evidence,
    load_run_evidence,
    read_correctness,
)
from saah_lab.analysis.plan import Arm, default_plan
from saah_lab.analysis.resultset import ResultSet
from saah_lab.analysis.runs import read_runs
from saah_lab.analysis.significance import binomial_two_sided_p, crossed_test, t_mde
from saah_lab.report.texts import evidence_summary, mde_text, row_sentence
from saah_lab.rundir.reader import DamagedResultsError
from saah_lib.jsonio import atomic_write_json, write_jsonl
from saah_lib.paths import REPO_ROOT
from saah_lib.rundir.folder import RunDir
from saah_lib.tasks.scoring import pass_at_1_ci

REPO = REPO_ROOT
SA, AH, GRPO = Arm("sa", 0.5), Arm("ah", 0.5), Arm("grpo", 0.0)


def write_run(root: Path, method: str, alpha: float, seed: int, correct: dict[int, list[bool]],
              rewards=(1.0, 2.0, 1.5, 2.5), kl=0.01, top_k=None, run_id=None, warm_start="tiny-warmstart") -> Path:
    """A minimal complete run folder in the committed format: config, a train log line per step (the
    ``rewards`` and ``kl`` spread over the steps in equal blocks), eval.jsonl and per-problem samples."""
    suffix = "-w" + warm_start.rsplit("-s", 1)[1] if warm_start.startswith("tiny-warmstart-s") else ""
    run_id = run_id or f"tiny-{method}-a{alpha:g}-s{seed}" + (f"-k{top_k}" if top_k else "") + suffix
    steps = max(correct)
    every = min(s for s in correct if s > 0)
    log = RunDir(root / "runs" / run_id)
    shutil.rmtree(log.dir, ignore_errors=True)  # a run written again replaces the old one
    atomic_write_json(log.config_path, {"run_id": run_id, "method": method, "alpha": alpha, "seed": seed,
                                        "steps": steps, "eval_every": every, "model_label": "tiny",
                                        "entropy_top_k": top_k, "model_name": warm_start})
    n = len(rewards)
    kls = kl if isinstance(kl, (list, tuple)) else [kl] * n
    write_jsonl(log.train_log_path, [{"step": s, "reward_mean": rewards[(s - 1) * n // steps],
                                      "kl": kls[(s - 1) * n // steps]} for s in range(1, steps + 1)])
    for step, values in sorted(correct.items()):
        samples = [{"id": f"p{j:03d}", "correct": bool(v)} for j, v in enumerate(values)]
        k, m = sum(map(bool, values)), len(values)
        log.log_eval({"step": step, "pass_at_1": k / m, "ci95": pass_at_1_ci(k / m, m), "n": m, "n_correct": k},
                     samples)
    return log.dir


def one_run(run_dir: Path):
    """A run folder's evidence as the root's one reading gives it (problems tolerated, so that a missing file
    reaches the evidence's own check)."""
    study = read_runs(run_dir.parent.parent, tolerate_problems=True)
    folder = next(f for f in study.runs if f.path == run_dir)
    return load_run_evidence(folder, study.health[folder.path.name])


def _pattern(n: int, ones: int) -> list[bool]:
    return [j < ones for j in range(n)]


def _two_arms(root, a_right: dict[int, int], b_right: dict[int, int], n=40, rewards_a=None, **kw):
    for seed in a_right:
        # step 0: 2 of 40 right, so every run gains more than evaluation noise (no health flag)
        write_run(root, "sa", 0.5, seed, {0: _pattern(n, 2), 20: _pattern(n, a_right[seed])},
                  rewards=(rewards_a or {}).get(seed, (1.0, 2.0, 1.5, 2.5)), **kw)
        write_run(root, "grpo", 0.0, seed, {0: _pattern(n, 2), 20: _pattern(n, b_right[seed])})
    return load_root_evidence(root)


# ------------------------------------------------------------------ reading

def test_load_run_evidence_final_earliest_peak_warm_start_and_health(tmp_path):
    run = write_run(tmp_path, "sa", 0.5, 0, {0: _pattern(10, 2), 20: _pattern(10, 6), 40: _pattern(10, 4),
                                            60: _pattern(10, 6)}, warm_start="results/mini/warmstart/model")
    ev = one_run(run)
    assert (ev.final_step, ev.peak_step) == (60, 20)
    assert (ev.method, ev.alpha, ev.seed, ev.entropy_top_k) == ("sa", 0.5, 0, None)
    assert ev.unit == ("tiny-warmstart", 0)  # the former folder name means the seed-0 warm start
    # the per-seed summaries are the tables' own definitions: second half of the 60 steps, 15 at 1.5 and 15 at 2.5
    assert ev.train_var == pytest.approx(np.var([1.5] * 15 + [2.5] * 15, ddof=1))
    assert ev.mean_kl == pytest.approx(0.01)
    assert ev.health == () and not ev.flagged
    sick = one_run(write_run(tmp_path, "grpo", 0.0, 1, {0: _pattern(10, 8), 20: _pattern(10, 2)},
                                       kl=(0.01, 0.2, 0.1, 0.1)))
    assert sick.health == ("kl_diverged", "fell_below_start") and "KL up to 0.200" in sick.health_text


def test_load_run_evidence_names_what_is_missing(tmp_path):
    run = write_run(tmp_path, "sa", 0.5, 0, {0: [True], 20: [False]})
    (run / "eval_samples" / "step_0020.jsonl").unlink()
    with pytest.raises(ValueError, match="step_0020.jsonl: missing"):
        one_run(run)
    (run / "config.json").unlink()
    with pytest.raises(DamagedResultsError, match="config.json"):
        read_runs(tmp_path)
    bad = tmp_path / "bad.jsonl"
    write_jsonl(bad, [{"id": "a", "correct": True}, {"id": "a", "correct": False}])
    with pytest.raises(ValueError, match="appears twice"):
        read_correctness(bad)
    write_jsonl(bad, [{"id": "a"}])
    with pytest.raises(ValueError, match="'correct'"):
        read_correctness(bad)


def test_incomplete_runs_stop_the_reading_or_are_left_out_by_name(tmp_path):
    write_run(tmp_path, "sa", 0.5, 0, {0: [True], 20: [False]})
    run = write_run(tmp_path, "grpo", 0.0, 0, {0: [True], 20: [False]})
    cfg = json.loads((run / "config.json").read_text())
    atomic_write_json(run / "config.json", {**cfg, "steps": 100})  # training still running
    with pytest.raises(ValueError, match="incomplete"):
        load_root_evidence(tmp_path)
    left_out = []
    assert [r.method for r in load_root_evidence(tmp_path, True, left_out)] == ["sa"]
    assert left_out == [run.name]


# ------------------------------------------------------------------ comparing, seed by seed

def test_compare_arms_takes_the_seed_as_the_unit(tmp_path):
    # nested patterns: on seed s, A is right on the first a_s problems, B on the first b_s
    runs = _two_arms(tmp_path, {0: 20, 1: 18, 2: 30}, {0: 15, 1: 18, 2: 10},
                     rewards_a={0: (1.0, 2.0, 1.0, 3.0), 1: (1.0, 2.0, 1.5, 2.0), 2: (1.0, 2.0, 2.0, 4.0)})
    rows = adjust(compare_arms(SA, GRPO, runs))  # one row per quantity: families of one
    final = next(r for r in rows if r.key == "final")
    a, b = np.array([20, 18, 30]) / 40, np.array([15, 18, 10]) / 40
    # the [seed, problem] matrix of differences, built here from the patterns: A right on the first a_s problems
    matrix = np.array([[(j < ra) - (j < rb) for j in range(40)] for ra, rb in ((20, 15), (18, 18), (30, 10))])
    ref = crossed_test(matrix)
    assert (final.p_value, final.se, final.df) == pytest.approx((ref.p_value, ref.se, ref.df), rel=1e-12)
    assert (final.ci_low, final.ci_high) == pytest.approx((ref.ci_low, ref.ci_high))  # family of one: 95%
    assert final.diff == pytest.approx((a - b).mean()) and final.sd_diff == pytest.approx((a - b).std(ddof=1))
    assert final.mde == pytest.approx(t_mde(ref.se, ref.df))
    assert final.p_signflip == 0.5  # differences (+, 0, +): 4 of 8 patterns reach |mean|
    assert set(final.units_needed) == {"0.03", "0.02"}
    var = next(r for r in rows if r.key == "train_var")  # a per-run summary: the paired t test over seeds
    assert var.p_value == pytest.approx(stats.ttest_rel(var.detail["a"], var.detail["b"]).pvalue, rel=1e-10)
    # the problem-level test is kept beside it: discordant problems pooled over seeds
    assert final.mcnemar_p == binomial_two_sided_p(0, 5 + 0 + 20)
    assert final.detail["mcnemar"]["a_only"] == 25
    assert (final.units_a_ahead, final.units_b_ahead, final.n_units, final.n_problems) == (2, 0, 3, 40)
    assert final.detail["units"] == ["tiny-warmstart/s0", "tiny-warmstart/s1", "tiny-warmstart/s2"]
    kl = next(r for r in rows if r.key == "mean_kl")
    assert kl.p_value == 1.0 and math.isnan(kl.mde) and kl.n_problems == 0  # equal KL everywhere: no variance


def test_two_warm_starts_are_fixed_strata_and_each_has_its_own_descriptive_test(tmp_path):
    for ws in ("tiny-warmstart", "tiny-warmstart-s1"):
        for seed, (ra, rb) in enumerate(((20, 15), (22, 14), (19, 17))):
            sign = 1 if ws == "tiny-warmstart" else -1
            write_run(tmp_path, "sa", 0.5, seed, {0: _pattern(40, 5), 20: _pattern(40, ra if sign > 0 else rb)},
                      warm_start=ws)
            write_run(tmp_path, "grpo", 0.0, seed, {0: _pattern(40, 5), 20: _pattern(40, rb if sign > 0 else ra)},
                      warm_start=ws)
    runs = load_root_evidence(tmp_path)
    final = next(r for r in adjust(compare_arms(SA, GRPO, runs)) if r.key == "final")
    assert final.n_units == 6 and final.n_warm_starts == 2
    assert final.crossed.warm_start_factor == "fixed stratum" and final.df <= 4  # 6 seeds - 2 strata
    per = final.detail["per_warm_start"]
    assert per["tiny-warmstart"]["mean_diff"] == pytest.approx(-per["tiny-warmstart-s1"]["mean_diff"])
    assert per["tiny-warmstart"]["p_value"] == pytest.approx(per["tiny-warmstart-s1"]["p_value"])
    assert final.diff == pytest.approx(0.0) and final.p_value == pytest.approx(1.0)
    assert not final.is_established()


def test_three_warm_starts_are_a_random_factor_with_their_own_df(tmp_path):
    rights = {"tiny-warmstart": ((24, 15), (22, 14)), "tiny-warmstart-s1": ((20, 18), (21, 17)),
              "tiny-warmstart-s2": ((25, 12), (23, 16))}
    for k, (ws, seeds) in enumerate(rights.items()):
        for seed, (ra, rb) in enumerate(seeds):
            write_run(tmp_path, "sa", 0.5, seed, {0: _pattern(40, 5), 20: _pattern(40, ra)}, warm_start=ws,
                      rewards=(1.0, 2.0, 1.0 + 0.3 * k + 0.2 * seed, 2.5 + 0.1 * k * k))
            write_run(tmp_path, "grpo", 0.0, seed, {0: _pattern(40, 5), 20: _pattern(40, rb)}, warm_start=ws)
    rows = adjust(compare_arms(SA, GRPO, load_root_evidence(tmp_path)))
    final = next(r for r in rows if r.key == "final")
    assert final.n_warm_starts == 3 and final.crossed.warm_start_factor == "random" and final.df <= 2
    assert final.units_needed_of == "warm starts"
    var = next(r for r in rows if r.key == "train_var")  # per-run summary: t test over the 3 warm-start means
    ws_means = np.array(var.detail["diffs"]).reshape(3, 2).mean(axis=1)
    assert var.p_value == pytest.approx(stats.ttest_1samp(ws_means, 0.0).pvalue, rel=1e-10) and var.df == 2


def test_compare_arms_needs_a_common_unit_and_the_same_problems(tmp_path):
    write_run(tmp_path, "sa", 0.5, 0, {0: [True], 20: [True]})
    write_run(tmp_path, "grpo", 0.0, 1, {0: [True], 20: [True]})
    with pytest.raises(ValueError, match="no common warm start and seed"):
        compare_arms(SA, GRPO, load_root_evidence(tmp_path))
    write_run(tmp_path, "grpo", 0.0, 0, {0: [True, False], 20: [True, False]})
    with pytest.raises(ValueError, match="other problems"):
        compare_arms(SA, GRPO, load_root_evidence(tmp_path))


def test_pairs_with_one_common_seed_are_not_tested_but_named(tmp_path):
    runs = _two_arms(tmp_path, {0: 30}, {0: 10})
    skipped = []
    assert compare_pairs(runs, [(SA, GRPO)], skipped=skipped) == []
    assert skipped == ["SA-AH-GRPO (α=0.5) vs GRPO: fewer than 2 common seeds"]


def test_topk_runs_are_their_own_arm(tmp_path):
    for seed in (0, 1):
        write_run(tmp_path, "sa", 0.5, seed, {0: [True, False], 20: [True, True]})
        write_run(tmp_path, "sa", 0.5, seed, {0: [True, False], 20: [False, False]}, top_k=5)
    runs = load_root_evidence(tmp_path)
    assert Arm("sa", 0.5).runs_by_unit(runs)[("tiny-warmstart", 0)].entropy_top_k is None
    rows = compare_arms(Arm("sa", 0.5, entropy_top_k=5), Arm("sa", 0.5), runs)
    assert rows[0].diff == -1.0 and "top-5" in rows[0].a


# ------------------------------------------------------------------ families

def test_the_primary_comparison_is_its_own_family_adjusted_by_bonferroni(tmp_path):
    runs = _two_arms(tmp_path, {0: 30, 1: 29, 2: 31}, {0: 10, 1: 12, 2: 9})
    for seed, right in ((0, 12), (1, 11), (2, 13)):
        write_run(tmp_path, "ah", 0.5, seed, {0: _pattern(40, 5), 20: _pattern(40, right)})
    runs = load_root_evidence(tmp_path)
    plan = default_plan()
    rows = compare_pairs(runs, plan.pairs, plan=plan)
    primary = [r for r in rows if r.primary]
    assert [(r.a, r.b, r.key) for r in primary] == [("SA-AH-GRPO (α=0.5)", "GRPO", "final"),
                                                    ("SA-AH-GRPO (α=0.5)", "GRPO", "train_var")]
    for row in primary:
        assert row.family_size == 2 and row.p_adjusted == pytest.approx(min(1, 2 * row.p_value))
        assert row.confidence == 0.975
        assert (row.ci_low, row.ci_high) == pytest.approx(row.crossed.at(0.975))
        assert row.mde == pytest.approx(t_mde(row.se, row.df, level=0.025), nan_ok=True)  # NaN: nothing varies
    final_family = [r for r in rows if r.family == "final"]
    assert [(r.a, r.b) for r in final_family] == [("SA-AH-GRPO (α=0.5)", "AH-GRPO (α=0.5)"),
                                                  ("AH-GRPO (α=0.5)", "GRPO")]
    assert [r.p_adjusted for r in final_family] == pytest.approx([min(1, 2 * r.p_value) for r in final_family])
    peak = next(r for r in rows if r.key == "peak" and r.a.startswith("SA") and r.b == "GRPO")
    assert peak.family == "peak" and peak.same_as_final  # one evaluation after step 0: peak is final


# ------------------------------------------------------------------ flagged runs

def test_flagged_runs_stay_and_every_row_is_repeated_without_them(tmp_path):
    runs = _two_arms(tmp_path, {0: 30, 1: 28, 2: 31, 3: 29}, {0: 10, 1: 12, 2: 9, 3: 11})
    write_run(tmp_path, "grpo", 0.0, 3, {0: _pattern(40, 5), 20: _pattern(40, 5)}, kl=(0.01, 0.3, 0.2, 0.1))
    runs = load_root_evidence(tmp_path)
    plan = default_plan()
    summary = evidence_summary(tmp_path)
    final = next(r for r in summary["rows"] if r["key"] == "final" and r["primary"])
    assert final["n_units"] == 4 and final["flagged_units"] == ["tiny-warmstart/s3"]
    healthy = [r for r in runs if r.seed != 3]
    again = next(r for r in compare_pairs(healthy, plan.pairs, plan=plan) if r.key == "final")
    assert final["without_flagged"]["n_units"] == 3
    assert final["without_flagged"]["diff"] == pytest.approx(again.diff)
    assert final["without_flagged"]["p_value"] == pytest.approx(again.p_value)
    assert summary["health"]["flagged"][0]["run_id"] == "tiny-grpo-a0-s3"
    assert "1 of 8 runs flagged: tiny-grpo-a0-s3" in summary["sentence"]
    assert "Without the seed pairs with a flagged run (tiny-warmstart/s3)" in summary["sentence"]


def test_an_incomplete_run_is_an_error_or_is_left_out_and_named(tmp_path):
    root = tmp_path / "root"
    _two_arms(root, {0: 30, 1: 28, 2: 27}, {0: 10, 1: 12, 2: 11})
    broken = sorted((root / "runs").iterdir())[0]
    (broken / "eval.jsonl").write_text("")  # no evaluation at all: not complete
    with pytest.raises(ValueError, match=f"{broken.name}: incomplete"):
        evidence_summary(root)
    summary = evidence_summary(root, tolerate_problems=True)
    assert summary["left_out"] == [broken.name] and "WARNING" in summary["sentence"]
    assert not Path(summary["root"]).is_absolute() or str(tmp_path) in summary["root"]


def test_a_pair_that_cannot_be_compared_is_an_error_or_named_never_dropped_silently(tmp_path):
    root = tmp_path / "root"
    _two_arms(root, {0: 30, 1: 28}, {0: 10, 1: 12})
    for seed in (0, 1):  # two seeds in common: the pair would be tested, but on 30 problems, not 40
        write_run(root, "ah", 0.5, seed, {0: _pattern(30, 5), 20: _pattern(30, 9)})
    with pytest.raises(ValueError, match=r"SA-AH-GRPO \(α=0.5\) vs AH-GRPO \(α=0.5\) cannot be compared: .*other "
                                         r"problems"):
        evidence_summary(root)
    summary = evidence_summary(root, tolerate_problems=True)
    assert len(summary["pairs_left_out"]) == 2  # SA vs AH and AH vs GRPO; SA vs GRPO is compared
    assert "WARNING: 2 comparison(s) could not be made: SA-AH-GRPO (α=0.5) vs AH-GRPO (α=0.5):" in summary["sentence"]
    assert {(r["a"], r["b"]) for r in summary["rows"]} == {("SA-AH-GRPO (α=0.5)", "GRPO")}
    # no seed in common is nothing to compare, not a problem
    write_run(tmp_path / "apart", "sa", 0.5, 0, {0: [True], 20: [True]})
    write_run(tmp_path / "apart", "grpo", 0.0, 1, {0: [True], 20: [False]})
    apart = evidence_summary(tmp_path / "apart")
    assert apart["rows"] == [] and apart["pairs_left_out"] == []


# ------------------------------------------------------------------ the committed studies

MINI = REPO / "results" / "mini"


@pytest.mark.skipif(not (MINI / "runs").is_dir(), reason="committed mini results absent")
def test_on_the_committed_mini_study_the_summaries_are_the_tables_and_nothing_is_established():
    summary = evidence_summary(MINI)
    runs = ResultSet.from_runs(MINI).runs
    for row in (r for r in summary["rows"] if r["key"] == "final"):
        for label, values in ((row["a"], row["detail"]["a"]), (row["b"], row["detail"]["b"])):
            method = {"GRPO": "grpo", "AH-GRPO (α=0.5)": "ah", "SA-AH-GRPO (α=0.5)": "sa"}[label]
            sel = runs[(runs["method"] == method) & np.isclose(runs["alpha"], 0.0 if method == "grpo" else 0.5)]
            assert values == pytest.approx(sel.sort_values("seed")["final_pass_at_1"].tolist(), abs=1e-12)
    for row in (r for r in summary["rows"] if r["key"] == "train_var"):  # per-run summaries: the paired t test
        assert row["p_value"] == pytest.approx(stats.ttest_rel(row["detail"]["a"], row["detail"]["b"]).pvalue)
    assert all(not math.isnan(r["mde"]) for r in summary["rows"])
    assert " has higher " not in summary["sentence"] and " has lower " not in summary["sentence"]
    assert "none of the 15 distinct differences is established" in summary["sentence"]
    assert summary["plan"]["primary"]["a"] == {"method": "sa", "alpha": 0.5, "entropy_top_k": None}


# ------------------------------------------------------------------ nothing varies: no MDE (issue 39, item 9)

def test_when_every_evaluation_scores_0_there_is_no_minimum_detectable_effect(tmp_path):
    for seed in (0, 1, 2):
        for method, alpha in (("sa", 0.5), ("grpo", 0.0)):
            write_run(tmp_path, method, alpha, seed, {0: _pattern(40, 0), 20: _pattern(40, 0)})
    rows = adjust(compare_arms(SA, GRPO, load_root_evidence(tmp_path)))
    final = next(r for r in rows if r.key == "final")
    assert final.se == 0 and math.isnan(final.mde) and not final.units_needed
    text = mde_text(final)
    assert text.startswith("no minimum detectable effect: the differences do not vary") and "0.000" not in text
    assert "would take" not in row_sentence(final)
