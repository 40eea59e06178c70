"""The (model, method, alpha) group that seeds are averaged over: its names, display labels and order, shared so
that every output orders and names runs the same way."""

from __future__ import annotations

import math
import re
from typing import Any, Iterable

import numpy as np
import pandas as pd

from saah_lab.analysis.quantities import number_or_nan

#: Method identifiers used in ``config.json`` and their display names.
METHOD_LABELS = {
    "base": "Base (zero-shot)",
    "grpo": "GRPO",
    "ah": "AH-GRPO",
    "sa": "SA-AH-GRPO",
}
METHOD_ORDER = ("base", "grpo", "ah", "sa")

#: A (model, method, alpha) group: the unit that seeds are averaged over.
GROUP_KEYS = ["model_label", "method", "alpha"]

_PARAMETER_COUNT = re.compile(r"(\d+(?:\.\d+)?)\s*([BM])\b", flags=re.IGNORECASE)


def method_label(method: str, alpha=None, *, show_grpo_alpha: bool = True, alpha_text=None,
                 alpha_symbol: str = "α") -> str:
    """``AH-GRPO (α=0.5)``; ``Base (zero-shot)`` has no alpha, nor GRPO with ``show_grpo_alpha=False``.
    ``alpha_text`` formats the number (default ``f"{alpha:g}"``, empty when missing)."""
    name = METHOD_LABELS.get(method, method)
    if method == "base" or (method == "grpo" and not show_grpo_alpha):
        return name
    if alpha_text is None:
        a = number_or_nan(alpha)
        text = "" if math.isnan(a) else f"{a:g}"
    else:
        text = alpha_text(alpha)
    return f"{name} ({alpha_symbol}={text})"


def model_short(label: Any) -> str:
    """``Qwen2.5-1.5B-Instruct`` -> ``1.5B``; a label without a parameter count (``tiny``) unchanged."""
    s = str(label)
    m = _PARAMETER_COUNT.search(s)
    return f"{m.group(1)}{m.group(2).upper()}" if m else s


def model_size(label: Any) -> float:
    """Parameter count parsed from a model label (``nan`` if none)."""
    m = _PARAMETER_COUNT.search(str(label))
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


def is_main_alpha(method: str, alpha: float, main_alphas: dict) -> bool:
    """Whether ``(method, alpha)`` is a main-comparison setting of ``method`` (``main_alphas`` maps a method
    to its alpha, or to several: the main alpha and a study's paper-matched one)."""
    if method not in main_alphas or math.isnan(alpha):
        return False
    return bool(np.isclose(alpha, np.atleast_1d(main_alphas[method])).any())


def sort_groups(df: pd.DataFrame, extra: list[str] | None = None) -> pd.DataFrame:
    """Rows ordered by model (largest first), method (:data:`METHOD_ORDER`), alpha, then ``extra``."""
    if df.empty:
        return df
    order = {m: i for i, m in enumerate(model_order(df["model_label"]))}
    morder = {m: i for i, m in enumerate(METHOD_ORDER)}
    key = df.assign(_m=df["model_label"].map(order), _k=df["method"].map(morder).fillna(9),
                    _a=pd.to_numeric(df["alpha"], errors="coerce").fillna(-1e9))
    by = ["_m", "_k", "_a"] + (extra or [])
    return key.sort_values(by, kind="stable").drop(columns=["_m", "_k", "_a"]).reset_index(drop=True)
