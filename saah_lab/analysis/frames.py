"""Run folders (:func:`saah_lab.rundir.reader.read_folders`) as tidy DataFrames: one row per run, per evaluation,
per logged step; every summary column is one of :mod:`saah_lab.analysis.summaries`."""

from __future__ import annotations

import functools
import math
from typing import Iterable

import numpy as np
import pandas as pd

from saah_lab.analysis.quantities import number_or_nan
from saah_lab.analysis.summaries import final_and_peak, mean_kl, ordered_by_step, pass_at_1_ci, training_variance
from saah_lab.rundir.reader import META_COLUMNS, RunFolder
from saah_lib.rundir.layout import EVAL_KEYS, TRAIN_LOG_KEYS


def _frame(records: list[dict], keys: Iterable[str]) -> pd.DataFrame:
    df = pd.DataFrame.from_records(records)
    # a column already numeric is what to_numeric would return: converting only the others is what keeps a
    # root of a thousand runs quick to read
    for k in keys:
        if k in df and not pd.api.types.is_numeric_dtype(df[k]):
            df[k] = pd.to_numeric(df[k], errors="coerce")
    missing = [k for k in keys if k not in df]
    return df.assign(**dict.fromkeys(missing, np.nan)) if missing else df


def _made_once(make):
    """``make(folder)`` made once per folder (kept in ``folder.frames``); each caller gets its own copy to change."""
    @functools.wraps(make)
    def once(folder: RunFolder) -> pd.DataFrame:
        if make.__name__ not in folder.frames:
            folder.frames[make.__name__] = make(folder)
        return folder.frames[make.__name__].copy()
    return once


@_made_once
def evals_frame(folder: RunFolder) -> pd.DataFrame:
    """A run's evaluations by step; a missing ``ci95`` is filled from ``pass_at_1`` and ``n``."""
    df = _frame(folder.evals, EVAL_KEYS)
    if df.empty:
        return pd.DataFrame(columns=list(EVAL_KEYS))
    df = ordered_by_step(df)
    return df.assign(ci95=df["ci95"].fillna(pd.Series(pass_at_1_ci(df["pass_at_1"], df["n"]), index=df.index)))


@_made_once
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
        if not df.empty:
            frames.append(df.assign(**_meta(folder)))
    meta = list(META_COLUMNS)
    if not frames:
        return pd.DataFrame(columns=meta + list(keys))
    out = pd.concat(frames, ignore_index=True)
    return out[meta + [c for c in out.columns if c not in meta]]


def runs_frame(folders: list[RunFolder]) -> pd.DataFrame:
    """One row per run folder: its (flattened) config, :func:`~saah_lab.analysis.summaries.final_and_peak`,
    the step-0 Pass@1, ``train_var``, ``mean_kl``, counts of logged steps and evaluations, ``complete``,
    ``damaged``, ``problems`` and ``compile_fallback`` (why the compiled rollout fell back to ``hf``)."""
    rows = []
    for folder in folders:
        evals, tlog = evals_frame(folder), train_log_frame(folder)
        step0 = evals.loc[evals["step"] == 0, "pass_at_1"]
        rows.append({**folder.config, "alpha": number_or_nan(folder.config.get("alpha")), **final_and_peak(evals),
                     "step0_pass_at_1": float(step0.iloc[-1]) if len(step0) else float("nan"),
                     "train_var": training_variance(tlog), "mean_kl": mean_kl(tlog), "n_steps_logged": int(len(tlog)),
                     "last_logged_step": float(tlog["step"].max()) if len(tlog) else float("nan"),
                     "n_evals": int(len(evals)), "complete": not folder.incomplete, "damaged": bool(folder.damage),
                     "problems": "; ".join(folder.problems), "compile_fallback": folder.compile_fallback})
    cols = ["run_id", "model_label", "method", "alpha", "max_steps", "seed"]
    if not rows:
        return pd.DataFrame(columns=cols + ["final_pass_at_1", "final_ci95", "final_step", "peak_pass_at_1",
                                            "peak_ci95", "peak_step", "train_var", "mean_kl", "n_steps_logged",
                                            "complete", "damaged", "problems", "compile_fallback"])
    df = pd.DataFrame.from_records(rows)
    return df[cols + [c for c in df.columns if c not in cols]]


def evals_long(folders: list[RunFolder]) -> pd.DataFrame:
    """All evaluations of the folders, one row per (run_id, step), with run metadata."""
    return _long(folders, evals_frame, EVAL_KEYS)


def train_logs_long(folders: list[RunFolder]) -> pd.DataFrame:
    """All training-log lines of the folders, one row per (run_id, step), with run metadata."""
    return _long(folders, train_log_frame, TRAIN_LOG_KEYS)


def baselines_frame(folders: list[RunFolder]) -> pd.DataFrame:
    """One row per evaluation in ``baselines/<name>/eval.jsonl``, with the folder's name and config fields."""
    rows = []
    for folder in folders:
        for rec in folder.evals:
            row = {**{k: v for k, v in folder.config.items() if k not in EVAL_KEYS}, "name": folder.path.name,
                   **{k: number_or_nan(rec.get(k)) for k in EVAL_KEYS}}
            if math.isnan(row["ci95"]) and not math.isnan(row["n"]):
                row["ci95"] = pass_at_1_ci(row["pass_at_1"], row["n"])
            rows.append(row)
    cols = ["name", "model_label", "profile", *EVAL_KEYS]
    if not rows:
        return pd.DataFrame(columns=cols)
    df = pd.DataFrame.from_records(rows)
    return df.reindex(columns=cols + [c for c in df.columns if c not in cols])


def token_entropies_frame(folders: list[RunFolder]) -> pd.DataFrame:
    """Rows of the optional ``token_entropies.jsonl``: run metadata, ``step, advantage, entropy_norm`` (a list)."""
    rows = [{**_meta(folder), "step": float(rec["step"]), "advantage": float(rec["advantage"]),
             "entropy_norm": [float(x) for x in rec["entropy_norm"]]}
            for folder in folders for rec in folder.token_entropies or ()]
    cols = ["run_id", "model_label", "method", "alpha", "step", "advantage", "entropy_norm"]
    return pd.DataFrame.from_records(rows) if rows else pd.DataFrame(columns=cols)
