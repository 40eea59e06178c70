"""Paired tests: hand-worked cases, scipy as an independent reference, and the crossed test computed another way."""

import itertools
import math

import numpy as np
import pytest
from scipy import stats as scipy_stats

from saah_lab.analysis.significance import (
    MAX_EXACT_SEEDS,
    RANDOM_SIGN_PATTERNS,
    binomial_two_sided_p,
    crossed_test,
    established,
    mcnemar_exact,
    mcnemar_pooled,
    sign_flip_test,
    t_mde,
    t_power,
)

# --------------------------------------------------------------------- McNemar by hand


def test_binomial_p_hand_worked():
    # 0 of 5 discordant pairs for A: 2 * (1/2)^5 = 1/16
    assert binomial_two_sided_p(0, 5) == 2 / 32
    # 1 of 6: 2 * (1 + 6) / 64 = 14/64
    assert binomial_two_sided_p(1, 6) == 14 / 64
    # symmetric in k <-> n - k, and 1 at the centre
    assert binomial_two_sided_p(5, 6) == binomial_two_sided_p(1, 6)
    assert binomial_two_sided_p(3, 6) == 1.0
    assert binomial_two_sided_p(0, 0) == 1.0
    with pytest.raises(ValueError, match="0 <= k <= n"):
        binomial_two_sided_p(4, 3)


def test_mcnemar_counts_and_p_on_a_hand_made_table():
    # 10 problems: both right on 3, A only on 4, B only on 1, neither on 2
    a = [1, 1, 1, 1, 1, 1, 1, 0, 0, 0]
    b = [1, 1, 1, 0, 0, 0, 0, 1, 0, 0]
    r = mcnemar_exact(a, b)
    assert (r.both, r.a_only, r.b_only, r.neither, r.n_pairs) == (3, 4, 1, 2, 10)
    # 1 of 5 discordant for B: 2 * (1 + 5) / 32 = 12/32
    assert r.p_value == 12 / 32
    assert r.diff == pytest.approx(0.3)  # 0.7 - 0.4


def test_mcnemar_rejects_unpaired_or_non_binary_input():
    with pytest.raises(ValueError, match="pair up"):
        mcnemar_exact([1, 0], [1, 0, 1])
    with pytest.raises(ValueError, match="booleans or 0/1"):
        mcnemar_exact([0.5, 1], [1, 0])


def test_pooled_mcnemar_sums_discordant_pairs_over_seeds():
    s0 = mcnemar_exact([1, 1, 0, 0], [0, 0, 0, 1])  # a_only 2, b_only 1
    s1 = mcnemar_exact([1, 0, 1, 1], [0, 0, 1, 1])  # a_only 1, b_only 0
    pooled = mcnemar_pooled([s0, s1])
    assert (pooled.a_only, pooled.b_only, pooled.n_pairs) == (3, 1, 8)
    assert pooled.p_value == binomial_two_sided_p(3, 4) == 2 * 5 / 16
    # pooling strata is the same as one test on the stacked pairs
    stacked = mcnemar_exact([[1, 1, 0, 0], [1, 0, 1, 1]], [[0, 0, 0, 1], [0, 0, 1, 1]])
    assert stacked.p_value == pooled.p_value
    with pytest.raises(ValueError, match="no per-seed"):
        mcnemar_pooled([])


# --------------------------------------------------------------------- sign flip

def test_sign_flip_hand_worked_three_seeds():
    # all three differences positive: only the observed pattern and its mirror reach |mean| -> 2/8
    r = sign_flip_test([3.0, 2.0, 4.0], [1.0, 1.0, 1.0])
    assert r.diffs == (2.0, 1.0, 3.0)
    assert r.mean_diff == 2.0
    assert r.p_value == 0.25 == r.min_p
    assert (r.n_positive, r.n_negative) == (3, 0)
    # differences (1, -1, 3): |sums| over the 8 sign patterns (+++, ++-, +-+, +--, -++, -+-, --+, ---)
    # are 3, 3, 5, 1, 1, 5, 3, 3 -> |sum| >= 3 in 6 of 8
    r = sign_flip_test([1.0, -1.0, 3.0], [0.0, 0.0, 0.0])
    assert r.p_value == 0.75


def test_sign_flip_floor_is_two_over_two_to_the_n():
    for n in (3, 4, 5):
        r = sign_flip_test(np.arange(1, n + 1, dtype=float), np.zeros(n))
        assert r.min_p == 2 / 2**n == r.p_value
    assert sign_flip_test([1, 2, 3, 4, 5], [0] * 5).p_value > 0.05  # five seeds can never reach 5%


