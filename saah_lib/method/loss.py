"""The SA-AH-GRPO method as plain tensor functions (no TRL, no model).

Shapes: per-token tensors are ``[B, T]`` (B completions, T completion positions,
``mask`` is 1 on real completion tokens), advantages are ``[B]``.

Pipeline of one loss evaluation::

    H   = normalised_entropy(logits, V)            # H_t / log V, in [0, 1]
    w   = method_weights(method, H, mask, A, alpha) # grpo: 1, ah: horizon, sa: selective
    L,s = saah_policy_loss(logps, old, ref, A, mask, w)

Choices the paper leaves open (also listed in the README):

* ``V`` is the number of logits the model emits (``lm_head`` rows, 151,936 for
  Qwen2.5), i.e. the support of the distribution whose entropy is measured.
* The top-K estimate renormalises the K largest logits with a softmax over those
  K and divides its entropy by ``log V`` (not ``log K``), so exact and top-K
  values live on the same scale; with K = V they coincide.
* The cumulative sum runs over completion tokens only (prompt and padding add 0).
* Log-weights are capped at ``LOG_WEIGHT_CAP`` so that negative alpha (which
  grows the weights) cannot overflow float32; the cap is reached only when
  ``-alpha * sum(H) > 50``, far outside the paper's settings.  For alpha >= 0
  the log-weights are <= 0 and the cap never applies; far along a completion
  a large alpha may take weights to float32's 0, which only means no gradient
  there (the first token keeps ``exp(-alpha * H_1) >= exp(-alpha)``).
"""

from __future__ import annotations

import math

import torch

from saah_lib.method.methods import LOG_WEIGHT_CAP, check_alpha, check_method

# Rows of a [chunk, V] float32 block: 2**25 elements is 128 MiB whatever V is.
_BLOCK_ELEMENTS = 2**25


def _rows_per_chunk(vocab: int, chunk_size: int | None) -> int:
    return chunk_size if chunk_size is not None else max(1, _BLOCK_ELEMENTS // max(vocab, 1))


def _entropy_nats(logits: torch.Tensor, top_k: int | None) -> torch.Tensor:
    """Entropy (nats) of softmax over the last dim, or over its top-k entries."""
    if top_k is not None and top_k < logits.size(-1):
        logits = torch.topk(logits, top_k, dim=-1, sorted=False).values
    logp = torch.log_softmax(logits.float(), dim=-1)
    return -(logp.exp() * logp).sum(-1)


@torch.no_grad()
def normalised_entropy(
    logits: torch.Tensor,
    vocab_size: int | None = None,
    top_k: int | None = 500,
    chunk_size: int | None = None,
) -> torch.Tensor:
    """Shannon entropy of each next-token distribution divided by ``log V``.

    ``logits``: ``[..., V]``. ``top_k=None`` gives the exact full-vocabulary
    entropy; ``top_k=K`` the estimate from the K largest logits. Rows are
    processed in chunks so only one ``[chunk, V]`` float32 block is live
    (plus its softmax), never ``[B*T, V]``. Returns ``logits.shape[:-1]``.
    """
    vocab = vocab_size or logits.size(-1)
    if vocab < 2:
        raise ValueError(f"vocab_size must be >= 2, got {vocab}")
    if top_k is not None and top_k < 1:
        raise ValueError(f"top_k must be a positive integer or None, got {top_k}")
    flat = logits.reshape(-1, logits.size(-1))
    rows = _rows_per_chunk(flat.size(-1), chunk_size)
    out = torch.empty(flat.size(0), dtype=torch.float32, device=logits.device)
    for start in range(0, flat.size(0), rows):
        out[start : start + rows] = _entropy_nats(flat[start : start + rows], top_k)
    return (out / math.log(vocab)).reshape(logits.shape[:-1])


@torch.no_grad()
def normalised_entropy_from_hidden(
    hidden: torch.Tensor,
    lm_head_weight: torch.Tensor,
    lm_head_bias: torch.Tensor | None = None,
    *,
    top_k: int | None = 500,
    temperature: float = 1.0,
    chunk_size: int | None = None,
) -> torch.Tensor:
    """Normalised entropy from final hidden states ``[..., D]`` and the LM head.

    Lets the trainer reuse the hidden states of the forward it already ran: the
    ``[chunk, V]`` logits are formed one chunk at a time without gradient.
    """
    vocab = lm_head_weight.size(0)
    flat = hidden.reshape(-1, hidden.size(-1))
    rows = _rows_per_chunk(vocab, chunk_size)
    out = torch.empty(flat.size(0), dtype=torch.float32, device=hidden.device)
    for start in range(0, flat.size(0), rows):
        chunk = flat[start : start + rows].to(lm_head_weight.dtype)
        logits = torch.nn.functional.linear(chunk, lm_head_weight, lm_head_bias) / temperature
        out[start : start + rows] = _entropy_nats(logits, top_k)
    return (out / math.log(vocab)).reshape(hidden.shape[:-1])


def horizon_weights(norm_entropy: torch.Tensor, mask: torch.Tensor, alpha: float) -> torch.Tensor:
    """``w_t = exp(-alpha * sum_{s<=t} H_s)`` over completion tokens, detached.

    Computed as a cumulative sum in log space; alpha = 0 gives exactly 1.
    """
    alpha = check_alpha(alpha)
    if alpha == 0.0:
        return torch.ones_like(norm_entropy, dtype=torch.float32)
    h = norm_entropy.detach().float() * mask.float()
    log_w = (-alpha * torch.cumsum(h, dim=-1)).clamp(max=LOG_WEIGHT_CAP)
    return torch.exp(log_w)


def selective_weights(weights: torch.Tensor, advantages: torch.Tensor) -> torch.Tensor:
    """The horizon weight on rollouts with negative advantage, exactly 1 elsewhere."""
    negative = (advantages < 0).reshape(-1, 1)
    return torch.where(negative, weights, torch.ones_like(weights))


def method_weights(
    method: str,
    norm_entropy: torch.Tensor,
    mask: torch.Tensor,
    advantages: torch.Tensor,
    alpha: float,
) -> torch.Tensor:
    """Token weights of a method: ``grpo`` (alpha forced to 0), ``ah`` or ``sa``."""
    if check_method(method) == "grpo":
        return torch.ones_like(norm_entropy, dtype=torch.float32)
    weights = horizon_weights(norm_entropy, mask, alpha)
    return weights if method == "ah" else selective_weights(weights, advantages)


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
