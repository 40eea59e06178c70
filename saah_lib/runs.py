"""Reading a results root (layout in ``docs/results_layout.md``) into tidy DataFrames.

Finished runs are read strictly.  Every problem in a run or baseline folder
becomes one message naming the file (and line, for logs):

* ``config.json`` missing, not valid JSON, not an object, or without a
  method, alpha, steps or model (a run that cannot be placed in its group);
* a log line that is not valid JSON (the last line included: a finished run
  has no torn tail), not an object, or without an integer ``step``;
* a metric that is not a number.  ``null`` is allowed in the training log
  (TRL logs nothing for some quantities at some steps, e.g. ``weight_neg_mean``
  when no rollout had a negative advantage); an evaluation needs a numeric
  ``pass_at_1``;
* an incomplete run: not trained to its ``steps`` or not evaluated at that
  step (:func:`saah_lib.runlog.trained_and_evaluated`, the one definition of a
  complete run, also behind ``RunLog.is_complete``).

By default a problem raises :class:`DamagedResultsError` listing every
problem found.  With ``tolerate_problems=True`` the results are read anyway:
a folder whose config cannot be read is *excluded*; any other run is kept with
its valid lines and *flagged* (``damaged`` / ``complete`` columns), and
:attr:`RunFolder.problems` says why.  :class:`saah_lib.resultset.ResultSet`
carries every message in ``warnings`` so the tables and figures can say so.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import pandas as pd

from saah_lib.labels import number_or_nan
from saah_lib.runlog import EVAL_KEYS, TRAIN_LOG_KEYS, scan_jsonl, trained_and_evaluated
from saah_lib.summaries import final_and_peak, mean_kl, ordered_by_step, pass_at_1_ci, training_variance

#: Run metadata merged into every long table.
META_COLUMNS = ("run_id", "model_label", "method", "alpha", "seed", "steps", "eval_every", "profile")


class DamagedResultsError(ValueError):
    """Results that cannot be read as they are; the message lists each problem by file and line."""


@dataclass
class RunFolder:
    """One ``runs/<run_id>/`` or ``baselines/<name>/`` folder as read from disk."""

    path: Path
    config: dict | None  # flattened config.json; None when it cannot be read (the folder is excluded)
    evals: list[dict] = field(default_factory=list)
    train_log: list[dict] = field(default_factory=list)
    token_entropies: list[dict] = field(default_factory=list)
    damage: list[str] = field(default_factory=list)  # unreadable config, bad lines, non-numeric metrics
    incomplete: str = ""  # why the run is not complete ("" when it is)

    @property
    def problems(self) -> list[str]:
        return self.damage + ([self.incomplete] if self.incomplete else [])

    @property
    def excluded(self) -> bool:
        return self.config is None


# ---------------------------------------------------------------------------
# one file
# ---------------------------------------------------------------------------

def flatten_config(cfg: dict, prefix: str = "") -> dict[str, Any]:
    """Flatten nested dicts with dotted keys (``data.train_sha256``).

    List-valued fields (e.g. ``data.train_ids``) are replaced by their length
    under ``<key>.len`` so that a run is one flat row.
    """
    out: dict[str, Any] = {}
    for key, value in cfg.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten_config(value, prefix=name + "."))
        elif isinstance(value, (list, tuple)):
            out[name + ".len"] = len(value)
        else:
            out[name] = value
    return out


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def read_config(path: Path, required: Iterable[str] = ("method", "alpha", "steps")) -> tuple[dict | None, list[str]]:
    """A folder's ``config.json``, flattened, or None and the reason it cannot be used."""
    if not path.is_file():
        return None, [f"{path}: missing"]
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        return None, [f"{path}: line {exc.lineno}: not valid JSON ({exc.msg})"]
    if not isinstance(data, dict):
        return None, [f"{path}: not a JSON object"]
    flat = flatten_config(data)
    if flat.get("model_label") in (None, "") and flat.get("model_name"):
        flat["model_label"] = str(flat["model_name"]).split("/")[-1]
    missing = [k for k in ("model_label", *required) if flat.get(k) in (None, "")]
    if missing:
        return None, [f"{path}: no {', '.join(missing)}"]
    if "alpha" in required and not _is_number(flat["alpha"]):
        return None, [f"{path}: alpha is {flat['alpha']!r}, not a number"]
    if "steps" in required and (not isinstance(flat["steps"], int) or isinstance(flat["steps"], bool)):
        return None, [f"{path}: steps is {flat['steps']!r}, not an integer"]
    return flat, []