def test_sign_flip_rejects_bad_input():
    with pytest.raises(ValueError, match="one value per seed"):
        sign_flip_test([1, 2], [1])
    with pytest.raises(ValueError, match="finite"):
        sign_flip_test([1, float("nan")], [1, 2])


# --------------------------------------------------------------------- scipy as reference

@pytest.mark.parametrize("k,n", [(0, 1), (0, 7), (3, 10), (5, 10), (12, 40), (30, 41), (97, 250)])
def test_binomial_p_matches_scipy_binomtest(k, n):
    assert binomial_two_sided_p(k, n) == pytest.approx(scipy_stats.binomtest(k, n, 0.5).pvalue, rel=1e-12)


def test_mcnemar_matches_scipy_on_random_paired_data():
    rng = np.random.default_rng(3)
    for _ in range(20):
        n = int(rng.integers(5, 300))
        a = rng.random(n) < rng.uniform(0.2, 0.8)
        b = np.where(rng.random(n) < 0.7, a, rng.random(n) < 0.5)
        r = mcnemar_exact(a, b)
        levels = ([False, True], [False, True])
        table = scipy_stats.contingency.crosstab(a, b, levels=levels).count  # rows: a False/True
        assert (table[1, 1], table[1, 0], table[0, 1], table[0, 0]) == (r.both, r.a_only, r.b_only, r.neither)
        expected = scipy_stats.binomtest(r.a_only, r.discordant, 0.5).pvalue if r.discordant else 1.0
        assert r.p_value == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("n", [3, 4, 5, 6])
def test_sign_flip_matches_scipy_exact_permutation_test(n):
    rng = np.random.default_rng(n)
    x, y = rng.normal(size=n), rng.normal(size=n)
    ref = scipy_stats.permutation_test((x, y), lambda u, v: np.mean(u - v), permutation_type="samples",
                                       alternative="two-sided", n_resamples=10**6)
    assert sign_flip_test(x, y).p_value == pytest.approx(ref.pvalue, rel=1e-12)


def test_sign_flip_enumerates_all_patterns():
    d = np.array([0.3, -0.1, 0.2, 0.05])
    count = sum(abs(np.dot(s, d)) >= abs(d.sum()) - 1e-12 for s in itertools.product((1, -1), repeat=4))
    assert sign_flip_test(d, np.zeros(4)).p_value == count / 16


def test_sign_flip_beyond_the_exact_limit_draws_random_patterns():
    n = MAX_EXACT_SEEDS + 2
    d = np.linspace(-1, 2, n)
    r = sign_flip_test(d, np.zeros(n))
    ref = scipy_stats.permutation_test((d,), np.mean, permutation_type="samples", alternative="two-sided",
                                       n_resamples=200_000, random_state=1)
    assert r.p_value == pytest.approx(ref.pvalue, abs=0.005)
    assert sign_flip_test(d, np.zeros(n)).p_value == r.p_value  # seeded


@pytest.mark.parametrize("n, ties", [(18, False), (17, False), (15, True)])
def test_sign_flip_exact_count_from_two_halves_matches_brute_force(n, ties):
    rng = np.random.default_rng(11)
    # ties: Pass@1 differences are multiples of 1/problems, so many sign patterns reach the observed mean exactly
    d = rng.integers(-3, 4, size=n) / 200 if ties else rng.normal(size=n)
    signs = np.array(list(itertools.product((1.0, -1.0), repeat=n)))
    expected = float((np.abs(signs @ d) >= abs(d.sum()) - 1e-12).mean())
    assert sign_flip_test(d, np.zeros(n)).p_value == pytest.approx(expected, abs=1e-15)


def test_sign_flip_with_thirty_seeds_is_exact_against_a_count_of_integer_sums():
    # 30 seed pairs (the confirmatory study) are counted exactly: the reference counts the sign patterns of
    # integer differences by convolving each pair's two signs into the distribution of the signed sum
    rng = np.random.default_rng(5)
    k = rng.integers(-12, 13, size=30)
    counts = {0: 1}
    for v in k:
        nxt = {}
        for total, c in counts.items():
            for signed in (total + v, total - v):
                nxt[signed] = nxt.get(signed, 0) + c
        counts = nxt
    expected = sum(c for total, c in counts.items() if abs(total) >= abs(k.sum())) / 2**30
    r = sign_flip_test(k / 1000, np.zeros(30))
    assert r.p_value == expected and r.min_p == 2 / 2**30
    assert sign_flip_test(k / 1000, np.zeros(30), seed=1).p_value == expected  # no seed enters an exact count


