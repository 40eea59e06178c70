"""Tests of saah_lab.analysis.summaries against hand-computed values."""

import math

import numpy as np
import pandas as pd
import pytest

from saah_lab.analysis import summaries as S
from saah_lib.tasks.scoring import pass_at_1_ci


def test_pass_at_1_ci_formula():
    assert pass_at_1_ci(0.5, 100) == pytest.approx(0.098)
    assert pass_at_1_ci(0.637, 500) == pytest.approx(1.96 * math.sqrt(0.637 * 0.363 / 500))
    assert np.allclose(pass_at_1_ci(np.array([0.0, 1.0]), 500), 0.0)
    assert math.isnan(pass_at_1_ci(0.5, 0))


def test_training_variance_hand_computed():
    # 5 logged steps -> second half = rows with index >= 2 -> reward_mean [3, 4, 6]
    # mean 13/3; squared deviations 16/9, 1/9, 25/9 -> sum 42/9; ddof=1 -> 21/9
    log = pd.DataFrame({"step": [1, 2, 3, 4, 5], "reward_mean": [1.0, 2.0, 3.0, 4.0, 6.0]})
    assert S.training_variance(log) == pytest.approx(21 / 9)
    # order of lines does not matter; a step logged twice keeps its last line
    shuffled = pd.DataFrame({"step": [5, 3, 1, 4, 2, 5], "reward_mean": [99.0, 3.0, 1.0, 4.0, 2.0, 6.0]})
    assert S.training_variance(shuffled) == pytest.approx(21 / 9)
    # 4 steps -> rows 2, 3 -> [3, 5] -> variance 2 (ddof=1)
    assert S.training_variance(pd.DataFrame({"step": [1, 2, 3, 4], "reward_mean": [1, 2, 3, 5]})) == pytest.approx(2.0)
    # nulls inside the second half are ignored, fewer than two values -> NaN
    assert S.training_variance(pd.DataFrame({"step": [1, 2, 3, 4], "reward_mean": [1, 2, None, 5]})) != \
        S.training_variance(pd.DataFrame({"step": [1, 2, 3, 4], "reward_mean": [1, 2, 3, 5]}))
    assert math.isnan(S.training_variance(pd.DataFrame({"step": [1, 2, 3], "reward_mean": [1, 2, None]})))
    assert math.isnan(S.training_variance(pd.DataFrame({"step": [], "reward_mean": []})))


def test_final_and_peak_excludes_step0_and_takes_earliest_tie():
    ev = pd.DataFrame({"step": [0, 10, 20, 30, 40], "pass_at_1": [0.9, 0.5, 0.7, 0.7, 0.6],
                       "n": [100] * 5})
    out = S.final_and_peak(ev)
    assert out["final_pass_at_1"] == 0.6 and out["final_step"] == 40
    assert out["peak_pass_at_1"] == 0.7 and out["peak_step"] == 20
    assert out["peak_ci95"] == pytest.approx(pass_at_1_ci(0.7, 100))
    only0 = S.final_and_peak(ev[ev.step == 0])
    assert all(math.isnan(v) for v in only0.values())


def test_mean_kl():
    assert S.mean_kl(pd.DataFrame({"step": [1, 2, 3], "kl": [0.1, None, 0.3]})) == pytest.approx(0.2)


def test_token_weights():
    h = np.array([0.2, 0.4, 0.1])
    ah = np.exp(-0.5 * np.cumsum(h))
    assert np.allclose(S.token_weights(h, 0.5, "grpo", -1.0), 1.0)
    assert np.allclose(S.token_weights(h, 0.5, "ah", 1.0), ah)
    assert np.allclose(S.token_weights(h, 0.5, "ah", -1.0), ah)
    assert np.allclose(S.token_weights(h, 0.5, "sa", 1.0), 1.0)
    assert np.allclose(S.token_weights(h, 0.5, "sa", 0.0), 1.0)  # advantage 0 counts as non-negative
    assert np.allclose(S.token_weights(h, 0.5, "sa", -1.0), ah)


