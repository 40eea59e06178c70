"""Tests of saah_lab.analysis.resultset (and saah_lab.analysis.reported through ResultSet.from_paper_reported)."""

import math

import numpy as np
import pytest

from saah_lab.analysis.reported import read_paper_reported
from saah_lab.analysis.resultset import ResultSet
from saah_lab.report.plots import pick_rollout_pair
from saah_lib.paths import REPO_ROOT

TINY = "tiny"
SMALL = "Qwen2.5-0.5B-Instruct"


def test_resultset_from_runs_aggregates_seeds(results_root):
    rs = ResultSet.from_runs(results_root, tolerate_problems=True)
    s = rs.summary
    g = s[(s.model_label == TINY) & (s.method == "grpo")].iloc[0]
    runs = ResultSet.from_runs(results_root, tolerate_problems=True).runs.set_index("run_id")
    finals = [runs.loc["tiny-grpo-s1", "final_pass_at_1"], runs.loc["tiny-grpo-s2", "final_pass_at_1"]]
    assert g["n_seeds"] == 2
    assert g["final_pass_at_1"] == pytest.approx(np.mean(finals))
    assert g["final_pass_at_1_std"] == pytest.approx(np.std(finals, ddof=1))
    single = s[(s.model_label == TINY) & (s.method == "sa")].iloc[0]
    assert single["n_seeds"] == 1 and math.isnan(single["final_pass_at_1_std"])
    # baselines: the folder for tiny, step-0 evaluations for the other model
    assert rs.baseline_for(TINY)["pass_at_1"] == 0.38 and rs.baseline_for(TINY)["kind"] == "baseline"
    assert rs.baseline_for(SMALL)["kind"] == "step0"
    assert set(s.loc[s.method == "base", "model_label"]) == {TINY, SMALL}
    # models ordered largest first, unknown sizes last
    assert rs.models == [SMALL, TINY]
    # checkpoints: step 0 excluded, seeds averaged
    ck = rs.checkpoints
    assert (ck.step > 0).all()
    c = ck[(ck.model_label == TINY) & (ck.method == "grpo") & (ck.step == 20)].iloc[0]
    assert c["pass_at_1"] == pytest.approx(np.mean(finals)) and c["n_seeds"] == 2


def test_resultset_ablation_and_diagnostics(results_root):
    rs = ResultSet.from_runs(results_root, tolerate_problems=True)
    ab = rs.ablation
    # AH alphas in order, GRPO standing in for alpha = 0 (no AH run at 0), the SA reference last
    assert list(zip(ab.method, ab.alpha)) == [("ah", -0.25), ("grpo", 0.0), ("ah", 0.25), ("ah", 0.5), ("sa", 0.5)]
    assert bool(ab.loc[ab.alpha == -0.25, "partial"].iloc[0])
    d = rs.diagnostics
    sa = d[(d.model_label == TINY) & (d.method == "sa")]
    assert sa["step"].tolist() == [1, 5, 10, 15, 20, 25]  # first logged step + every eval_every
    assert sa.loc[sa.step == 1, "pass_at_1"].isna().all()
    assert sa.loc[sa.step == 5, "pass_at_1"].notna().all()
    noneg = d[d.neg_frac == 0]
    assert (noneg["weight_neg_note"] == "all_positive").all()


def test_pick_rollout_pair(results_root):
    te = ResultSet.from_runs(results_root, tolerate_problems=True).token_entropies
    assert len(te) == 3
    pair = pick_rollout_pair(te)
    assert pair["run_id"] == "tiny-sa-s1" and pair["step"] == 20 and pair["alpha"] == 0.5
    assert np.allclose(pair["h_neg"], [0.3, 0.7, 0.6, 0.2])
    assert pick_rollout_pair(te[te.step == 10]) is None  # no negative rollout at that step