# --------------------------------------------------------------------- power of the t test (noncentral t)

def test_power_at_zero_effect_is_the_level_and_grows_with_effect_and_seeds():
    assert t_power(0.0, 1 / math.sqrt(10), 9) == pytest.approx(0.05, abs=1e-12)
    se10, se20 = 1 / math.sqrt(10), 1 / math.sqrt(20)
    assert t_power(0.5, se10, 9) < t_power(1.0, se10, 9) < t_power(1.0, se20, 19)


def test_power_matches_the_textbook_value():
    # one-sample / paired t, n = 10, standardised effect 1, two-sided 5%: power 0.803 (Cohen 1988; G*Power)
    assert t_power(1.0, 1 / math.sqrt(10), 9) == pytest.approx(0.8031, abs=5e-4)


def test_power_matches_a_simulation_of_the_test_itself():
    # at the reported minimum detectable effect, the t test rejects in about 80% of simulated studies
    rng = np.random.default_rng(0)
    sd, n = 0.04, 8
    mde = t_mde(sd / math.sqrt(n), n - 1)
    sims = rng.normal(mde, sd, size=(20000, n))
    rejected = scipy_stats.ttest_1samp(sims, 0.0, axis=1).pvalue < 0.05
    assert rejected.mean() == pytest.approx(0.80, abs=0.01)


def test_minimum_detectable_effect_against_the_normal_approximation():
    # for many seeds the noncentral t tends to (z_0.975 + z_0.8) sd / sqrt(n)
    sd, n = 0.045, 400
    approx = (scipy_stats.norm.ppf(0.975) + scipy_stats.norm.ppf(0.8)) * sd / math.sqrt(n)
    assert t_mde(sd / math.sqrt(n), n - 1) == pytest.approx(approx, rel=0.01)
    assert t_power(t_mde(sd / math.sqrt(5), 4), sd / math.sqrt(5), 4) == pytest.approx(0.8, abs=1e-8)
    assert math.isnan(t_mde(sd, 0)) and math.isnan(t_mde(0.0, 4)) and math.isnan(t_mde(math.nan, 4))


# --------------------------------------------------------------------- the rule for "established"

def test_established_is_the_adjusted_p_and_checks_that_the_interval_agrees():
    assert established(0.01, 0.02, 0.05) and established(0.01, -0.05, -0.02)
    assert not established(0.2, -0.01, 0.05) and not established(0.05, 0.0, 0.05)  # on the level: not below it
    assert not established(math.nan, math.nan, math.nan)  # no test, no interval: nothing established
    assert established(0.09, 0.02, 0.05, level=0.1)
    # an interval that is not the same test's at the family's confidence is an error, not a second condition
    with pytest.raises(ValueError, match="disagree"):
        established(0.01, -0.01, 0.05)
    with pytest.raises(ValueError, match="disagree"):
        established(0.2, 0.02, 0.05)
    with pytest.raises(ValueError, match="without an interval"):
        established(0.01, math.nan, math.nan)


@pytest.mark.parametrize("n", [MAX_EXACT_SEEDS + 1, 61, 333])
def test_sign_flip_random_patterns_estimate_the_exact_count_of_tied_integer_sums(n):
    # Beyond the exact limit, with Pass@1-like ties and a seed count that is no multiple of 8 (the patterns are
    # drawn a byte per 8 seeds): the estimate is within 4 Monte Carlo standard errors of the exact p-value,
    # counted by convolving each pair's two signs into the distribution of the signed integer sum.
    rng = np.random.default_rng(n)
    k = rng.integers(-6, 7, size=n) + (1 if n < 100 else 0)
    counts = np.zeros(2 * int(np.abs(k).sum()) + 1)
    offset = int(np.abs(k).sum())
    counts[offset] = 1.0
    for v in np.abs(k):
        counts = (np.roll(counts, v) + np.roll(counts, -v)) / 2  # no wrap-around: the array spans every sum
    totals = np.arange(counts.size) - offset
    expected = counts[np.abs(totals) >= abs(k.sum())].sum()
    r = sign_flip_test(k / 100, np.zeros(n))
    standard_error = np.sqrt(expected * (1 - expected) / RANDOM_SIGN_PATTERNS)
    assert 0.001 < expected < 0.999
    assert abs(r.p_value - expected) < 4 * standard_error + 1 / RANDOM_SIGN_PATTERNS