@pytest.mark.parametrize("method", ["grpo", "ah", "sa"])
@pytest.mark.parametrize("advantage", [-1.0, 0.0, 2.0])
@pytest.mark.parametrize("alpha", [-0.25, 0.0, 0.5, 5.9])
def test_token_weights_follow_the_trainers_rule(method, advantage, alpha):
    """The figure's float64 weights agree with the trainer's float32 method_weights (float32 cumsum: 1e-5)."""
    import torch

    from saah_lib.method.loss import method_weights

    h = np.random.default_rng(0).uniform(0.0, 0.3, size=80)
    t = torch.as_tensor(h).reshape(1, -1)
    trainer = method_weights(method, t, torch.ones_like(t), torch.tensor([advantage]), alpha)[0].double().numpy()
    np.testing.assert_allclose(S.token_weights(h, alpha, method, advantage), trainer, rtol=1e-5, atol=0)


def test_detrended_variance_hand_computed():
    # 6 steps -> second half = steps 4, 5, 6 with rewards [1, 3, 2]: least-squares line 1.5 + 0.5 (x - 4),
    # i.e. fitted [1.5, 2, 2.5]; residuals [-0.5, 1, -0.5] -> sum of squares 1.5; divided by 3 - 2 = 1
    log = pd.DataFrame({"step": [1, 2, 3, 4, 5, 6], "reward_mean": [9.0, 9.0, 9.0, 1.0, 3.0, 2.0]})
    assert S.detrended_training_variance(log) == pytest.approx(1.5)
    # the plain variance of the same rows: mean 2, squares 1 + 1 + 0 -> 2 / 2 = 1 (a different number)
    assert S.training_variance(log) == pytest.approx(1.0)


def test_detrending_removes_a_trend_and_keeps_the_noise():
    steps = np.arange(1, 401)
    line = 2.0 + 0.01 * steps
    assert S.detrended_training_variance(pd.DataFrame({"step": steps, "reward_mean": line})) == pytest.approx(0, abs=1e-20)
    assert S.training_variance(pd.DataFrame({"step": steps, "reward_mean": line})) > 0.3  # the trend counts there
    # simulated noise of known variance 0.25 on a rising line: the detrended estimate finds 0.25
    rng = np.random.default_rng(1)
    noisy = pd.DataFrame({"step": np.arange(1, 40001), "reward_mean": 0.001 * np.arange(1, 40001)
                          + rng.normal(0, 0.5, 40000)})
    assert S.detrended_training_variance(noisy) == pytest.approx(0.25, rel=0.03)
    assert math.isnan(S.detrended_training_variance(pd.DataFrame({"step": [1, 2, 3, 4], "reward_mean": [1, 2, 3, 4]})))


def test_detrended_variance_does_not_depend_on_the_order_of_its_additions():
    """A BLAS kernel of another CPU adds in another order; the committed outputs must not change with it.  The
    series mirrored in time (last step first) is the same fit with the slope's sign flipped and the same
    residuals added in reverse order: the same bits only if every sum is exact (np.polyfit's are not)."""
    rng = np.random.default_rng(3)
    steps, rewards = np.arange(1, 61), 0.01 * np.arange(1, 61) + rng.normal(0, 0.3, 60)
    log = pd.DataFrame({"step": steps, "reward_mean": rewards})
    mirrored = pd.DataFrame({"step": steps, "reward_mean": np.concatenate([rewards[:30], rewards[30:][::-1]])})
    assert S.detrended_training_variance(mirrored) == S.detrended_training_variance(log)


def test_within_step_variance_hand_computed():
    # second half of 4 steps: reward_std 1 and 3 -> variances 1 and 9 -> mean 5
    log = pd.DataFrame({"step": [1, 2, 3, 4], "reward_std": [7.0, 7.0, 1.0, 3.0]})
    assert S.within_step_variance(log) == pytest.approx(5.0)
    assert math.isnan(S.within_step_variance(pd.DataFrame({"step": [1, 2], "reward_mean": [1.0, 2.0]})))


def _simulated_log(rng, steps: int, per_step: int, drift_sd: float) -> pd.DataFrame:
    """Per-step rewards drawn as the trainer logs them: mean and ddof=1 std of ``per_step`` draws, the step's
    true mean moving by ``drift_sd`` between steps (0: a policy that does not change)."""
    centre = 3.0 + rng.normal(0, drift_sd, steps) if drift_sd else np.full(steps, 3.0)
    draws = rng.normal(centre[:, None], 1.5, (steps, per_step))
    return pd.DataFrame({"step": np.arange(1, steps + 1), "reward_mean": draws.mean(1),
                         "reward_std": draws.std(1, ddof=1)})


