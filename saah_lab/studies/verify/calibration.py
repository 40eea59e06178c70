"""The level-2 rule's false-alarm rate and power, by simulation from the committed studies' own variance.

    python -m saah_lab.studies.verify.calibration            # writes results/calibration/level2.json

Per committed study, :func:`calibrate_study` (seeded: the same file every time) draws reruns that differ only in
rounding, as much as another seed would (the worst case), and plants shifts to measure power.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np
from scipy import stats

from saah_lab.analysis.plan import Arm
from saah_lab.studies.verify.conclusions import (
    CALIBRATION_FILE,
    MIN_SEEDS_FOR_HETEROGENEITY,
    SAME_DESIGN,
    SHIFT_LEVEL,
    WARM_START_LEVEL,
    cell_values,
    conclusions_of,
    final_pass_at_1,
    shift_tests,
    shipped_build_spread,
    yardstick,
)
from saah_lib.jsonio import atomic_write_json, read_json
from saah_lib.paths import PAPER_TABLES, in_repo, repo_relative

SIMULATED_STUDIES = 4000
POWER_STUDIES = 400


def design(study: str) -> dict:
    """The committed runs of ``study`` and those its yardstick pools, their cells' means and spreads."""
    finals = [final_pass_at_1(root)[0] for root in SAME_DESIGN[study]]
    runs = [(i, k) for i, f in enumerate(finals)
            for k in sorted(f, key=lambda k: (k[0].method, k[0].alpha, k[0].entropy_top_k or 0, k[1]))]
    cells = {(i, cell): values for i, f in enumerate(finals) for cell, values in cell_values(f).items()}
    cell_of = [(i, (k[0], k[1][0])) for i, k in runs]
    measured = {c: float(np.std(v, ddof=1)) for c, v in cells.items() if len(v) >= MIN_SEEDS_FOR_HETEROGENEITY}
    pooled = yardstick(*finals)["pooled"]
    return {"runs": runs, "tested": np.array([i == 0 for i, _ in runs]), "cell_of": cell_of,
            "mean": np.array([np.mean(cells[c]) for c in cell_of]), "measured_sd": measured, "pooled": pooled,
            "ratios": np.array([sd / pooled for sd in measured.values()])}


def _draw_truth(d: dict, rng) -> np.ndarray:
    """Each run's true per-seed spread: its cell's if well measured, else the pooled times a drawn measured ratio."""
    cells = list(dict.fromkeys(d["cell_of"]))
    sd = {c: d["measured_sd"].get(c, d["pooled"] * float(rng.choice(d["ratios"])) if len(d["ratios"]) else d["pooled"])
          for c in cells}
    return np.array([sd[c] for c in d["cell_of"]])


def _flags(d: dict, committed: np.ndarray, rerun: np.ndarray) -> tuple[bool, list[dict]]:
    """The rule on one simulated study: the yardstick from every committed run, the tests on the study's own."""
    roots = sorted({i for i, _ in d["runs"]})
    per_root = [{k: v for (i, k), v in zip(d["runs"], committed) if i == root} for root in roots]
    spread = yardstick(*per_root)
    c = per_root[0]
    r = {k: v for (i, k), v, t in zip(d["runs"], rerun, d["tested"]) if t}
    tests = shift_tests(c, r, spread["sigma"], spread["df"], detectable=False)
    return any(t["flagged"] for t in tests), tests


def _simulate(d: dict, rng, n: int, shift=None, warm_start_sd: float = 0.0) -> np.ndarray:
    """Which of ``n`` simulated reruns the shift tests flag (``shift``: a vector added to the rerun)."""
    flagged = np.zeros(n, bool)
    starts = sorted({k[1][0] for _, k in d["runs"]})
    index = np.array([starts.index(k[1][0]) for _, k in d["runs"]])
    for i in range(n):
        sd = _draw_truth(d, rng)
        committed = d["mean"] + rng.normal(0, sd)
        rerun = d["mean"] + rng.normal(0, sd)
        if warm_start_sd:
            rerun = rerun + rng.normal(0, warm_start_sd * math.sqrt(2), len(starts))[index]
        if shift is not None:
            rerun = rerun + shift
        flagged[i] = _flags(d, committed, rerun)[0]
    return flagged


def _warm_start_false_alarm(rng, n: int, builds: int, rebuilt: int) -> float:
    """How often the rebuilt warm starts' check flags a rebuild that differs only in rounding."""
    if builds < 2 or rebuilt < 1:
        return 0.0
    critical = stats.t.ppf(1 - WARM_START_LEVEL / rebuilt / 2, builds - 1)
    spread = rng.normal(0, 1, (n, builds)).std(axis=1, ddof=1)
    differences = rng.normal(0, math.sqrt(2), (n, rebuilt))
    return float((np.abs(differences) > critical * spread[:, None] * math.sqrt(2)).any(axis=1).mean())


def stated_mde(study: str) -> float | None:
    """The study's stated minimum detectable effect of its primary comparison (final Pass@1)."""
    evidence = read_json(PAPER_TABLES / f"{study}_paired_evidence.json", default=None) or {}
    return next((row["mde"] for row in evidence.get("rows", [])
                 if row.get("family") == "primary" and row.get("quantity") == "final Pass@1"), None)


