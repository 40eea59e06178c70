"""The quantities the report prints, their names and decimals: :data:`DECIMALS` is the one rounding of every table,
sentence and note, so that the tables of ``results/paper_reported`` print the paper's cells exactly."""

from __future__ import annotations

from typing import Any

import numpy as np

#: The quantities a paired comparison reports, by key, as the texts name them.
QUANTITIES = {"final": "final Pass@1", "peak": "peak Pass@1", "train_var": "training-reward variance",
              "train_var_detrended": "training-reward variance around its trend",
              "train_var_within": "within-step reward variance", "mean_kl": "mean KL"}

#: The checkpoints whose Pass@1 a comparison reports: the last evaluated step and the best one.
CHECKPOINTS = ("final", "peak")

#: Decimals per quantity. ``final``/``peak`` are Pass@1 at a checkpoint; ``kl`` is one step's KL and
#: ``mean_kl`` its mean over steps (the same scale); the three training-reward variances
#: (:data:`saah_lab.analysis.summaries.TRAIN_LOG_SUMMARIES`) share the paper's 4.
DECIMALS = {"pass_at_1": 3, "final": 3, "peak": 3, "ci95": 3, "train_var": 4, "train_var_detrended": 4,
            "train_var_within": 4, "kl": 5, "mean_kl": 5,
            "reward": 3, "entropy": 4, "weight": 3, "neg_frac": 2, "completion_length": 0}


def decimals(key: str) -> int:
    """The decimals of quantity ``key``; an unknown key is an error, so that no text rounds on its own."""
    if key not in DECIMALS:
        raise KeyError(f"no decimals defined for quantity {key!r}; add it to DECIMALS (known: {sorted(DECIMALS)})")
    return DECIMALS[key]


def number_or_nan(x: Any) -> float:
    """A cell as a float: numbers and numeric strings convert, anything else (None, '---') is NaN."""
    if x is None or isinstance(x, (bool, np.bool_)):
        return float("nan")
    try:
        return float(x)  # a string's surrounding spaces too
    except (TypeError, ValueError):
        return float("nan")
