"""Level 2 of the check: where the bits of a rerun differ, do its runs still say what the committed runs say?

A run and its rerun share warm start, seed and problems, so differ only in rounding: at most as another seed.
``d`` = rerun - committed final Pass@1 is held to the committed per-seed spread (:func:`yardstick`) by t tests
(:func:`shift_tests`); the primary comparison's direction must hold; a rebuilt warm start is held to the shipped
builds' spread. False alarms (at most :data:`SHIFT_LEVEL` + :data:`WARM_START_LEVEL`) are simulated
(:mod:`.calibration`).
"""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path

import numpy as np
from scipy import stats

from saah_lab.analysis.evidence import LEVEL, load_root_evidence, unit_label
from saah_lab.analysis.plan import Arm
from saah_lab.analysis.significance import sign_flip_test, t_mde
from saah_lib.jsonio import read_json
from saah_lib.method.methods import MAIN_ALPHAS
from saah_lib.models.warmstart import BUILD_INFO_FILE
from saah_lib.paths import CONFIRM_ROOT, EXTENDED_ROOT, MINI_ROOT, RESULTS, SHIPPED_WARM_STARTS
from saah_lib.rundir import layout

#: The false-alarm budget of the shift tests together (Bonferroni over them).
SHIFT_LEVEL = 0.04
#: The false-alarm budget of the rebuilt warm starts' checks together.
WARM_START_LEVEL = 0.01
POWER = 0.8
#: The paper's primary claim: SA-AH-GRPO against plain GRPO.
PRIMARY = (Arm("sa", MAIN_ALPHAS["sa"]), Arm("grpo", MAIN_ALPHAS["grpo"]))
RULE = (f"every run against its committed twin (same warm start, seed and problems): the mean shift of final Pass@1 "
        f"over all runs, each method and each arm, in units of sigma x sqrt(2/n) (sigma the committed per-seed "
        f"standard deviation within arms, pooled), t test at {SHIFT_LEVEL:g} Bonferroni over the tests; the primary "
        f"comparison's direction judged only where both sides find it significant (sign-flip at {LEVEL:g}); a "
        f"rebuilt warm start's held-out Pass@1 against the committed build's, at {WARM_START_LEVEL:g}, the spread of "
        "the shipped builds as yardstick")


#: Where the calibration writes the rule's measured false-alarm rate and power per study.
CALIBRATION_FILE = RESULTS / "calibration" / "level2.json"
#: Per committed study, the committed roots of its design (same profile, steps and problems) whose runs its
#: yardstick pools: the mini study's three seeds per arm borrow the extended study's ten.
SAME_DESIGN = {"mini": (MINI_ROOT, EXTENDED_ROOT), "extended": (EXTENDED_ROOT, MINI_ROOT), "confirm": (CONFIRM_ROOT,)}


def final_pass_at_1(root: Path) -> tuple[dict[tuple[Arm, tuple[str, int]], float], list[str]]:
    """``{(arm, unit): final Pass@1}`` of every readable run of ``root``, and the runs left out as unreadable."""
    left_out: list[str] = []
    runs = load_root_evidence(root, tolerate_problems=True, left_out=left_out)
    finals = {}
    for run in runs:
        key = (Arm(run.method, run.alpha, run.entropy_top_k), run.unit)
        if key in finals:
            raise ValueError(f"{root}: two runs of {key[0].label} share warm start {run.unit[0]!r} and seed "
                             f"{run.unit[1]}")
        finals[key] = float(np.mean(list(run.at("final").values())))
    return finals, left_out


#: A cell needs this many seeds before its spread counts as measured well enough to bound the others'.
MIN_SEEDS_FOR_HETEROGENEITY = 5


def cell_values(finals: dict) -> dict[tuple[Arm, str], list[float]]:
    """Final Pass@1 per (arm, warm start)."""
    cells: dict[tuple[Arm, str], list[float]] = defaultdict(list)
    for (arm, unit), value in finals.items():
        cells[(arm, unit[0])].append(value)
    return cells