def read_log(path: Path, numeric: Iterable[str], required: Iterable[str] = ()) -> tuple[list[dict], list[str]]:
    """The valid lines of a finished log and one message per bad line (the line is left out).

    A valid line is a JSON object with an integer ``step`` whose ``numeric``
    keys hold numbers or null, and whose ``required`` keys hold numbers.
    """
    records, bad_json = scan_jsonl(path)
    messages = [f"{path}: line {i}: {problem}" for i, problem in bad_json]
    good = []
    for i, rec in records:
        if not isinstance(rec, dict):
            messages.append(f"{path}: line {i}: not a JSON object")
            continue
        if not isinstance(rec.get("step"), int) or isinstance(rec.get("step"), bool):
            messages.append(f"{path}: line {i}: step is {rec.get('step')!r}, not an integer")
            continue
        bad = [k for k in numeric if k in rec and rec[k] is not None and not _is_number(rec[k])]
        bad += [k for k in required if k not in bad and not _is_number(rec.get(k))]
        if bad:
            messages.append(f"{path}: line {i}: " + ", ".join(f"{k} is {rec.get(k)!r}, not a number" for k in bad))
            continue
        good.append(rec)
    return good, messages


def _token_entropy_lines(path: Path) -> tuple[list[dict], list[str]]:
    records, messages = read_log(path, numeric=(), required=("advantage",))
    good = []
    for rec in records:
        h = rec.get("entropy_norm")
        if isinstance(h, list) and h and all(_is_number(x) for x in h):
            good.append(rec)
        else:
            messages.append(f"{path}: step {rec['step']}: entropy_norm is not a list of numbers")
    return good, messages


# ---------------------------------------------------------------------------
# one folder, one root
# ---------------------------------------------------------------------------

def read_run_folder(run_dir: Path) -> RunFolder:
    """Everything in one run folder, with every problem recorded (never raises on bad content)."""
    cfg, damage = read_config(run_dir / "config.json")
    folder = RunFolder(run_dir, None, damage=damage)
    if cfg is None:
        return folder
    cfg["run_id"] = cfg.get("run_id") or run_dir.name
    for key in META_COLUMNS:
        cfg.setdefault(key, None)
    folder.config = cfg
    folder.evals, bad_evals = read_log(run_dir / "eval.jsonl", EVAL_KEYS[2:], required=("pass_at_1",))
    folder.train_log, bad_steps = read_log(run_dir / "train_log.jsonl", TRAIN_LOG_KEYS[1:])
    folder.token_entropies, bad_h = _token_entropy_lines(run_dir / "token_entropies.jsonl")
    folder.damage += bad_evals + bad_steps + bad_h
    logged = [r["step"] for r in folder.train_log]
    evaluated = [r["step"] for r in folder.evals]
    steps = cfg["steps"]
    if not trained_and_evaluated(logged, evaluated, steps):
        reached = f"trained to step {max(logged)}" if logged else "no training step logged"
        evaluated_last = "evaluated" if steps in evaluated else "not evaluated"
        folder.incomplete = f"{run_dir}: incomplete: {reached} of {steps}, {evaluated_last} at step {steps}"
    return folder


def read_baseline_folder(folder_dir: Path) -> RunFolder:
    """A ``baselines/<name>/`` folder: its config and evaluations, with every problem recorded."""
    cfg, damage = read_config(folder_dir / "config.json", required=())
    folder = RunFolder(folder_dir, cfg, damage=damage)
    if cfg is not None:
        folder.evals, bad = read_log(folder_dir / "eval.jsonl", EVAL_KEYS[2:], required=("pass_at_1",))
        folder.damage += bad
    return folder


def _subfolders(path: Path) -> list[Path]:
    return sorted(p for p in path.iterdir() if p.is_dir()) if path.is_dir() else []


