"""Paired comparisons of methods from run folders, and a sentence that says what they show.

A method *arm* is a (method, alpha, entropy_top_k) setting, optionally of one
model.  Two arms are compared over the seeds both have, run for run:

* **Pass@1 at the final and at the peak checkpoint** -- per-problem
  correctness (``eval_samples/step_XXXX.jsonl``) paired by (seed, problem id):
  an exact McNemar test per seed and pooled over seeds, and a paired
  bootstrap interval for the pooled difference that resamples problems
  (:mod:`saah_lib.analysis.significance`).  Final and peak steps are those of the
  tables (:func:`saah_lib.analysis.summaries.final_and_peak`: checkpoints after step 0;
  the peak is the earliest best).  Each run's peak is picked by its own Pass@1
  on these same problems, so peak-versus-peak comparisons select on the
  outcome; the final checkpoint is the unbiased one.
* **Training-reward variance over the second half and mean KL** -- one number
  per run (:func:`saah_lib.analysis.summaries.training_variance`, :func:`mean_kl`),
  compared with the exact sign-flip test over seeds.

Each quantity is its own family: its tests across the compared pairs are
adjusted together with Holm's method (the paper makes one claim per
quantity).  :func:`evidence_sentence` calls a difference established only
when its Holm-adjusted p-value is below the level *and*, for Pass@1, its
bootstrap interval excludes zero (the pooled McNemar test treats the same
problem under different seeds as independent pairs; the interval does not).
"""

from __future__ import annotations

import logging
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from saah_lib.analysis.labels import method_label
from saah_lib.analysis.significance import (
    DEFAULT_RESAMPLES,
    holm,
    mcnemar_exact,
    mcnemar_pooled,
    paired_bootstrap,
    sign_flip_test,
)
from saah_lib.analysis.summaries import final_and_peak, mean_kl, training_variance
from saah_lib.jsonio import read_jsonl
from saah_lib.paths import repo_relative
from saah_lib.rundir import layout
from saah_lib.rundir.folder import RunDir
from saah_lib.rundir.reader import read_folders

log = logging.getLogger(__name__)

LEVEL = 0.05
CHECKPOINTS = ("final", "peak")
SUMMARIES = {"train_var": "training-reward variance", "mean_kl": "mean KL"}


# ---------------------------------------------------------------------------
# reading runs
# ---------------------------------------------------------------------------

@dataclass
class RunEvidence:
    """What one run folder contributes: its setting, checkpoints, per-problem correctness and summaries."""

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
    mean_kl: float

    def at(self, checkpoint: str) -> dict[str, bool]:
        if checkpoint not in CHECKPOINTS:
            raise ValueError(f"checkpoint must be one of {CHECKPOINTS}, got {checkpoint!r}")
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


def load_run_evidence(run_dir: str | Path) -> RunEvidence:
    """Read one run folder; raises ValueError naming the file when something needed is missing."""
    runlog = RunDir(Path(run_dir))
    cfg = runlog.read_config()
    if cfg is None:
        raise ValueError(f"{runlog.config_path}: missing")
    for key in ("method", "alpha", "seed"):
        if key not in cfg:
            raise ValueError(f"{runlog.config_path}: no field {key!r}")
    points = final_and_peak(pd.DataFrame(runlog.evals()))
    if math.isnan(points["final_step"]):
        raise ValueError(f"{runlog.eval_path}: no evaluation after step 0")
    final_step, peak_step = int(points["final_step"]), int(points["peak_step"])
    files = runlog.sample_files()
    correct = {}
    for step in {final_step, peak_step}:
        if step not in files:
            raise ValueError(f"{runlog.samples_path(step)}: missing (eval.jsonl lists step {step})")
        correct[step] = read_correctness(files[step])
    train_log = pd.DataFrame(runlog.train_log())
    top_k = cfg.get("entropy_top_k")
    return RunEvidence(
        run_id=str(cfg.get("run_id") or runlog.dir.name), model_label=str(cfg.get("model_label", "")),
        method=str(cfg["method"]), alpha=float(cfg["alpha"]), entropy_top_k=None if top_k is None else int(top_k),
        seed=int(cfg["seed"]), final_step=final_step, peak_step=peak_step, correct=correct,
        train_var=training_variance(train_log), mean_kl=mean_kl(train_log),
    )