def test_batch_noise_share_against_simulations_of_known_truth():
    rng = np.random.default_rng(0)
    # a policy that never changes: the per-step mean varies by batch noise alone -> share 1
    assert S.batch_noise_share(_simulated_log(rng, 20000, 16, 0.0), 16) == pytest.approx(1.0, rel=0.05)
    # true between-step spread of the mean with variance 0.1406 beside batch noise 2.25 / 16 = 0.1406 -> share 1/2
    assert S.batch_noise_share(_simulated_log(rng, 20000, 16, 0.375), 16) == pytest.approx(0.5, rel=0.05)
    with pytest.raises(ValueError, match="at least 1"):
        S.batch_noise_share(_simulated_log(rng, 10, 16, 0.0), 0)


def test_every_train_log_summary_is_a_named_quantity_with_decimals():
    from saah_lab.analysis.quantities import DECIMALS, QUANTITIES

    log = pd.DataFrame({"step": [1, 2, 3, 4, 5, 6], "reward_mean": [1.0, 2, 3, 1, 3, 2],
                        "reward_std": [1.0] * 6, "kl": [0.01] * 6})
    for key, summary in S.TRAIN_LOG_SUMMARIES.items():
        assert key in QUANTITIES and key in DECIMALS
        assert math.isfinite(summary(log))


def _final_and_peak_with_pandas(evals: pd.DataFrame) -> dict[str, float]:
    """The rule of final_and_peak written with pandas' own operations, row selection by row selection."""
    keys = ("final_pass_at_1", "final_ci95", "final_step", "peak_pass_at_1", "peak_ci95", "peak_step")
    df = evals.copy()
    df["step"] = pd.to_numeric(df["step"], errors="coerce")
    df["pass_at_1"] = pd.to_numeric(df["pass_at_1"], errors="coerce")
    df = df[(df["step"] > 0) & df["pass_at_1"].notna()].sort_values("step", kind="stable")
    if df.empty:
        return dict.fromkeys(keys, float("nan"))
    df = df.drop_duplicates("step", keep="last")
    ci = pd.to_numeric(df["ci95"], errors="coerce") if "ci95" in df else pd.Series(np.nan, index=df.index)
    if "n" in df:
        ci = ci.fillna(pd.Series(pass_at_1_ci(df["pass_at_1"].to_numpy(),
                                              pd.to_numeric(df["n"], errors="coerce").to_numpy()), index=df.index))
    last, peak = df.index[-1], df["pass_at_1"].idxmax()
    return dict(zip(keys, map(float, (df.at[last, "pass_at_1"], ci.at[last], df.at[last, "step"],
                                      df.at[peak, "pass_at_1"], ci.at[peak], df.at[peak, "step"]))))


@pytest.mark.parametrize("seed", range(40))
def test_final_and_peak_equals_the_pandas_rule_on_untidy_logs(seed):
    # shuffled rows, repeated steps, missing or non-numeric values, ties of the peak, a missing ci95 or n column
    rng = np.random.default_rng(seed)
    rows = int(rng.integers(1, 12))
    values = lambda k: [None if rng.random() < 0.15 else ("x" if rng.random() < 0.05 else v) for v in k]
    evals = pd.DataFrame({"step": values(rng.integers(0, 6, rows) * 5),
                          "pass_at_1": values(rng.integers(0, 5, rows) / 4),
                          "ci95": values(rng.random(rows) / 10), "n": values(rng.choice([0, 100, 500], rows))})
    evals = evals.drop(columns=[c for c in ("ci95", "n") if rng.random() < 0.25])
    got, expected = S.final_and_peak(evals), _final_and_peak_with_pandas(evals)
    assert got.keys() == expected.keys()
    for key in got:
        assert got[key] == expected[key] or (math.isnan(got[key]) and math.isnan(expected[key])), (key, evals)


def test_logged_values_are_in_step_order_last_line_kept_nulls_dropped():
    """The one reading of a log column behind training variance, mean KL and the health rules' KL maximum."""
    log = pd.DataFrame({"step": [3, 1, 2, 1, 4], "kl": [0.3, 9.0, None, 0.1, 0.4]})
    assert S.logged_values(log, "kl").tolist() == [0.1, 0.3, 0.4]
    assert S.logged_values(log, "kl", second_half_only=True).tolist() == [0.3, 0.4]
    assert S.logged_values(log, "reward_mean").empty and S.logged_values(None, "kl").empty