def read_folders(root: str | Path, kind: str = "runs",
                 tolerate_problems: bool = False) -> tuple[list[RunFolder], list[str]]:
    """The folders under ``<root>/runs`` (``kind="runs"``) or ``<root>/baselines``, and every problem.

    Raises :class:`DamagedResultsError` listing every problem, unless
    ``tolerate_problems``: then the usable folders (flagged where damaged or
    incomplete) come back with one message per problem, excluded folders included.
    """
    reader = read_run_folder if kind == "runs" else read_baseline_folder
    everything = [reader(p) for p in _subfolders(Path(root) / kind)]
    problems = [m for f in everything for m in f.problems]
    if problems and not tolerate_problems:
        listing = "\n".join(f"  - {m}" for m in problems)
        raise DamagedResultsError(
            f"{len(problems)} problem(s) in the {kind} under {root} (tolerate_problems=True reads them anyway: "
            f"damaged and incomplete runs flagged in every output, runs without a usable config left out):"
            f"\n{listing}")
    excluded = [f"{f.path}: excluded ({'; '.join(f.damage)})" for f in everything if f.excluded]
    flagged = [m for f in everything if not f.excluded for m in f.problems]
    return [f for f in everything if not f.excluded], flagged + excluded


# ---------------------------------------------------------------------------
# DataFrames
# ---------------------------------------------------------------------------

def _frame(records: list[dict], keys: Iterable[str]) -> pd.DataFrame:
    df = pd.DataFrame.from_records(records)
    for k in keys:
        df[k] = pd.to_numeric(df[k], errors="coerce") if k in df else np.nan
    return df


def evals_frame(folder: RunFolder) -> pd.DataFrame:
    """A run's evaluations by step; a missing ``ci95`` is filled from ``pass_at_1`` and ``n``."""
    df = _frame(folder.evals, EVAL_KEYS)
    if df.empty:
        return pd.DataFrame(columns=list(EVAL_KEYS))
    df = df.sort_values("step", kind="stable").drop_duplicates("step", keep="last")
    missing = df["ci95"].isna() & df["n"].notna() & df["pass_at_1"].notna()
    if missing.any():
        df.loc[missing, "ci95"] = pass_at_1_ci(df.loc[missing, "pass_at_1"].to_numpy(), df.loc[missing, "n"].to_numpy())
    return df.reset_index(drop=True)


def train_log_frame(folder: RunFolder) -> pd.DataFrame:
    """A run's training log by step (a step logged twice keeps its last line)."""
    df = _frame(folder.train_log, TRAIN_LOG_KEYS)
    if df.empty:
        return pd.DataFrame(columns=list(TRAIN_LOG_KEYS))
    return ordered_by_step(df)


def _meta(folder: RunFolder) -> dict:
    meta = {k: folder.config.get(k) for k in META_COLUMNS}
    meta["alpha"] = number_or_nan(meta["alpha"])
    return meta


def _long(folders: list[RunFolder], frame, keys) -> pd.DataFrame:
    frames = []
    for folder in folders:
        df = frame(folder)
        if df.empty:
            continue
        for k, v in _meta(folder).items():
            df[k] = v
        frames.append(df)
    meta = list(META_COLUMNS)
    if not frames:
        return pd.DataFrame(columns=meta + list(keys))
    out = pd.concat(frames, ignore_index=True)
    return out[meta + [c for c in out.columns if c not in meta]]


def load_runs(root: str | Path, tolerate_problems: bool = False) -> pd.DataFrame:
    """One row per usable ``runs/<run_id>/`` under ``root`` (see the module docstring for strictness).

    Columns: every config field (flattened, see :func:`flatten_config`) plus the
    summaries ``final_pass_at_1, final_ci95, final_step, peak_pass_at_1,
    peak_ci95, peak_step`` (:func:`~saah_lib.summaries.final_and_peak`),
    ``step0_pass_at_1`` (the evaluation before training, if any), ``train_var``
    (:func:`~saah_lib.summaries.training_variance`), ``mean_kl``,
    ``n_steps_logged``, ``last_logged_step``, ``n_evals``, ``complete``
    (trained to ``steps`` and evaluated there), ``damaged`` (some line or value
    could not be used) and ``problems`` (the messages, ``; ``-separated).
    """
    return runs_frame(read_folders(root, "runs", tolerate_problems)[0])


