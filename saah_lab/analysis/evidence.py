"""Paired comparisons of method arms over their common units (warm start, training seed).

Per quantity (:func:`compare_arms`) the primary test is the crossed seed x problem test
(:func:`saah_lab.analysis.significance.crossed_test`), beside its MDE, per-warm-start tests, a sign-flip
test and a problem-level McNemar test; Bonferroni within families (:func:`assign_families`); every comparison
is repeated without units holding a flagged run. The reasoning: docs/evidence.md.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from saah_lab.analysis.frames import evals_frame, train_log_frame
from saah_lab.analysis.health import RULES, RunHealth
from saah_lab.analysis.plan import Arm, StudyPlan
from saah_lab.analysis.quantities import CHECKPOINTS, QUANTITIES
from saah_lab.analysis.runs import StudyRuns, read_runs
from saah_lab.analysis.significance import (
    LEVEL,
    CrossedResult,
    bonferroni,
    crossed_test,
    crossed_units_needed,
    established,
    family_confidence,
    mcnemar_exact,
    mcnemar_pooled,
    sign_flip_test,
    t_mde,
)
from saah_lab.analysis.summaries import TRAIN_LOG_SUMMARIES, final_and_peak
from saah_lab.rundir.reader import RunFolder
from saah_lib.jsonio import read_jsonl
from saah_lib.models.names import canonical_model_name
from saah_lib.rundir.folder import RunDir

log = logging.getLogger(__name__)

#: Pass@1 differences whose required seed count is reported beside every Pass@1 result.
TARGET_EFFECTS = (0.03, 0.02)
PRIMARY_FAMILY = "primary"


@dataclass
class RunEvidence:
    """What one run folder contributes: its setting, checkpoints, per-problem correctness, summaries, health."""

    run_id: str
    model_label: str
    method: str
    alpha: float
    entropy_top_k: int | None
    seed: int
    final_step: int
    peak_step: int
    correct: dict[int, dict[str, bool]] = field(repr=False)  # step -> problem id -> correct
    train_var: float
    train_var_detrended: float
    train_var_within: float
    mean_kl: float
    warm_start: str = ""  # the canonical name of the model it started from
    health: tuple[str, ...] = ()  # the health rules it breaks (saah_lab.analysis.health)
    health_text: str = ""
    flagged: bool = False  # RunHealth.flagged, as the root's one reading found it
    folder: str = ""  # the run folder it was read from (errors name it)

    @property
    def unit(self) -> tuple[str, int]:
        return (self.warm_start, self.seed)

    def at(self, checkpoint: str) -> dict[str, bool]:
        return self.correct[self.final_step if checkpoint == "final" else self.peak_step]


def read_correctness(path: Path) -> dict[str, bool]:
    """Problem id -> correct, from one ``eval_samples/step_XXXX.jsonl``."""
    records = read_jsonl(path)
    if not records:
        raise ValueError(f"{path}: no evaluation records")
    out: dict[str, bool] = {}
    for i, r in enumerate(records, 1):
        if "id" not in r or "correct" not in r:
            raise ValueError(f"{path}: record {i} lacks the field 'id' or 'correct'")
        if r["id"] in out:
            raise ValueError(f"{path}: problem id {r['id']!r} appears twice")
        if not isinstance(r["correct"], bool):
            raise ValueError(f"{path}: record {i} has a non-boolean 'correct': {r['correct']!r}")
        out[str(r["id"])] = r["correct"]
    return out


def load_run_evidence(folder: RunFolder, health: RunHealth) -> RunEvidence:
    """One run with its per-problem correctness at the final and peak checkpoints (ValueError naming the file)."""
    runlog = RunDir(folder.path)
    cfg = folder.config
    for key in ("method", "alpha", "seed"):
        if key not in cfg:
            raise ValueError(f"{runlog.config_path}: no field {key!r}")
    points = final_and_peak(evals_frame(folder))
    if math.isnan(points["final_step"]):
        raise ValueError(f"{runlog.eval_path}: no evaluation after step 0")
    final_step, peak_step = int(points["final_step"]), int(points["peak_step"])
    files = runlog.sample_files()
    correct = {}
    for step in {final_step, peak_step}:
        if step not in files:
            raise ValueError(f"{runlog.samples_path(step)}: missing (eval.jsonl lists step {step})")
        correct[step] = read_correctness(files[step])
    train_log = train_log_frame(folder)  # made once per run, in step order: what every summary sorts it into
    top_k = cfg.get("entropy_top_k")
    return RunEvidence(
        run_id=health.run_id, model_label=str(cfg.get("model_label", "")),
        method=str(cfg["method"]), alpha=float(cfg["alpha"]), entropy_top_k=None if top_k is None else int(top_k),
        seed=int(cfg["seed"]), final_step=final_step, peak_step=peak_step, correct=correct,
        **{key: summary(train_log) for key, summary in TRAIN_LOG_SUMMARIES.items()},
        warm_start=canonical_model_name(cfg["model_name"]) if cfg.get("model_name") else "model not recorded",
        health=health.flags, health_text=health.describe(), flagged=health.flagged, folder=str(folder.path),
    )


def load_root_evidence(root: str | Path | StudyRuns, tolerate_problems: bool = False,
                       left_out: list[str] | None = None) -> list[RunEvidence]:
    """Every run of a root (or of one already read); a damaged or incomplete run raises, or with
    ``tolerate_problems`` is left out and named in ``left_out``."""
    study = root if isinstance(root, StudyRuns) else read_runs(root, tolerate_problems)
    unusable = list(study.unreadable)
    out = []
    for folder in study.runs:
        try:
            if folder.problems:
                raise ValueError("; ".join(folder.problems))
            out.append(load_run_evidence(folder, study.health[folder.path.name]))
        except ValueError as err:
            if not tolerate_problems:
                raise
            log.warning("leaving out %s: %s", folder.path.name, err)
            unusable.append(folder.path.name)
    if left_out is not None:
        left_out.extend(sorted(unusable))
    return out


@dataclass
class EvidenceRow:
    """One quantity compared between two arms over their common units (a row of the evidence table)."""

    a: str
    b: str
    quantity: str  # "final Pass@1", "peak Pass@1", "training-reward variance", "mean KL"
    key: str  # final / peak / train_var / mean_kl
    a_value: float  # mean over units
    b_value: float
    diff: float  # mean over units of A - B
    se: float  # standard error of diff under the crossed model (significance.crossed_test)
    df: float  # its Satterthwaite degrees of freedom
    p_value: float  # the crossed test, two-sided, unadjusted
    p_signflip: float  # exact sign-flip test over the per-unit values (problems held fixed)
    min_p_signflip: float  # the smallest p the sign-flip test can give with these units: 2 / 2^n
    sd_diff: float  # standard deviation of the per-unit differences (descriptive)
    mcnemar_p: float  # problem-level McNemar, pooled over units (Pass@1 only): these trained models
    n_units: int  # (warm start, seed) pairs
    n_warm_starts: int
    n_problems: int  # Pass@1 rows; 0 for per-run summaries
    units_a_ahead: int
    units_b_ahead: int
    flagged_units: list = field(default_factory=list)  # "warm start/seed" of units with a flagged run
    detail: dict = field(default_factory=dict)
    crossed: CrossedResult | None = field(default=None, repr=False)  # the fit the family numbers come from
    family: str = ""  # "primary" or the quantity
    primary: bool = False
    same_as_final: bool = False  # a peak row whose checkpoints are the final ones in every run
    # filled by adjust(), for the row's family of family_size tests at the study's level:
    family_size: int = 0
    level: float = LEVEL
    p_adjusted: float = float("nan")  # Bonferroni: min(1, family_size * p_value)
    confidence: float = float("nan")  # of the interval: 1 - level / family_size
    ci_low: float = float("nan")  # the crossed test's t interval at that confidence
    ci_high: float = float("nan")
    mde: float = float("nan")  # the smallest difference this test detects with 80% power at level / family_size
    units_needed: dict = field(default_factory=dict)  # Pass@1: {"0.03": n, "0.02": n} seeds for that power
    units_needed_of: str = "seed pairs"  # what units_needed counts: warm starts when they are a random factor
    without_flagged: dict | None = None  # the same comparison without flagged units (None: nothing flagged)

    def to_dict(self) -> dict:
        return asdict(self)

    def is_established(self, level: float | None = None) -> bool:
        """Established at the level the row was adjusted for (another level would need other intervals)."""
        if level is not None and level != self.level:
            raise ValueError(f"row adjusted at level {self.level}, asked at {level}: call adjust(rows, {level})")
        return established(self.p_adjusted, self.ci_low, self.ci_high, self.level)


def unit_label(unit: tuple[str, int]) -> str:
    return f"{unit[0]}/s{unit[1]}"


def _pass_at_1_matrix(a_runs: dict, b_runs: dict, units: list, checkpoint: str):
    """``[n_units, n_problems]`` correctness of A and B, columns in one problem order."""
    first = a_runs[units[0]]
    ids = sorted(first.at(checkpoint))
    rows_a, rows_b = [], []
    for unit in units:
        for run in (a_runs[unit], b_runs[unit]):
            got = set(run.at(checkpoint))
            if got != set(ids):
                raise ValueError(f"run {run.run_id!r} evaluated other problems than {first.run_id!r} "
                                 f"({len(got ^ set(ids))} ids differ); pairing needs the same evaluation set")
        rows_a.append([a_runs[unit].at(checkpoint)[i] for i in ids])
        rows_b.append([b_runs[unit].at(checkpoint)[i] for i in ids])
    return np.array(rows_a, dtype=bool), np.array(rows_b, dtype=bool)


def _per_warm_start(units: list, diffs: np.ndarray) -> dict:
    """Each warm start's own crossed test (descriptive: one warm start says nothing about another)."""
    out = {}
    for ws in dict.fromkeys(u[0] for u in units):
        idx = [i for i, u in enumerate(units) if u[0] == ws]
        fit = crossed_test(diffs[idx])
        out[ws] = {"n": len(idx), "mean_diff": fit.mean_diff, "se": fit.se, "df": fit.df, "p_value": fit.p_value}
    return out


