"""The paper's loss written out once more, as the reference the trainer's one path (TRL's ``bnpo`` with the
weighted advantages) is held to: the weighted clipped surrogate over the weighted token count, plus the
unweighted k3 KL penalty."""

import torch


def _masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    total = mask.sum()
    return (x * mask).sum() / total if total > 0 else torch.full((), float("nan"), device=x.device)


def saah_policy_loss(
    logps: torch.Tensor,
    old_logps: torch.Tensor,
    ref_logps: torch.Tensor | None,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    weights: torch.Tensor,
    epsilon: float = 0.2,
    beta: float = 0.04,
    *,
    norm_entropy: torch.Tensor | None = None,
    token_scale: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Weighted clipped surrogate plus the unweighted k3 KL penalty.

    ``loss = -sum(w * l * m) / sum(w * m) + beta * sum(kl * m) / sum(m)`` with
    ``l = min(r A, clip(r, 1-eps, 1+eps) A)`` and ``r = exp(logps - old_logps)``.
    With ``w = 1`` this is TRL's ``bnpo`` loss. ``token_scale`` multiplies the
    surrogate per token (TRL's vLLM importance-sampling correction).

    Returns the loss and detached statistics: ``entropy_norm``, ``weight_mean``,
    ``weight_neg_mean`` (NaN without negative rollouts), ``neg_frac``, ``kl``,
    ``surrogate``, ``clip_frac``.
    """
    mask = mask.to(logps.dtype)
    weights = weights.detach().to(logps.dtype)
    adv = advantages.reshape(-1, 1).to(logps.dtype)
    ratio = torch.exp(logps - old_logps)
    clipped = torch.clamp(ratio, 1.0 - epsilon, 1.0 + epsilon)
    surrogate = torch.min(ratio * adv, clipped * adv)
    if token_scale is not None:
        surrogate = surrogate * token_scale
    weighted_mask = weights * mask
    denom = weighted_mask.sum()
    denom = torch.where(denom > 0, denom, torch.ones_like(denom))
    loss = -(surrogate * weighted_mask).sum() / denom

    kl = None
    if beta != 0.0:
        if ref_logps is None:
            raise ValueError("beta != 0 needs ref_logps")
        delta = ref_logps - logps
        kl = torch.exp(delta) - delta - 1.0
        loss = loss + beta * (kl * mask).sum() / mask.sum().clamp(min=1.0)

    with torch.no_grad():
        negative_rows = (advantages.reshape(-1) < 0).to(logps.dtype).reshape(-1, 1)
        nan = torch.full((), float("nan"), device=logps.device)
        stats = {
            "entropy_norm": _masked_mean(norm_entropy.float(), mask) if norm_entropy is not None else nan,
            "weight_mean": _masked_mean(weights, mask),
            "weight_neg_mean": _masked_mean(weights, mask * negative_rows),
            "neg_frac": negative_rows.mean() if negative_rows.numel() else nan,
            "kl": _masked_mean(kl, mask) if kl is not None else nan,
            "surrogate": _masked_mean(surrogate, mask),
            "clip_frac": _masked_mean(((ratio - clipped).abs() > 0).to(logps.dtype), mask),
        }
    return loss, {k: v.detach() for k, v in stats.items()}