def load_root_evidence(root: str | Path, tolerate_problems: bool = False,
                       left_out: list[str] | None = None) -> list[RunEvidence]:
    """Every run under ``<root>/runs/``, read strictly through :func:`saah_lib.rundir.reader.read_folders`
    (the project's one definition of a damaged or incomplete run: such a run raises
    :class:`~saah_lib.rundir.reader.DamagedResultsError` naming it). With ``tolerate_problems`` those
    runs are left out and named in ``left_out``, which the summary, table and sentence report."""
    every = layout.folders(root, layout.RUNS)
    if not every:
        return []
    folders, _ = read_folders(root, layout.RUNS, tolerate_problems)
    readable = {f.path.name for f in folders}
    unusable = sorted(p.name for p in every if p.name not in readable)
    out = []
    for folder in folders:
        try:
            if folder.problems:
                raise ValueError("; ".join(folder.problems))
            out.append(load_run_evidence(folder.path))
        except ValueError as err:
            if not tolerate_problems:
                raise
            log.warning("leaving out %s: %s", folder.path.name, err)
            unusable.append(folder.path.name)
    if left_out is not None:
        left_out.extend(sorted(unusable))
    return out


# ---------------------------------------------------------------------------
# arms and comparisons
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Arm:
    """One setting whose runs (one per seed) are compared with another's."""

    method: str
    alpha: float
    entropy_top_k: int | None = None
    model_label: str | None = None

    @property
    def label(self) -> str:
        text = method_label(self.method, self.alpha, show_grpo_alpha=False)
        if self.entropy_top_k is not None:
            text += f" top-{self.entropy_top_k}"
        return text

    def matches(self, run: RunEvidence) -> bool:
        return (run.method == self.method and math.isclose(run.alpha, self.alpha, abs_tol=1e-9)
                and run.entropy_top_k == self.entropy_top_k
                and (self.model_label is None or run.model_label == self.model_label))

    def runs_by_seed(self, runs: list[RunEvidence]) -> dict[int, RunEvidence]:
        found: dict[int, RunEvidence] = {}
        for run in runs:
            if self.matches(run):
                if run.seed in found:
                    raise ValueError(f"{self.label}: runs {found[run.seed].run_id!r} and {run.run_id!r} "
                                     f"share seed {run.seed}; give a model_label or remove one")
                found[run.seed] = run
        return dict(sorted(found.items()))


#: The paper's claims, A vs B: SA-AH-GRPO against each baseline, and AH against GRPO.
DEFAULT_PAIRS = (
    (Arm("sa", 0.5), Arm("grpo", 0.0)),
    (Arm("sa", 0.5), Arm("ah", 0.5)),
    (Arm("ah", 0.5), Arm("grpo", 0.0)),
)


@dataclass
class EvidenceRow:
    """One test of one quantity between two arms (a row of the evidence table)."""

    a: str
    b: str
    quantity: str  # "final Pass@1", "peak Pass@1", "training-reward variance", "mean KL"
    key: str  # final / peak / train_var / mean_kl
    test: str  # "McNemar" or "sign-flip"
    a_value: float
    b_value: float
    diff: float  # A - B
    ci_low: float  # bootstrap interval (NaN for per-seed summaries)
    ci_high: float
    p_value: float
    min_p: float  # smallest p-value the test can give with these data sizes
    n_seeds: int
    n_units: int  # McNemar: (seed, problem) pairs; sign-flip: seeds
    seeds_a_ahead: int  # seeds where A - B > 0
    seeds_b_ahead: int
    detail: dict = field(default_factory=dict)  # per-seed tests, discordant counts, resamples
    p_holm: float = float("nan")

    def to_dict(self) -> dict:
        return asdict(self)


def _paired_matrix(a_runs: dict[int, RunEvidence], b_runs: dict[int, RunEvidence], seeds: list[int],
                   checkpoint: str) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """``[n_seeds, n_problems]`` correctness of A and B, columns in one problem order."""
    ids = sorted(a_runs[seeds[0]].at(checkpoint))
    rows_a, rows_b = [], []
    for seed in seeds:
        for runs in (a_runs, b_runs):
            run = runs[seed]
            got = set(run.at(checkpoint))
            if got != set(ids):
                raise ValueError(f"run {run.run_id!r} evaluated other problems than {a_runs[seeds[0]].run_id!r} "
                                 f"({len(got ^ set(ids))} ids differ); pairing needs the same evaluation set")
        rows_a.append([a_runs[seed].at(checkpoint)[i] for i in ids])
        rows_b.append([b_runs[seed].at(checkpoint)[i] for i in ids])
    return np.array(rows_a, dtype=bool), np.array(rows_b, dtype=bool), ids