def runs_frame(folders: list[RunFolder]) -> pd.DataFrame:
    """The rows of :func:`load_runs` for folders already read."""
    rows = []
    for folder in folders:
        evals, tlog = evals_frame(folder), train_log_frame(folder)
        row = dict(folder.config)
        row["alpha"] = number_or_nan(row.get("alpha"))
        row.update(final_and_peak(evals))
        step0 = evals.loc[evals["step"] == 0, "pass_at_1"]
        row["step0_pass_at_1"] = float(step0.iloc[-1]) if len(step0) else float("nan")
        row["train_var"] = training_variance(tlog)
        row["mean_kl"] = mean_kl(tlog)
        row["n_steps_logged"] = int(len(tlog))
        row["last_logged_step"] = float(tlog["step"].max()) if len(tlog) else float("nan")
        row["n_evals"] = int(len(evals))
        row["complete"] = not folder.incomplete
        row["damaged"] = bool(folder.damage)
        row["problems"] = "; ".join(folder.problems)
        rows.append(row)
    cols = ["run_id", "model_label", "method", "alpha", "steps", "seed"]
    if not rows:
        return pd.DataFrame(columns=cols + ["final_pass_at_1", "final_ci95", "final_step", "peak_pass_at_1",
                                            "peak_ci95", "peak_step", "train_var", "mean_kl", "n_steps_logged",
                                            "complete", "damaged", "problems"])
    df = pd.DataFrame.from_records(rows)
    return df[cols + [c for c in df.columns if c not in cols]]


def evals_long(folders: list[RunFolder]) -> pd.DataFrame:
    """All evaluations of the folders, one row per (run_id, step), with run metadata."""
    return _long(folders, evals_frame, EVAL_KEYS)


def train_logs_long(folders: list[RunFolder]) -> pd.DataFrame:
    """All training-log lines of the folders, one row per (run_id, step), with run metadata."""
    return _long(folders, train_log_frame, TRAIN_LOG_KEYS)


def load_evals(root: str | Path, tolerate_problems: bool = False) -> pd.DataFrame:
    """All evaluations of all runs under ``root`` (:func:`evals_long`)."""
    return evals_long(read_folders(root, "runs", tolerate_problems)[0])


def load_train_logs(root: str | Path, tolerate_problems: bool = False) -> pd.DataFrame:
    """All training-log lines of all runs under ``root`` (:func:`train_logs_long`)."""
    return train_logs_long(read_folders(root, "runs", tolerate_problems)[0])


def baselines_frame(folders: list[RunFolder]) -> pd.DataFrame:
    """One row per evaluation in ``baselines/<name>/eval.jsonl``.

    Columns: ``name``, ``model_label``, ``profile``, the eval keys and the
    remaining (flattened) config fields.
    """
    rows = []
    for folder in folders:
        for rec in folder.evals:
            row = {k: v for k, v in folder.config.items() if k not in EVAL_KEYS}
            row["name"] = folder.path.name
            for k in EVAL_KEYS:
                row[k] = number_or_nan(rec.get(k))
            if math.isnan(row["ci95"]) and not math.isnan(row["n"]):
                row["ci95"] = pass_at_1_ci(row["pass_at_1"], row["n"])
            rows.append(row)
    cols = ["name", "model_label", "profile", *EVAL_KEYS]
    if not rows:
        return pd.DataFrame(columns=cols)
    df = pd.DataFrame.from_records(rows)
    for c in cols:
        if c not in df:
            df[c] = None
    return df[cols + [c for c in df.columns if c not in cols]]


def load_baselines(root: str | Path, tolerate_problems: bool = False) -> pd.DataFrame:
    """The evaluations under ``<root>/baselines`` (:func:`baselines_frame`)."""
    return baselines_frame(read_folders(root, "baselines", tolerate_problems)[0])


def token_entropies_frame(folders: list[RunFolder]) -> pd.DataFrame:
    """Rows of ``runs/<run_id>/token_entropies.jsonl`` (optional trainer output).

    Columns ``run_id, model_label, method, alpha, step, advantage, entropy_norm``
    (the last a list of per-token normalised entropies).  Empty if no run has
    the file.
    """
    rows = []
    for folder in folders:
        if not folder.token_entropies:
            continue
        meta = _meta(folder)
        for rec in folder.token_entropies:
            rows.append({**meta, "step": float(rec["step"]), "advantage": float(rec["advantage"]),
                         "entropy_norm": [float(x) for x in rec["entropy_norm"]]})
    cols = ["run_id", "model_label", "method", "alpha", "step", "advantage", "entropy_norm"]
    return pd.DataFrame.from_records(rows) if rows else pd.DataFrame(columns=cols)


def load_token_entropies(root: str | Path, run_id: str | None = None,
                         tolerate_problems: bool = False) -> pd.DataFrame:
    """The logged per-token entropies under ``root`` (:func:`token_entropies_frame`), optionally of one run."""
    folders = read_folders(root, "runs", tolerate_problems)[0]
    return token_entropies_frame([f for f in folders if run_id is None or f.path.name == run_id])