# --------------------------------------------------------------------- the crossed test, computed another way

def test_crossed_test_of_one_column_is_the_paired_t_test_worked_by_hand():
    # differences 2, 1, 3: mean 2, sd 1, se 1/sqrt(3), t = 2 sqrt(3) = 3.4641 on 2 df
    r = crossed_test([2.0, 1.0, 3.0])
    assert (r.mean_diff, r.df, r.se) == (2.0, 2, pytest.approx(1 / math.sqrt(3)))
    assert r.t == pytest.approx(2 * math.sqrt(3))
    # two-sided p on 2 df has the closed form 1 - t / sqrt(2 + t^2)
    assert r.p_value == pytest.approx(1 - r.t / math.sqrt(2 + r.t**2), rel=1e-12)
    # interval: 2 +- t_{0.975, 2} / sqrt(3), with t_{0.975, 2} = 4.302653
    assert (r.ci_low, r.ci_high) == pytest.approx((2 - 4.302653 / math.sqrt(3), 2 + 4.302653 / math.sqrt(3)),
                                                  abs=1e-6)


def crossed_reference(d: np.ndarray, strata: list[int]) -> tuple[float, float, float]:
    """se, df and p of the crossed rule with fixed strata, the interaction from a least-squares fit of the
    additive model (a seed effect plus a stratum x problem effect) rather than from row and column means."""
    n_rows, n_problems = d.shape
    k = max(strata) + 1
    design = np.zeros((n_rows * n_problems, n_rows + k * n_problems))
    for r in range(n_rows):
        for p in range(n_problems):
            design[r * n_problems + p, r] = design[r * n_problems + p, n_rows + strata[r] * n_problems + p] = 1
    fitted = design @ np.linalg.lstsq(design, d.ravel(), rcond=None)[0]
    rows_df, problems_df = n_rows - k, n_problems - 1
    ms_e = ((d.ravel() - fitted) ** 2).sum() / (rows_df * problems_df)
    row = d.mean(axis=1)
    within = row - np.array([row[[i for i in range(n_rows) if strata[i] == strata[r]]].mean() for r in range(n_rows)])
    ms_rows = n_problems * (within ** 2).sum() / rows_df
    ms_problems = n_rows * ((d.mean(axis=0) - d.mean()) ** 2).sum() / problems_df
    if ms_problems > ms_e:
        var = (ms_rows + ms_problems - ms_e) / (n_rows * n_problems)
        df = (ms_rows + ms_problems - ms_e) ** 2 / (
            ms_rows ** 2 / rows_df + ms_problems ** 2 / problems_df + ms_e ** 2 / (rows_df * problems_df))
    else:
        var, df = ms_rows / (n_rows * n_problems), rows_df
    df = min(df, rows_df)
    se = math.sqrt(var)
    return se, df, float(2 * scipy_stats.t.sf(abs(d.mean()) / se, df))


@pytest.mark.parametrize("case", range(6))
def test_crossed_test_with_two_warm_starts_matches_a_least_squares_fit(case):
    rng = np.random.default_rng(case)
    n_rows, n_problems = int(rng.integers(4, 9)), int(rng.integers(3, 40))
    strata = [0] * (n_rows // 2) + [1] * (n_rows - n_rows // 2)
    scale = case % 3 / 10  # 0: no problem effect (case 0: its mean square falls below the interaction's)
    d = rng.normal(0.02, 0.3, (n_rows, n_problems)) + rng.normal(0, scale, n_problems)
    d = d + rng.normal(0, 0.05, n_rows)[:, None] + np.array(strata)[:, None] * rng.normal(0, 2 * scale, n_problems)
    r = crossed_test(d, [f"w{s}" for s in strata])
    se, df, p = crossed_reference(d, strata)
    assert r.warm_start_factor == "fixed stratum"
    assert (r.mean_squares["problems"] > r.mean_squares["interaction"]) == (case != 0)  # both branches
    assert (r.df < r.mean_squares["rows_df"]) == (case == 3)  # Satterthwaite's df, and the cap
    assert (r.se, r.df, r.p_value) == pytest.approx((se, df, p), rel=1e-9)
