"""The top-K entropy ablation: hand-worked errors, rollouts from a real (random) model, the table and figure,
and the extended study's run plan."""

import math

import pytest
import torch

from saah_lab.report.plots import plot_topk
from saah_lab.report.render import render_source
from saah_lab.report.tables import table_topk
from saah_lab.studies.topk import (
    RESULT_FILE,
    completion_mask,
    measure_topk,
    topk_errors,
    topk_run_id,
    topk_training_configs,
)
from saah_lib.jsonio import atomic_write_json


def test_completion_mask_keeps_the_first_eos_and_drops_what_follows():
    ids = torch.tensor([[5, 6, 2, 2, 2], [5, 6, 7, 8, 9], [2, 3, 3, 3, 3]])
    assert completion_mask(ids, eos_token_id=2).tolist() == [[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]]


def test_uniform_rows_give_the_closed_form_errors():
    """Uniform logits over V: exact H/log V = 1, top-K gives log K / log V; the weight error compounds."""
    V, T, K, alpha = 64, 5, 8, 0.5
    logits = torch.zeros(2, T, V)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    r = topk_errors([(logits, mask)], ks=(K, V), alphas=(alpha,))
    dh = math.log(K) / math.log(V) - 1.0  # per-token error of the estimate (negative: it misses the tail)
    row, exact = r["per_k"]
    assert r["n_tokens"] == 8 and r["n_rollouts"] == 2 and r["vocab_size"] == V
    assert row["entropy_abs_err"]["mean"] == pytest.approx(abs(dh), rel=1e-5)
    assert row["entropy_signed_err_mean"] == pytest.approx(dh, rel=1e-5)
    assert row["topk_mass"]["mean"] == pytest.approx(K / V, rel=1e-5)
    # relative weight error at token t (1-based): exp(-alpha * t * dh) - 1
    rel = [math.exp(-alpha * t * dh) - 1 for t in range(1, 6)]
    w = row["weights"]["0.5"]
    assert w["rel_err"]["max"] == pytest.approx(rel[4], rel=1e-4)
    assert w["rel_err"]["mean"] == pytest.approx((sum(rel) + sum(rel[:3])) / 8, rel=1e-4)
    assert w["last_token_rel_err"]["mean"] == pytest.approx((rel[4] + rel[2]) / 2, rel=1e-4)
    assert exact["exact"] and exact["entropy_abs_err"]["max"] == 0 and exact["weights"]["0.5"]["rel_err"]["max"] == 0


def test_topk_errors_needs_rollouts():
    with pytest.raises(ValueError, match="no rollouts"):
        topk_errors([])


def test_measure_topk_on_sampled_rollouts_of_a_real_model(tiny_random_model_dir):
    r = measure_topk(tiny_random_model_dir, n_prompts=2, per_prompt=2, ks=(5, 50), alphas=(0.5,), seed=0)
    assert r["vocab_size"] == 660 and [row["k"] for row in r["per_k"]] == [5, 50, 660]
    assert r["n_rollouts"] == 4 and r["n_tokens"] > 4
    e5, e50, exact = (row["entropy_abs_err"]["mean"] for row in r["per_k"])
    assert e5 > e50 > exact == 0  # fewer logits, larger error; K = V is the exact entropy
    # a random model's next-token distribution is nearly uniform
    assert r["exact_entropy_norm"]["mean"] > 0.9
    again = measure_topk(tiny_random_model_dir, n_prompts=2, per_prompt=2, ks=(5, 50), alphas=(0.5,), seed=0)
    assert again["per_k"] == r["per_k"]  # seeded sampling


def test_topk_training_configs_have_their_own_run_ids():
    configs = topk_training_configs((5, 20), (0, 1), results_dir="r", steps=3)
    assert [c.run_id for c in configs] == ["tiny-sa-a0.5-k5-s0", "tiny-sa-a0.5-k5-s1", "tiny-sa-a0.5-k20-s0",
                                           "tiny-sa-a0.5-k20-s1"]
    assert {(c.trainer.method, c.trainer.alpha, c.trainer.max_steps) for c in configs} == {("sa", 0.5, 3)}
    assert [c.trainer.entropy_top_k for c in configs] == [5, 5, 20, 20]
    assert topk_run_id(100, 2) == "tiny-sa-a0.5-k100-s2"


def _topk_result():
    rows = []
    for k, err in ((5, 1e-3), (20, 1e-4), (660, 0.0)):
        w = {"abs_err": {"mean": err, "max": 10 * err}, "rel_err": {"mean": err, "max": 10 * err},
             "last_token_rel_err": {"mean": 2 * err, "max": 20 * err}, "last_token_weight_exact_mean": 0.9}
        rows.append({"k": k, "frac_vocab": k / 660, "exact": k == 660, "entropy_abs_err": {"mean": err, "max": 5 * err},
                     "entropy_signed_err_mean": -err, "entropy_rel_err_of_total": -err,
                     "topk_mass": {"mean": 1 - err, "min": 0.9}, "weights": {"0.5": w}})
    return {"vocab_size": 660, "n_rollouts": 8, "n_tokens": 400, "n_prompts": 2, "per_prompt": 4,
            "temperature": 1.0, "model": "model", "exact_entropy_norm": {"mean": 0.01, "max": 0.3, "median": 0.0},
            "alphas": [0.5], "per_k": rows}


def test_topk_table_and_figure(tmp_path):
    tex = table_topk(_topk_result(), prefix="t")
    assert r"\label{t:topk}" in tex and "$V=660$" in tex
    assert tex.count(r"\\") == 1 + 2  # header and the two truncating K (K = V is the reference)
    assert r"5 & 0.8\%" in tex
    assert plot_topk(_topk_result()) is not None
    root = tmp_path / "root"
    atomic_write_json(root / RESULT_FILE, _topk_result())
    out = render_source(root, tmp_path / "tables", tmp_path / "figs", prefix="t")
    assert sorted(p.name for p in out["written"]) == ["t_topk.pdf", "t_topk.png", "t_topk.tex"]
