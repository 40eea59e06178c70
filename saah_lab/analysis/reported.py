"""The paper's numbers, from their CSV transcription in ``results/paper_reported/``, as the same
:class:`~saah_lab.analysis.resultset.ResultSet` frames our runs give (per-checkpoint CIs, which the paper does not
tabulate, from :func:`~saah_lib.tasks.scoring.pass_at_1_ci` with ``N = 500``)."""

from __future__ import annotations

import io
import math
import re
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import pandas as pd

from saah_lab.analysis.groups import GROUP_KEYS, is_main_alpha, sort_groups
from saah_lab.analysis.quantities import number_or_nan
from saah_lab.analysis.resultset import ABLATION_COLUMNS, ABLATION_LABELS, DIAGNOSTIC_COLUMNS, ResultSet, in_group
from saah_lib.method.methods import MAIN_ALPHAS
from saah_lib.paths import repo_relative
from saah_lib.tasks.scoring import pass_at_1_ci

REPORTED_FILES = {
    "tab_main.csv": "tab:main",
    "tab_checkpoints_3b.csv": "tab:checkpoints_3b",
    "tab_checkpoints_1b.csv": "tab:checkpoints_1b",
    "tab_alpha_ablation.csv": "tab:alpha_ablation",
    "tab_sa_log_3b.csv": "tab:sa_log_3b",
    "tab_sa_log_1b.csv": "tab:sa_log_1b",
    "baselines.csv": "sec:setup + tab:main (Base rows)",
    "tab_hparams.csv": "tab:hparams",
    "text_setup.csv": "running text",
}

#: Evaluation-set size the paper states (used for CIs it does not tabulate).
REPORTED_N_EVAL = 500


def read_reported_csv(path: str | Path) -> pd.DataFrame:
    """Read one transcription CSV as strings (``#`` comment lines skipped, nothing turned into NaN)."""
    with open(path, encoding="utf-8") as fh:
        text = "".join(line for line in fh if not line.lstrip().startswith("#"))
    return pd.read_csv(io.StringIO(text), dtype=object, keep_default_na=False) if text.strip() else pd.DataFrame()


def _numeric(df: pd.DataFrame, cols: Iterable[str]) -> pd.DataFrame:
    df = df.copy()
    for c in cols:
        if c in df:
            df[c] = [number_or_nan(x) for x in df[c]]  # "" and "---" are NaN
    return df


def _wide_to_long(df: pd.DataFrame, id_cols: list[str]) -> pd.DataFrame:
    step_cols = [c for c in df.columns if re.fullmatch(r"\d+", str(c))]
    long = df.melt(id_vars=id_cols, value_vars=step_cols, var_name="step", value_name="pass_at_1")
    long["step"] = long["step"].astype(int)
    long = _numeric(long, ["pass_at_1"])
    return long[long["pass_at_1"].notna()]


def _table(d: Path, name: str, numeric: Iterable[str] = (), missing=None) -> pd.DataFrame | None:
    """One transcription CSV of ``d``, its ``numeric`` columns as floats; ``missing`` without the file."""
    return _numeric(read_reported_csv(d / name), numeric) if (d / name).is_file() else missing


def read_paper_reported(directory: Path) -> ResultSet:
    """The result set of the paper's reported numbers (see ``results/paper_reported/README.md``)."""
    d = Path(directory)
    if not (d / "tab_main.csv").is_file():
        raise FileNotFoundError(f"{d}/tab_main.csv not found: not a paper_reported folder")
    notes: dict[str, Any] = {"conflicts": []}
    summary = sort_groups(_table(d, "tab_main.csv", ["alpha", "steps", "final_pass_at_1", "final_ci95",
                                                     "peak_pass_at_1", "peak_ci95", "train_var", "mean_kl"])
                          .assign(n_seeds=1, complete=True, in_main=True))
    ablation_raw = _table(d, "tab_alpha_ablation.csv", missing=pd.DataFrame())
    logs = [_table(d, f, ["alpha", "step", "pass_at_1", *DIAGNOSTIC_COLUMNS])
            for f in ("tab_sa_log_3b.csv", "tab_sa_log_1b.csv") if (d / f).is_file()]
    diagnostics = sort_groups(pd.concat(logs, ignore_index=True), ["step"]).assign(n_seeds=1) if logs \
        else pd.DataFrame()
    # curves for figures: the sampled diagnostic steps only. The paper's 0.000 for w_- at all-positive steps is a
    # placeholder, not a weight, so it is dropped from the curves (kept in the table).
    curves = diagnostics.copy()
    if len(curves):
        curves.loc[curves["weight_neg_note"] == "all_positive", "weight_neg_mean"] = np.nan
    baselines = _table(d, "baselines.csv", ["pass_at_1", "ci95", "raw_pass_at_1", "adjustment_pp", "n"],
                       missing=pd.DataFrame(columns=["model_label", "pass_at_1", "ci95", "n"]))
    return ResultSet(source="paper_reported", summary=summary,
                     checkpoints=_reported_checkpoints(d, ablation_raw, notes),
                     ablation=_reported_ablation(ablation_raw, summary), diagnostics=diagnostics,
                     baselines=baselines.assign(kind="reported (adjusted)", name="zero-shot (paper)"), curves=curves,
                     hparams=_table(d, "tab_hparams.csv"), root=d, notes=notes)


