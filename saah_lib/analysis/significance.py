"""Paired significance tests for two methods run at matched seeds (pure numpy/python).

Three tools, each for one kind of evidence the logs hold:

``mcnemar_exact(a, b)``
    Per-problem correctness of two models on the *same* problems.  Only the
    discordant pairs carry information: with ``n10`` problems solved by A only
    and ``n01`` by B only, under H0 (A and B equally likely to be the one that
    is right) ``n10 ~ Binomial(n10 + n01, 1/2)``.  The two-sided p-value is
    ``min(1, 2 * P(X <= min(n10, n01)))``, computed exactly with integers.
    Pairs can be problems of one seed, or (seed, problem) pairs pooled over
    seeds: summing discordant counts over seeds is the stratified version of
    the same conditional test (each stratum's ``n10`` is binomial given its
    discordant total, so the sum is binomial given the summed total).  It
    treats pairs as independent; the same problem under several seeds is
    not, which is why the seed-level interval resamples whole problems.

``sign_flip_test(x, y)``
    Exact paired permutation test for per-seed summaries (one number per run,
    e.g. training-reward variance or mean KL): under H0 each seed's
    difference ``x_i - y_i`` is as likely to have either sign, so all ``2^n``
    sign patterns are enumerated and the p-value is the share whose
    ``|mean|`` reaches the observed one.  The smallest attainable two-sided
    p-value is ``2 / 2^n``: 0.25 for 3 seeds, 0.125 for 4, 0.0625 for 5; so
    with at most five seeds no per-seed summary can be significant at 5%,
    whatever the data.  ``min_p`` is reported with every result.

``holm(pvalues)``
    Holm's step-down adjustment for a family of tests (controls the
    family-wise error rate without assuming independence).

Seed-level inference (the training seed, not the problem, is the unit):

``paired_t_test(x, y)``
    Student's paired t test of ``mean(x - y) = 0`` over seeds, with its
    t interval.  It assumes the per-seed differences are roughly normal; the
    sign-flip test above assumes only symmetry, and both are reported.
``hierarchical_bootstrap(diffs, groups)``
    Percentile interval for the mean difference that resamples every level
    the result should generalise over: warm starts (``groups``) when there
    are several, then the seeds within each drawn warm start, then the
    problems.  The problems are the same for every seed, so one problem draw
    is shared by all drawn seeds of a resample (a crossed design: a problem
    that favours A in one seed tends to in others, and resampling it per seed
    independently would hide that and narrow the interval).
``paired_t_power`` / ``minimum_detectable_effect`` / ``units_needed``
    Power of the two-sided paired t test from the noncentral t distribution;
    the smallest true difference detected with a given power from the
    observed spread of the per-seed differences, and the number of seeds
    that would detect a given difference.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
from scipy import optimize, stats

DEFAULT_RESAMPLES = 10_000
MAX_EXACT_SEEDS = 24  # 2^24 sign patterns, enumerated in chunks (about a second); beyond that: random signs
SIGN_CHUNK = 2**16  # sign patterns per block of the exact enumeration (bounds its memory)
RANDOM_SIGN_PATTERNS = 200_000  # sign patterns drawn when there are too many seeds to enumerate
POWER = 0.8
LEVEL = 0.05
MAX_UNITS_NEEDED = 10_000  # a seed count beyond this is reported as "more than" (no study could run it)


def established(p_holm: float, ci_low: float, ci_high: float, level: float = LEVEL) -> bool:
    """Whether a difference is established: its Holm-adjusted t-test p is below ``level`` and its bootstrap
    interval excludes 0.  An interval that could not be computed (NaN) excludes nothing, so it establishes
    nothing; every table, figure and sentence asks this one function."""
    if not p_holm < level:
        return False
    return ci_low > 0 or ci_high < 0


def _as_bool_array(x, name: str) -> np.ndarray:
    arr = np.asarray(x)
    if arr.dtype != bool:
        if arr.size and not np.isin(arr, (0, 1)).all():
            raise ValueError(f"{name}: correctness values must be booleans or 0/1")
        arr = arr.astype(bool)
    return arr


def binomial_two_sided_p(k: int, n: int) -> float:
    """Exact two-sided p-value of ``k`` successes in ``n`` fair-coin trials.

    ``min(1, 2 * P(X <= min(k, n - k)))``; for p = 1/2 this equals the
    "sum of outcomes no more likely than the observed" definition (scipy's
    ``binomtest``).  ``n = 0`` gives 1.
    """
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
    """Exact McNemar test on paired correctness ``a`` and ``b`` (same shape, any dims, 0/1 or bool)."""
    a, b = _as_bool_array(a, "a"), _as_bool_array(b, "b")
    if a.shape != b.shape:
        raise ValueError(f"a and b must pair up element by element, got shapes {a.shape} and {b.shape}")
    a, b = a.ravel(), b.ravel()
    a_only, b_only = int((a & ~b).sum()), int((~a & b).sum())
    return McNemarResult(n_pairs=int(a.size), both=int((a & b).sum()), a_only=a_only, b_only=b_only,
                         neither=int((~a & ~b).sum()), p_value=binomial_two_sided_p(a_only, a_only + b_only))


def mcnemar_pooled(results: list[McNemarResult]) -> McNemarResult:
    """One test over several strata (seeds): discordant counts summed, as documented above."""
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


def _sign_patterns(n: int, seed: int):
    """Every one of the 2^n sign patterns in blocks (exact), or RANDOM_SIGN_PATTERNS random ones beyond
    :data:`MAX_EXACT_SEEDS`; yields ``[k, n]`` arrays of +1/-1."""
    if n <= MAX_EXACT_SEEDS:
        bits = 1 << np.arange(n)
        for start in range(0, 2**n, SIGN_CHUNK):
            codes = np.arange(start, min(start + SIGN_CHUNK, 2**n))
            yield np.where(codes[:, None] & bits, -1.0, 1.0)
        return
    rng = np.random.default_rng(seed)
    for start in range(0, RANDOM_SIGN_PATTERNS, SIGN_CHUNK):
        yield rng.choice((1.0, -1.0), size=(min(SIGN_CHUNK, RANDOM_SIGN_PATTERNS - start), n))


def _paired_values(x, y) -> tuple[np.ndarray, np.ndarray]:
    """``x`` and ``y`` as float arrays of one finite value per seed each, or a ValueError saying what is wrong."""
    x, y = np.asarray(x, dtype=float).ravel(), np.asarray(y, dtype=float).ravel()
    if x.shape != y.shape:
        raise ValueError(f"x and y must have one value per seed each, got {x.size} and {y.size}")
    if x.size == 0:
        raise ValueError("no paired values")
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        raise ValueError("per-seed values must be finite (a run without the summary cannot be paired)")
    return x, y


def sign_flip_test(x, y, *, seed: int = 0) -> SignFlipResult:
    """Exact two-sided paired sign-flip (permutation) test of ``mean(x - y) = 0``.

    ``x[i]`` and ``y[i]`` are the two methods' summaries at seed ``i``.  Up to
    :data:`MAX_EXACT_SEEDS` pairs every sign pattern is enumerated; beyond that
    :data:`RANDOM_SIGN_PATTERNS` random patterns (seeded) estimate the p-value,
    counting the observed pattern itself ((hits + 1) / (draws + 1)).
    """
    x, y = _paired_values(x, y)
    n = x.size
    d = x - y
    observed = abs(d.mean())
    # a relative tolerance so that sign patterns equal in exact arithmetic count as reaching the observed value
    tolerance = 1e-12 * max(1.0, np.abs(d).max())
    hits = total = 0
    for signs in _sign_patterns(n, seed):
        hits += int((np.abs(signs @ d) / n >= observed - tolerance).sum())
        total += len(signs)
    p = hits / total if n <= MAX_EXACT_SEEDS else (hits + 1) / (total + 1)
    return SignFlipResult(n=n, mean_diff=float(d.mean()), diffs=tuple(float(v) for v in d),
                          p_value=float(p), min_p=2.0 / 2**n if n else 1.0)


def holm(pvalues) -> list[float]:
    """Holm-adjusted p-values, in the input order (NaN entries stay NaN and are not counted)."""
    p = np.asarray(pvalues, dtype=float)
    out = np.full(p.shape, np.nan)
    idx = np.flatnonzero(~np.isnan(p))
    m = idx.size
    running = 0.0
    for rank, i in enumerate(idx[np.argsort(p[idx], kind="stable")]):
        running = max(running, min(1.0, (m - rank) * p[i]))
        out[i] = running
    return out.tolist()


# ---------------------------------------------------------------------------
# seed-level inference
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class PairedTResult:
    n: int  # seeds (pairs)
    mean_diff: float
    sd_diff: float  # sample standard deviation of the differences (ddof=1)
    t: float
    df: int
    p_value: float  # two-sided; NaN with fewer than two pairs
    ci_low: float  # t interval for the mean difference
    ci_high: float
    confidence: float

    def to_dict(self) -> dict:
        return asdict(self)


def paired_t_test(x, y, *, confidence: float = 0.95) -> PairedTResult:
    """Student's two-sided paired t test of ``mean(x - y) = 0``, and the t interval of the mean difference.

    With one pair there is no spread to test against: p, t and the interval are NaN.  Differences that
    are all equal give sd 0: p = 0 unless they are all 0 (p = 1), and a zero-width interval.
    """
    x, y = _paired_values(x, y)
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    d = x - y
    n, mean = d.size, float(d.mean())
    nan = float("nan")
    if n < 2:
        return PairedTResult(n, mean, nan, nan, 0, nan, nan, nan, confidence)
    sd = float(d.std(ddof=1))
    df = n - 1
    if sd == 0.0:
        p = 1.0 if mean == 0.0 else 0.0
        t = 0.0 if mean == 0.0 else math.copysign(math.inf, mean)
        return PairedTResult(n, mean, 0.0, t, df, p, mean, mean, confidence)
    se = sd / math.sqrt(n)
    t = mean / se
    half = float(stats.t.ppf(0.5 + confidence / 2, df)) * se
    return PairedTResult(n, mean, sd, t, df, float(2 * stats.t.sf(abs(t), df)), mean - half, mean + half, confidence)


def paired_t_power(effect: float, sd: float, n: int, *, level: float = LEVEL) -> float:
    """Power of the two-sided level-``level`` paired t test with ``n`` pairs when the true mean
    difference is ``effect`` and the differences' standard deviation is ``sd``.

    Exact under normal differences: the statistic follows a noncentral t with ``n - 1`` degrees of
    freedom and noncentrality ``effect * sqrt(n) / sd``.
    """
    if n < 2:
        raise ValueError(f"the paired t test needs at least 2 pairs, got {n}")
    if not sd > 0:
        raise ValueError(f"sd must be positive, got {sd}")
    df = n - 1
    critical = stats.t.ppf(1 - level / 2, df)
    nc = abs(effect) * math.sqrt(n) / sd
    upper = float(stats.nct.sf(critical, df, nc))
    # rejections in the wrong direction: scipy returns NaN where this tail underflows (large nc); it is 0 there
    lower = float(np.nan_to_num(stats.nct.cdf(-critical, df, nc), nan=0.0))
    return upper + lower


def minimum_detectable_effect(sd: float, n: int, *, power: float = POWER, level: float = LEVEL) -> float:
    """The smallest true mean difference the paired t test detects with probability ``power``.

    ``sd`` is the standard deviation of the per-seed differences (the observed one, in practice).
    NaN with fewer than two pairs or an unknown sd; 0 when the differences do not vary at all.
    """
    if n < 2 or not math.isfinite(sd):
        return float("nan")
    if sd == 0:
        return 0.0
    if not level < power < 1:
        raise ValueError(f"power must lie in ({level}, 1), got {power}")
    high = sd
    while paired_t_power(high, sd, n, level=level) < power:
        high *= 2
    return float(optimize.brentq(lambda e: paired_t_power(e, sd, n, level=level) - power, 0.0, high, xtol=1e-10))


def units_needed(effect: float, sd: float, *, power: float = POWER, level: float = LEVEL,
                 max_units: int = 100_000) -> int:
    """The fewest pairs (seeds) with which the paired t test detects a true difference ``effect`` with
    probability ``power``, for differences of standard deviation ``sd`` (power grows with n)."""
    if not effect > 0 or not math.isfinite(sd) or sd < 0:
        raise ValueError(f"need a positive effect and a finite sd >= 0, got effect={effect}, sd={sd}")
    if sd == 0:
        return 2

    def enough(n: int) -> bool:
        return paired_t_power(effect, sd, n, level=level) >= power

    high = 2
    while not enough(high):
        if high >= max_units:
            raise ValueError(f"more than {max_units} pairs would be needed")
        high = min(2 * high, max_units)
    low = high // 2 + 1 if high > 2 else 2
    while low < high:  # the smallest n in [low, high] that is enough
        mid = (low + high) // 2
        if enough(mid):
            high = mid
        else:
            low = mid + 1
    return high


@dataclass(frozen=True)
class HierarchicalBootstrapResult:
    diff: float  # observed mean over seeds of each seed's mean difference
    low: float
    high: float
    confidence: float
    n_resamples: int
    seed: int
    n_groups: int  # warm starts
    n_units: int  # seeds (over all warm starts)
    n_problems: int  # 1 for per-seed summaries
    levels: tuple[str, ...]  # what was resampled, outermost first

    def to_dict(self) -> dict:
        return {**asdict(self), "levels": list(self.levels)}


def _group_index(groups, n_units: int) -> list[np.ndarray]:
    if groups is None:
        return [np.arange(n_units)]
    labels = list(groups)
    if len(labels) != n_units:
        raise ValueError(f"groups: one label per seed needed, got {len(labels)} for {n_units} seeds")
    order = list(dict.fromkeys(labels))
    return [np.array([i for i, g in enumerate(labels) if g == name]) for name in order]


def _unit_counts(rng, members: list[np.ndarray], n_units: int, size: int) -> np.ndarray:
    """``[size, n_units]``: how often each seed is drawn in each resample (warm starts, then seeds within)."""
    counts = np.zeros((size, n_units))
    drawn = rng.integers(0, len(members), size=(size, len(members))) if len(members) > 1 \
        else np.zeros((size, 1), dtype=int)
    for slot in range(drawn.shape[1]):
        for g, idx in enumerate(members):
            chosen = np.flatnonzero(drawn[:, slot] == g)
            if chosen.size:
                picks = idx[rng.integers(0, idx.size, size=(chosen.size, idx.size))]
                np.add.at(counts, (chosen[:, None], picks), 1.0)
    return counts / counts.sum(axis=1, keepdims=True)


def hierarchical_bootstrap(diffs, groups=None, *, n_resamples: int = DEFAULT_RESAMPLES, seed: int = 0,
                           confidence: float = 0.95, chunk: int = 1000) -> HierarchicalBootstrapResult:
    """Percentile interval for the mean difference, resampling warm starts, seeds, then problems.

    ``diffs``: ``[n_seeds, n_problems]`` per-problem differences A - B (column ``j`` the same problem in
    every row), or ``[n_seeds]`` per-seed differences of a summary (no problem level).  ``groups``: the
    warm start of each row; with more than one, warm starts are resampled first and seeds within each
    drawn warm start.  The statistic of a resample is the mean, over the drawn seeds, of each seed's mean
    over the drawn problems (one problem draw for all seeds of the resample).
    """
    d = np.asarray(diffs, dtype=float)
    if d.ndim == 1:
        d = d[:, None]
    if d.ndim != 2 or d.size == 0:
        raise ValueError(f"diffs: expected [n_seeds] or [n_seeds, n_problems] values, got shape {d.shape}")
    if not np.isfinite(d).all():
        raise ValueError("diffs must be finite")
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n_resamples}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    n_units, n_problems = d.shape
    members = _group_index(groups, n_units)
    rng = np.random.default_rng(seed)
    stats_ = np.empty(n_resamples)
    for start in range(0, n_resamples, chunk):
        size = min(chunk, n_resamples - start)
        unit_w = _unit_counts(rng, members, n_units, size)
        if n_problems > 1:
            cols = rng.integers(0, n_problems, size=(size, n_problems))
            problem_w = np.zeros((size, n_problems))
            np.add.at(problem_w, (np.arange(size)[:, None], cols), 1.0 / n_problems)
            stats_[start:start + size] = np.einsum("bn,nm,bm->b", unit_w, d, problem_w)
        else:
            stats_[start:start + size] = unit_w @ d[:, 0]
    tail = (1 - confidence) / 2
    low, high = np.quantile(stats_, [tail, 1 - tail])
    levels = (("warm starts",) if len(members) > 1 else ()) + ("seeds",) + (("problems",) if n_problems > 1 else ())
    return HierarchicalBootstrapResult(diff=float(d.mean(axis=1).mean()), low=float(low), high=float(high),
                                       confidence=confidence, n_resamples=n_resamples, seed=seed,
                                       n_groups=len(members), n_units=n_units, n_problems=n_problems,
                                       levels=levels)