def _planted(d: dict, group: str, size: float) -> np.ndarray:
    """A shift of ``size`` in the rerun of every tested run of ``group`` (all runs, a method or an arm)."""
    return np.array([size if tested and group in ("all runs", f"method {k[0].method}", k[0].label) else 0.0
                     for (_, k), tested in zip(d["runs"], d["tested"])])


def calibrate_study(study: str, n: int = SIMULATED_STUDIES, n_power: int = POWER_STUDIES) -> dict:
    """False alarms and power of the level-2 rule on ``n`` (``n_power``) simulated reruns of one study.

    Each run's rerun is an independent draw around its arm mean with the committed per-seed spread of its cell (a
    rerun as different as another seed: the worst case). Problems and the shipped warm start are the same on both
    sides; the ``rebuilt warm start`` rows move each warm start by the shipped builds' spread. Power: a shift planted
    in every run, one method or one arm, at the study's stated MDE and twice it.
    """
    d = design(study)
    rng = np.random.default_rng(sum(map(ord, study)))
    spread, build_df = shipped_build_spread()
    warm_starts = sorted({k[1][0] for (i, k) in d["runs"] if i == 0})
    shifts = _simulate(d, rng, n)
    warm = _warm_start_false_alarm(rng, n, build_df + 1, len(warm_starts))
    rebuilt = _simulate(d, rng, max(n // 8, 200), warm_start_sd=spread) if math.isfinite(spread) else None
    mde = stated_mde(study)
    tests = _flags(d, d["mean"], d["mean"])[1]
    power = {}
    for group in (t["group"] for t in tests) if mde and n_power else ():
        power[group] = {f"{m:g} x MDE": float(_simulate(d, rng, n_power, shift=_planted(d, group, m * mde)).mean())
                        for m in (1, 2)}
    false_alarm = float(1 - (1 - shifts.mean()) * (1 - warm))
    return {"spread_from": [repo_relative(r) for r in SAME_DESIGN[study]], "runs": int(d["tested"].sum()),
            "warm_starts": warm_starts, "simulated_reruns": n, "shift_tests_false_alarm": float(shifts.mean()),
            "warm_start_check_false_alarm": warm, "false_alarm": false_alarm,
            "monte_carlo_se": math.sqrt(false_alarm * (1 - false_alarm) / n),
            "false_alarm_if_warm_start_rebuilt": None if rebuilt is None else float(rebuilt.mean()),
            "stated_mde": mde, "power": power, "pooled_sd": d["pooled"],
            "well_measured_cell_sd_ratios": sorted(round(float(r), 3) for r in d["ratios"])}


def planted_defects_table(record: dict, study: str = "mini") -> list[str]:
    """Markdown rows per planted defect: each method's mean shift of final Pass@1 and what level 2 flags."""
    committed_root, *others = SAME_DESIGN[study]
    committed = final_pass_at_1(committed_root)[0]
    pooled = [final_pass_at_1(root)[0] for root in others]
    mde = stated_mde(study)
    rows = [f"| defect | runs | mean shift per method (grpo, ah, sa) | beyond the MDE {mde:.3f} | flagged by level 2 |",
            "| --- | --- | --- | --- | --- |"]
    for defect, runs in record["runs"].items():
        rerun = {(Arm(r["method"], r["alpha"]), ("tiny-warmstart", r["seed"])): r["pass_at_1"] for r in runs.values()}
        result = conclusions_of(committed, rerun, pooled)
        shifts = {m: float(np.mean([v - committed[k] for k, v in rerun.items() if k[0].method == m]))
                  for m in ("grpo", "ah", "sa")}
        flagged = [f"{t['group']} (t = {t['t']:+.1f}, limit {t['critical']:.1f})"
                   for t in result["tests"] if t["flagged"]]
        rows.append(f"| {defect} | {len(runs)} | " + ", ".join(f"{v:+.3f}" for v in shifts.values())
                    + f" | {'yes' if any(abs(v) > mde for v in shifts.values()) else 'no'} | "
                    + ("; ".join(flagged) or "nothing: conclusions reproduced") + " |")
    return rows


def calibrate(studies=tuple(SAME_DESIGN)) -> dict:
    return {"command": "python -m saah_lab.studies.verify.calibration",
            "budget": {"shift_tests": SHIFT_LEVEL, "warm_start_checks": WARM_START_LEVEL},
            "studies": {study: calibrate_study(study) for study in studies}}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m saah_lab.studies.verify.calibration",
                                     description=__doc__.splitlines()[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--out", type=Path, default=repo_relative(CALIBRATION_FILE),
                        help="where to write the rates (relative to the repository root)")
    parser.add_argument("--planted", type=Path, default=None,
                        help="instead: the table of a planted-defect record (tools/plant_defects.py) against the mini "
                             "study")
    args = parser.parse_args(argv)
    if args.planted:
        print("\n".join(planted_defects_table(json.loads(in_repo(args.planted).read_text()))))
        return
    result = calibrate()
    atomic_write_json(in_repo(args.out), result)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