def yardstick(*studies: dict) -> dict:
    """``sigma`` (with ``df``, ``pooled``, ``heterogeneity``) from the committed runs of one design: the per-seed
    standard deviation of final Pass@1 within an arm and warm start, pooled, times the largest ratio of a
    well-measured cell's to it (so the noisiest arm keeps the false alarms in budget); nan without two seeds."""
    cells = [v for finals in studies for v in cell_values(finals).values() if len(v) > 1]
    df = sum(len(v) - 1 for v in cells)
    if not df:
        return {"sigma": float("nan"), "df": 0, "pooled": float("nan"), "heterogeneity": None}
    pooled = math.sqrt(sum(float(((np.array(v) - np.mean(v)) ** 2).sum()) for v in cells) / df)
    ratios = [float(np.std(v, ddof=1)) / pooled for v in cells
              if len(v) >= MIN_SEEDS_FOR_HETEROGENEITY and pooled > 0]
    heterogeneity = max([1.0, *ratios]) if ratios else None
    return {"sigma": pooled * (heterogeneity or 1.0), "df": df, "pooled": pooled, "heterogeneity": heterogeneity}


def _groups(keys) -> dict[str, list]:
    """The tested groups of run keys: all runs, each method, each arm of two or more runs (in that order); a group
    holding the same runs as an earlier one (a method of one arm) is tested once, under the earlier name."""
    candidates = [("all runs", list(keys))]
    candidates += [(f"method {m}", [k for k in keys if k[0].method == m]) for m in sorted({a.method for a, _ in keys})]
    for arm in sorted({arm for arm, _ in keys}, key=lambda a: (a.method, a.alpha, a.entropy_top_k or 0)):
        candidates.append((arm.label, [k for k in keys if k[0] == arm]))
    groups: dict[str, list] = {}
    for name, members in candidates:
        if len(members) > 1 and members not in groups.values():
            groups[name] = members
    return groups


def shift_tests(committed: dict, rerun: dict, sigma: float, df: int, level: float = SHIFT_LEVEL,
                detectable: bool = True) -> list[dict]:
    """One t test per group of common runs (all, each method, each arm: where a broken reward, method or alpha
    shows), ``t = mean(d) / (sigma sqrt(2 / n))`` on ``df``, two-sided at ``level`` / tests; ``flagged`` beyond
    the limit; ``detectable``: the shift found with 80% power (slow: the simulations leave it out)."""
    keys = sorted(committed.keys() & rerun.keys(), key=lambda k: (k[0].method, k[0].alpha, k[1]))
    groups = _groups(keys)
    per_test = level / len(groups)
    critical = float(stats.t.ppf(1 - per_test / 2, df))
    out = []
    for name, members in groups.items():
        n = len(members)
        shift = float(np.mean([rerun[k] - committed[k] for k in members]))
        se = sigma * math.sqrt(2 / n)
        t = shift / se if se > 0 else (0.0 if shift == 0 else math.copysign(math.inf, shift))
        out.append({"group": name, "runs": n, "shift": shift, "se": se, "t": t, "critical": critical,
                    "detectable": t_mde(se, df, power=POWER, level=per_test) if detectable else None,
                    "flagged": abs(t) > critical})
    return out


def paired_summary(a: dict, b: dict, units: list) -> dict:
    """Mean of A - B over ``units``, and the exact sign-flip test."""
    test = sign_flip_test([a[u] for u in units], [b[u] for u in units])
    return {"mean_difference": test.mean_diff, "p_value": test.p_value, "min_p": test.min_p,
            "significant": test.p_value < LEVEL}


