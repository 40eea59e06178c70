"""Paired significance tests for two methods run at matched seeds (numpy and scipy).

:func:`crossed_test` is the one test behind every "established": seeds crossed with evaluation problems, variance
components by the method of moments, t on Satterthwaite df capped at the seeds' own (no library has it).  Secondary:
the exact McNemar test (these trained models, held fixed) and the exact sign-flip test, counted from two halves
because scipy's ``permutation_test`` would list all 2^n patterns (10^9 for 30 seeds).
"""

from __future__ import annotations

import bisect
import math
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd
from scipy import optimize, stats

MAX_EXACT_SEEDS = 40  # counted exactly from two halves of 2^20 sums each (well under a second); beyond: random
SIGN_CHUNK = 2**16  # random sign patterns per block (bounds their memory)
RANDOM_SIGN_PATTERNS = 200_000  # sign patterns drawn when there are too many seeds to count exactly
POWER = 0.8
LEVEL = 0.05
MAX_UNITS_NEEDED = 10_000  # a seed count beyond this is reported as "more than" (no study could run it)


def established(p_adjusted: float, ci_low: float, ci_high: float, level: float = LEVEL) -> bool:
    """Whether the family-adjusted p is below ``level``; the interval (same test, family's confidence) must
    agree, else the two were not computed together (an error).  Every table, figure and sentence asks this."""
    decided = bool(p_adjusted < level)
    if decided and not (math.isfinite(ci_low) and math.isfinite(ci_high)):
        raise ValueError(f"adjusted p {p_adjusted} without an interval: the test and its interval come together")
    if math.isfinite(ci_low) and math.isfinite(ci_high):
        slack = 1e-9 * max(ci_high - ci_low, 1e-300)
        excludes = ci_low > slack or ci_high < -slack
        includes = ci_low < -slack and ci_high > slack
        if (decided and includes) or (not decided and excludes):
            raise ValueError(f"interval [{ci_low}, {ci_high}] and adjusted p {p_adjusted} at level {level} disagree:"
                             " they must come from the same test at the family's confidence")
    return decided


def _as_bool_array(x, name: str) -> np.ndarray:
    arr = np.asarray(x)
    if arr.dtype != bool:
        if arr.size and not np.isin(arr, (0, 1)).all():
            raise ValueError(f"{name}: correctness values must be booleans or 0/1")
        arr = arr.astype(bool)
    return arr


def binomial_two_sided_p(k: int, n: int) -> float:
    """Exact two-sided p of ``k`` successes in ``n`` fair-coin trials (scipy's ``binomtest``; 1 for n = 0), counted
    in integers: scipy differs in the last digits, which ``paper/generated/*_paired_evidence.json`` record."""
    if not (0 <= k <= n):
        raise ValueError(f"need 0 <= k <= n, got k={k}, n={n}")
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(k, n - k) + 1))
    return min(1.0, 2 * tail / 2**n)  # int / int: exact, correctly rounded


@dataclass(frozen=True)
class McNemarResult:
    n_pairs: int
    both: int  # both right
    a_only: int  # A right, B wrong (n10)
    b_only: int  # A wrong, B right (n01)
    neither: int
    p_value: float

    @property
    def discordant(self) -> int:
        return self.a_only + self.b_only

    @property
    def diff(self) -> float:
        """Pass@1 of A minus Pass@1 of B over these pairs."""
        return (self.a_only - self.b_only) / self.n_pairs if self.n_pairs else float("nan")

    def to_dict(self) -> dict:
        return {**asdict(self), "discordant": self.discordant, "diff": self.diff}


def mcnemar_exact(a, b) -> McNemarResult:
    """Exact McNemar test on paired correctness ``a`` and ``b`` (same shape, any dims, 0/1 or bool): under H0
    the ``a_only`` of the discordant pairs are Binomial(discordant, 1/2); pairs are taken as independent."""
    a, b = _as_bool_array(a, "a"), _as_bool_array(b, "b")
    if a.shape != b.shape:
        raise ValueError(f"a and b must pair up element by element, got shapes {a.shape} and {b.shape}")
    a, b = a.ravel(), b.ravel()
    a_only, b_only = int((a & ~b).sum()), int((~a & b).sum())
    return McNemarResult(n_pairs=int(a.size), both=int((a & b).sum()), a_only=a_only, b_only=b_only,
                         neither=int((~a & ~b).sum()), p_value=binomial_two_sided_p(a_only, a_only + b_only))


