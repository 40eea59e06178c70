"""The one seed-level inference: seeds crossed with evaluation problems.

References: a matrix worked by hand, scipy's paired t test, the variance decomposition of the primary data that
the review computed, and simulated studies with a known truth (false-positive rate under a true null, power at
the stated minimum detectable effect).  Simulations are vectorised over replicates through
``crossed_p_values``, the same code path as ``crossed_test``; the designs are
:mod:`saah_lab.analysis.crossed_simulation`'s, which prints the rates these tests check."""

import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from saah_lab.analysis.crossed_simulation import (
    LEVELS,
    NULL_CASES,
    POWER_CASES,
    POWER_STUDIES,
    gaussian_studies,
    null_p_values,
    power_at_mde,
)
from saah_lab.analysis.significance import (
    bonferroni,
    crossed_p_values,
    crossed_test,
    crossed_units_needed,
    established,
    family_confidence,
    mean_squares,
    projected_se_df,
    t_power,
)
from saah_lib.paths import REPO_ROOT

# --------------------------------------------------------------------- simulated studies with a known truth


@pytest.mark.parametrize("name", list(NULL_CASES))
@pytest.mark.parametrize("level", LEVELS)
def test_false_positive_rate_under_a_true_null_is_at_most_the_level(name, level):
    p = null_p_values(name)
    rate, mc = float((p < level).mean()), math.sqrt(level * (1 - level) / p.size)
    assert rate <= level + 2.5 * mc, f"{name}: {rate:.4f} rejections at level {level} ({p.size} studies)"


@pytest.mark.parametrize("case", POWER_CASES)
@pytest.mark.parametrize("level", LEVELS)
def test_power_at_the_stated_mde_is_eighty_percent(case, level):
    assert power_at_mde(case, level) == pytest.approx(0.80, abs=3 * math.sqrt(0.16 / POWER_STUDIES))


def test_the_estimated_variance_is_unbiased_for_the_true_one():
    # crossed design: E[var estimate] = s2_seed/S + s2_problem/P + s2_e/(S P) (the components never truncate here)
    rng = np.random.default_rng(3)
    d, labels = gaussian_studies(rng, 4000, 10, 2, 100, 2e-3, 5e-3, 0.1)
    _, se, _, _ = crossed_p_values(d, labels)
    truth = 2e-3 / 20 + 5e-3 / 100 + 0.1 / 2000
    assert (se ** 2).mean() == pytest.approx(truth, rel=0.03)
    # and the spread of the estimated means over studies is that variance
    assert d.mean(axis=(1, 2)).var() == pytest.approx(truth, rel=0.06)


# --------------------------------------------------------------------- by hand and against scipy


def test_hand_worked_two_seeds_three_problems():
    d = [[1.0, 0.0, -1.0], [1.0, 1.0, 0.0]]
    ms = mean_squares(d)
    # row means 0 and 2/3, column means 1, 1/2, -1/2, grand mean 1/3
    assert (ms.rows, ms.problems, ms.interaction) == pytest.approx((2 / 3, 7 / 6, 1 / 6))
    assert (ms.rows_df, ms.problems_df, ms.interaction_df) == (1, 2, 2)
    r = crossed_test(d)
    # components: seed (2/3 - 1/6)/3 = 1/6, problem (7/6 - 1/6)/2 = 1/2, interaction 1/6
    assert r.components == pytest.approx({"seed": 1 / 6, "problem": 1 / 2, "interaction": 1 / 6})
    # Var(mean) = (1/6)/2 + (1/2)/3 + (1/6)/6 = 10/36; Satterthwaite 200/82 capped at the seeds' 1 df
    assert r.se == pytest.approx(math.sqrt(10 / 36)) and r.df == 1
    assert r.p_value == pytest.approx(2 * stats.t.sf((1 / 3) / math.sqrt(10 / 36), 1))
    half = stats.t.ppf(0.975, 1) * math.sqrt(10 / 36)
    assert (r.ci_low, r.ci_high) == pytest.approx((1 / 3 - half, 1 / 3 + half))


def test_without_a_problem_effect_the_seed_level_t_test_on_seed_means():
    # column means equal: the problem component is 0 and the test is the t test of the per-seed means
    d = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [0.0, 0.0]])
    d = np.hstack([d, d[:, ::-1]])  # every column has mean 1/2
    r = crossed_test(d)
    ref = stats.ttest_1samp(d.mean(axis=1), 0.0)
    assert r.components["problem"] == 0.0 and r.df == 3
    assert r.p_value == pytest.approx(ref.pvalue, rel=1e-12)


@pytest.mark.parametrize("n", [2, 3, 7, 20])
def test_one_column_and_one_warm_start_is_the_paired_t_test(n):
    rng = np.random.default_rng(n)
    x, y = rng.normal(0.3, 0.05, n), rng.normal(0.29, 0.05, n)
    r, ref = crossed_test(x - y), stats.ttest_rel(x, y)
    assert r.p_value == pytest.approx(ref.pvalue, rel=1e-10) and r.df == n - 1
    ci = ref.confidence_interval(0.95)
    assert (r.ci_low, r.ci_high) == pytest.approx((ci.low, ci.high), rel=1e-10)


