"""The three methods and their one parameter, alpha (light: no torch).

``grpo`` is plain GRPO (alpha is 0 by definition), ``ah`` discounts every rollout with the entropy-adaptive
horizon weight, ``sa`` only rollouts with negative advantage.  The paper's main comparison runs ``ah`` and
``sa`` at :data:`MAIN_ALPHA`; its ablation sweeps :data:`SWEEP_ALPHAS`.
"""

from __future__ import annotations

import math
import numbers

METHODS = ("grpo", "ah", "sa")
#: Negative alpha grows the weights; the log-weight cap of :mod:`saah_lib.method.loss` keeps them finite, and
#: -2 is the lowest the paper's ablation needs (-0.25) with room.  The upper end holds the CPU studies'
#: paper-matched alpha (about 6, :mod:`saah_lab.studies.matched_alpha`): for alpha >= 0 the log-weights are
#: <= 0, so the cap never binds, and up to 10 the first token of a completion keeps a weight >= exp(-10), so
#: the loss's weighted token count stays positive even at maximal entropy.
ALPHA_RANGE = (-2.0, 10.0)
#: The largest log-weight: negative alpha grows the weights, and the cap keeps them finite.
LOG_WEIGHT_CAP = 50.0

#: The alpha of AH-GRPO and SA-AH-GRPO in the paper's main comparison.
MAIN_ALPHA = 0.5
#: The alpha of each method in the main comparison; other alphas of a method are ablation runs.
MAIN_ALPHAS = {"grpo": 0.0, "ah": MAIN_ALPHA, "sa": MAIN_ALPHA}
#: The paper's alpha ablation (0 is plain GRPO).
SWEEP_ALPHAS = (-0.25, 0.0, 0.1, 0.25, MAIN_ALPHA)
#: The paper's entropy estimate: from the 500 largest logits (None would be the exact entropy).
PAPER_ENTROPY_TOP_K = 500
#: The largest top-K: more rows than any language model's head has (a larger K is a mistake, not an estimate).
MAX_ENTROPY_TOP_K = 2**20

#: TRL 1.16's GRPO loss types; the weights are defined for each (:mod:`saah_lib.method.loss`).
LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "luspo", "vespo")
#: TRL's importance-sampling levels: per token (GRPO) or one ratio per sequence (GSPO).
IMPORTANCE_SAMPLING_LEVELS = ("token", "sequence")


def check_method(method) -> str:
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}: expected one of {', '.join(METHODS)}")
    return method


def check_alpha(alpha) -> float:
    """``alpha`` as a float, or a ValueError when it is not a finite number in :data:`ALPHA_RANGE`."""
    lo, hi = ALPHA_RANGE
    if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real) or not math.isfinite(alpha) \
            or not lo <= alpha <= hi:
        raise ValueError(f"alpha must be a finite number in [{lo}, {hi}], got {alpha!r}")
    return float(alpha)


def method_alpha(method: str, alpha) -> float:
    """The alpha a method trains with: checked, and 0 for ``grpo`` whatever was asked."""
    check_method(method)
    return 0.0 if method == "grpo" else check_alpha(alpha)


def weights_problem(method: str, alpha: float, loss_type: str, importance_sampling_level: str) -> str | None:
    """Why the weights cannot act in this loss, or None when they can (or when every weight is 1 anyway).

    Under sequence-level importance sampling the policy term is one value per completion; ``grpo`` and
    ``sapo`` divide a completion's weighted sum by its weighted token count, so the weights cancel.
    """
    if method == "grpo" or alpha == 0:
        return None
    if importance_sampling_level == "sequence" and loss_type in ("grpo", "sapo"):
        return (f"with importance_sampling_level='sequence' the {loss_type!r} loss averages one value per "
                "completion over its own weighted tokens, so the weights cancel and the run would be plain GSPO; "
                "use loss_type='luspo' (each completion counted by its weighted length) or token-level sampling")
    return None
