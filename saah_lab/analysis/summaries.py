"""The per-run summaries behind every number in the tables and figures, each a small function of one run's logs
so that a reader can check what a reported number means.  Missing data stays missing (NaN).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from saah_lib.method.methods import LOG_WEIGHT_CAP, check_alpha, check_method
from saah_lib.tasks.scoring import pass_at_1_ci


def final_and_peak(evals: pd.DataFrame) -> dict[str, float]:
    """Final (largest step) and peak Pass@1 of one run, with CI (logged ``ci95``, else from ``n``) and step.

    Only training checkpoints count: step 0 is the baseline.  A tied peak reports the earliest step (the paper
    quotes SA-AH-GRPO 3B's peak 0.858 at step 30 although it recurs at step 90).  NaN without a checkpoint.
    """
    out = {k: float("nan") for k in (
        "final_pass_at_1", "final_ci95", "final_step", "peak_pass_at_1", "peak_ci95", "peak_step")}
    if evals is None or len(evals) == 0 or "pass_at_1" not in evals:
        return out
    # numpy on the columns rather than pandas on the frame: this runs for every run of a root, several times
    step, p = _numbers(evals, "step"), _numbers(evals, "pass_at_1")
    kept = np.flatnonzero((step > 0) & ~np.isnan(p))
    if kept.size == 0:
        return out
    kept = kept[np.argsort(step[kept], kind="stable")]
    kept = kept[np.append(step[kept][1:] != step[kept][:-1], True)]  # a step evaluated twice keeps its last row
    ci = _numbers(evals, "ci95") if "ci95" in evals else np.full(len(evals), np.nan)
    if "n" in evals:
        ci = np.where(np.isnan(ci), pass_at_1_ci(p, _numbers(evals, "n")), ci)
    last, peak = kept[-1], kept[np.argmax(p[kept])]  # argmax: the first maximum, the earliest step
    out.update(final_pass_at_1=float(p[last]), final_ci95=float(ci[last]), final_step=float(step[last]),
               peak_pass_at_1=float(p[peak]), peak_ci95=float(ci[peak]), peak_step=float(step[peak]))
    return out


def _numbers(frame: pd.DataFrame, column: str) -> np.ndarray:
    """A column as floats, NaN where a value is missing or not a number."""
    return pd.to_numeric(frame[column], errors="coerce").to_numpy(dtype=float, na_value=np.nan)


def ordered_by_step(train_log: pd.DataFrame) -> pd.DataFrame:
    """Log rows sorted by step; a step logged twice keeps its last line."""
    if _in_step_order(train_log):  # as every frame of saah_lab.analysis.frames is: the sort would keep it
        return train_log.copy()
    df = train_log.copy()
    df["step"] = pd.to_numeric(df["step"], errors="coerce")
    df = df[df["step"].notna()].sort_values("step", kind="stable")
    return df.drop_duplicates("step", keep="last").reset_index(drop=True)


def _in_step_order(df: pd.DataFrame) -> bool:
    """Numeric steps, none missing, strictly increasing, on a 0..n-1 index: what :func:`ordered_by_step` gives."""
    if "step" not in df or not pd.api.types.is_numeric_dtype(df["step"]) or pd.api.types.is_bool_dtype(df["step"]):
        return False
    if not (isinstance(df.index, pd.RangeIndex) and df.index.start == 0 and df.index.step == 1):
        return False
    steps = df["step"].to_numpy(dtype=float, na_value=np.nan)
    return not np.isnan(steps).any() and bool((np.diff(steps) > 0).all())


def second_half(train_log: pd.DataFrame) -> pd.DataFrame:
    """The rows every training-variance summary reads: rows ``>= n // 2`` of the log in step order."""
    df = ordered_by_step(train_log)
    return df.iloc[len(df) // 2:]


def logged_values(train_log: pd.DataFrame, column: str, second_half_only: bool = False) -> pd.Series:
    """One column of a training log in step order (its second half only, if asked), nulls dropped."""
    if train_log is None or len(train_log) == 0 or column not in train_log:
        return pd.Series(dtype=float)
    rows = second_half(train_log) if second_half_only else ordered_by_step(train_log)
    return pd.to_numeric(rows[column], errors="coerce").dropna()


def training_variance(train_log: pd.DataFrame, column: str = "reward_mean") -> float:
    """Training variance as in tab:main: the sample variance (``ddof=1``) of ``column`` over the rows
    ``>= n // 2`` of the log in step order (180 steps: 91..180), nulls ignored; NaN for fewer than two values."""
    vals = logged_values(train_log, column, second_half_only=True)
    return float(vals.var(ddof=1)) if len(vals) >= 2 else float("nan")


def detrended_training_variance(train_log: pd.DataFrame, column: str = "reward_mean") -> float:
    """Variance of the second half's ``column`` around its least-squares line in ``step`` (residual sum of squares
    over ``m - 2``); NaN for fewer than three values."""
    if train_log is None or len(train_log) == 0 or column not in train_log:
        return float("nan")
    rows = second_half(train_log)
    y = pd.to_numeric(rows[column], errors="coerce")
    keep = y.notna()
    x, y = rows["step"][keep].to_numpy(float), y[keep].to_numpy(float)
    if len(y) < 3:
        return float("nan")
    # The line in closed form, every sum exact (math.fsum): np.polyfit goes through LAPACK, whose OpenBLAS
    # kernels differ by CPU (AVX-512 or AVX2) in the last bits, so committed outputs would differ by machine.
    dx, dy = x - math.fsum(x) / len(x), y - math.fsum(y) / len(y)
    residuals = dy - (math.fsum(dx * dy) / math.fsum(dx * dx)) * dx
    return math.fsum(residuals ** 2) / (len(y) - 2)


def within_step_variance(train_log: pd.DataFrame, column: str = "reward_std") -> float:
    """Mean over the second half of ``reward_std ** 2`` (TRL's std over all the step's completions): the
    within-step reward variance; NaN without a value."""
    vals = logged_values(train_log, column, second_half_only=True)
    return float((vals ** 2).mean()) if len(vals) else float("nan")


def batch_noise_share(train_log: pd.DataFrame, completions_per_step: int) -> float:
    """How much of :func:`training_variance` a finite batch explains on its own: ``within_step_variance /
    completions_per_step`` (independent draws from an unchanging policy) over it.  Completions of one prompt are
    correlated, so this is a lower bound."""
    if completions_per_step < 1:
        raise ValueError(f"completions_per_step must be at least 1, got {completions_per_step}")
    between = training_variance(train_log)
    within = within_step_variance(train_log)
    if not (np.isfinite(between) and np.isfinite(within)) or between == 0:
        return float("nan")
    return float(within / completions_per_step / between)


def mean_kl(train_log: pd.DataFrame) -> float:
    """Mean of the per-step ``kl`` (mean per-token k3 estimate) over all logged steps, nulls ignored."""
    vals = logged_values(train_log, "kl")
    return float(vals.mean()) if len(vals) else float("nan")


#: The per-run summaries of a training log that a paired comparison can compare, by quantity key
#: (:data:`saah_lab.analysis.quantities.QUANTITIES` names them): each maps a ``train_log`` to one number.
TRAIN_LOG_SUMMARIES = {
    "train_var": training_variance,
    "train_var_detrended": detrended_training_variance,
    "train_var_within": within_step_variance,
    "mean_kl": mean_kl,
}


def token_weights(entropy_norm, alpha: float, method: str, advantage: float) -> np.ndarray:
    """Per-token weights of one rollout, for drawing: the trainer's rule (:func:`saah_lib.method.loss.method_weights`)
    in float64 numpy, since its float32 ``torch.exp`` differs by CPU in the last bit and a figure must not."""
    method = check_method(method)
    h = np.asarray(entropy_norm, dtype=np.float64).reshape(-1)
    alpha = check_alpha(alpha)
    if method == "grpo" or alpha == 0.0 or (method == "sa" and not advantage < 0):
        return np.ones_like(h)
    return np.exp(np.minimum(-alpha * np.cumsum(h), LOG_WEIGHT_CAP))