def compare_arms(a: Arm, b: Arm, runs: list[RunEvidence], *, n_resamples: int = DEFAULT_RESAMPLES,
                 seed: int = 0) -> list[EvidenceRow]:
    """Rows for final and peak Pass@1 and the per-seed summaries of A vs B at their common seeds."""
    a_runs, b_runs = a.runs_by_seed(runs), b.runs_by_seed(runs)
    seeds = sorted(set(a_runs) & set(b_runs))
    if not seeds:
        raise ValueError(f"no common seed for {a.label} (seeds {sorted(a_runs)}) and {b.label} (seeds {sorted(b_runs)})")
    rows = []
    for checkpoint in CHECKPOINTS:
        ma, mb, _ = _paired_matrix(a_runs, b_runs, seeds, checkpoint)
        per_seed = [mcnemar_exact(ma[i], mb[i]) for i in range(len(seeds))]
        pooled = mcnemar_pooled(per_seed)
        boot = paired_bootstrap(ma, mb, n_resamples=n_resamples, seed=seed)
        seed_diffs = ma.mean(axis=1) - mb.mean(axis=1)
        rows.append(EvidenceRow(
            a=a.label, b=b.label, quantity=f"{checkpoint} Pass@1", key=checkpoint, test="McNemar",
            a_value=float(ma.mean()), b_value=float(mb.mean()), diff=boot.diff, ci_low=boot.low, ci_high=boot.high,
            p_value=pooled.p_value, min_p=binomial_floor(pooled.discordant), n_seeds=len(seeds),
            n_units=pooled.n_pairs, seeds_a_ahead=int((seed_diffs > 0).sum()),
            seeds_b_ahead=int((seed_diffs < 0).sum()),
            detail={"seeds": seeds, "pooled": pooled.to_dict(), "per_seed": [r.to_dict() for r in per_seed],
                    "steps_a": [getattr(a_runs[s], f"{checkpoint}_step") for s in seeds],
                    "steps_b": [getattr(b_runs[s], f"{checkpoint}_step") for s in seeds],
                    "bootstrap": boot.to_dict()},
        ))
    for key, name in SUMMARIES.items():
        xa = [getattr(a_runs[s], key) for s in seeds]
        xb = [getattr(b_runs[s], key) for s in seeds]
        if not all(math.isfinite(v) for v in xa + xb):
            log.warning("%s vs %s: %s missing in some run; row left out", a.label, b.label, name)
            continue
        test = sign_flip_test(xa, xb)
        rows.append(EvidenceRow(
            a=a.label, b=b.label, quantity=name, key=key, test="sign-flip",
            a_value=float(np.mean(xa)), b_value=float(np.mean(xb)), diff=test.mean_diff,
            ci_low=float("nan"), ci_high=float("nan"), p_value=test.p_value, min_p=test.min_p,
            n_seeds=len(seeds), n_units=len(seeds), seeds_a_ahead=test.n_positive, seeds_b_ahead=test.n_negative,
            detail={"seeds": seeds, "a": xa, "b": xb, "sign_flip": test.to_dict()},
        ))
    return rows


def binomial_floor(discordant: int) -> float:
    """Smallest two-sided McNemar p-value with this many discordant pairs (all on one side)."""
    return min(1.0, 2.0 / 2**discordant) if discordant else 1.0


def adjust(rows: list[EvidenceRow]) -> list[EvidenceRow]:
    """Fill ``p_holm``: Holm's adjustment within each quantity (``key``), across the pairs compared."""
    for key in dict.fromkeys(r.key for r in rows):
        family = [r for r in rows if r.key == key]
        for row, p in zip(family, holm([r.p_value for r in family])):
            row.p_holm = p
    return rows


def family_size(rows: list[EvidenceRow], key: str) -> int:
    return sum(r.key == key for r in rows)


