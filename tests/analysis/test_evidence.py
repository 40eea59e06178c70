"""Paired comparisons read from run folders, the generated sentence, and the rendered table and figure."""

import json
import math
from pathlib import Path

import numpy as np
import pytest

from saah_lib.analysis.evidence import (
    Arm,
    adjust,
    compare_arms,
    compare_pairs,
    established,
    evidence_sentence,
    evidence_summary,
    load_root_evidence,
    load_run_evidence,
    read_correctness,
)
from saah_lib.analysis.resultset import ResultSet
from saah_lib.analysis.significance import binomial_two_sided_p, sign_flip_test
from saah_lib.jsonio import atomic_write_json, write_jsonl
from saah_lib.paths import REPO_ROOT
from saah_lib.report.evidence_report import render_evidence, tex_text
from saah_lib.rundir.folder import RunDir
from saah_lib.tasks.scoring import pass_at_1_ci

REPO = REPO_ROOT


def write_run(root: Path, method: str, alpha: float, seed: int, correct: dict[int, list[bool]],
              rewards=(1.0, 2.0, 1.5, 2.5), kl=0.01, top_k=None, run_id=None) -> Path:
    """A minimal complete run folder in the committed format: config, a train log line per step (the
    ``rewards`` spread over the steps in equal blocks), eval.jsonl and per-problem samples."""
    run_id = run_id or f"tiny-{method}-a{alpha:g}-s{seed}" + (f"-k{top_k}" if top_k else "")
    steps = max(correct)
    every = min(s for s in correct if s > 0)
    log = RunDir(root / "runs" / run_id)
    atomic_write_json(log.config_path, {"run_id": run_id, "method": method, "alpha": alpha, "seed": seed,
                                        "steps": steps, "eval_every": every, "model_label": "tiny",
                                        "entropy_top_k": top_k})
    n = len(rewards)
    write_jsonl(log.train_log_path, [{"step": s, "reward_mean": rewards[(s - 1) * n // steps], "kl": kl}
                                     for s in range(1, steps + 1)])
    for step, values in sorted(correct.items()):
        samples = [{"id": f"p{j:03d}", "correct": bool(v)} for j, v in enumerate(values)]
        k, m = sum(map(bool, values)), len(values)
        log.log_eval({"step": step, "pass_at_1": k / m, "ci95": pass_at_1_ci(k / m, m), "n": m, "n_correct": k},
                     samples)
    return log.dir


def _pattern(n: int, ones: int) -> list[bool]:
    return [j < ones for j in range(n)]


# ------------------------------------------------------------------ reading

def test_load_run_evidence_final_and_earliest_peak(tmp_path):
    run = write_run(tmp_path, "sa", 0.5, 0, {0: _pattern(10, 2), 20: _pattern(10, 6), 40: _pattern(10, 4),
                                            60: _pattern(10, 6)})
    ev = load_run_evidence(run)
    assert (ev.final_step, ev.peak_step) == (60, 20)
    assert sum(ev.at("final").values()) == 6 and sum(ev.at("peak").values()) == 6
    assert (ev.method, ev.alpha, ev.seed, ev.entropy_top_k) == ("sa", 0.5, 0, None)
    # the per-seed summaries are the tables' own definitions: second half of the 60 steps, 15 at 1.5 and 15 at 2.5
    assert ev.train_var == pytest.approx(np.var([1.5] * 15 + [2.5] * 15, ddof=1))
    assert ev.mean_kl == pytest.approx(0.01)


def test_load_run_evidence_names_what_is_missing(tmp_path):
    run = write_run(tmp_path, "sa", 0.5, 0, {0: [True], 20: [False]})
    (run / "eval_samples" / "step_0020.jsonl").unlink()
    with pytest.raises(ValueError, match="step_0020.jsonl: missing"):
        load_run_evidence(run)
    (run / "config.json").unlink()
    with pytest.raises(ValueError, match="config.json: missing"):
        load_run_evidence(run)
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


# ------------------------------------------------------------------ comparing

def _two_arms(tmp_path, a_right: dict[int, int], b_right: dict[int, int], n=40, **kw):
    for seed in a_right:
        write_run(tmp_path, "sa", 0.5, seed, {0: _pattern(n, 5), 20: _pattern(n, a_right[seed])}, **kw)
        write_run(tmp_path, "grpo", 0.0, seed, {0: _pattern(n, 5), 20: _pattern(n, b_right[seed])})
    return load_root_evidence(tmp_path)


def test_compare_arms_pairs_by_seed_and_problem(tmp_path):
    # nested patterns: on seed s, A is right on the first a_s problems, B on the first b_s
    runs = _two_arms(tmp_path, {0: 20, 1: 18, 2: 30}, {0: 15, 1: 18, 2: 10})
    rows = compare_arms(Arm("sa", 0.5), Arm("grpo", 0.0), runs, n_resamples=500)
    final = next(r for r in rows if r.key == "final")
    pooled = final.detail["pooled"]
    assert (pooled["a_only"], pooled["b_only"]) == (5 + 0 + 20, 0)
    assert final.p_value == binomial_two_sided_p(0, 25)
    assert final.diff == pytest.approx((68 - 43) / 120)
    assert final.a_value == pytest.approx(68 / 120) and final.b_value == pytest.approx(43 / 120)
    assert (final.seeds_a_ahead, final.seeds_b_ahead, final.n_units) == (2, 0, 120)
    assert [d["p_value"] for d in final.detail["per_seed"]] == [binomial_two_sided_p(0, 5), 1.0,
                                                                binomial_two_sided_p(0, 20)]
    kl = next(r for r in rows if r.key == "mean_kl")
    assert kl.test == "sign-flip" and kl.p_value == 1.0 and kl.min_p == 0.25  # equal KL everywhere


def test_compare_arms_needs_a_common_seed_and_the_same_problems(tmp_path):
    write_run(tmp_path, "sa", 0.5, 0, {0: [True], 20: [True]})
    write_run(tmp_path, "grpo", 0.0, 1, {0: [True], 20: [True]})
    with pytest.raises(ValueError, match="no common seed"):
        compare_arms(Arm("sa", 0.5), Arm("grpo", 0.0), load_root_evidence(tmp_path))
    write_run(tmp_path, "grpo", 0.0, 0, {0: [True, False], 20: [True, False]})
    with pytest.raises(ValueError, match="other problems"):
        compare_arms(Arm("sa", 0.5), Arm("grpo", 0.0), load_root_evidence(tmp_path))


def test_topk_runs_are_their_own_arm(tmp_path):
    write_run(tmp_path, "sa", 0.5, 0, {0: [True, False], 20: [True, True]})
    write_run(tmp_path, "sa", 0.5, 0, {0: [True, False], 20: [False, False]}, top_k=5)
    runs = load_root_evidence(tmp_path)
    assert Arm("sa", 0.5).runs_by_seed(runs)[0].entropy_top_k is None
    assert Arm("sa", 0.5, entropy_top_k=5).runs_by_seed(runs)[0].entropy_top_k == 5
    rows = compare_arms(Arm("sa", 0.5, entropy_top_k=5), Arm("sa", 0.5), runs, n_resamples=100)
    assert rows[0].diff == -1.0 and "top-5" in rows[0].a


def test_holm_is_applied_within_each_quantity(tmp_path):
    runs = _two_arms(tmp_path, {0: 30}, {0: 10})
    write_run(tmp_path, "ah", 0.5, 0, {0: _pattern(40, 5), 20: _pattern(40, 10)})
    runs = load_root_evidence(tmp_path)
    rows = compare_pairs(runs, [(Arm("sa", 0.5), Arm("grpo", 0.0)), (Arm("sa", 0.5), Arm("ah", 0.5))],
                         n_resamples=200)
    finals = [r for r in rows if r.key == "final"]
    assert len(finals) == 2
    p = sorted(r.p_value for r in finals)  # both are 0-of-20 discordant: equal p, each doubled
    assert all(r.p_holm == pytest.approx(min(1.0, 2 * p[0])) for r in finals)


# ------------------------------------------------------------------ the sentence

def test_sentence_significant_case(tmp_path):
    runs = _two_arms(tmp_path, {0: 30, 1: 28, 2: 31}, {0: 10, 1: 12, 2: 9})
    rows = compare_pairs(runs, [(Arm("sa", 0.5), Arm("grpo", 0.0))], n_resamples=1000)
    text = evidence_sentence(rows)
    final = next(r for r in rows if r.key == "final")
    assert established(final)
    assert "SA-AH-GRPO (α=0.5) has higher final Pass@1 than GRPO by 0.483" in text
    assert "2 of 4 differences are established" in text  # final and peak; the per-seed summaries cannot be
    assert "cannot give p below 2/2^3 = 0.25" in text
    assert "not that another training seed would rank the methods the same way" in text
    assert "Peak checkpoints are picked on the evaluation problems" in text


def test_sentence_not_significant_case(tmp_path):
    runs = _two_arms(tmp_path, {0: 20, 1: 21}, {0: 20, 1: 20})
    rows = compare_pairs(runs, [(Arm("sa", 0.5), Arm("grpo", 0.0))], n_resamples=500)
    text = evidence_sentence(rows)
    assert "no difference is established at the 5% level" in text
    assert "higher" not in text and "lower" not in text
    assert "2/2^2 = 0.5" in text


def test_sentence_mixed_directions(tmp_path):
    runs = _two_arms(tmp_path, {0: 25, 1: 10}, {0: 10, 1: 25})
    rows = compare_pairs(runs, [(Arm("sa", 0.5), Arm("grpo", 0.0))], n_resamples=500)
    text = evidence_sentence(rows)
    final = next(r for r in rows if r.key == "final")
    assert (final.seeds_a_ahead, final.seeds_b_ahead) == (1, 1)
    assert final.p_value == 1.0  # 15 discordant each way
    assert "Seeds disagree on the direction of SA-AH-GRPO (α=0.5) vs GRPO (final Pass@1)" in text
    assert "no difference is established" in text


def test_significant_test_with_an_interval_that_includes_zero_is_not_established(tmp_path):
    runs = _two_arms(tmp_path, {0: 30}, {0: 10})
    rows = compare_pairs(runs, [(Arm("sa", 0.5), Arm("grpo", 0.0))], n_resamples=200)
    row = next(r for r in rows if r.key == "final")
    row.ci_low = -0.01  # as if the problem-resampled interval disagreed with the pooled test
    assert row.p_holm < 0.05 and not established(row)
    text = evidence_sentence(rows)
    assert "interval includes 0, so not established" in text


def test_sentence_without_rows_and_unadjusted_rows(tmp_path):
    assert "No paired comparison" in evidence_sentence([])
    runs = _two_arms(tmp_path, {0: 30}, {0: 10})
    rows = compare_arms(Arm("sa", 0.5), Arm("grpo", 0.0), runs, n_resamples=100)
    with pytest.raises(ValueError, match="adjust"):
        evidence_sentence(rows)
    assert evidence_sentence(adjust(rows))


# ------------------------------------------------------------------ rendering

def test_render_evidence_writes_table_sentence_figure_and_json(tmp_path):
    root = tmp_path / "root"
    _two_arms(root, {0: 30, 1: 28, 2: 31}, {0: 10, 1: 12, 2: 9})
    out = render_evidence(root, tmp_path / "tables", tmp_path / "figs", prefix="t", n_resamples=300)
    names = sorted(p.name for p in out["written"])
    assert names == ["t_paired.pdf", "t_paired.png", "t_paired.tex", "t_paired_evidence.json",
                     "t_paired_sentence.tex"]
    assert sorted(p.name for p in root.iterdir()) == ["runs"]  # nothing derived lands in the results root
    tex = (tmp_path / "tables" / "t_paired.tex").read_text()
    assert r"\label{t:paired}" in tex and r"\toprule" in tex and r"\bottomrule" in tex
    assert r"SA-AH-GRPO ($\alpha$=0.5)" in tex and "5\\% level" in tex and "300 resamples" in tex
    assert tex.count(r"\\") == 1 + 1 + 4  # header, the pair's heading row, four quantities
    summary = json.loads((tmp_path / "tables" / "t_paired_evidence.json").read_text())
    assert summary["bootstrap"]["n_resamples"] == 300
    sentence = (tmp_path / "tables" / "t_paired_sentence.tex").read_text()
    assert "$2/2^{3}$" in sentence and "5\\%" in sentence
    # no data any more: the stale outputs go
    for run in (root / "runs").iterdir():
        (run / "config.json").unlink()
    with pytest.raises(ValueError, match="config"):
        render_evidence(root, tmp_path / "tables", tmp_path / "figs", prefix="t", n_resamples=300)
    out = render_evidence(root, tmp_path / "tables", tmp_path / "figs", prefix="t", n_resamples=300,
                          tolerate_problems=True)
    assert out["written"] == [] and not (tmp_path / "tables" / "t_paired.tex").exists()
    assert not (tmp_path / "figs" / "t_paired.png").exists()


def test_tex_text_escapes_and_keeps_math():
    assert tex_text("A_b (α=0.5) p < 0.001, 2/2^3 = 0.25, 5%") == \
        r"A\_b ($\alpha$=0.5) p $<$ 0.001, $2/2^{3}$ = 0.25, 5\%"


# ------------------------------------------------------------------ the committed mini study

MINI = REPO / "results" / "mini"


@pytest.mark.skipif(not (MINI / "runs").is_dir(), reason="committed mini results absent")
def test_on_the_committed_mini_study_pass_at_1_agrees_with_the_tables():
    """The pooled Pass@1 of an arm is the mean over its seeds of eval.jsonl's final Pass@1 (the tables' number)."""
    summary = evidence_summary(MINI, n_resamples=200)
    runs = ResultSet.from_runs(MINI).runs
    for row in (r for r in summary["rows"] if r["key"] == "final"):
        for label, value in ((row["a"], row["a_value"]), (row["b"], row["b_value"])):
            method = {"GRPO": "grpo", "AH-GRPO (α=0.5)": "ah", "SA-AH-GRPO (α=0.5)": "sa"}[label]
            sel = runs[(runs["method"] == method) & np.isclose(runs["alpha"], 0.0 if method == "grpo" else 0.5)
                       & runs["seed"].isin(row["detail"]["seeds"])]
            assert value == pytest.approx(sel["final_pass_at_1"].mean(), abs=1e-12)
    kl_rows = [r for r in summary["rows"] if r["key"] == "mean_kl"]
    assert kl_rows and all(r["min_p"] == 2 / 2 ** r["n_seeds"] for r in kl_rows)
    assert all(math.isclose(r["p_value"], sign_flip_test(r["detail"]["a"], r["detail"]["b"]).p_value)
               for r in kl_rows)


def test_topk_runs_get_their_own_table_and_family(tmp_path):
    root = tmp_path / "root"
    _two_arms(root, {0: 30, 1: 28}, {0: 10, 1: 12})
    for seed, right in ((0, 29), (1, 27)):
        write_run(root, "sa", 0.5, seed, {0: _pattern(40, 5), 20: _pattern(40, right)}, top_k=5)
    before = evidence_summary(root, n_resamples=200)
    out = render_evidence(root, tmp_path / "tables", tmp_path / "figs", prefix="t", n_resamples=200)
    # the main comparison is unchanged by the top-K runs (a separate Holm family)
    assert [r["p_holm"] for r in out["summary"]["rows"]] == [r["p_holm"] for r in before["rows"]]
    rows = out["topk_runs"]["rows"]
    assert {(r["a"], r["b"]) for r in rows} == {("SA-AH-GRPO (α=0.5) top-5", "SA-AH-GRPO (α=0.5)")}
    final = next(r for r in rows if r["key"] == "final")
    assert final["diff"] == pytest.approx(-2 / 80) and final["detail"]["pooled"]["b_only"] == 2
    tex = (tmp_path / "tables" / "t_topk_runs.tex").read_text()
    assert r"\label{t:topk_runs}" in tex and "top-5" in tex
    assert (tmp_path / "tables" / "t_topk_runs_evidence.json").is_file() and (tmp_path / "figs" / "t_topk_runs.png").is_file()


def test_an_incomplete_run_is_an_error_or_is_left_out_and_named(tmp_path):
    root = tmp_path / "root"
    _two_arms(root, {0: 30, 1: 28}, {0: 10, 1: 12})
    broken = next((root / "runs").iterdir())
    (broken / "eval.jsonl").write_text("")  # no evaluation at all: not complete
    with pytest.raises(ValueError, match=f"{broken.name}: incomplete"):
        evidence_summary(root, n_resamples=50)
    summary = evidence_summary(root, n_resamples=50, tolerate_problems=True)
    assert summary["left_out"] == [broken.name] and "WARNING" in summary["sentence"]
    assert not Path(summary["root"]).is_absolute() or str(tmp_path) in summary["root"]


def test_a_pair_that_cannot_be_compared_is_an_error_or_named_never_dropped_silently(tmp_path):
    root = tmp_path / "root"
    _two_arms(root, {0: 30, 1: 28}, {0: 10, 1: 12})
    write_run(root, "ah", 0.5, 0, {0: _pattern(30, 5), 20: _pattern(30, 9)})  # 30 problems, not 40
    with pytest.raises(ValueError, match=r"SA-AH-GRPO \(α=0.5\) vs AH-GRPO \(α=0.5\) cannot be compared: .*other "
                                         r"problems"):
        evidence_summary(root, n_resamples=50)
    summary = evidence_summary(root, n_resamples=50, tolerate_problems=True)
    assert len(summary["pairs_left_out"]) == 2  # SA vs AH and AH vs GRPO; SA vs GRPO is compared
    assert "WARNING: 2 comparison(s) could not be made: SA-AH-GRPO (α=0.5) vs AH-GRPO (α=0.5):" in summary["sentence"]
    assert {(r["a"], r["b"]) for r in summary["rows"]} == {("SA-AH-GRPO (α=0.5)", "GRPO")}
    # no seed in common is nothing to compare, not a problem
    write_run(tmp_path / "apart", "sa", 0.5, 0, {0: [True], 20: [True]})
    write_run(tmp_path / "apart", "grpo", 0.0, 1, {0: [True], 20: [False]})
    apart = evidence_summary(tmp_path / "apart", n_resamples=50)
    assert apart["rows"] == [] and "pairs_left_out" not in apart
