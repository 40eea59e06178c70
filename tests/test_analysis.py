"""Tests of saah_lib.analysis: loaders, the paper's summaries and the ResultSet.

``make_results_root`` writes a small synthetic results root by hand (it is
also imported by test_tables.py and test_plots.py).
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from saah_lib import analysis as A

TINY = "tiny"
SMALL = "Qwen2.5-0.5B-Instruct"


def _write_jsonl(path: Path, rows, trailing: str | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(r) + "\n" for r in rows)
    if trailing is not None:
        text += trailing  # a line still being written
    path.write_text(text)


def _train_rows(steps: int, base: float, slope: float, seed: int, method: str, alpha: float) -> list[dict]:
    rng = np.random.default_rng(seed)
    rows = []
    for s in range(1, steps + 1):
        neg = float(rng.choice([0.0, 0.25, 0.5]))
        w_neg = None if neg == 0 else float(np.exp(-alpha * 2.0)) if method != "grpo" else 1.0
        rows.append({
            "step": s, "reward_mean": base + slope * s + float(rng.normal(0, 0.1)), "reward_std": 0.5,
            "reward_correct": 1.0, "reward_format": 0.5, "reward_present": 0.5, "reward_steps": 0.4,
            "kl": 0.001 * s, "entropy_norm": 0.05 - 0.001 * s, "weight_mean": 1.0 if method == "grpo" else 0.8,
            "weight_neg_mean": w_neg, "neg_frac": neg, "completion_length": 100 + s, "step_time": 1.0,
            "loss": 0.1, "learning_rate": 5e-6, "grad_norm": 0.3,
        })
    return rows


def make_run(root: Path, run_id: str, model: str, method: str, alpha: float, seed: int, steps: int = 20,
             eval_every: int = 5, logged: int | None = None, evals: dict | None = None,
             trailing: str | None = None, token_entropies: list | None = None) -> Path:
    d = root / "runs" / run_id
    d.mkdir(parents=True, exist_ok=True)
    cfg = {"run_id": run_id, "profile": "mini", "model_name": f"org/{model}", "model_label": model,
           "method": method, "alpha": alpha, "steps": steps, "seed": seed, "eval_every": eval_every,
           "learning_rate": 5e-6, "versions": {"torch": "x"}, "data": {"train_ids": ["a", "b", "c"], "source": "local"}}
    (d / "config.json").write_text(json.dumps(cfg))
    logged = steps if logged is None else logged
    _write_jsonl(d / "train_log.jsonl", _train_rows(logged, 1.0, 0.1, seed, method, alpha), trailing)
    if evals is None:
        evals = {0: 0.40}
        for s in range(eval_every, logged + 1, eval_every):
            evals[s] = round(0.40 + 0.01 * s + 0.01 * seed, 3)
    _write_jsonl(d / "eval.jsonl", [{"step": s, "pass_at_1": p, "ci95": A.pass_at_1_ci(p, 50), "n": 50,
                                     "n_correct": int(round(p * 50))} for s, p in sorted(evals.items())],
                 trailing)
    if token_entropies is not None:
        _write_jsonl(d / "token_entropies.jsonl", token_entropies)
    return d


def make_results_root(root: Path) -> Path:
    """Synthetic results root: two seeds of GRPO, AH, SA and an alpha sweep on ``tiny``,
    one incomplete run, truncated trailing lines, a baseline, token entropies, and a
    second model without baseline folder."""
    make_run(root, "tiny-grpo-s1", TINY, "grpo", 0.0, 1, trailing='{"step": 21, "reward_me')
    make_run(root, "tiny-grpo-s2", TINY, "grpo", 0.0, 2)
    make_run(root, "tiny-ah-s1", TINY, "ah", 0.5, 1)
    make_run(root, "tiny-ah-a0.25", TINY, "ah", 0.25, 1)
    # incomplete: 20 steps configured, 12 logged, evaluated up to step 10
    make_run(root, "tiny-ah-a-0.25", TINY, "ah", -0.25, 1, logged=12, trailing="{")
    te = [
        {"step": 20, "advantage": 0.8, "entropy_norm": [0.1, 0.5, 0.2, 0.9, 0.05]},
        {"step": 20, "advantage": -0.6, "entropy_norm": [0.3, 0.7, 0.6, 0.2]},
        {"step": 10, "advantage": 0.5, "entropy_norm": [0.1, 0.1]},
    ]
    make_run(root, "tiny-sa-s1", TINY, "sa", 0.5, 1, steps=25, token_entropies=te)
    make_run(root, "small-grpo-s1", SMALL, "grpo", 0.0, 1, steps=10)
    _write_jsonl(root / "baselines" / "tiny_zero_shot" / "eval.jsonl",
                 [{"step": 0, "pass_at_1": 0.38, "ci95": None, "n": 50, "n_correct": 19}], trailing='{"st')
    (root / "baselines" / "tiny_zero_shot" / "config.json").write_text(json.dumps({"model_label": TINY, "profile": "mini"}))
    return root


@pytest.fixture
def results_root(tmp_path) -> Path:
    return make_results_root(tmp_path / "results")


# ---------------------------------------------------------------------------
# the summaries
# ---------------------------------------------------------------------------

def test_pass_at_1_ci_formula():
    assert A.pass_at_1_ci(0.5, 100) == pytest.approx(0.098)
    assert A.pass_at_1_ci(0.637, 500) == pytest.approx(1.96 * math.sqrt(0.637 * 0.363 / 500))
    assert np.allclose(A.pass_at_1_ci(np.array([0.0, 1.0]), 500), 0.0)
    assert math.isnan(A.pass_at_1_ci(0.5, 0))


def test_training_variance_hand_computed():
    # 5 logged steps -> second half = rows with index >= 2 -> reward_mean [3, 4, 6]
    # mean 13/3; squared deviations 16/9, 1/9, 25/9 -> sum 42/9; ddof=1 -> 21/9
    log = pd.DataFrame({"step": [1, 2, 3, 4, 5], "reward_mean": [1.0, 2.0, 3.0, 4.0, 6.0]})
    assert A.training_variance(log) == pytest.approx(21 / 9)
    # order of lines does not matter; a step logged twice keeps its last line
    shuffled = pd.DataFrame({"step": [5, 3, 1, 4, 2, 5], "reward_mean": [99.0, 3.0, 1.0, 4.0, 2.0, 6.0]})
    assert A.training_variance(shuffled) == pytest.approx(21 / 9)
    # 4 steps -> rows 2, 3 -> [3, 5] -> variance 2 (ddof=1)
    assert A.training_variance(pd.DataFrame({"step": [1, 2, 3, 4], "reward_mean": [1, 2, 3, 5]})) == pytest.approx(2.0)
    # nulls inside the second half are ignored, fewer than two values -> NaN
    assert A.training_variance(pd.DataFrame({"step": [1, 2, 3, 4], "reward_mean": [1, 2, None, 5]})) != \
        A.training_variance(pd.DataFrame({"step": [1, 2, 3, 4], "reward_mean": [1, 2, 3, 5]}))
    assert math.isnan(A.training_variance(pd.DataFrame({"step": [1, 2, 3], "reward_mean": [1, 2, None]})))
    assert math.isnan(A.training_variance(pd.DataFrame({"step": [], "reward_mean": []})))


def test_final_and_peak_excludes_step0_and_takes_earliest_tie():
    ev = pd.DataFrame({"step": [0, 10, 20, 30, 40], "pass_at_1": [0.9, 0.5, 0.7, 0.7, 0.6],
                       "n": [100] * 5})
    out = A.final_and_peak(ev)
    assert out["final_pass_at_1"] == 0.6 and out["final_step"] == 40
    assert out["peak_pass_at_1"] == 0.7 and out["peak_step"] == 20
    assert out["peak_ci95"] == pytest.approx(A.pass_at_1_ci(0.7, 100))
    only0 = A.final_and_peak(ev[ev.step == 0])
    assert all(math.isnan(v) for v in only0.values())


def test_mean_kl():
    assert A.mean_kl(pd.DataFrame({"step": [1, 2, 3], "kl": [0.1, None, 0.3]})) == pytest.approx(0.2)


def test_token_weights():
    h = np.array([0.2, 0.4, 0.1])
    ah = np.exp(-0.5 * np.cumsum(h))
    assert np.allclose(A.token_weights(h, 0.5, "grpo", -1.0), 1.0)
    assert np.allclose(A.token_weights(h, 0.5, "ah", 1.0), ah)
    assert np.allclose(A.token_weights(h, 0.5, "ah", -1.0), ah)
    assert np.allclose(A.token_weights(h, 0.5, "sa", 1.0), 1.0)
    assert np.allclose(A.token_weights(h, 0.5, "sa", 0.0), 1.0)  # advantage 0 counts as non-negative
    assert np.allclose(A.token_weights(h, 0.5, "sa", -1.0), ah)


def test_read_jsonl_truncated_and_corrupt(tmp_path, caplog):
    p = tmp_path / "x.jsonl"
    p.write_text('{"a": 1}\nnot json\n\n{"a": 2}\n{"a": 3, "b"')
    with caplog.at_level(logging.WARNING):
        rows = A.read_jsonl(p)
    assert rows == [{"a": 1}, {"a": 2}]
    assert sum("not valid JSON" in r.message for r in caplog.records) == 1  # only the middle line warns
    assert A.read_jsonl(tmp_path / "missing.jsonl") == []


def test_model_labels():
    assert A.model_short("Qwen2.5-1.5B-Instruct") == "1.5B"
    assert A.model_short("tiny") == "tiny"
    assert A.slug("Qwen2.5-1.5B-Instruct") == "1p5b"
    assert A.model_order(["tiny", "Qwen2.5-1.5B-Instruct", "Qwen2.5-3B-Instruct"]) == \
        ["Qwen2.5-3B-Instruct", "Qwen2.5-1.5B-Instruct", "tiny"]


# ---------------------------------------------------------------------------
# loaders
# ---------------------------------------------------------------------------

def test_load_runs(results_root):
    runs = A.load_runs(results_root).set_index("run_id")
    assert len(runs) == 7
    for col in ("model_label", "method", "alpha", "steps", "seed", "final_pass_at_1", "final_ci95", "final_step",
                "peak_pass_at_1", "peak_ci95", "peak_step", "train_var", "mean_kl", "n_steps_logged"):
        assert col in runs.columns
    r = runs.loc["tiny-grpo-s1"]
    assert r["n_steps_logged"] == 20  # the truncated 21st line is ignored
    assert r["final_step"] == 20 and r["final_pass_at_1"] == pytest.approx(0.61)
    assert r["complete"]
    assert r["data.train_ids.len"] == 3 and r["versions.torch"] == "x"
    inc = runs.loc["tiny-ah-a-0.25"]
    assert inc["n_steps_logged"] == 12 and not inc["complete"] and inc["final_step"] == 10
    # train_var follows the definition on the logged steps
    log = A.load_train_logs(results_root)
    one = log[log.run_id == "tiny-grpo-s2"]
    assert runs.loc["tiny-grpo-s2", "train_var"] == pytest.approx(one["reward_mean"].iloc[10:].var(ddof=1))
    assert runs.loc["tiny-grpo-s2", "mean_kl"] == pytest.approx(one["kl"].mean())


def test_long_loaders(results_root):
    ev = A.load_evals(results_root)
    assert {"run_id", "model_label", "method", "alpha", "seed", "step", "pass_at_1", "ci95"} <= set(ev.columns)
    assert ev[ev.run_id == "tiny-ah-a-0.25"]["step"].tolist() == [0, 5, 10]
    tl = A.load_train_logs(results_root)
    assert tl[tl.run_id == "tiny-sa-s1"]["step"].max() == 25
    assert tl["weight_neg_mean"].isna().any()  # null stays null
    base = A.load_baselines(results_root)
    assert len(base) == 1 and base["model_label"].iloc[0] == TINY
    assert base["ci95"].iloc[0] == pytest.approx(A.pass_at_1_ci(0.38, 50))  # filled from n


def test_empty_root(tmp_path):
    assert A.load_runs(tmp_path).empty
    assert A.load_evals(tmp_path).empty
    rs = A.ResultSet.from_runs(tmp_path)
    assert rs.is_empty()


# ---------------------------------------------------------------------------
# ResultSet
# ---------------------------------------------------------------------------

def test_resultset_from_runs_aggregates_seeds(results_root):
    rs = A.ResultSet.from_runs(results_root)
    s = rs.summary
    g = s[(s.model_label == TINY) & (s.method == "grpo")].iloc[0]
    runs = A.load_runs(results_root).set_index("run_id")
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
    rs = A.ResultSet.from_runs(results_root)
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
    te = A.load_token_entropies(results_root)
    assert len(te) == 3
    pair = A.pick_rollout_pair(te)
    assert pair["run_id"] == "tiny-sa-s1" and pair["step"] == 20 and pair["alpha"] == 0.5
    assert np.allclose(pair["h_neg"], [0.3, 0.7, 0.6, 0.2])
    assert A.pick_rollout_pair(te[te.step == 10]) is None  # no negative rollout at that step


def test_resultset_from_paper_reported():
    d = Path(__file__).resolve().parents[1] / "results" / "paper_reported"
    rs = A.ResultSet.from_paper_reported(d)
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


def test_zero_shot_baseline_preferred(tmp_path):
    root = tmp_path / "r"
    make_run(root, "g", TINY, "grpo", 0.0, 1)
    for name, p in (("a_warmstart", 0.5), ("tiny_zero_shot", 0.3)):
        _write_jsonl(root / "baselines" / name / "eval.jsonl", [{"step": 0, "pass_at_1": p, "n": 50}])
        (root / "baselines" / name / "config.json").write_text(json.dumps({"model_label": TINY}))
    b = A.ResultSet.from_runs(root).baseline_for(TINY)
    assert b["name"] == "tiny_zero_shot" and b["pass_at_1"] == 0.3
