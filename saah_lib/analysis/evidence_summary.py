"""A results root's paired evidence in one JSON-ready dict, and its primary comparison as a verdict can use it.

``evidence_summary(root)`` reads every run (strictly), tests the pairs of the
root's study plan (:mod:`saah_lib.analysis.plan`) with the seed as the unit
(:mod:`saah_lib.analysis.evidence`), repeats every comparison without the seed
pairs that contain a flagged run, and writes the paragraph
(:mod:`saah_lib.analysis.evidence_sentence`).  ``primary_comparison(root)``
returns the plan's primary comparison on one quantity: direction, estimate,
interval, p and minimum detectable effect.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from saah_lib.analysis.evidence import (
    assign_families,
    attach_without_flagged,
    compare_arms,
    compare_pairs,
    established,
    families,
    health_summary,
    load_root_evidence,
    testable,
    topk_pairs,
)
from saah_lib.analysis.evidence_sentence import evidence_paragraphs
from saah_lib.analysis.plan import read_plan
from saah_lib.analysis.significance import DEFAULT_RESAMPLES, LEVEL, POWER
from saah_lib.paths import repo_relative

FAMILY_RULE = ("Holm within each family: the study plan's primary comparison (its quantities) is one family; "
               "every other row is in the family of its quantity across the other pairs")
TOPK_FAMILY_RULE = "Holm within each quantity across the compared pairs (no primary comparison)"
RESAMPLED = "warm starts (when several), then seeds within each, then problems (one draw shared by all seeds)"


def evidence_summary(root: str | Path, pairs="plan", *, n_resamples: int = DEFAULT_RESAMPLES, seed: int = 0,
                     level: float = LEVEL, tolerate_problems: bool = False,
                     loaded: tuple[list, list[str]] | None = None) -> dict:
    """Everything about a results root as one dict: plan, rows, families, health, paragraph.

    ``pairs="plan"``: the root's study plan (its primary comparison a family of its own);
    ``pairs="topk"``: every top-K training setting against the exact-entropy runs (no primary comparison).
    ``loaded``: the root's runs and left-out names as :func:`load_root_evidence` already gave them (read with
    the same ``tolerate_problems``), so that several summaries of one root read its runs once.
    """
    if pairs not in ("plan", "topk"):
        raise ValueError(f"pairs must be 'plan' or 'topk', got {pairs!r}")
    plan = read_plan(root) if pairs == "plan" else None
    if loaded is None:
        left_out: list[str] = []
        runs = load_root_evidence(root, tolerate_problems, left_out)
    else:
        runs, left_out = loaded
    tested = plan.pairs if plan else topk_pairs(runs)
    skipped: list[str] = []
    pairs_left_out: list[str] | None = [] if tolerate_problems else None  # strict: an unpairable pair raises
    # top-K runs may have one seed only: shown descriptively, their McNemar test about those two models
    rows = compare_pairs(runs, tested, plan=plan, n_resamples=n_resamples, seed=seed, skipped=skipped,
                         min_units=2 if plan else 1, left_out=pairs_left_out)
    attach_without_flagged(runs, rows, tested, plan, n_resamples, seed)
    parts = evidence_paragraphs(rows, level, plan=plan, runs=runs) if rows else {}
    warning = " ".join(w for w in (
        f"WARNING: {len(left_out)} damaged or incomplete run(s) were left out: {', '.join(left_out)}."
        if left_out else "",
        f"WARNING: {len(pairs_left_out)} comparison(s) could not be made: {'; '.join(pairs_left_out)}."
        if pairs_left_out else "",
        # planned comparisons that a missing or left-out run leaves with fewer than two seeds are named, never dropped
        f"Not tested ({len(skipped)} planned comparison(s)): {'; '.join(skipped)}." if skipped and plan else "")
        if w)
    sentence = " ".join(p for p in (*parts.values(), warning) if p)  # evidence_sentence's join, without a second pass
    return {
        "root": repo_relative(root),
        "runs": [r.run_id for r in runs],
        "left_out": left_out,
        "pairs_left_out": pairs_left_out or [],
        "not_tested": skipped,
        "level": level,
        "power": POWER,
        "plan": plan.to_dict() if plan else None,
        "primary": plan.describe() if plan else None,
        "family_rule": FAMILY_RULE if plan else TOPK_FAMILY_RULE,
        "families": families(rows),
        "bootstrap": {"n_resamples": n_resamples, "seed": seed, "confidence": 0.95, "resampled": RESAMPLED},
        "health": health_summary(runs),
        "rows": [r.to_dict() for r in rows],
        "sentence": sentence,
        "paragraphs": {**parts, "warning": warning},
    }


@dataclass(frozen=True)
class PrimaryResult:
    """The primary comparison on one quantity, in a form a verdict can use."""

    quantity: str
    a: str
    b: str
    direction: str  # "higher" / "lower" (A against B, established) or "no difference detected"
    estimate: float  # mean over seed pairs of A - B
    ci_low: float  # hierarchical bootstrap
    ci_high: float
    p_value: float  # paired t test over seed pairs
    p_holm: float  # within the primary family
    mde: float  # minimum detectable effect, 80% power, two-sided 5%
    n_units: int
    established: bool

    def to_dict(self) -> dict:
        return asdict(self)


def primary_comparison(root: str | Path, quantity: str = "final", *, n_resamples: int = DEFAULT_RESAMPLES,
                       seed: int = 0, level: float = LEVEL) -> PrimaryResult:
    """The root's primary comparison (from its study plan) on ``quantity`` (``final`` or ``train_var``).

    Raises ValueError when the plan does not make ``quantity`` primary or fewer than two seeds have both arms.
    """
    plan = read_plan(root)
    if quantity not in plan.quantities:
        raise ValueError(f"{quantity!r} is not a primary quantity of {root} (primary: {plan.describe()})")
    runs = load_root_evidence(root)
    a, b = plan.primary
    if not testable((a, b), runs):
        raise ValueError(f"{root}: {a.label} vs {b.label} has fewer than two common seeds")
    rows = assign_families(compare_arms(a, b, runs, n_resamples=n_resamples, seed=seed), plan)
    row = next(r for r in rows if r.key == quantity)
    ok = established(row, level)
    return PrimaryResult(quantity=row.quantity, a=row.a, b=row.b,
                         direction=("higher" if row.diff > 0 else "lower") if ok else "no difference detected",
                         estimate=row.diff, ci_low=row.ci_low, ci_high=row.ci_high, p_value=row.p_value,
                         p_holm=row.p_holm, mde=row.mde, n_units=row.n_units, established=ok)