def _row(a: Arm, b: Arm, key: str, units: list, a_vals, b_vals, diffs: np.ndarray, extra: dict,
         a_runs: dict, b_runs: dict) -> EvidenceRow:
    """One row: ``diffs`` is the ``[units, problems]`` matrix of differences (Pass@1) or the per-unit ones."""
    d = np.asarray(a_vals, float) - np.asarray(b_vals, float)
    flagged = [unit_label(u) for u in units if a_runs[u].flagged or b_runs[u].flagged]
    groups = [u[0] for u in units]
    fit = crossed_test(diffs, groups)
    flip = sign_flip_test(a_vals, b_vals)
    return EvidenceRow(
        a=a.label, b=b.label, quantity=QUANTITIES[key], key=key, a_value=float(np.mean(a_vals)),
        b_value=float(np.mean(b_vals)), diff=fit.mean_diff, se=fit.se, df=fit.df, p_value=fit.p_value,
        p_signflip=flip.p_value, min_p_signflip=flip.min_p, sd_diff=float(d.std(ddof=1)) if d.size > 1 else math.nan,
        mcnemar_p=extra.pop("mcnemar_p", float("nan")), n_units=len(units), n_warm_starts=len(set(groups)),
        n_problems=extra.pop("n_problems", 0), units_a_ahead=int((d > 0).sum()), units_b_ahead=int((d < 0).sum()),
        flagged_units=flagged, crossed=fit,
        detail={"units": [unit_label(u) for u in units], "a": [float(v) for v in a_vals],
                "b": [float(v) for v in b_vals], "diffs": d.tolist(), "per_warm_start": _per_warm_start(units, diffs),
                "sign_flip": flip.to_dict(), **extra},
    )