def established(row: EvidenceRow, level: float = LEVEL) -> bool:
    """Holm-adjusted p below ``level`` and, where there is an interval, zero outside it."""
    if not row.p_holm < level:
        return False
    return math.isnan(row.ci_low) or row.ci_low > 0 or row.ci_high < 0


def compare_pairs(runs: list[RunEvidence], pairs=DEFAULT_PAIRS, *, n_resamples: int = DEFAULT_RESAMPLES,
                  seed: int = 0, left_out: list[str] | None = None) -> list[EvidenceRow]:
    """All rows of the given pairs, Holm-adjusted together.

    A pair with no run of one of its arms, or no seed that both have, has nothing to compare and is
    skipped (logged).  A pair whose runs cannot be compared (other evaluation problems, two runs of one
    seed) is an error, or, given a ``left_out`` list (tolerant reading), named there as
    ``"<A> vs <B>: <why>"`` for the summary and sentence to report: runs that exist never disappear
    from the tests silently.
    """
    rows = []
    for a, b in pairs:
        try:
            if not set(a.runs_by_seed(runs)) & set(b.runs_by_seed(runs)):
                log.info("%s vs %s left out: no seed has runs of both", a.label, b.label)
                continue
            rows += compare_arms(a, b, runs, n_resamples=n_resamples, seed=seed)
        except ValueError as err:
            if left_out is None:
                raise ValueError(f"{a.label} vs {b.label} cannot be compared: {err}") from err
            left_out.append(f"{a.label} vs {b.label}: {err}")
    return adjust(rows)


# ---------------------------------------------------------------------------
# the sentence
# ---------------------------------------------------------------------------

def fmt_p(p: float) -> str:
    return "p < 0.001" if p < 0.001 else f"p = {p:.3f}"


def _scale(key: str) -> int:
    return 3 if key in CHECKPOINTS else 4


def _num(x: float, key: str, signed: bool = False) -> str:
    dp = _scale(key)
    if x != 0 and abs(x) < 0.5 * 10 ** (-dp):
        return f"{x:+.1e}" if signed else f"{x:.1e}"
    return f"{x:+.{dp}f}" if signed else f"{x:.{dp}f}"


def row_sentence(row: EvidenceRow, level: float = LEVEL) -> str:
    """One sentence per row; 'higher/lower' only for an established difference (:func:`established`)."""
    ci = ""
    if not math.isnan(row.ci_low):
        ci = f" (95% CI [{_num(row.ci_low, row.key, True)}, {_num(row.ci_high, row.key, True)}])"
    test = f"{row.test} {fmt_p(row.p_value)}, Holm-adjusted {fmt_p(row.p_holm)}"
    if established(row, level):
        word = "higher" if row.diff > 0 else "lower"
        text = f"{row.a} has {word} {row.quantity} than {row.b} by {_num(abs(row.diff), row.key)}{ci}; {test}"
    else:
        verdict = "not significant"
        if row.p_holm < level:
            verdict = "the test is significant but the problem-resampled interval includes 0, so not established"
        text = f"{row.quantity}, {row.a} minus {row.b}: {_num(row.diff, row.key, True)}{ci}; {test}; {verdict}"
    if row.seeds_a_ahead and row.seeds_b_ahead:
        text += f"; the seeds disagree on the direction ({row.seeds_a_ahead} of {row.n_seeds} favour {row.a})"
    return text + "."


