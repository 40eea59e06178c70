"""Read run folders (or the paper's reported numbers) into tidy DataFrames.

This module is the single place where the *summaries* used by tables and
figures are defined.  Every summary is a small, documented function so that a
reader can check what a number in the generated report means:

``pass_at_1_ci(p, n)``
    Half-width of the normal-approximation 95% binomial interval,
    ``1.96 * sqrt(p * (1 - p) / n)``.
``final_and_peak(evals)``
    Final and peak Pass@1 of one run over its *training checkpoints*
    (evaluations with ``step > 0``; step 0 is the untouched model and is
    reported separately as the baseline).
``training_variance(train_log)``
    Sample variance (``ddof=1``) of the per-step ``reward_mean`` over the
    second half of the logged steps.
``mean_kl(train_log)``
    Mean of the per-step ``kl`` over all logged steps.

Two sources feed the same :class:`ResultSet`:

* :meth:`ResultSet.from_runs` -- a results root written by our trainer (layout in
  ``docs/results_layout.md``); several seeds of one ``(model_label, method,
  alpha)`` are aggregated into mean, sample standard deviation and seed count.
* :meth:`ResultSet.from_paper_reported` -- the CSV transcription of the paper's
  tables in ``results/paper_reported/``.

Missing data stays missing (NaN); nothing here interpolates or fills values.
"""

from __future__ import annotations

import json
import logging
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import pandas as pd

from saah_lib.runlog import read_jsonl as _read_jsonl

log = logging.getLogger(__name__)

#: Method identifiers used in ``config.json`` and their display names.
METHOD_LABELS = {
    "base": "Base (zero-shot)",
    "grpo": "GRPO",
    "ah": "AH-GRPO",
    "sa": "SA-AH-GRPO",
}
METHOD_ORDER = ("base", "grpo", "ah", "sa")

#: The alpha of each method in the paper's main comparison (tab:main).  Other
#: alphas of the same method are treated as ablation runs.
MAIN_ALPHAS = {"grpo": 0.0, "ah": 0.5, "sa": 0.5}

#: Keys of ``train_log.jsonl`` (docs/results_layout.md).
TRAIN_LOG_KEYS = (
    "step", "reward_mean", "reward_std", "reward_correct", "reward_format",
    "reward_present", "reward_steps", "kl", "entropy_norm", "weight_mean",
    "weight_neg_mean", "neg_frac", "completion_length", "step_time", "loss",
    "learning_rate", "grad_norm",
)
EVAL_KEYS = ("step", "pass_at_1", "ci95", "n", "n_correct")

#: Columns of the per-step diagnostic tables (tab:sa_log_*).
DIAGNOSTIC_COLUMNS = (
    "reward_mean", "reward_std", "kl", "entropy_norm", "weight_mean",
    "weight_neg_mean", "neg_frac", "completion_length",
)

#: Run metadata merged into every long table.
META_COLUMNS = ("run_id", "model_label", "method", "alpha", "seed", "steps", "eval_every", "profile")

GROUP_KEYS = ["model_label", "method", "alpha"]


# ---------------------------------------------------------------------------
# small helpers
# ---------------------------------------------------------------------------

def read_jsonl(path: str | Path) -> list[dict]:
    """Records of a JSON-lines file that may still be appended to (see :func:`saah_lib.runlog.read_jsonl`)."""
    return [r for r in _read_jsonl(Path(path), strict=False) if isinstance(r, dict)]


def _read_json(path: Path) -> dict | None:
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
        return data if isinstance(data, dict) else None
    except (OSError, json.JSONDecodeError) as exc:
        log.warning("cannot read %s: %s", path, exc)
        return None


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


def model_short(label: Any) -> str:
    """Short model name for tables: ``Qwen2.5-1.5B-Instruct`` -> ``1.5B``.

    Labels without a parameter count (``tiny``) are returned unchanged.
    """
    s = str(label)
    m = re.search(r"(\d+(?:\.\d+)?)\s*([BM])\b", s, flags=re.IGNORECASE)
    return f"{m.group(1)}{m.group(2).upper()}" if m else s


def model_size(label: Any) -> float:
    """Parameter count parsed from a model label (``nan`` if none)."""
    s = str(label)
    m = re.search(r"(\d+(?:\.\d+)?)\s*([BM])\b", s, flags=re.IGNORECASE)
    if not m:
        return float("nan")
    return float(m.group(1)) * (1e9 if m.group(2).upper() == "B" else 1e6)


def model_order(labels: Iterable[Any]) -> list:
    """Models ordered largest first (as in the paper), unparseable labels last."""
    uniq = list(dict.fromkeys(labels))
    return sorted(uniq, key=lambda x: (math.isnan(model_size(x)), -np.nan_to_num(model_size(x)), str(x)))


def slug(label: Any) -> str:
    """File-name friendly model label: ``1.5B`` -> ``1p5b``."""
    s = model_short(label).lower().replace(".", "p")
    return re.sub(r"[^a-z0-9]+", "-", s).strip("-") or "model"


def _num(x: Any) -> float:
    """Float or NaN (accepts None, strings, '---')."""
    if x is None:
        return float("nan")
    if isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool):
        return float(x)
    try:
        return float(str(x).strip())
    except ValueError:
        return float("nan")