def compare_arms(a: Arm, b: Arm, runs: list[RunEvidence]) -> list[EvidenceRow]:
    """Rows for final and peak Pass@1 (on the common evaluation problems, with the McNemar test pooled over
    units) and each per-run summary of :data:`TRAIN_LOG_SUMMARIES`, of A vs B over their common units."""
    a_runs, b_runs = a.runs_by_unit(runs), b.runs_by_unit(runs)
    units = sorted(set(a_runs) & set(b_runs))
    if not units:
        raise ValueError(f"no common warm start and seed for {a.label} ({[unit_label(u) for u in a_runs]}) "
                         f"and {b.label} ({[unit_label(u) for u in b_runs]})")
    rows = []
    for checkpoint in CHECKPOINTS:
        ma, mb = _pass_at_1_matrix(a_runs, b_runs, units, checkpoint)
        per_unit = [mcnemar_exact(ma[i], mb[i]) for i in range(len(units))]
        pooled = mcnemar_pooled(per_unit)
        steps = {side: [getattr(runs_[u], f"{checkpoint}_step") for u in units]
                 for side, runs_ in (("steps_a", a_runs), ("steps_b", b_runs))}
        extra = {"mcnemar_p": pooled.p_value, "n_problems": ma.shape[1], "mcnemar": pooled.to_dict(),
                 "mcnemar_per_unit": [r.to_dict() for r in per_unit], **steps}
        rows.append(_row(a, b, checkpoint, units, ma.mean(axis=1), mb.mean(axis=1),
                         ma.astype(float) - mb.astype(float), extra, a_runs, b_runs))
    peak = next(r for r in rows if r.key == "peak")
    peak.same_as_final = all(a_runs[u].peak_step == a_runs[u].final_step
                             and b_runs[u].peak_step == b_runs[u].final_step for u in units)
    for key in TRAIN_LOG_SUMMARIES:
        xa = [getattr(a_runs[u], key) for u in units]
        xb = [getattr(b_runs[u], key) for u in units]
        if not all(math.isfinite(v) for v in xa + xb):
            log.warning("%s vs %s: %s missing in some run; row left out", a.label, b.label, QUANTITIES[key])
            continue
        rows.append(_row(a, b, key, units, xa, xb, np.asarray(xa) - np.asarray(xb), {}, a_runs, b_runs))
    return rows