def primary_comparison(committed: dict, rerun: dict, primary=PRIMARY) -> dict:
    """The primary comparison on both sides; its direction judged only where both sides' sign-flip tests reach 5%."""
    a, b = primary
    per_side = {}
    for side, finals in (("committed", committed), ("rerun", rerun)):
        per_side[side] = ({u: v for (arm, u), v in finals.items() if arm == a},
                          {u: v for (arm, u), v in finals.items() if arm == b})
    units = sorted(set.intersection(*(set(x) for pair in per_side.values() for x in pair)))
    out = {"a": a.label, "b": b.label, "units": [unit_label(u) for u in units]}
    if not units:
        return {**out, "judged": False, "reversed": False, "why": f"no unit where {a.label} and {b.label} ran on "
                                                                  "both sides"}
    sides = {side: paired_summary(*pair, units) for side, pair in per_side.items()}
    out.update(sides)
    c, r = sides["committed"], sides["rerun"]
    if not (c["significant"] and r["significant"]):
        which = " or ".join(s for s in ("committed", "rerun") if not sides[s]["significant"])
        return {**out, "judged": False, "reversed": False,
                "why": f"not significant on the {which} side (sign-flip p {c['p_value']:.2g} committed, "
                       f"{r['p_value']:.2g} rerun; {len(units)} units can give p down to {c['min_p']:.2g}): its "
                       "direction is not judged"}
    reversed_ = np.sign(c["mean_difference"]) != np.sign(r["mean_difference"])
    return {**out, "judged": True, "reversed": bool(reversed_),
            "why": f"significant on both sides, {'opposite' if reversed_ else 'same'} direction "
                   f"({c['mean_difference']:+.3f} -> {r['mean_difference']:+.3f})"}


def shipped_build_spread() -> tuple[float, int]:
    """(standard deviation, df) of the held-out Pass@1 of the shipped warm starts (one build per seed)."""
    values = [info["heldout_pass_at_1"] for info in (read_json(p, default=None)
                                                      for p in sorted(SHIPPED_WARM_STARTS.glob(f"*/{BUILD_INFO_FILE}")))
              if info and info.get("heldout_pass_at_1") is not None]
    return (float(np.std(values, ddof=1)), len(values) - 1) if len(values) > 1 else (float("nan"), 0)


def warm_start_records(root: Path) -> dict[str, dict]:
    """A study root's warm-start build records by name (the extended and confirm studies' file, else mini's)."""
    single = read_json(Path(root) / layout.WARMSTART_RECORD_FILE, default=None)
    many = read_json(Path(root) / layout.WARMSTART_RECORDS_FILE, default=None) or {}
    return {**many, **({"tiny-warmstart": single} if single and "tiny-warmstart" not in many else {})}


def warm_start_checks(committed_root: Path, rerun_root: Path, level: float = WARM_START_LEVEL) -> list[dict]:
    """Each warm start rebuilt with other weights: its held-out Pass@1 against the committed one, ``|diff| /
    (s sqrt 2)`` against t with the shipped builds' df, at ``level`` over them."""
    committed, rerun = warm_start_records(committed_root), warm_start_records(rerun_root)
    differing = [name for name in sorted(committed.keys() & rerun.keys())
                 if committed[name].get("weights_sha256") != rerun[name].get("weights_sha256")]
    if not differing:
        return []
    spread, df = shipped_build_spread()
    critical = float(stats.t.ppf(1 - level / len(differing) / 2, df)) if df else float("nan")
    out = []
    for name in differing:
        a, b = committed[name].get("heldout_pass_at_1"), rerun[name].get("heldout_pass_at_1")
        limit = critical * spread * math.sqrt(2)
        checkable = a is not None and b is not None and math.isfinite(limit)
        out.append({"warm_start": name, "committed": a, "rerun": b, "limit": limit if checkable else None,
                    "flagged": bool(checkable and abs(b - a) > limit), "checked": checkable})
    return out


def compare_conclusions(committed_root: Path, rerun_root: Path, primary=PRIMARY, study: str | None = None,
                        spread_from: tuple[Path, ...] = ()) -> dict:
    """Level 2 for two study roots, summed up in ``line``; ``study``: the design whose measured false-alarm rate
    the line quotes; ``spread_from``: committed roots of the same design the yardstick pools."""
    try:
        committed, left_committed = final_pass_at_1(Path(committed_root))
        rerun, left_rerun = final_pass_at_1(Path(rerun_root))
        others = [final_pass_at_1(Path(root))[0] for root in spread_from if Path(root) != Path(committed_root)]
    except ValueError as err:  # e.g. two runs of one arm share a seed: the report is still written
        return {"rule": RULE, "reproduced": None, "line": f"conclusions not checked: {err}"}
    result = conclusions_of(committed, rerun, others, primary, warm_starts=warm_start_checks(Path(committed_root),
                                                                                           Path(rerun_root)),
                            false_alarm=measured_false_alarm(study))
    return {**result, "left_out": {"committed": left_committed, "rerun": left_rerun}}


