"""How strongly a discount acts: the mean token weight on negative-advantage rollouts, and the alpha that
gives a chosen mean weight (pure functions of per-token entropies and rewards, no model).

:func:`mean_negative_weight` is the trainer's ``weight_neg_mean`` at any alpha, with its weight function, so the
alpha giving a wanted level can be solved for before training (:func:`solve_alpha`): every weight
``exp(-alpha * cumsum H)`` falls as alpha grows, so bisection finds the one alpha.
"""

from __future__ import annotations

import torch

from saah_lib.method.loss import horizon_weights
from saah_lib.method.methods import ALPHA_RANGE

#: TRL's guard in the group normalisation, (r - mean) / (std + 1e-4).
STD_EPSILON = 1e-4


def group_advantages(rewards, group_size: int, std_threshold: float = 0.0) -> torch.Tensor:
    """TRL's advantages of rewards in consecutive groups of ``group_size``: ``(r - mean) / (std + 1e-4)``, unbiased
    std; 0 for a group whose std is below ``std_threshold`` (the trainer's ``reward_std_threshold``)."""
    r = torch.as_tensor(rewards, dtype=torch.float64).reshape(-1)
    if group_size < 2 or r.numel() % group_size:
        raise ValueError(f"{r.numel()} rewards do not split into groups of {group_size} (need group_size >= 2)")
    groups = r.reshape(-1, group_size)
    std = groups.std(dim=1, keepdim=True)
    adv = (groups - groups.mean(dim=1, keepdim=True)) / (std + STD_EPSILON)
    return torch.where(std >= std_threshold, adv, torch.zeros_like(adv)).reshape(-1)


def padded(entropies) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-rollout normalised entropies (sequences of any lengths) as ``[N, T]`` values and mask."""
    rows = [torch.as_tensor(h, dtype=torch.float64).reshape(-1) for h in entropies]
    width = max((len(h) for h in rows), default=0)
    values = torch.zeros((len(rows), width), dtype=torch.float64)
    mask = torch.zeros((len(rows), width), dtype=torch.float64)
    for i, h in enumerate(rows):
        values[i, : len(h)] = h
        mask[i, : len(h)] = 1.0
    return values, mask


def mean_negative_weight(entropies, advantages, alpha: float) -> float:
    """Mean horizon weight over every token of the negative-advantage rollouts, pooled as the trainer pools them
    (NaN when none); ``entropies``: per rollout, each token's normalised entropy; ``advantages``: one per rollout."""
    values, mask = entropies if isinstance(entropies, tuple) else padded(entropies)
    adv = torch.as_tensor(advantages, dtype=torch.float64).reshape(-1)
    if adv.numel() != values.shape[0]:
        raise ValueError(f"{adv.numel()} advantages for {values.shape[0]} rollouts")
    negative = mask * (adv < 0).to(mask.dtype).reshape(-1, 1)
    if negative.sum() == 0:
        return float("nan")
    weights = horizon_weights(values, mask, alpha).double()
    return float((weights * negative).sum() / negative.sum())


def solve_alpha(entropies, advantages, target: float, *, tolerance: float = 1e-6) -> dict:
    """``{"alpha", "weight", "iterations", "bracket"}``: the alpha in ``[0, ALPHA_RANGE[1]]`` at which
    :func:`mean_negative_weight` equals ``target``, by bisection; a ValueError says why there is none."""
    if not 0 < target < 1:
        raise ValueError(f"a target mean weight must lie in (0, 1), got {target}")
    data = padded(entropies)
    low, high = 0.0, ALPHA_RANGE[1]
    at_high = mean_negative_weight(data, advantages, high)
    if at_high != at_high:  # NaN
        raise ValueError("no rollout has a negative advantage: the discount never applies")
    if at_high > target:
        raise ValueError(f"even alpha = {high:g} (the largest allowed) gives a mean negative weight of "
                         f"{at_high:.4f} > target {target:.4f}; widen ALPHA_RANGE or use longer completions")
    iterations = 0
    while high - low > tolerance:
        middle = (low + high) / 2
        if mean_negative_weight(data, advantages, middle) > target:
            low = middle
        else:
            high = middle
        iterations += 1
    alpha = (low + high) / 2
    return {"alpha": alpha, "weight": mean_negative_weight(data, advantages, alpha), "iterations": iterations,
            "bracket": [0.0, ALPHA_RANGE[1]]}


def alphas_for_targets(entropies, advantages, targets: dict[str, float]) -> dict:
    """Per named target mean negative weight: the alpha giving it (3 decimals, or None and why) and its weight."""
    matched = {}
    for name, target in targets.items():
        try:
            solved = solve_alpha(entropies, advantages, target)
            matched[name] = {"target": target, "alpha": round(solved["alpha"], 3), "weight": solved["weight"]}
        except ValueError as err:
            matched[name] = {"target": target, "alpha": None, "reason": str(err)}
    return matched
