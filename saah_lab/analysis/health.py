"""Run health: the rules (:data:`RULES`, each on one run's own logs) that flag a diverged or collapsed run, which
is never dropped silently: tables mark it, figures name it, the evidence is computed with and without it.  A rule
whose inputs are missing says so in :attr:`RunHealth.unchecked`.  Why these rules: docs/evidence.md, "Run health".
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import pandas as pd

from saah_lab.analysis.summaries import final_and_peak, logged_values
from saah_lib.tasks.scoring import pass_at_1_ci

#: Above every other run of the committed CPU studies (results/mini, results/extended) and the paper's 1.5B log,
#: below the one run that diverged (docs/evidence.md, "Run health").
KL_BOUND = 0.1
#: Each rule, as the tables and the paper state it.
RULES = {
    "kl_diverged": f"per-step KL to the reference above {KL_BOUND:g} at some step",
    "fell_below_start": "final Pass@1 below the step-0 Pass@1 by more than its 95% half-width",
    "fell_back": "final Pass@1 below the peak by more than the peak's 95% half-width",
}


@dataclass(frozen=True)
class RunHealth:
    run_id: str
    flags: tuple[str, ...]  # the rules the run breaks, in the order of RULES
    kl_max: float
    start_pass_at_1: float  # the run's step-0 evaluation
    peak_pass_at_1: float
    final_pass_at_1: float
    n_eval: float  # problems per evaluation (for the half-widths)
    unchecked: tuple[str, ...] = ()  # rules that could not be applied (inputs missing)

    @property
    def flagged(self) -> bool:
        return bool(self.flags)

    def describe(self) -> str:
        """What the run did against each broken rule, e.g. ``KL up to 0.169 > 0.1; best 0.290 vs 0.270 at step 0``."""
        parts = []
        if "kl_diverged" in self.flags:
            parts.append(f"KL up to {self.kl_max:.3f}, above {KL_BOUND:g}")
        if "fell_below_start" in self.flags:
            parts.append(f"final {self.final_pass_at_1:.3f} below {self.start_pass_at_1:.3f} at step 0")
        if "fell_back" in self.flags:
            parts.append(f"final {self.final_pass_at_1:.3f} after a peak of {self.peak_pass_at_1:.3f}")
        return "; ".join(parts)

    def to_dict(self) -> dict:
        return {**asdict(self), "flags": list(self.flags), "unchecked": list(self.unchecked),
                "description": self.describe()}


def _step0(evals: pd.DataFrame) -> tuple[float, float]:
    """Pass@1 and problem count of the step-0 evaluation (NaN when there is none)."""
    if evals is None or evals.empty or "step" not in evals:
        return float("nan"), float("nan")
    at0 = evals[pd.to_numeric(evals["step"], errors="coerce") == 0]
    at0 = at0[pd.to_numeric(at0["pass_at_1"], errors="coerce").notna()]
    if at0.empty:
        return float("nan"), float("nan")
    row = at0.iloc[-1]
    n = pd.to_numeric(pd.Series([row.get("n")]), errors="coerce").iloc[0]
    return float(row["pass_at_1"]), float(n)


def run_health(run_id: str, evals: pd.DataFrame, train_log: pd.DataFrame) -> RunHealth:
    """Apply every rule of :data:`RULES` to one run's evaluations and training log."""
    points = final_and_peak(evals)
    peak, final = points["peak_pass_at_1"], points["final_pass_at_1"]
    start, n = _step0(evals)
    if not math.isfinite(n) and evals is not None and "n" in evals:
        counts = pd.to_numeric(evals["n"], errors="coerce").dropna()
        n = float(counts.iloc[-1]) if len(counts) else float("nan")
    kl = float(logged_values(train_log, "kl").max())  # NaN without a value
    flags, unchecked = [], []
    if math.isfinite(kl):
        if kl > KL_BOUND:
            flags.append("kl_diverged")
    else:
        unchecked.append("kl_diverged")
    for rule, before in (("fell_below_start", start), ("fell_back", peak)):
        if not (math.isfinite(before) and math.isfinite(final) and math.isfinite(n)):
            unchecked.append(rule)
        elif before - final > pass_at_1_ci(before, n):  # NaN (never flagged) for n <= 0
            flags.append(rule)
    return RunHealth(run_id=run_id, flags=tuple(flags), kl_max=kl, start_pass_at_1=start, peak_pass_at_1=peak,
                     final_pass_at_1=final, n_eval=n, unchecked=tuple(unchecked))