# ---------------------------------------------------------------------------
# the paper's summaries
# ---------------------------------------------------------------------------

def pass_at_1_ci(p, n):
    """Half-width of the 95% normal-approximation binomial interval.

    ``CI95 = 1.96 * sqrt(p * (1 - p) / n)`` (the paper's evaluation protocol).
    Works on scalars and arrays; ``n <= 0`` or missing values give NaN.
    """
    p_arr = np.asarray(p, dtype=float)
    n_arr = np.asarray(n, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        ci = 1.96 * np.sqrt(p_arr * (1.0 - p_arr) / n_arr)
    ci = np.where(n_arr > 0, ci, np.nan)
    return float(ci) if np.ndim(ci) == 0 else ci


def final_and_peak(evals: pd.DataFrame) -> dict[str, float]:
    """Final and peak Pass@1 of one run.

    ``evals`` has columns ``step``, ``pass_at_1`` and optionally ``ci95``/``n``.
    Only *training checkpoints* count (``step > 0``): step 0 is the model
    before any update, i.e. the baseline, and is neither a final nor a peak
    candidate.  Rows with a missing ``pass_at_1`` are ignored.

    * final = the evaluation at the largest evaluated step;
    * peak  = the maximum Pass@1 over those checkpoints; on ties the *earliest*
      step is reported (the paper quotes SA-AH-GRPO 3B's peak 0.858 at step 30
      although 0.858 recurs at step 90).

    The CI of each is the logged ``ci95`` if present, else computed from ``n``.
    Returns a dict with ``final_pass_at_1, final_ci95, final_step,
    peak_pass_at_1, peak_ci95, peak_step`` (NaN when there is no checkpoint).
    """
    out = {k: float("nan") for k in (
        "final_pass_at_1", "final_ci95", "final_step", "peak_pass_at_1", "peak_ci95", "peak_step")}
    if evals is None or len(evals) == 0 or "pass_at_1" not in evals:
        return out
    df = evals.copy()
    df["step"] = pd.to_numeric(df["step"], errors="coerce")
    df["pass_at_1"] = pd.to_numeric(df["pass_at_1"], errors="coerce")
    df = df[(df["step"] > 0) & df["pass_at_1"].notna()].sort_values("step", kind="stable")
    if df.empty:
        return out
    df = df.drop_duplicates("step", keep="last")
    ci = pd.to_numeric(df["ci95"], errors="coerce") if "ci95" in df else pd.Series(np.nan, index=df.index)
    if "n" in df:
        computed = pd.Series(pass_at_1_ci(df["pass_at_1"].to_numpy(), pd.to_numeric(df["n"], errors="coerce").to_numpy()),
                             index=df.index)
        ci = ci.fillna(computed)
    last = df.index[-1]
    peak = df["pass_at_1"].idxmax()  # first occurrence of the maximum = earliest step
    out.update(
        final_pass_at_1=float(df.at[last, "pass_at_1"]), final_ci95=float(ci.at[last]),
        final_step=float(df.at[last, "step"]),
        peak_pass_at_1=float(df.at[peak, "pass_at_1"]), peak_ci95=float(ci.at[peak]),
        peak_step=float(df.at[peak, "step"]),
    )
    return out


def _ordered_log(train_log: pd.DataFrame) -> pd.DataFrame:
    df = train_log.copy()
    df["step"] = pd.to_numeric(df["step"], errors="coerce")
    df = df[df["step"].notna()].sort_values("step", kind="stable")
    return df.drop_duplicates("step", keep="last").reset_index(drop=True)


def training_variance(train_log: pd.DataFrame, column: str = "reward_mean") -> float:
    """Training variance as in tab:main, made precise.

    Sort the logged steps by ``step`` (a step logged twice keeps its last
    line) and number them ``0..n-1``; the *second half* is the rows with index
    ``>= n // 2`` (for 180 logged steps: steps 91..180; for 5 logged steps the
    last 3).  Return the **sample variance** (``ddof=1``) of ``column``
    (default ``reward_mean``) over those rows, ignoring nulls.  Fewer than two
    non-null values give NaN.
    """
    if train_log is None or len(train_log) == 0 or column not in train_log:
        return float("nan")
    df = _ordered_log(train_log)
    n = len(df)
    vals = pd.to_numeric(df[column].iloc[n // 2:], errors="coerce").dropna()
    if len(vals) < 2:
        return float("nan")
    return float(vals.var(ddof=1))


def mean_kl(train_log: pd.DataFrame) -> float:
    """Mean of the per-step ``kl`` (mean per-token k3 estimate) over all logged steps, nulls ignored."""
    if train_log is None or len(train_log) == 0 or "kl" not in train_log:
        return float("nan")
    vals = pd.to_numeric(_ordered_log(train_log)["kl"], errors="coerce").dropna()
    return float(vals.mean()) if len(vals) else float("nan")


def token_weights(entropy_norm, alpha: float, method: str, advantage: float) -> np.ndarray:
    """Per-token weights of one rollout under GRPO, AH-GRPO or SA-AH-GRPO.

    The same function the trainer uses (:func:`saah_lib.loss.method_weights`),
    applied to one rollout's logged normalised entropies.
    """
    import torch

    from saah_lib.loss import method_weights

    h = torch.as_tensor(np.asarray(entropy_norm, dtype=float), dtype=torch.float64).reshape(1, -1)
    w = method_weights(method, h, torch.ones_like(h), torch.tensor([float(advantage)]), alpha)
    return w[0].double().numpy()


# ---------------------------------------------------------------------------
# loading a results root
# ---------------------------------------------------------------------------

def _run_dirs(root: Path) -> list[Path]:
    runs = Path(root) / "runs"
    if not runs.is_dir():
        return []
    return sorted(p for p in runs.iterdir() if p.is_dir())


def _run_config(run_dir: Path) -> dict[str, Any]:
    cfg = _read_json(run_dir / "config.json") or {}
    flat = flatten_config(cfg)
    flat.setdefault("run_id", run_dir.name)
    if not flat.get("run_id"):
        flat["run_id"] = run_dir.name
    for key in ("model_label", "method", "alpha", "seed", "steps", "eval_every", "profile"):
        flat.setdefault(key, None)
    if flat.get("model_label") in (None, "") and flat.get("model_name"):
        flat["model_label"] = str(flat["model_name"]).split("/")[-1]
    flat["alpha"] = _num(flat.get("alpha"))
    return flat


def _frame(records: list[dict], keys: Iterable[str]) -> pd.DataFrame:
    df = pd.DataFrame.from_records(records)
    for k in keys:
        if k not in df:
            df[k] = np.nan
    for k in keys:
        df[k] = pd.to_numeric(df[k], errors="coerce")
    return df


def _meta(cfg: dict) -> dict:
    return {k: cfg.get(k) for k in META_COLUMNS}


def _run_evals(run_dir: Path) -> pd.DataFrame:
    df = _frame(read_jsonl(run_dir / "eval.jsonl"), EVAL_KEYS)
    if df.empty:
        return pd.DataFrame(columns=list(EVAL_KEYS))
    df = df[df["step"].notna()].sort_values("step", kind="stable").drop_duplicates("step", keep="last")
    missing = df["ci95"].isna() & df["n"].notna() & df["pass_at_1"].notna()
    if missing.any():
        df.loc[missing, "ci95"] = pass_at_1_ci(df.loc[missing, "pass_at_1"].to_numpy(), df.loc[missing, "n"].to_numpy())
    return df.reset_index(drop=True)


def _run_train_log(run_dir: Path) -> pd.DataFrame:
    df = _frame(read_jsonl(run_dir / "train_log.jsonl"), TRAIN_LOG_KEYS)
    if df.empty:
        return pd.DataFrame(columns=list(TRAIN_LOG_KEYS))
    return _ordered_log(df)


def load_runs(root: str | Path) -> pd.DataFrame:
    """One row per ``runs/<run_id>/`` under ``root``.

    Columns: every config field (flattened, see :func:`flatten_config`) plus the
    summaries ``final_pass_at_1, final_ci95, final_step, peak_pass_at_1,
    peak_ci95, peak_step`` (:func:`final_and_peak`), ``step0_pass_at_1``
    (the evaluation before training, if any), ``train_var``
    (:func:`training_variance`), ``mean_kl`` (:func:`mean_kl`),
    ``n_steps_logged``, ``last_logged_step``, ``n_evals`` and ``complete``
    (the log reaches the configured ``steps``).  A run folder without a
    config still gets a row (``run_id`` from the folder name).
    """
    rows = []
    for run_dir in _run_dirs(Path(root)):
        cfg = _run_config(run_dir)
        evals = _run_evals(run_dir)
        tlog = _run_train_log(run_dir)
        row = dict(cfg)
        row.update(final_and_peak(evals))
        step0 = evals.loc[evals["step"] == 0, "pass_at_1"] if len(evals) else pd.Series(dtype=float)
        row["step0_pass_at_1"] = float(step0.iloc[-1]) if len(step0) else float("nan")
        row["train_var"] = training_variance(tlog)
        row["mean_kl"] = mean_kl(tlog)
        row["n_steps_logged"] = int(len(tlog))
        row["last_logged_step"] = float(tlog["step"].max()) if len(tlog) else float("nan")
        row["n_evals"] = int(len(evals))
        planned = _num(cfg.get("steps"))
        row["complete"] = bool(len(tlog) and not math.isnan(planned) and row["last_logged_step"] >= planned)
        rows.append(row)
    cols = ["run_id", "model_label", "method", "alpha", "steps", "seed"]
    if not rows:
        return pd.DataFrame(columns=cols + ["final_pass_at_1", "final_ci95", "final_step", "peak_pass_at_1",
                                            "peak_ci95", "peak_step", "train_var", "mean_kl", "n_steps_logged"])
    df = pd.DataFrame.from_records(rows)
    return df[cols + [c for c in df.columns if c not in cols]]


def _long(root: Path, reader, keys) -> pd.DataFrame:
    frames = []
    for run_dir in _run_dirs(Path(root)):
        df = reader(run_dir)
        if df.empty:
            continue
        for k, v in _meta(_run_config(run_dir)).items():
            df[k] = v
        frames.append(df)
    meta = list(META_COLUMNS)
    if not frames:
        return pd.DataFrame(columns=meta + list(keys))
    out = pd.concat(frames, ignore_index=True)
    return out[meta + [c for c in out.columns if c not in meta]]


def load_evals(root: str | Path) -> pd.DataFrame:
    """All evaluations of all runs, one row per (run_id, step), with run metadata.

    A missing ``ci95`` is filled from ``pass_at_1`` and ``n`` by :func:`pass_at_1_ci`.
    """
    return _long(Path(root), _run_evals, EVAL_KEYS)


def load_train_logs(root: str | Path) -> pd.DataFrame:
    """All training-log lines of all runs, one row per (run_id, step), with run metadata."""
    return _long(Path(root), _run_train_log, TRAIN_LOG_KEYS)


def load_baselines(root: str | Path) -> pd.DataFrame:
    """One row per evaluation in ``baselines/<name>/eval.jsonl``.

    Columns: ``name``, ``model_label``, ``profile``, the eval keys and the
    remaining (flattened) config fields.
    """
    base = Path(root) / "baselines"
    rows = []
    if base.is_dir():
        for d in sorted(p for p in base.iterdir() if p.is_dir()):
            cfg = flatten_config(_read_json(d / "config.json") or {})
            if not cfg.get("model_label") and cfg.get("model_name"):
                cfg["model_label"] = str(cfg["model_name"]).split("/")[-1]
            for rec in read_jsonl(d / "eval.jsonl"):
                row = {k: v for k, v in cfg.items() if k not in EVAL_KEYS}
                row["name"] = d.name
                for k in EVAL_KEYS:
                    row[k] = _num(rec.get(k))
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


def load_token_entropies(root: str | Path, run_id: str | None = None) -> pd.DataFrame:
    """Rows of ``runs/<run_id>/token_entropies.jsonl`` (optional trainer output).

    Columns ``run_id, model_label, method, alpha, step, advantage, entropy_norm``
    (the last a list of per-token normalised entropies).  Empty if no run has
    the file.
    """
    rows = []
    for run_dir in _run_dirs(Path(root)):
        if run_id is not None and run_dir.name != run_id:
            continue
        recs = read_jsonl(run_dir / "token_entropies.jsonl")
        if not recs:
            continue
        meta = _meta(_run_config(run_dir))
        for rec in recs:
            h = rec.get("entropy_norm")
            if not isinstance(h, list) or not h:
                continue
            rows.append({**meta, "step": _num(rec.get("step")), "advantage": _num(rec.get("advantage")),
                         "entropy_norm": [float(x) for x in h]})
    cols = ["run_id", "model_label", "method", "alpha", "step", "advantage", "entropy_norm"]
    return pd.DataFrame.from_records(rows) if rows else pd.DataFrame(columns=cols)


def pick_rollout_pair(token_entropies: pd.DataFrame) -> dict | None:
    """Choose one positive- and one negative-advantage rollout logged at the same step.

    Prefers an SA-AH-GRPO run, then AH-GRPO, then any; within a run the latest
    step that has both signs.  Returns ``{run_id, step, alpha, h_pos, h_neg,
    adv_pos, adv_neg}`` or None.
    """
    te = token_entropies
    if te is None or te.empty:
        return None
    pref = {"sa": 0, "ah": 1}
    runs = sorted(te["run_id"].unique(), key=lambda r: (pref.get(te.loc[te.run_id == r, "method"].iloc[0], 2), str(r)))
    for rid in runs:
        sub = te[te.run_id == rid]
        for step in sorted(sub["step"].dropna().unique(), reverse=True):
            at = sub[sub.step == step]
            pos = at[at.advantage > 0]
            neg = at[at.advantage < 0]
            if len(pos) and len(neg):
                p, n = pos.iloc[0], neg.iloc[0]
                return {"run_id": rid, "step": float(step), "alpha": _num(p["alpha"]),
                        "h_pos": np.asarray(p["entropy_norm"], float), "h_neg": np.asarray(n["entropy_norm"], float),
                        "adv_pos": float(p["advantage"]), "adv_neg": float(n["advantage"])}
    return None


# ---------------------------------------------------------------------------
# the result set
# ---------------------------------------------------------------------------

def _agg_seeds(df: pd.DataFrame, keys: list[str], cols: list[str]) -> pd.DataFrame:
    """Mean, sample std (ddof=1) and count of each column across seeds.

    For each ``c`` in ``cols`` the output has ``c`` (mean over non-null values),
    ``c_std`` (NaN with one seed) and ``n_seeds`` (runs contributing to the
    first column).
    """
    if df.empty:
        return pd.DataFrame(columns=keys + cols + [c + "_std" for c in cols] + ["n_seeds"])
    g = df.groupby(keys, dropna=False, sort=False)
    mean = g[cols].mean()
    std = g[cols].std(ddof=1).add_suffix("_std")
    count = g[cols[0]].count().rename("n_seeds")
    return pd.concat([mean, std, count], axis=1).reset_index()


def _is_main(method: str, alpha: float, main_alphas: dict) -> bool:
    if method not in main_alphas:
        return False
    return bool(np.isclose(alpha, main_alphas[method])) if not math.isnan(alpha) else False


def _sort_frame(df: pd.DataFrame, extra: list[str] | None = None) -> pd.DataFrame:
    if df.empty:
        return df
    order = {m: i for i, m in enumerate(model_order(df["model_label"]))}
    morder = {m: i for i, m in enumerate(METHOD_ORDER)}
    key = df.assign(_m=df["model_label"].map(order), _k=df["method"].map(morder).fillna(9),
                    _a=pd.to_numeric(df["alpha"], errors="coerce").fillna(-1e9))
    by = ["_m", "_k", "_a"] + (extra or [])
    return key.sort_values(by, kind="stable").drop(columns=["_m", "_k", "_a"]).reset_index(drop=True)


@dataclass
class ResultSet:
    """Everything the tables and figures need, from either source.

    DataFrames (all keyed by ``model_label, method, alpha``; ``method`` in
    ``base/grpo/ah/sa``):

    ``summary``
        One row per (model, method, alpha) incl. one ``base`` row per model:
        ``steps, final_pass_at_1, final_ci95, peak_pass_at_1, peak_ci95,
        train_var, mean_kl`` (means across seeds), the ``*_std`` companions
        (sample std across seeds, ``ddof=1``), ``n_seeds``, ``complete``,
        ``in_main`` (the alpha of the main comparison).
    ``checkpoints``
        Pass@1 per evaluated training step: ``step, pass_at_1, ci95,
        pass_at_1_std, n_seeds, in_main``.
    ``ablation``
        One row per entry of the alpha ablation (AH-GRPO alphas on one model,
        plus the SA-AH-GRPO reference): ``steps, peak_pass_at_1,
        final_pass_at_1, partial, note``; per-step values are in ``checkpoints``.
    ``diagnostics``
        Per-step training diagnostics at the sampled steps: ``step, pass_at_1``
        and :data:`DIAGNOSTIC_COLUMNS`; ``weight_neg_note`` marks steps where no
        rollout had a negative advantage.
    ``baselines``
        One row per model: ``pass_at_1, ci95, n`` (and ``raw_pass_at_1`` for the
        paper's adjusted zero-shot numbers).
    ``curves``
        Per-step training curves used by the figures (all logged steps for our
        runs; the sampled diagnostic steps for the paper).
    """

    source: str
    summary: pd.DataFrame
    checkpoints: pd.DataFrame
    ablation: pd.DataFrame
    diagnostics: pd.DataFrame
    baselines: pd.DataFrame
    curves: pd.DataFrame = field(default_factory=pd.DataFrame)
    runs: pd.DataFrame | None = None
    evals: pd.DataFrame | None = None
    train_logs: pd.DataFrame | None = None
    token_entropies: pd.DataFrame | None = None
    hparams: pd.DataFrame | None = None
    root: Path | None = None
    notes: dict = field(default_factory=dict)

    # -- convenience -------------------------------------------------------
    @property
    def models(self) -> list:
        labels = list(self.summary["model_label"]) if len(self.summary) else []
        labels += list(self.checkpoints["model_label"]) if len(self.checkpoints) else []
        return model_order(labels)

    def baseline_for(self, model_label) -> dict | None:
        b = self.baselines
        if b is None or b.empty:
            return None
        sub = b[b["model_label"] == model_label]
        return None if sub.empty else sub.iloc[0].to_dict()

    def is_empty(self) -> bool:
        return all(df is None or df.empty for df in (self.summary, self.checkpoints, self.diagnostics))

    # -- builders ----------------------------------------------------------
    @classmethod
    def from_runs(cls, root: str | Path, main_alphas: dict | None = None,
                  diag_every: int | None = None, ablation_model=None) -> "ResultSet":
        """Build from a results root written by our trainer.

        Runs are grouped by ``(model_label, method, alpha)``; seeds within a
        group are averaged (mean, sample std ``ddof=1``, ``n_seeds``).
        Baselines come from ``baselines/*/eval.jsonl`` (a name containing
        ``zero`` is preferred when a model has several); for a model without one,
        the runs' own step-0 evaluations (the same untouched model) are used
        and ``baselines.kind`` says so.
        """
        root = Path(root)
        main_alphas = dict(MAIN_ALPHAS if main_alphas is None else main_alphas)
        runs = load_runs(root)
        evals = load_evals(root)
        tlogs = load_train_logs(root)
        base_raw = load_baselines(root)
        te = load_token_entropies(root)

        # ---- baselines (one row per model)
        brows = []
        if len(base_raw):
            for label, sub in base_raw.groupby("model_label", dropna=True, sort=False):
                # several baselines of one model (zero-shot, warm-start): prefer a zero-shot one
                sub = sub.assign(_zero=~sub["name"].astype(str).str.contains("zero", case=False))
                sub = sub.sort_values(["_zero", "name", "step"], kind="stable")
                r = sub[sub["name"] == sub["name"].iloc[0]].iloc[-1]
                brows.append({"model_label": label, "name": r["name"], "pass_at_1": r["pass_at_1"],
                              "ci95": r["ci95"], "n": r["n"], "raw_pass_at_1": np.nan, "kind": "baseline"})
        have = {b["model_label"] for b in brows}
        if len(evals):
            s0 = evals[(evals["step"] == 0) & evals["pass_at_1"].notna()]
            for label, sub in s0.groupby("model_label", dropna=True, sort=False):
                if label in have:
                    continue
                p = float(sub["pass_at_1"].mean())
                n = float(sub["n"].mean()) if sub["n"].notna().any() else float("nan")
                ci = float(sub["ci95"].mean()) if len(sub) == 1 else pass_at_1_ci(p, n)
                brows.append({"model_label": label, "name": "step 0 of the runs", "pass_at_1": p, "ci95": ci,
                              "n": n, "raw_pass_at_1": np.nan, "kind": "step0"})
        baselines = pd.DataFrame(brows, columns=["model_label", "name", "pass_at_1", "ci95", "n", "raw_pass_at_1", "kind"])

        # ---- summary
        scols = ["final_pass_at_1", "final_ci95", "peak_pass_at_1", "peak_ci95", "train_var", "mean_kl",
                 "final_step", "peak_step"]
        if len(runs):
            r = runs.copy()
            for c in scols + ["steps"]:
                r[c] = pd.to_numeric(r[c], errors="coerce")
            summ = _agg_seeds(r, GROUP_KEYS, scols)
            extra = r.groupby(GROUP_KEYS, dropna=False, sort=False).agg(
                steps=("steps", "max"), complete=("complete", "all"), n_runs=("run_id", "count"),
                seeds=("seed", lambda s: ",".join(str(int(x)) for x in pd.to_numeric(s, errors="coerce").dropna())),
            ).reset_index()
            summ = summ.merge(extra, on=GROUP_KEYS, how="left")
        else:
            summ = pd.DataFrame(columns=GROUP_KEYS + scols + ["steps", "complete", "n_seeds", "n_runs", "seeds"])
        for b in brows:
            summ = pd.concat([summ, pd.DataFrame([{
                "model_label": b["model_label"], "method": "base", "alpha": np.nan,
                "final_pass_at_1": b["pass_at_1"], "final_ci95": b["ci95"], "n_seeds": 1, "complete": True,
                "base_kind": b["kind"]}])], ignore_index=True)
        if len(summ):
            summ["in_main"] = [m == "base" or _is_main(m, _num(a), main_alphas)
                               for m, a in zip(summ["method"], summ["alpha"])]
        summ = _sort_frame(summ)

        # ---- checkpoints
        if len(evals):
            ev = evals[(evals["step"] > 0) & evals["pass_at_1"].notna()].copy()
            ck = _agg_seeds(ev, GROUP_KEYS + ["step"], ["pass_at_1", "ci95"])
            ck = ck.drop(columns=["ci95_std"])
            ck["in_main"] = [_is_main(m, _num(a), main_alphas) for m, a in zip(ck["method"], ck["alpha"])]
            ck = _sort_frame(ck, ["step"])
        else:
            ck = pd.DataFrame(columns=GROUP_KEYS + ["step", "pass_at_1", "ci95", "pass_at_1_std", "n_seeds", "in_main"])

        # ---- ablation: AH alphas on the model with most of them, + SA reference
        abl = _ablation_from_summary(summ, main_alphas, ablation_model)

        # ---- diagnostics and curves
        curves = pd.DataFrame()
        diag = pd.DataFrame()
        if len(tlogs):
            cols = [c for c in TRAIN_LOG_KEYS if c != "step"]
            t = tlogs.copy()
            g = t.groupby(GROUP_KEYS + ["step"], dropna=False, sort=False)
            curves = g[cols].mean()
            curves["n_seeds"] = g["run_id"].nunique()
            curves = _sort_frame(curves.reset_index(), ["step"])
            diag = _sample_diagnostics(curves, runs, ck, diag_every)

        return cls(source="runs", summary=summ, checkpoints=ck, ablation=abl, diagnostics=diag,
                   baselines=baselines, curves=curves, runs=runs, evals=evals, train_logs=tlogs,
                   token_entropies=te, root=root, notes={"main_alphas": main_alphas})

    @classmethod
    def from_paper_reported(cls, directory: str | Path = "results/paper_reported") -> "ResultSet":
        """Build from the CSV transcription of the paper's tables (see its README.md).

        Per-checkpoint CIs, which the paper does not tabulate, are computed with
        :func:`pass_at_1_ci` and ``N = 500`` (``ci_source = 'formula'``).  The
        paper's own strings are kept in ``*_str`` columns so that tables
        regenerate with the paper's rounding.
        """
        return _from_paper_reported(Path(directory))


def _ablation_from_summary(summ: pd.DataFrame, main_alphas: dict, ablation_model=None) -> pd.DataFrame:
    cols = GROUP_KEYS + ["label", "steps", "peak_pass_at_1", "final_pass_at_1", "peak_pass_at_1_std",
                         "final_pass_at_1_std", "n_seeds", "partial", "note"]
    if summ.empty:
        return pd.DataFrame(columns=cols)
    ah = summ[summ["method"] == "ah"]
    if ablation_model is None:
        counts = ah.groupby("model_label")["alpha"].nunique()
        counts = counts[counts >= 2]
        if counts.empty:
            return pd.DataFrame(columns=cols)
        best = counts.max()
        ablation_model = model_order([m for m, c in counts.items() if c == best])[-1]
    rows = []
    sub = summ[summ["model_label"] == ablation_model]
    ah_alphas = set(np.round(pd.to_numeric(sub.loc[sub.method == "ah", "alpha"]), 6))
    for _, r in sub.iterrows():
        a = _num(r["alpha"])
        use = (r["method"] == "ah") or (r["method"] == "grpo" and 0.0 not in ah_alphas) or \
              (r["method"] == "sa" and _is_main("sa", a, main_alphas))
        if not use:
            continue
        label = {"grpo": "GRPO", "sa": "SA-AH-GRPO"}.get(r["method"], "")
        rows.append({**{k: r[k] for k in GROUP_KEYS}, "label": label, "steps": r.get("steps"),
                     "peak_pass_at_1": r["peak_pass_at_1"], "final_pass_at_1": r["final_pass_at_1"],
                     "peak_pass_at_1_std": r.get("peak_pass_at_1_std"), "final_pass_at_1_std": r.get("final_pass_at_1_std"),
                     "n_seeds": r.get("n_seeds"), "partial": not bool(r.get("complete", True)), "note": ""})
    df = pd.DataFrame(rows, columns=cols)
    # AH/GRPO rows by alpha, the SA reference last
    df["_sa"] = (df["method"] == "sa").astype(int)
    return df.sort_values(["_sa", "alpha"], kind="stable").drop(columns="_sa").reset_index(drop=True)


def _sample_diagnostics(curves: pd.DataFrame, runs: pd.DataFrame, ck: pd.DataFrame,
                        diag_every: int | None) -> pd.DataFrame:
    """Rows of the diagnostic tables: the first logged step and every ``eval_every`` steps.

    ``eval_every`` comes from the runs' config (``diag_every`` overrides it);
    without one the evaluated steps are used.  Pass@1 is attached where an
    evaluation exists at that step.
    """
    out = []
    for key, sub in curves.groupby(GROUP_KEYS, dropna=False, sort=False):
        sub = sub.sort_values("step")
        every = diag_every
        if every is None and runs is not None and len(runs):
            m = (runs["model_label"] == key[0]) & (runs["method"] == key[1]) & np.isclose(
                pd.to_numeric(runs["alpha"], errors="coerce").fillna(-9e9), _num(key[2]) if not math.isnan(_num(key[2])) else -9e9)
            ee = pd.to_numeric(runs.loc[m, "eval_every"], errors="coerce").dropna()
            every = int(ee.iloc[0]) if len(ee) and ee.iloc[0] > 0 else None
        steps = sub["step"].to_numpy()
        ck_sub = ck[(ck["model_label"] == key[0]) & (ck["method"] == key[1]) &
                    np.isclose(pd.to_numeric(ck["alpha"], errors="coerce").fillna(-9e9),
                               _num(key[2]) if not math.isnan(_num(key[2])) else -9e9)] if len(ck) else ck
        if every:
            chosen = [s for s in steps if s % every == 0]
        elif len(ck_sub):
            chosen = [s for s in steps if s in set(ck_sub["step"])]
        else:
            chosen = []
        chosen = sorted(set([steps[0]] + chosen))
        pick = sub[sub["step"].isin(chosen)].copy()
        p = dict(zip(ck_sub["step"], ck_sub["pass_at_1"])) if len(ck_sub) else {}
        pick["pass_at_1"] = [p.get(s, np.nan) for s in pick["step"]]
        pick["weight_neg_note"] = np.where(pick["weight_neg_mean"].isna() & (pick["neg_frac"] == 0), "all_positive", "")
        out.append(pick)
    if not out:
        return pd.DataFrame()
    cols = GROUP_KEYS + ["step", "pass_at_1", *DIAGNOSTIC_COLUMNS, "weight_neg_note", "n_seeds"]
    df = pd.concat(out, ignore_index=True)
    return df[[c for c in cols if c in df.columns]]


# ---------------------------------------------------------------------------
# the paper's reported numbers
# ---------------------------------------------------------------------------

#: CSV files of ``results/paper_reported`` and the paper table each transcribes.
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
    import csv
    import io

    with open(path, encoding="utf-8") as fh:
        text = "".join(line for line in fh if not line.lstrip().startswith("#"))
    rows = list(csv.reader(io.StringIO(text)))
    if not rows:
        return pd.DataFrame()
    return pd.DataFrame(rows[1:], columns=rows[0], dtype=object)


def _numeric(df: pd.DataFrame, cols: Iterable[str]) -> pd.DataFrame:
    df = df.copy()
    for c in cols:
        if c in df:
            df[c] = [_num(x) if str(x).strip() not in ("", "---") else np.nan for x in df[c]]
    return df


def _wide_to_long(df: pd.DataFrame, id_cols: list[str]) -> pd.DataFrame:
    step_cols = [c for c in df.columns if re.fullmatch(r"\d+", str(c))]
    long = df.melt(id_vars=id_cols, value_vars=step_cols, var_name="step", value_name="pass_at_1")
    long["step"] = long["step"].astype(int)
    long = _numeric(long, ["pass_at_1"])
    return long[long["pass_at_1"].notna()]


def _from_paper_reported(directory: Path) -> ResultSet:
    d = Path(directory)
    if not (d / "tab_main.csv").is_file():
        raise FileNotFoundError(f"{d}/tab_main.csv not found: not a paper_reported folder")
    notes: dict[str, Any] = {"conflicts": []}

    # ---- summary (tab:main)
    main = _numeric(read_reported_csv(d / "tab_main.csv"),
                    ["alpha", "steps", "final_pass_at_1", "final_ci95", "peak_pass_at_1", "peak_ci95",
                     "train_var", "mean_kl"])
    main["n_seeds"] = 1
    main["complete"] = True
    main["in_main"] = True
    summary = _sort_frame(main)

    # ---- baselines
    base = _numeric(read_reported_csv(d / "baselines.csv"), ["pass_at_1", "ci95", "raw_pass_at_1", "adjustment_pp", "n"]) \
        if (d / "baselines.csv").is_file() else pd.DataFrame(columns=["model_label", "pass_at_1", "ci95", "n"])
    base["kind"] = "reported (adjusted)"
    base["name"] = "zero-shot (paper)"

    # ---- checkpoints: the two checkpoint tables, then extra rows of the ablation
    frames = []
    for f in ("tab_checkpoints_3b.csv", "tab_checkpoints_1b.csv"):
        if (d / f).is_file():
            long = _wide_to_long(read_reported_csv(d / f), ["model_label", "method", "alpha"])
            long["table"] = REPORTED_FILES[f]
            frames.append(long)
    abl_raw = read_reported_csv(d / "tab_alpha_ablation.csv") if (d / "tab_alpha_ablation.csv").is_file() else pd.DataFrame()
    if len(abl_raw):
        long = _wide_to_long(abl_raw.drop(columns=["row_label", "peak", "final", "flag"]), ["model_label", "method", "alpha"])
        long["table"] = REPORTED_FILES["tab_alpha_ablation.csv"]
        frames.append(long)
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
    ck["in_main"] = [_is_main(m, a, MAIN_ALPHAS) for m, a in zip(ck["method"], ck["alpha"])]
    ck = _sort_frame(ck, ["step"])

    # ---- ablation entries (the SA reference's two table rows merged into one entry)
    arows = []
    if len(abl_raw):
        a = _numeric(abl_raw, ["alpha", "peak", "final"])
        for (label, method, alpha), sub in a.groupby(["model_label", "method", "alpha"], sort=False):
            peak = sub["peak"].dropna()
            final = sub["final"].dropna()
            srow = summary[(summary.model_label == label) & (summary.method == method) & np.isclose(summary.alpha.fillna(-9), alpha)]
            steps = float(srow["steps"].iloc[0]) if len(srow) else float("nan")
            if method == "ah" and math.isnan(steps):
                steps = 150.0  # sec:alpha_setup: every sweep run has 150 steps
            flag = ",".join(x for x in sub["flag"] if x)
            arows.append({"model_label": label, "method": method, "alpha": alpha,
                          "label": {"grpo": "GRPO", "sa": "SA-AH-GRPO"}.get(method, ""),
                          "steps": steps, "peak_pass_at_1": peak.iloc[0] if len(peak) else np.nan,
                          "final_pass_at_1": final.iloc[0] if len(final) else np.nan,
                          "peak_pass_at_1_std": np.nan, "final_pass_at_1_std": np.nan, "n_seeds": 1,
                          "partial": flag == "partial",
                          "note": "partial run (steps 30--60 only, per the paper's footnote)" if flag == "partial" else ""})
    ablation = pd.DataFrame(arows)

    # ---- diagnostics (tab:sa_log_*)
    dframes = []
    for f in ("tab_sa_log_3b.csv", "tab_sa_log_1b.csv"):
        if (d / f).is_file():
            df = _numeric(read_reported_csv(d / f), ["alpha", "step", "pass_at_1", *DIAGNOSTIC_COLUMNS])
            dframes.append(df)
    diagnostics = _sort_frame(pd.concat(dframes, ignore_index=True), ["step"]) if dframes else pd.DataFrame()
    if len(diagnostics):
        diagnostics["n_seeds"] = 1

    # ---- curves for figures: the sampled diagnostic steps only.  The paper's
    # 0.000 for w_- at all-positive steps is a placeholder, not a weight, so it
    # is dropped from the curves (kept in the table).
    curves = diagnostics.copy()
    if len(curves):
        curves.loc[curves["weight_neg_note"] == "all_positive", "weight_neg_mean"] = np.nan

    hparams = read_reported_csv(d / "tab_hparams.csv") if (d / "tab_hparams.csv").is_file() else None
    return ResultSet(source="paper_reported", summary=summary, checkpoints=ck, ablation=ablation,
                     diagnostics=diagnostics, baselines=base, curves=curves, hparams=hparams, root=d, notes=notes)