def mcnemar_pooled(results: list[McNemarResult]) -> McNemarResult:
    """One test over several strata (seeds), discordant counts summed: each stratum's ``a_only`` is binomial
    given its discordant total, so their sum is binomial given the summed total (the stratified test)."""
    if not results:
        raise ValueError("no per-seed results to pool")
    tot = {k: sum(getattr(r, k) for r in results) for k in ("n_pairs", "both", "a_only", "b_only", "neither")}
    return McNemarResult(**tot, p_value=binomial_two_sided_p(tot["a_only"], tot["a_only"] + tot["b_only"]))


@dataclass(frozen=True)
class SignFlipResult:
    n: int  # seeds (pairs)
    mean_diff: float  # mean of x_i - y_i
    diffs: tuple[float, ...]
    p_value: float
    min_p: float  # smallest p-value this many pairs can give: 2 / 2^n

    @property
    def n_positive(self) -> int:
        return sum(d > 0 for d in self.diffs)

    @property
    def n_negative(self) -> int:
        return sum(d < 0 for d in self.diffs)

    def to_dict(self) -> dict:
        return {**asdict(self), "diffs": list(self.diffs), "n_positive": self.n_positive,
                "n_negative": self.n_negative}


def _random_signed_sums(d: np.ndarray, seed: int):
    """``s @ d`` for RANDOM_SIGN_PATTERNS seeded random sign patterns ``s``, in blocks: one random byte per 8 seeds
    (bit set: negated), its 256 sums tabulated once, so hundreds of seeds take a fraction of a second."""
    rng = np.random.default_rng(seed)
    groups = -(-d.size // 8)
    by_byte = np.zeros(groups * 8)
    by_byte[:d.size] = d
    bits = (np.arange(256)[:, None] >> np.arange(8)) & 1  # [byte value, bit]
    negated = bits @ by_byte.reshape(groups, 8).T  # [byte value, group]: the sum of the group's negated differences
    columns = np.arange(groups)
    for start in range(0, RANDOM_SIGN_PATTERNS, SIGN_CHUNK):
        draws = rng.integers(0, 256, size=(min(SIGN_CHUNK, RANDOM_SIGN_PATTERNS - start), groups), dtype=np.uint8)
        yield d.sum() - 2.0 * negated[draws, columns].sum(axis=1)


def _signed_sums(values: np.ndarray) -> np.ndarray:
    """``s @ values`` for every one of the 2^len(values) sign patterns ``s``."""
    sums = np.zeros(1)
    for v in values:
        sums = np.concatenate([sums + v, sums - v])
    return sums


def _count_signed_sums_at_least(d: np.ndarray, threshold: float) -> int:
    """How many of the 2^n sign patterns ``s`` give ``|s @ d| >= threshold``, counted exactly without listing
    them: each half of ``d`` gets its 2^(n/2) signed sums, and for every sum of the first half a binary search in
    the second half's sorted sums counts the partners that reach the threshold (meet in the middle)."""
    half = d.size // 2
    left, right = _signed_sums(d[:half]), np.sort(_signed_sums(d[half:]))
    if threshold <= 0:
        return left.size * right.size
    at_or_above = right.size - np.searchsorted(right, threshold - left, side="left")
    at_or_below = np.searchsorted(right, -threshold - left, side="right")
    return int(at_or_above.sum() + at_or_below.sum())


def sign_flip_test(x, y, *, seed: int = 0) -> SignFlipResult:
    """Exact two-sided paired sign-flip test of ``mean(x - y) = 0`` (``x[i]``, ``y[i]``: seed ``i``): the share of
    the 2^n sign patterns whose ``|mean|`` reaches the observed one.  Beyond :data:`MAX_EXACT_SEEDS` pairs,
    :data:`RANDOM_SIGN_PATTERNS` seeded random patterns estimate it as (hits + 1) / (draws + 1)."""
    x, y = np.asarray(x, dtype=float).ravel(), np.asarray(y, dtype=float).ravel()
    if x.shape != y.shape:
        raise ValueError(f"x and y must have one value per seed each, got {x.size} and {y.size}")
    if x.size == 0:
        raise ValueError("no paired values")
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        raise ValueError("per-seed values must be finite (a run without the summary cannot be paired)")
    n = x.size
    d = x - y
    observed = abs(d.mean())
    # a relative tolerance so that sign patterns equal in exact arithmetic count as reaching the observed value
    tolerance = 1e-12 * max(1.0, np.abs(d).max())
    if n <= MAX_EXACT_SEEDS:
        p = _count_signed_sums_at_least(d, n * (observed - tolerance)) / 2**n
    else:
        hits = sum(int((np.abs(sums) / n >= observed - tolerance).sum()) for sums in _random_signed_sums(d, seed))
        p = (hits + 1) / (RANDOM_SIGN_PATTERNS + 1)
    return SignFlipResult(n=n, mean_diff=float(d.mean()), diffs=tuple(float(v) for v in d),
                          p_value=float(p), min_p=2.0 / 2**n if n else 1.0)


#: With at least this many warm starts the warm start is a random factor; with fewer it is a fixed stratum
#: (two warm starts carry one degree of freedom for their spread: too few to generalise over).
MIN_RANDOM_WARM_STARTS = 3


@dataclass(frozen=True)
class MeanSquares:
    """Mean squares of a ``[rows, problems]`` matrix of differences, rows in strata: rows within their stratum,
    problem columns, and the interaction left within strata (no problem terms for one column: df 0)."""

    rows: float
    rows_df: int
    problems: float
    problems_df: int
    interaction: float
    interaction_df: int
    n_rows: int
    n_problems: int


def _batched_mean_squares(d: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean squares of ``d[..., rows, problems]`` (any leading batch axes; the simulation tests use them),
    rows in strata ``labels`` (0..K-1).  Degrees of freedom: rows - K, problems - 1, (rows - K)(problems - 1)."""
    n_rows, n_problems = d.shape[-2:]
    strata = np.eye(labels.max() + 1)[labels]  # [rows, K]
    per_stratum = strata.sum(axis=0)
    row = d.mean(axis=-1)
    stratum_mean = (row @ strata) / per_stratum
    rows_df = n_rows - strata.shape[1]
    ms_rows = n_problems * ((row - stratum_mean[..., labels]) ** 2).sum(axis=-1) / max(rows_df, 1)
    if n_problems == 1:
        zero = np.zeros_like(ms_rows)
        return ms_rows, zero, zero
    col = d.mean(axis=-2)
    ms_problems = n_rows * ((col - col.mean(axis=-1, keepdims=True)) ** 2).sum(axis=-1) / (n_problems - 1)
    stratum_col = np.einsum("...rp,rk->...kp", d, strata) / per_stratum[:, None]
    resid = d - row[..., None] - stratum_col[..., labels, :] + stratum_mean[..., labels][..., None]
    ms_interaction = (resid ** 2).sum(axis=(-2, -1)) / max(rows_df * (n_problems - 1), 1)
    return ms_rows, ms_problems, ms_interaction


def _stratum_labels(groups, n_rows: int) -> np.ndarray:
    if groups is None:
        return np.zeros(n_rows, dtype=int)
    if len(groups) != n_rows:
        raise ValueError(f"groups: one label per seed needed, got {len(groups)} for {n_rows} seeds")
    return pd.factorize(np.asarray(groups))[0]  # 0, 1, ... in the order of first appearance


def _matrix(diffs) -> np.ndarray:
    d = np.asarray(diffs, dtype=float)
    if d.ndim == 1:
        d = d[:, None]
    if d.ndim != 2 or d.size == 0:
        raise ValueError(f"diffs: expected [n_seeds] or [n_seeds, n_problems] values, got shape {d.shape}")
    if not np.isfinite(d).all():
        raise ValueError("diffs must be finite")
    return d


def mean_squares(diffs, groups=None) -> MeanSquares:
    """:class:`MeanSquares` of ``diffs`` (``[n_seeds, n_problems]``, or ``[n_seeds]`` for a per-run summary),
    seeds in the strata ``groups`` (one label per seed; None: one stratum)."""
    d = _matrix(diffs)
    labels = _stratum_labels(groups, d.shape[0])
    ms = _batched_mean_squares(d, labels)
    rows_df = d.shape[0] - (labels.max() + 1)
    p_df = d.shape[1] - 1
    return MeanSquares(float(ms[0]), rows_df, float(ms[1]), p_df, float(ms[2]), rows_df * p_df, *d.shape)


def _variance_of_mean(ms_rows, ms_problems, ms_interaction, rows_df, problems_df, interaction_df,
                      n_rows: int, n_problems: int):
    """Variance of the grand mean, ``(MS_rows + MS_problems - MS_interaction)/(R P)`` by moments, and its df.

    A problem component at or below 0 is set to 0 (the seed-level t test).  The seed term is never dropped:
    a chance-low seed mean square would hand the test the interaction's many df (false positives with 3 seeds,
    tests/analysis/test_crossed_inference.py).  Satterthwaite's df are capped at the seeds' ``rows_df``:
    uncapped, 2 warm starts x 3 seeds rejected a true null 5.4% of the time at 5%."""
    if n_problems == 1:
        return ms_rows / n_rows, np.full(np.shape(ms_rows), float(rows_df))
    problems_on = ms_problems > ms_interaction
    terms = (ms_rows, np.where(problems_on, ms_problems, 0.0), np.where(problems_on, -ms_interaction, 0.0))
    total = terms[0] + terms[1] + terms[2]
    spread = terms[0] ** 2 / rows_df + terms[1] ** 2 / problems_df + terms[2] ** 2 / interaction_df
    with np.errstate(divide="ignore", invalid="ignore"):
        satterthwaite = np.where(spread > 0, total ** 2 / np.where(spread > 0, spread, 1.0), float(rows_df))
    return total / (n_rows * n_problems), np.minimum(satterthwaite, float(rows_df))


def _t_outcome(mean, var, df, confidence: float):
    """t statistic, two-sided p and the interval at ``confidence`` (arrays); var 0: p 0 (or 1 at mean 0)."""
    se = np.sqrt(np.maximum(var, 0.0))
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(se > 0, mean / np.where(se > 0, se, 1.0), np.where(mean == 0, 0.0, np.sign(mean) * np.inf))
    p = np.where(se > 0, 2 * stats.t.sf(np.abs(t), df), np.where(mean == 0, 1.0, 0.0))
    half = stats.t.ppf(0.5 + confidence / 2, df) * se
    return se, t, p, mean - half, mean + half


@dataclass(frozen=True)
class CrossedResult:
    """The test and interval of a mean paired difference over seeds x evaluation problems (crossed)."""

    mean_diff: float
    se: float
    df: float  # Satterthwaite
    t: float
    p_value: float  # two-sided, unadjusted
    ci_low: float
    ci_high: float
    confidence: float
    n_units: int  # seeds over all warm starts
    n_problems: int  # 1 for a per-run summary
    n_warm_starts: int
    warm_start_factor: str  # "one warm start" | "fixed stratum" | "random"
    components: dict  # variance components: seed (or warm start), problem, interaction
    mean_squares: dict

    def to_dict(self) -> dict:
        return asdict(self)

    def at(self, confidence: float) -> tuple[float, float]:
        """The interval at another confidence (a family's adjusted one), from the same se and df."""
        if not math.isfinite(self.se):
            return float("nan"), float("nan")
        return tuple(float(v) for v in _t_outcome(self.mean_diff, self.se ** 2, self.df, confidence)[3:])


def _collapse_random_warm_starts(d: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray, str]:
    """With :data:`MIN_RANDOM_WARM_STARTS` or more warm starts, their seed means become the rows (one stratum)."""
    n_ws = int(labels.max()) + 1
    if n_ws < MIN_RANDOM_WARM_STARTS:
        return d, labels, "one warm start" if n_ws == 1 else "fixed stratum"
    means = np.stack([d[..., labels == k, :].mean(axis=-2) for k in range(n_ws)], axis=-2)
    return means, np.zeros(n_ws, dtype=int), "random"


def crossed_p_values(diffs, groups=None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The rule of :func:`crossed_test` on many matrices at once: ``diffs[..., n_seeds, n_problems]`` (leading
    axes: replicates of a simulation) -> mean difference, standard error, df and two-sided p, each ``[...]``."""
    d = np.asarray(diffs, dtype=float)
    labels = _stratum_labels(groups, d.shape[-2])
    d, labels, _ = _collapse_random_warm_starts(d, labels)
    n_rows, n_problems = d.shape[-2:]
    rows_df = n_rows - (int(labels.max()) + 1)
    if rows_df < 1:
        raise ValueError("no seed replicates within a warm start: nothing to test against")
    ms = _batched_mean_squares(d, labels)
    var, df = _variance_of_mean(*ms, rows_df, n_problems - 1, rows_df * (n_problems - 1), n_rows, n_problems)
    mean = d.mean(axis=(-2, -1))
    se, _, p, _, _ = _t_outcome(mean, var, df, 0.95)
    return mean, se, df, p


def crossed_test(diffs, groups=None, *, confidence: float = 0.95) -> CrossedResult:
    """Test of ``mean difference = 0`` and its t interval; ``diffs``: ``[n_seeds, n_problems]`` differences A - B
    (or ``[n_seeds]`` per-run ones: the seed-level t test), ``groups``: each seed's warm start.  Fewer than
    :data:`MIN_RANDOM_WARM_STARTS` warm starts are fixed strata; more are random, their seed means the rows."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    d = _matrix(diffs)
    labels = _stratum_labels(groups, d.shape[0])
    n_units, n_problems = d.shape
    n_ws = int(labels.max()) + 1
    d, labels, factor = _collapse_random_warm_starts(d, labels)
    ms = mean_squares(d, labels)
    mean = float(d.mean())
    nan = float("nan")
    if ms.rows_df < 1:  # no replication of the seed (or warm-start) level: nothing to test against
        return CrossedResult(mean, nan, nan, nan, nan, nan, nan, confidence, n_units, n_problems, n_ws, factor,
                             {}, asdict(ms))
    var, df = _variance_of_mean(ms.rows, ms.problems, ms.interaction, ms.rows_df, ms.problems_df, ms.interaction_df,
                                ms.n_rows, ms.n_problems)
    se, t, p, low, high = (float(v) for v in _t_outcome(mean, float(var), float(df), confidence))
    row_name = "warm start" if factor == "random" else "seed"
    if n_problems == 1:
        components = {row_name: ms.rows}
    else:
        # the seed (row) component as estimated, below 0 when chance makes it so: with the problem one floored
        # at 0 these reproduce the variance exactly, s2_row/R + s2_problem/P + s2_interaction/(R P)
        components = {row_name: (ms.rows - ms.interaction) / n_problems,
                      "problem": max(ms.problems - ms.interaction, 0.0) / ms.n_rows,
                      "interaction": ms.interaction}
    return CrossedResult(mean, se, float(df), t, p, low, high, confidence, n_units, n_problems, n_ws, factor,
                         components, asdict(ms))


def t_power(effect: float, se: float, df: float, *, level: float = LEVEL) -> float:
    """Power of the two-sided t test (``se``, ``df``) at true mean ``effect`` (noncentral t)."""
    critical = stats.t.ppf(1 - level / 2, df)
    nc = abs(effect) / se
    lower = float(np.nan_to_num(stats.nct.cdf(-critical, df, nc), nan=0.0))
    return float(stats.nct.sf(critical, df, nc)) + lower


def t_mde(se: float, df: float, *, power: float = POWER, level: float = LEVEL) -> float:
    """The smallest true mean the t test (``se``, ``df``) detects with probability ``power``; NaN without a
    finite se or df, and for se 0 (no variance to say what it would detect)."""
    if not (math.isfinite(se) and math.isfinite(df) and df > 0) or se == 0:
        return float("nan")
    if not level < power < 1:
        raise ValueError(f"power must lie in ({level}, 1), got {power}")
    high = se
    while t_power(high, se, df, level=level) < power:
        high *= 2
    return float(optimize.brentq(lambda e: t_power(e, se, df, level=level) - power, 0.0, high, xtol=1e-12))


def projected_se_df(result: CrossedResult, n_units: int) -> tuple[float, float]:
    """Standard error and df of the same rule with ``n_units`` seeds (warm starts when random), the estimated
    components taken as true."""
    c, n_p = result.components, result.n_problems
    strata = 1 if result.warm_start_factor == "random" else result.n_warm_starts
    row_var = max(c.get("seed", c.get("warm start", float("nan"))), 0.0)
    if n_p == 1:
        return math.sqrt(row_var / n_units), float(n_units - strata)
    ms_rows = n_p * row_var + c["interaction"]
    ms_problems = n_units * c["problem"] + c["interaction"]
    rows_df = n_units - strata
    var, df = _variance_of_mean(np.float64(ms_rows), np.float64(ms_problems), np.float64(c["interaction"]),
                                rows_df, n_p - 1, rows_df * (n_p - 1), n_units, n_p)
    return math.sqrt(float(var)), float(df)


def crossed_units_needed(result: CrossedResult, effect: float, *, power: float = POWER, level: float = LEVEL,
                         max_units: int = MAX_UNITS_NEEDED) -> int | None:
    """The fewest seeds (warm starts when random) with which the rule detects ``effect`` with probability
    ``power``; None when even ``max_units`` would not (the problem term does not shrink with more seeds)."""
    if not effect > 0:
        raise ValueError(f"need a positive effect, got {effect}")
    if not result.components:
        return None
    strata = 1 if result.warm_start_factor == "random" else result.n_warm_starts

    def enough(n: int) -> bool:
        se, df = projected_se_df(result, n)
        return se == 0 or t_power(effect, se, df, level=level) >= power

    if not enough(max_units):
        return None
    return bisect.bisect_left(range(max_units + 1), True, lo=strata + 1, key=enough)


def bonferroni(p_value: float, family_size: int) -> float:
    """The p-value adjusted for a family of ``family_size`` tests (NaN stays NaN)."""
    return min(1.0, family_size * p_value) if math.isfinite(p_value) else float("nan")


def family_confidence(family_size: int, level: float = LEVEL) -> float:
    """``1 - level / family_size``: the family's intervals cover together (Bonferroni) and exclude 0 exactly when
    the adjusted p is below ``level``."""
    return 1 - level / family_size