def assign_families(rows: list[EvidenceRow], plan: StudyPlan | None, level: float = LEVEL) -> list[EvidenceRow]:
    """The primary comparison's rows on its quantities form one family; every other row the family of its
    quantity.  Then each family is adjusted (:func:`adjust`)."""
    primary = (plan.primary[0].label, plan.primary[1].label) if plan else None
    for row in rows:
        row.primary = primary is not None and (row.a, row.b) == primary and row.key in plan.quantities
        row.family = PRIMARY_FAMILY if row.primary else row.key
    return adjust(rows, level)


def adjust(rows: list[EvidenceRow], level: float = LEVEL) -> list[EvidenceRow]:
    """Fill each row's family numbers (``family``, or the quantity when unset): with m tests, the Bonferroni p,
    the interval at 1 - level/m, the MDE and seeds needed at level/m, each warm start significant at level/m."""
    for row in rows:
        row.family = row.family or row.key
    sizes = Counter(r.family for r in rows)
    for row in rows:
        row.family_size, row.level = sizes[row.family], level
        per_test = level / row.family_size
        row.p_adjusted = bonferroni(row.p_value, row.family_size)
        row.confidence = family_confidence(row.family_size, level)
        row.ci_low, row.ci_high = row.crossed.at(row.confidence)
        row.mde = t_mde(row.se, row.df, level=per_test)
        # with no variance (every seed and problem alike) there is nothing to project a seed count from
        if row.key in CHECKPOINTS and row.crossed.components and row.se > 0:
            row.units_needed = {f"{e:g}": crossed_units_needed(row.crossed, e, level=per_test) for e in TARGET_EFFECTS}
            row.units_needed_of = "warm starts" if row.crossed.warm_start_factor == "random" else "seed pairs"
        for ws in row.detail.get("per_warm_start", {}).values():
            ws["significant"] = bool(ws["p_value"] < per_test)
    return rows


def families(rows: list[EvidenceRow]) -> dict[str, list[str]]:
    """Family name -> the rows in it, as "A vs B: quantity" (what the JSON records)."""
    out: dict[str, list[str]] = {}
    for r in rows:
        out.setdefault(r.family, []).append(f"{r.a} vs {r.b}: {r.quantity}")
    return out


def testable(pair, runs, min_units: int = 2) -> bool:
    a, b = pair
    common = set(a.runs_by_unit(runs)) & set(b.runs_by_unit(runs))
    return len(common) >= min_units