def test_two_warm_starts_are_fixed_strata_for_a_per_run_summary():
    # seed spread is measured within each warm start: a warm-start offset does not enter the variance
    a, b = np.array([0.1, 0.2, 0.3]), np.array([1.1, 1.3, 1.2])
    r = crossed_test(np.concatenate([a, b]), ["w0"] * 3 + ["w1"] * 3)
    pooled_var = (((a - a.mean()) ** 2).sum() + ((b - b.mean()) ** 2).sum()) / 4  # 4 df
    assert r.warm_start_factor == "fixed stratum" and r.df == 4
    assert r.se == pytest.approx(math.sqrt(pooled_var / 6))
    assert r.mean_diff == pytest.approx(np.concatenate([a, b]).mean())


def test_three_or_more_warm_starts_are_a_random_factor():
    # the warm starts are the rows: their spread, seeds included, is the row term, on warm starts - 1 df
    ws_means = np.array([0.05, -0.01, 0.02, 0.03])
    d = np.repeat(ws_means, 2) + np.tile([0.01, -0.01], 4)
    r = crossed_test(d, [f"w{k}" for k in range(4) for _ in range(2)])
    ref = stats.ttest_1samp(ws_means, 0.0)
    assert r.warm_start_factor == "random" and r.df == 3 and r.n_units == 8
    assert r.p_value == pytest.approx(ref.pvalue, rel=1e-10)


def test_one_seed_per_warm_start_has_nothing_to_test_against():
    r = crossed_test([[1.0, 0.0], [0.0, 0.0]], ["w0", "w1"])
    assert math.isnan(r.p_value) and math.isnan(r.ci_low) and r.components == {}


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="one label per seed"):
        crossed_test([1.0, 2.0], ["a"])
    with pytest.raises(ValueError, match="finite"):
        crossed_test([1.0, float("nan")])
    with pytest.raises(ValueError, match="confidence"):
        crossed_test([1.0, 2.0], confidence=1.0)


# --------------------------------------------------------------------- family adjustment and the decision


def test_family_interval_excludes_zero_exactly_when_the_adjusted_p_is_below_the_level():
    rng = np.random.default_rng(11)
    for _ in range(300):
        d = rng.normal(rng.normal(0, 0.02), 0.3, size=(int(rng.integers(3, 12)), int(rng.integers(1, 30))))
        r = crossed_test(d)
        for m in (1, 2, 3, 4):
            low, high = r.at(family_confidence(m))
            p = bonferroni(r.p_value, m)
            assert established(p, low, high) == (low > 0 or high < 0) == (p < 0.05)
    assert family_confidence(2) == 0.975 and bonferroni(0.03, 2) == 0.06 and bonferroni(0.7, 2) == 1.0


def test_the_result_is_deterministic():
    rng = np.random.default_rng(2)
    d = (rng.random((20, 200)) < 0.5).astype(float) - (rng.random((20, 200)) < 0.5)
    assert crossed_test(d, ["a"] * 10 + ["b"] * 10) == crossed_test(d.copy(), ["a"] * 10 + ["b"] * 10)


def test_units_needed_projects_the_same_rule():
    rng = np.random.default_rng(5)
    d, labels = gaussian_studies(rng, 1, 10, 2, 200, 4e-4, 2.8e-3, 0.106)
    r = crossed_test(d[0], labels)
    n = crossed_units_needed(r, 0.03)
    se, df = projected_se_df(r, n)
    se_before, df_before = projected_se_df(r, n - 1)
    assert t_power(0.03, se, df) >= 0.8 > t_power(0.03, se_before, df_before)
    assert projected_se_df(r, 20)[0] == pytest.approx(r.se, rel=1e-9)  # today's seeds: today's se
    # a problem term that alone hides the effect: no number of seeds on these problems detects it
    assert crossed_units_needed(r, 1e-3) is None


# --------------------------------------------------------------------- the committed primary data

EXTENDED = REPO_ROOT / "results" / "extended"


@pytest.mark.skipif(not (Path(EXTENDED) / "runs").is_dir(), reason="committed extended results absent")
def test_the_primary_data_give_the_reviewed_variance_decomposition():
    from saah_lab.analysis.evidence import _pass_at_1_matrix, load_root_evidence
    from saah_lab.analysis.plan import read_plan

    plan = read_plan(EXTENDED)
    runs = load_root_evidence(EXTENDED)
    a, b = (arm.runs_by_unit(runs) for arm in plan.primary)
    units = sorted(set(a) & set(b))
    ma, mb = _pass_at_1_matrix(a, b, units, "final")
    d = ma.astype(float) - mb
    pooled = crossed_test(d)  # the review's decomposition ignored the warm starts
    assert pooled.components["seed"] == pytest.approx(4.0e-4, abs=5e-6)
    assert pooled.components["problem"] == pytest.approx(2.8e-3, abs=5e-5)
    assert pooled.components["interaction"] == pytest.approx(0.106, abs=5e-4)
    assert pooled.se == pytest.approx(0.0078, abs=5e-5)
    strata = crossed_test(d, [u[0] for u in units])
    assert strata.warm_start_factor == "fixed stratum" and strata.df == 18