def evidence_sentence(rows: list[EvidenceRow], level: float = LEVEL) -> str:
    """A paragraph from Holm-adjusted rows that claims no more than they show."""
    if not rows:
        return "No paired comparison could be made (no two methods share a seed)."
    if any(math.isnan(r.p_holm) for r in rows):
        raise ValueError("rows need Holm-adjusted p-values: call adjust(rows) first")
    pct = f"{level:.0%}"
    seeds = sorted({r.n_seeds for r in rows})
    seed_text = str(seeds[0]) if len(seeds) == 1 else f"{seeds[0]} to {seeds[-1]}"
    families = list(dict.fromkeys(r.key for r in rows))
    sizes = sorted({family_size(rows, k) for k in families})
    per = f"{sizes[0]}" if len(sizes) == 1 else "the"
    correction = (f"Holm correction over the {per} comparisons of each quantity" if max(sizes) > 1
                  else "Holm correction (one comparison per quantity)")
    found = [r for r in rows if established(r, level)]
    head = f"Over {len(rows)} paired tests with {seed_text} matched seed{'s' if seeds[-1] > 1 else ''}, "
    if not found:
        head += f"no difference is established at the {pct} level after {correction}."
    else:
        head += (f"{len(found)} of {len(rows)} differences {'is' if len(found) == 1 else 'are'} established "
                 f"at the {pct} level after {correction}: " + " ".join(row_sentence(r, level) for r in found))
        head += " No other difference is established."
    parts = [head]
    flagged = [r for r in rows if r.p_holm < level and not established(r, level)]
    for r in flagged:
        parts.append(row_sentence(r, level))
    floors = sorted({(r.n_seeds, r.min_p) for r in rows if r.test == "sign-flip" and r.min_p >= level})
    for n_seeds, floor in floors:
        parts.append(f"With {n_seeds} seed{'s' if n_seeds > 1 else ''} the sign-flip test cannot give p below 2/2^{n_seeds} = {floor:.4g}, "
                     f"so no per-seed summary (training-reward variance, mean KL) can reach the {pct} level "
                     "with these runs, however large its difference.")
    mixed = [r for r in rows if r.test == "McNemar" and r.seeds_a_ahead and r.seeds_b_ahead]
    if mixed:
        parts.append("Seeds disagree on the direction of "
                     + "; ".join(f"{r.a} vs {r.b} ({r.quantity})" for r in mixed) + ".")
    if any(r.test == "McNemar" for r in found):
        n_problems = sorted({r.n_units // r.n_seeds for r in found if r.test == "McNemar"})
        parts.append(f"The Pass@1 tests take the {'/'.join(map(str, n_problems))} evaluation problems as the "
                     "sampling unit: they show that these trained models differ on such problems, not that "
                     "another training seed would rank the methods the same way.")
    if any(r.key == "peak" for r in found):
        parts.append("Peak checkpoints are picked on the evaluation problems themselves, so a peak difference "
                     "is weaker evidence than a final one.")
    return " ".join(parts)


def topk_pairs(runs: list[RunEvidence], method: str = "sa", alpha: float = 0.5) -> list[tuple[Arm, Arm]]:
    """Each top-K training setting found in ``runs`` against the same method with the exact entropy."""
    exact = Arm(method, alpha)
    ks = sorted({r.entropy_top_k for r in runs if r.entropy_top_k is not None
                 and Arm(method, alpha, r.entropy_top_k).matches(r)})
    return [(Arm(method, alpha, k), exact) for k in ks]


def evidence_summary(root: str | Path, pairs=DEFAULT_PAIRS, *, n_resamples: int = DEFAULT_RESAMPLES,
                     seed: int = 0, level: float = LEVEL, tolerate_problems: bool = False) -> dict:
    """Everything about a results root as one JSON-ready dict: rows, sentence, settings.

    ``pairs="topk"``: every top-K training setting against the exact-entropy runs (:func:`topk_pairs`).
    """
    left_out: list[str] = []
    runs = load_root_evidence(root, tolerate_problems, left_out)
    if pairs == "topk":
        pairs = topk_pairs(runs)
    pairs_left_out: list[str] | None = [] if tolerate_problems else None
    rows = compare_pairs(runs, pairs, n_resamples=n_resamples, seed=seed, left_out=pairs_left_out)
    summary = {
        "root": repo_relative(root),
        "runs": [r.run_id for r in runs],
        "left_out": left_out,
        "level": level,
        "family": "Holm over every row",
        "bootstrap": {"n_resamples": n_resamples, "seed": seed, "confidence": 0.95, "resampled": "problems"},
        "rows": [r.to_dict() for r in rows],
        "sentence": evidence_sentence(rows, level) + (
            f" WARNING: {len(left_out)} damaged or incomplete run(s) were left out: {', '.join(left_out)}."
            if left_out else "") + (
            f" WARNING: {len(pairs_left_out)} comparison(s) could not be made: {'; '.join(pairs_left_out)}."
            if pairs_left_out else ""),
    }
    if pairs_left_out:  # only then: the committed summaries keep their keys
        summary["pairs_left_out"] = pairs_left_out
    return summary