def _reported_checkpoints(d: Path, ablation_raw: pd.DataFrame, notes: dict) -> pd.DataFrame:
    """The two checkpoint tables, then the ablation's extra rows; a step two tables give differently is noted in
    ``notes["conflicts"]`` and the first table's value kept."""
    tables = [(f, read_reported_csv(d / f)) for f in ("tab_checkpoints_3b.csv", "tab_checkpoints_1b.csv")
              if (d / f).is_file()]
    if len(ablation_raw):
        tables.append(("tab_alpha_ablation.csv", ablation_raw.drop(columns=["row_label", "peak", "final", "flag"])))
    frames = [_wide_to_long(table, GROUP_KEYS).assign(table=REPORTED_FILES[f]) for f, table in tables]
    ck = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=GROUP_KEYS + ["step", "pass_at_1"])
    ck = _numeric(ck, ["alpha"])
    ck["_a"] = ck["alpha"].round(6)
    for key, sub in ck.groupby(["model_label", "method", "_a", "step"]):
        if sub["pass_at_1"].nunique() > 1:
            notes["conflicts"].append({"key": key, "values": dict(zip(sub["table"], sub["pass_at_1"]))})
    ck = ck.drop_duplicates(["model_label", "method", "_a", "step"], keep="first").drop(columns="_a")
    ck["ci95"] = pass_at_1_ci(ck["pass_at_1"].to_numpy(), REPORTED_N_EVAL)
    ck["ci_source"] = "formula"
    ck["pass_at_1_std"] = np.nan
    ck["n_seeds"] = 1
    ck["in_main"] = [is_main_alpha(m, a, MAIN_ALPHAS) for m, a in zip(ck["method"], ck["alpha"])]
    return sort_groups(ck, ["step"])


def _reported_ablation(ablation_raw: pd.DataFrame, summary: pd.DataFrame) -> pd.DataFrame:
    """The ablation's entries (the SA reference's two table rows merged into one entry), each with its steps in
    tab:main, else 150 for a sweep run (sec:alpha_setup: every sweep run has 150 steps)."""
    if not len(ablation_raw):
        return pd.DataFrame()
    ab = _numeric(ablation_raw, ["alpha", "peak", "final"]).groupby(GROUP_KEYS, sort=False).agg(
        peak_pass_at_1=("peak", "first"), final_pass_at_1=("final", "first"),
        flag=("flag", lambda flags: ",".join(x for x in flags if x))).reset_index()

    def steps(key) -> float:
        found = summary.loc[in_group(summary, key), "steps"]
        value = float(found.iloc[0]) if len(found) else math.nan
        return 150.0 if key[1] == "ah" and math.isnan(value) else value

    partial = ab["flag"] == "partial"
    return ab.assign(label=ab["method"].map(ABLATION_LABELS).fillna(""),
                     steps=[steps(key) for key in zip(*(ab[k] for k in GROUP_KEYS))],
                     peak_pass_at_1_std=np.nan, final_pass_at_1_std=np.nan, n_seeds=1, partial=partial,
                     note=np.where(partial, "partial run (steps 30--60 only, per the paper's footnote)", ""),
                     ).reindex(columns=ABLATION_COLUMNS)


#: The paper's log that sets the CPU studies' discount level (:func:`negative_weight_target`).
DISCOUNT_LOG_FILE = "tab_sa_log_1b.csv"


def negative_weight_target(directory: Path, file: str = DISCOUNT_LOG_FILE) -> dict:
    """The mean ``weight_neg_mean`` over every row of the paper's 1.5B SA-AH-GRPO log that has one (a step without
    a negative rollout has none): the level the CPU studies' paper-matched alpha reproduces.  All rows, not the
    first: each is one step's handful of rollouts (0.14 at step 5, 0.81 at step 30) and the log has no trend."""
    path = Path(directory) / file
    if not path.is_file():
        raise FileNotFoundError(f"{path}: the paper's diagnostic log is missing (results/paper_reported)")
    rows = _logged_rows(path, "weight_neg_mean")
    if rows.empty or "step" not in rows:
        raise ValueError(f"{path}: no row has a weight_neg_mean and a step")
    values = [float(v) for v in rows["weight_neg_mean"]]
    return {"target": float(np.mean(values)), "file": repo_relative(path), "column": "weight_neg_mean",
            "steps": [int(s) for s in rows["step"]], "values": values}


def _logged_rows(path: Path, column: str) -> pd.DataFrame:
    """The rows of a paper log with a ``column`` value (none without the file or column); a ``weight_neg_mean`` at
    a step without a negative rollout (``weight_neg_note`` set) is the paper's placeholder, no weight."""
    log = _table(path.parent, path.name, ["step", column], missing=pd.DataFrame())
    if column not in log:
        return pd.DataFrame()
    rows = log[log[column].notna()]
    if column == "weight_neg_mean" and "weight_neg_note" in rows:
        rows = rows[rows["weight_neg_note"].fillna("").astype(str) == ""]
    return rows


def logged_range(directory: Path, column: str, file: str = DISCOUNT_LOG_FILE) -> dict | None:
    """The lowest and highest ``column`` of the paper's SA-AH-GRPO log, ``{"low", "high", "model", "steps"}``, or
    None when the file or column is missing."""
    rows = _logged_rows(Path(directory) / file, column)
    if rows.empty:
        return None
    return {"low": float(rows[column].min()), "high": float(rows[column].max()),
            "model": str(rows["model_label"].iloc[0]) if "model_label" in rows else "",
            "steps": (int(rows["step"].min()), int(rows["step"].max()))}