def compare_pairs(runs: list[RunEvidence], pairs, *, plan: StudyPlan | None = None, level: float = LEVEL,
                  skipped: list | None = None, min_units: int = 2,
                  left_out: list[str] | None = None) -> list[EvidenceRow]:
    """All rows of the given pairs, in families.  Pairs with fewer than ``min_units`` common units are named in
    ``skipped``; a pair that cannot be compared raises, or given ``left_out`` is named there: runs that exist never
    disappear from the tests silently."""
    rows = []
    for a, b in pairs:
        if not testable((a, b), runs, min_units):
            reason = "no runs of one of them" if not (a.runs_by_unit(runs) and b.runs_by_unit(runs)) \
                else f"fewer than {min_units} common seeds"
            log.info("%s vs %s left out: %s", a.label, b.label, reason)
            if skipped is not None:
                skipped.append(f"{a.label} vs {b.label}: {reason}")
            continue
        try:
            rows += compare_arms(a, b, runs)
        except ValueError as err:
            if left_out is None:
                raise ValueError(f"{a.label} vs {b.label} cannot be compared: {err}") from err
            left_out.append(f"{a.label} vs {b.label}: {err}")
    return assign_families(rows, plan, level)


def attach_without_flagged(runs: list[RunEvidence], rows: list[EvidenceRow], pairs, plan,
                           level: float = LEVEL) -> None:
    """Attach to each row with flagged units the same comparison over the units where neither run is flagged."""
    flagged_units = {r.unit for r in runs if r.flagged}
    if not flagged_units or not any(row.flagged_units for row in rows):
        return
    healthy = [r for r in runs if r.unit not in flagged_units]
    again = {(r.a, r.b, r.key): r for r in compare_pairs(healthy, pairs, plan=plan, level=level)}
    for row in rows:
        if not row.flagged_units:
            continue
        other = again.get((row.a, row.b, row.key))
        row.without_flagged = {"n_units": row.n_units - len(row.flagged_units), "untestable": True} if other is None \
            else {**{k: getattr(other, k) for k in ("n_units", "a_value", "b_value", "diff", "se", "df", "confidence",
                                                    "ci_low", "ci_high", "p_value", "p_adjusted", "p_signflip",
                                                    "sd_diff", "mde", "units_needed")},
                  "established": other.is_established()}


def topk_pairs(runs: list[RunEvidence], method: str = "sa", alpha: float = 0.5) -> list[tuple[Arm, Arm]]:
    """Each top-K training setting found in ``runs`` against the same method with the exact entropy."""
    exact = Arm(method, alpha)
    ks = sorted({r.entropy_top_k for r in runs if r.entropy_top_k is not None
                 and Arm(method, alpha, r.entropy_top_k).matches(r)})
    return [(Arm(method, alpha, k), exact) for k in ks]


def health_summary(runs: list[RunEvidence]) -> dict:
    flagged = [r for r in runs if r.flagged]
    return {"rules": RULES, "n_runs": len(runs),
            "flagged": [{"run_id": r.run_id, "flags": list(r.health), "description": r.health_text}
                        for r in sorted(flagged, key=lambda r: r.run_id)]}


FAMILY_RULE = ("Bonferroni within each family (p times its size m, interval at confidence 1 - level/m): the "
               "study plan's primary comparison (its quantities) is one family; every other row is in the family "
               "of its quantity across the other pairs")
TOPK_FAMILY_RULE = ("Bonferroni within each quantity across the compared pairs (p times their number m, interval at "
                    "confidence 1 - level/m; no primary comparison)")
INFERENCE = {
    "model": "mean paired difference over seeds crossed with evaluation problems: Var(mean) = s2_seed/n_seeds + "
             "s2_problem/n_problems + s2_interaction/(n_seeds n_problems), components by the method of moments "
             "(negative ones set to 0); a per-run summary has the seed term only",
    "reference": "t on Satterthwaite degrees of freedom; the interval is the same t's",
    "warm_starts": "fewer than 3: fixed strata (seed spread within warm starts; the result is about these warm "
                   "starts); 3 or more: a random factor (the warm starts are the rows)",
    "mde": "the smallest true difference the same test detects with 80% power at level/m",
}
