"""Level 2 of the check: where the bits of a rerun differ, do the study's conclusions still hold?

A rerun can differ in every bit for reasons outside the code: a CPU whose torch
kernels round differently (docs/reproducibility.md) trains every run into another
model, as another seed would.  :func:`compare_conclusions` then asks what a reader
of the study relies on, from the final Pass@1 of each run of the main comparison
(each method at its :data:`~saah_lib.method.methods.MAIN_ALPHAS`, one run per seed):

Each method's mean over seeds (:func:`method_within_tolerance`)
    The rerun's mean final Pass@1 is within ``TOLERANCE_MULTIPLE * sigma * sqrt(2 / n)``
    of the committed one: about two standard errors of the difference of two means of
    ``n`` seeds, had the rerun drawn ``n`` new seeds.  ``sigma`` is the committed
    per-seed standard deviation of that method, floored at ``sqrt(p (1 - p) / N)``
    (``p`` the committed mean, ``N`` the problems of one evaluation): the spread that
    two equally good models show on ``N`` problems by chance alone, so that three seeds
    that happen to agree do not make the tolerance zero.

The primary comparison (:func:`primary_comparison`)
    SA-AH-GRPO against GRPO, paired by seed: the direction of the mean difference and
    whether the exact sign-flip test over seeds
    (:func:`saah_lib.analysis.significance.sign_flip_test`) finds it at the 5% level.
    It is unchanged when both are the same in the rerun.  With three seeds the test
    cannot reach 5% (its smallest p-value is 0.25), so here the direction carries the
    check.

The function is fed the two roots and returns a dict with ``reproduced`` (True, False, or
None when it could not check) and ``line`` (the verdict's last clause); a richer
seed-level comparison can replace it (``compare_studies(..., conclusions=...)``).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from saah_lib.analysis.evidence import LEVEL, Arm, load_root_evidence, unit_label
from saah_lib.analysis.significance import sign_flip_test
from saah_lib.method.methods import MAIN_ALPHAS

TOLERANCE_MULTIPLE = 2.0
#: The paper's primary claim: SA-AH-GRPO against plain GRPO.
PRIMARY = (Arm("sa", MAIN_ALPHAS["sa"]), Arm("grpo", MAIN_ALPHAS["grpo"]))
RULE = (f"per method, the rerun's mean final Pass@1 over seeds within {TOLERANCE_MULTIPLE:g} x sigma x sqrt(2/n) of "
        "the committed mean (n seeds; sigma the committed per-seed standard deviation, at least sqrt(p(1-p)/N) for "
        "committed mean p and N problems per evaluation); primary comparison "
        f"{PRIMARY[0].label} vs {PRIMARY[1].label}: same direction of the mean paired difference and same "
        f"significance at {LEVEL:g} by the exact sign-flip test over seeds")


def final_pass_at_1(root: Path, arms) -> tuple[dict[str, dict[int, float]], dict[str, int], list[str]]:
    """Per arm label: seed -> final Pass@1; per arm label: problems per evaluation; runs left out as unreadable."""
    left_out: list[str] = []
    runs = load_root_evidence(root, tolerate_problems=True, left_out=left_out)
    finals, problems = {}, {}
    one_start = len({run.unit[0] for run in runs}) <= 1  # then a seed names a unit; else "<warm start>/s<seed>"
    for arm in arms:
        by_unit = arm.runs_by_unit(runs)
        finals[arm.label] = {unit[1] if one_start else unit_label(unit): float(np.mean(list(run.at("final").values())))
                             for unit, run in by_unit.items()}
        problems[arm.label] = min((len(run.at("final")) for run in by_unit.values()), default=0)
    return finals, problems, left_out


def method_within_tolerance(committed: dict[int, float], rerun: dict[int, float], n_problems: int) -> dict:
    """The rule of the module docstring for one method, over the seeds both sides ran."""
    seeds = sorted(committed.keys() & rerun.keys())
    out = {"seeds": seeds, "seeds_committed_only": sorted(committed.keys() - rerun.keys()),
           "seeds_rerun_only": sorted(rerun.keys() - committed.keys())}
    if len(seeds) < 2 or n_problems < 1:
        return {**out, "within": None, "reason": f"{len(seeds)} common seed(s): a spread needs at least 2"}
    a = np.array([committed[s] for s in seeds])
    b = np.array([rerun[s] for s in seeds])
    p = float(a.mean())
    sigma = max(float(a.std(ddof=1)), math.sqrt(p * (1 - p) / n_problems))
    tolerance = TOLERANCE_MULTIPLE * sigma * math.sqrt(2 / len(seeds))
    difference = float(b.mean()) - p
    return {**out, "committed_mean": p, "rerun_mean": float(b.mean()), "difference": difference, "sigma": sigma,
            "tolerance": tolerance, "within": abs(difference) <= tolerance}


def _direction(mean_difference: float) -> str:
    return "above" if mean_difference > 0 else "below" if mean_difference < 0 else "level with"


def paired_summary(a: dict[int, float], b: dict[int, float], seeds: list[int]) -> dict:
    """Mean of A - B over ``seeds``, its direction, and the exact sign-flip test."""
    test = sign_flip_test([a[s] for s in seeds], [b[s] for s in seeds])
    return {"mean_difference": test.mean_diff, "direction": _direction(test.mean_diff), "p_value": test.p_value,
            "min_p": test.min_p, "significant": test.p_value < LEVEL, "seeds": seeds}


def primary_comparison(committed: dict[str, dict[int, float]], rerun: dict[str, dict[int, float]],
                       primary=PRIMARY) -> dict:
    """The primary comparison (two arms) on each side, over the seeds where both arms ran on both sides."""
    a, b = (arm.label for arm in primary)
    seeds = sorted(set(committed[a]) & set(committed[b]) & set(rerun[a]) & set(rerun[b]))
    out = {"a": a, "b": b}
    if not seeds:
        return {**out, "unchanged": None, "change": f"no seed where {a} and {b} ran on both sides"}
    sides = {"committed": paired_summary(committed[a], committed[b], seeds),
             "rerun": paired_summary(rerun[a], rerun[b], seeds)}
    c, r = sides["committed"], sides["rerun"]
    changes = []
    if c["direction"] != r["direction"]:
        changes.append(f"{'reversed' if {c['direction'], r['direction']} == {'above', 'below'} else 'changed'} "
                       f"({a} - {b}: {c['mean_difference']:+.3f} -> {r['mean_difference']:+.3f})")
    if c["significant"] != r["significant"]:
        changes.append(f"significance changed (sign-flip p {c['p_value']:.3g} -> {r['p_value']:.3g})")
    return {**out, **sides, "unchanged": not changes, "change": "; ".join(changes) or None}


def compare_conclusions(committed_root: Path, rerun_root: Path, arms=None, primary=PRIMARY) -> dict:
    """Level 2 for two study roots (see the module docstring); ``line`` sums it up in one clause.

    ``arms`` (default: each method at its main alpha) are checked one by one; ``primary`` is the study's
    primary comparison (default: the mini study's, SA-AH-GRPO at the main alpha against GRPO).
    """
    arms = list(arms or (Arm(method, alpha) for method, alpha in MAIN_ALPHAS.items()))
    rule = RULE if primary == PRIMARY else RULE.replace(f"{PRIMARY[0].label} vs {PRIMARY[1].label}",
                                                         f"{primary[0].label} vs {primary[1].label}")
    try:
        committed, problems, left_committed = final_pass_at_1(Path(committed_root), arms + list(primary))
        rerun, _, left_rerun = final_pass_at_1(Path(rerun_root), arms + list(primary))
    except ValueError as err:  # e.g. two runs of one method share a seed: the report is still written
        return {"rule": rule, "reproduced": None, "line": f"conclusions not checked: {err}"}
    methods = {arm.label: method_within_tolerance(committed[arm.label], rerun[arm.label], problems[arm.label])
               for arm in arms}
    primary = primary_comparison(committed, rerun, primary)
    checked = [m for m in methods.values() if m["within"] is not None]
    within = sum(m["within"] for m in checked)
    outside = [label for label, m in methods.items() if m["within"] is False]
    unchecked = [label for label, m in methods.items() if m["within"] is None]
    if outside or primary["unchanged"] is False:
        reproduced = False
    elif unchecked or primary["unchanged"] is None:
        reproduced = None  # nothing contradicts the study, but not everything could be checked
    else:
        reproduced = True
    return {"rule": rule, "methods": methods, "primary": primary, "reproduced": reproduced,
            "left_out": {"committed": left_committed, "rerun": left_rerun},
            "line": _line(methods, primary, reproduced, within, len(arms), outside, unchecked)}


def _line(methods, primary, reproduced, within, n_methods, outside, unchecked) -> str:
    if reproduced:
        return f"conclusions reproduced: {within}/{n_methods} methods within tolerance, primary comparison unchanged"
    parts = [f"{label} outside tolerance (rerun {methods[label]['rerun_mean']:.3f}, committed "
             f"{methods[label]['committed_mean']:.3f} ± {methods[label]['tolerance']:.3f})" for label in outside]
    if primary["unchanged"] is False:
        parts.append(f"primary comparison {primary['change']}")
    if reproduced is False:
        return "conclusions changed: " + "; ".join(parts)
    missing = [f"{label}: {methods[label]['reason']}" for label in unchecked]
    if primary["unchanged"] is None:
        missing.append(f"primary comparison: {primary['change']}")
    return "conclusions not checked: " + "; ".join(missing)