def test_resultset_from_paper_reported():
    d = REPO_ROOT / "results" / "paper_reported"
    rs = read_paper_reported(d)
    assert rs.source == "paper_reported"
    assert rs.models == ["Qwen2.5-3B-Instruct", "Qwen2.5-1.5B-Instruct"]
    assert rs.notes["conflicts"] == []  # ablation rows agree with the checkpoint tables
    s = rs.summary.set_index(["model_short", "method"])
    assert s.loc[("3B", "sa"), "train_var"] == 0.0246
    ck = rs.checkpoints
    assert len(ck[(ck.model_label == "Qwen2.5-1.5B-Instruct") & (ck.method == "ah")]["alpha"].unique()) == 4
    assert rs.baseline_for("Qwen2.5-1.5B-Instruct")["raw_pass_at_1"] == 0.652
    # the paper's 0.000 placeholder for w_- is kept in the table, dropped from the curves
    assert (rs.diagnostics["weight_neg_mean"] == 0).sum() == 3
    assert rs.curves["weight_neg_mean"].isna().sum() == 3


def test_zero_shot_baseline_preferred(tmp_path, run_maker, baseline_maker):
    root = tmp_path / "r"
    run_maker(root, "g", TINY, "grpo", 0.0, 1)
    for name, correct in (("a_warmstart", 25), ("tiny_zero_shot", 15)):
        baseline_maker(root, name, TINY, 50, correct)
    b = ResultSet.from_runs(root).baseline_for(TINY)
    assert b["name"] == "tiny_zero_shot" and b["pass_at_1"] == 0.3


def test_the_paper_matched_alpha_joins_the_main_comparison_and_runs_carry_their_health(tmp_path, run_maker):
    import json

    from saah_lib.rundir.layout import MATCHED_ALPHA_FILE

    root = tmp_path / "results"
    run_maker(root, "tiny-grpo-a0-s0", "tiny", "grpo", 0.0, 0, evals={0: 0.3, 10: 0.5, 20: 0.55}, eval_every=10)
    run_maker(root, "tiny-sa-a0.5-s0", "tiny", "sa", 0.5, 0, evals={0: 0.3, 10: 0.5, 20: 0.55}, eval_every=10)
    run_maker(root, "tiny-sa-a5.9-s0", "tiny", "sa", 5.9, 0, evals={0: 0.3, 10: 0.1, 20: 0.05}, eval_every=10)
    before = ResultSet.from_runs(root)
    assert not before.summary.loc[before.summary.alpha == 5.9, "in_main"].any()
    (root / MATCHED_ALPHA_FILE).write_text(json.dumps({"alpha": 5.9}))
    rs = ResultSet.from_runs(root)
    assert rs.notes["matched_alpha"] == 5.9
    assert rs.summary.loc[rs.summary.alpha == 5.9, "in_main"].all()
    assert set(rs.checkpoints.loc[rs.checkpoints.in_main, "alpha"]) == {0.0, 0.5, 5.9}
    health = rs.runs.set_index("run_id")
    assert health.loc["tiny-sa-a5.9-s0", "flagged"] and "fell_below_start" in health.loc["tiny-sa-a5.9-s0", "flags"]
    assert not health.loc["tiny-sa-a0.5-s0", "flagged"]
    assert rs.summary.loc[rs.summary.alpha == 5.9, "n_flagged"].iloc[0] == 1
    (root / MATCHED_ALPHA_FILE).write_text(json.dumps({"alpha": "x"}))
    with pytest.raises(ValueError, match="numeric 'alpha'"):
        ResultSet.from_runs(root)


def test_the_paper_matched_alpha_comes_from_the_root_or_else_from_its_plan(tmp_path):
    import json

    from saah_lab.analysis.resultset import matched_alpha

    assert matched_alpha(tmp_path) is None
    (tmp_path / "study_plan.json").write_text(json.dumps({"study": "confirm", "paper_matched_alpha": 5.9}))
    assert matched_alpha(tmp_path) == 5.9  # a study that runs another study's matched alpha
    (tmp_path / "paper_matched_alpha.json").write_text(json.dumps({"alpha": 6.1}))
    assert matched_alpha(tmp_path) == 6.1  # measured there: that one
    (tmp_path / "paper_matched_alpha.json").unlink()
    (tmp_path / "study_plan.json").write_text(json.dumps({"study": "mini"}))
    assert matched_alpha(tmp_path) is None
    (tmp_path / "study_plan.json").write_text(json.dumps({"paper_matched_alpha": "six"}))
    with pytest.raises(ValueError, match="study_plan.json: no numeric 'alpha'"):
        matched_alpha(tmp_path)
