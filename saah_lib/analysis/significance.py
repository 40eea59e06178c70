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
    not, which is why the interval below resamples whole problems.

``paired_bootstrap(a, b)``
    Percentile interval for the difference in Pass@1, ``a`` and ``b`` being
    ``[n_seeds, n_problems]`` correctness arrays whose columns are the same
    problems.  Problems (columns) are resampled with replacement and keep all
    their seeds and both methods, so the pairing and the correlation of one
    problem across seeds are both kept.  Seeded; the number of resamples is
    part of the result.

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
"""

from __future__ import annotations

import itertools
import math
from dataclasses import asdict, dataclass

import numpy as np

DEFAULT_RESAMPLES = 10_000
MAX_EXACT_SEEDS = 20  # 2^20 sign patterns; beyond that an exact test is not worth it here


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
class BootstrapResult:
    diff: float  # observed Pass@1(A) - Pass@1(B), pooled over seeds and problems
    low: float
    high: float
    confidence: float
    n_resamples: int
    seed: int
    n_seeds: int
    n_problems: int

    def to_dict(self) -> dict:
        return asdict(self)


def _as_seeds_by_problems(x, name: str) -> np.ndarray:
    arr = _as_bool_array(x, name)
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.ndim != 2 or arr.shape[1] == 0:
        raise ValueError(f"{name}: expected a [n_seeds, n_problems] array with at least one problem, got {arr.shape}")
    return arr


def paired_bootstrap(a, b, *, n_resamples: int = DEFAULT_RESAMPLES, seed: int = 0,
                     confidence: float = 0.95, chunk: int = 1000) -> BootstrapResult:
    """Percentile bootstrap interval for ``mean(a) - mean(b)``, resampling problems (columns).

    ``a``, ``b``: ``[n_seeds, n_problems]`` (or ``[n_problems]``) correctness,
    column ``j`` being the same problem in both and in every seed.
    """
    a, b = _as_seeds_by_problems(a, "a"), _as_seeds_by_problems(b, "b")
    if a.shape != b.shape:
        raise ValueError(f"a and b must pair up (same seeds x problems), got shapes {a.shape} and {b.shape}")
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n_resamples}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    per_problem = (a.astype(float) - b.astype(float)).mean(axis=0)  # seed-averaged difference per problem
    n = per_problem.size
    rng = np.random.default_rng(seed)
    stats = np.empty(n_resamples)
    for start in range(0, n_resamples, chunk):
        size = min(chunk, n_resamples - start)
        stats[start:start + size] = per_problem[rng.integers(0, n, size=(size, n))].mean(axis=1)
    tail = (1 - confidence) / 2
    low, high = np.quantile(stats, [tail, 1 - tail])
    return BootstrapResult(diff=float(per_problem.mean()), low=float(low), high=float(high), confidence=confidence,
                           n_resamples=n_resamples, seed=seed, n_seeds=a.shape[0], n_problems=n)


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


def sign_flip_test(x, y) -> SignFlipResult:
    """Exact two-sided paired sign-flip (permutation) test of ``mean(x - y) = 0``.

    ``x[i]`` and ``y[i]`` are the two methods' summaries at seed ``i``.
    """
    x, y = np.asarray(x, dtype=float).ravel(), np.asarray(y, dtype=float).ravel()
    if x.shape != y.shape:
        raise ValueError(f"x and y must have one value per seed each, got {x.size} and {y.size}")
    if x.size == 0:
        raise ValueError("no paired values")
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        raise ValueError("per-seed values must be finite (a run without the summary cannot be paired)")
    n = x.size
    if n > MAX_EXACT_SEEDS:
        raise ValueError(f"exact enumeration is limited to {MAX_EXACT_SEEDS} pairs, got {n}")
    d = x - y
    observed = abs(d.mean())
    signs = np.array(list(itertools.product((1.0, -1.0), repeat=n)))
    null = np.abs(signs @ d) / n
    # a relative tolerance so that sign patterns equal in exact arithmetic count as reaching the observed value
    hits = null >= observed - 1e-12 * max(1.0, np.abs(d).max())
    return SignFlipResult(n=n, mean_diff=float(d.mean()), diffs=tuple(float(v) for v in d),
                          p_value=float(hits.mean()), min_p=2.0 / 2**n if n else 1.0)


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
