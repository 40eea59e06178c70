"""Tests of saah_lib.runs: the loaders, and strict reading of finished runs.

Results roots are written by hand (``make_results_root`` in conftest.py).
"""

import json
import math

import pandas as pd
import pytest


from saah_lib import runs as A
from saah_lib.resultset import ResultSet
from saah_lib.summaries import pass_at_1_ci

TINY = "tiny"


def test_load_runs(results_root):
    runs = A.load_runs(results_root, tolerate_problems=True).set_index("run_id")
    assert len(runs) == 7
    for col in ("model_label", "method", "alpha", "steps", "seed", "final_pass_at_1", "final_ci95", "final_step",
                "peak_pass_at_1", "peak_ci95", "peak_step", "train_var", "mean_kl", "n_steps_logged"):
        assert col in runs.columns
    r = runs.loc["tiny-grpo-s1"]
    assert r["n_steps_logged"] == 20
    assert r["final_step"] == 20 and r["final_pass_at_1"] == pytest.approx(0.61)
    assert r["complete"]
    assert r["data.train_ids.len"] == 3 and r["versions.torch"] == "x"
    inc = runs.loc["tiny-ah-a-0.25"]
    assert inc["n_steps_logged"] == 12 and not inc["complete"] and inc["final_step"] == 10
    # train_var follows the definition on the logged steps
    log = A.load_train_logs(results_root, tolerate_problems=True)
    one = log[log.run_id == "tiny-grpo-s2"]
    assert runs.loc["tiny-grpo-s2", "train_var"] == pytest.approx(one["reward_mean"].iloc[10:].var(ddof=1))
    assert runs.loc["tiny-grpo-s2", "mean_kl"] == pytest.approx(one["kl"].mean())


def test_long_loaders(results_root):
    ev = A.load_evals(results_root, tolerate_problems=True)
    assert {"run_id", "model_label", "method", "alpha", "seed", "step", "pass_at_1", "ci95"} <= set(ev.columns)
    assert ev[ev.run_id == "tiny-ah-a-0.25"]["step"].tolist() == [0, 5, 10]
    tl = A.load_train_logs(results_root, tolerate_problems=True)
    assert tl[tl.run_id == "tiny-sa-s1"]["step"].max() == 25
    assert tl["weight_neg_mean"].isna().any()  # null stays null
    base = A.load_baselines(results_root)
    assert len(base) == 1 and base["model_label"].iloc[0] == TINY
    assert base["ci95"].iloc[0] == pytest.approx(pass_at_1_ci(0.38, 50))  # filled from n


def test_empty_root(tmp_path):
    assert A.load_runs(tmp_path).empty
    assert A.load_evals(tmp_path).empty
    rs = ResultSet.from_runs(tmp_path)
    assert rs.is_empty()