def conclusions_of(committed: dict, rerun: dict, others=(), primary=PRIMARY, warm_starts=(),
                   false_alarm: float | None = None) -> dict:
    """Level 2 from ``{(arm, unit): final Pass@1}`` per side; ``others`` pooled into the yardstick."""
    common = committed.keys() & rerun.keys()
    spread = yardstick(committed, *others)
    sigma, df = spread["sigma"], spread["df"]
    out = {"rule": RULE, **spread, "runs_compared": len(common),
           "runs_on_one_side": sorted(f"{arm.label} {unit_label(u)}" for arm, u in committed.keys() ^ rerun.keys()),
           "warm_starts": list(warm_starts), "false_alarm": false_alarm}
    if len(common) < 2 or not df or not sigma > 0:
        why = ("fewer than two runs on both sides" if len(common) < 2 else
               "the committed study has no arm with two seeds of one warm start: no per-seed spread to measure "
               "against" if not df else "the committed seeds of every arm agree exactly: no spread to measure against")
        return {**out, "tests": [], "primary": None, "reproduced": None, "line": f"conclusions not checked: {why}"}
    out["tests"] = shift_tests(committed, rerun, sigma, df)
    out["primary"] = primary_comparison(committed, rerun, primary)
    flagged = [t for t in out["tests"] if t["flagged"]] + [w for w in out["warm_starts"] if w["flagged"]]
    out["reproduced"] = not flagged and not out["primary"]["reversed"]
    out["line"] = conclusions_line(out)
    return out


def read_calibration(path: Path = CALIBRATION_FILE) -> dict:
    """The committed calibration's entry per study (empty where none is committed)."""
    return (read_json(path, default={}) or {}).get("studies", {})


def measured_false_alarm(study: str | None) -> float | None:
    """The false-alarm rate the calibration measured for this study's design (None where not measured)."""
    return read_calibration().get(study, {}).get("false_alarm") if study else None


def _shift_text(test: dict) -> str:
    return f"{test['group']} shifted by {test['shift']:+.3f} (t = {test['t']:+.1f}, limit {test['critical']:.1f})"


def _detectable(tests: list[dict]) -> str:
    """The shift each kind of test detects with 80% power: one figure, or the range over its tests."""
    kinds = {"over all runs": [t for t in tests if t["group"] == "all runs"],
             "per method": [t for t in tests if t["group"].startswith("method ")],
             "per arm": [t for t in tests if t["group"] != "all runs" and not t["group"].startswith("method ")]}
    parts = []
    for kind, members in kinds.items():
        values = sorted(t["detectable"] for t in members)
        if values:
            parts.append(f"{values[0]:.3f}" + (f"-{values[-1]:.3f}" if values[-1] > values[0] + 5e-4 else "") + f" {kind}")
    return ", ".join(parts)


def conclusions_line(result: dict) -> str:
    """One clause: what was checked (and how finely), what changed, what the seeds could not check."""
    tests, primary = result["tests"], result["primary"]
    changes = [_shift_text(t) for t in tests if t["flagged"]]
    changes += [f"rebuilt warm start {w['warm_start']} held-out Pass@1 {w['rerun']:.3f} against {w['committed']:.3f}"
                f" (limit ±{w['limit']:.3f})" for w in result["warm_starts"] if w["flagged"]]
    if primary["reversed"]:
        changes.append(f"primary comparison {primary['a']} vs {primary['b']} reversed ({primary['why']})")
    rate = result.get("false_alarm")
    checked = (f"{len(tests)} shift tests over {result['runs_compared']} runs against their committed twins "
               f"(sigma {result['sigma']:.3f}, {result['df']} df; detectable with 80% power: {_detectable(tests)}; "
               "false alarms " + (f"{rate:.1%} measured" if rate is not None else "not measured for this design")
               + f", at most {SHIFT_LEVEL + WARM_START_LEVEL:.0%} by construction)")
    unchecked = "" if primary["judged"] else f"; not checkable: the direction of {primary['a']} vs {primary['b']}, " \
                                             f"{primary['why']}"
    if changes:
        return "conclusions changed: " + "; ".join(changes) + f" [{checked}]"
    return f"conclusions reproduced: {checked}{unchecked}"
