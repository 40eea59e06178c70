"""The SA-AH-GRPO method as plain tensor functions (no TRL, no model).

Per-token tensors are ``[B, T]`` (B completions, T completion positions; ``mask`` is 1 on real
completion tokens), advantages ``[B]``.  One evaluation of the paper's loss::

    H   = normalised_entropy(logits, V)              # H_t / log V, in [0, 1]
    w   = method_weights(method, H, mask, A, alpha)  # grpo: 1, ah: horizon, sa: selective
    f   = advantage_factors(w, mask, loss_type)       # what the trainer multiplies into TRL's advantages

The factor is the weight times the loss type's normaliser correction, so that TRL's own loss becomes the
weighted one (for ``bnpo``, the paper's: normalised by the weighted token count).  What each loss type
becomes is the table in docs/library.md ("The weights in each TRL loss type"); the choices the paper
leaves open (V, the top-K normaliser, the log-weight cap) are in docs/design.md.
"""

from __future__ import annotations

import math

import torch

from saah_lib.method.methods import LOG_WEIGHT_CAP, LOSS_TYPES, check_method

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

    ``logits``: ``[..., V]``. ``top_k=None`` gives the exact full-vocabulary entropy; ``top_k=K`` the estimate
    from the K largest logits. Rows are processed in chunks so only one ``[chunk, V]`` float32 block is live
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
    logit_scale: float = 1.0,
    final_logit_softcapping: float | None = None,
    chunk_size: int | None = None,
) -> torch.Tensor:
    """Normalised entropy from final hidden states ``[..., D]`` and the LM head.

    Lets the trainer reuse the hidden states of the forward it already ran: the ``[chunk, V]`` logits are formed
    one chunk at a time without gradient.  The logits are the policy's: ``z = head(h) * logit_scale``, then
    ``cap * tanh(z / cap)`` when ``final_logit_softcapping`` is set (Cohere, Granite, Gemma2/3 apply these in
    their forward), then ``/ temperature``.
    """
    vocab = lm_head_weight.size(0)
    flat = hidden.reshape(-1, hidden.size(-1))
    rows = _rows_per_chunk(vocab, chunk_size)
    out = torch.empty(flat.size(0), dtype=torch.float32, device=hidden.device)
    for start in range(0, flat.size(0), rows):
        chunk = flat[start : start + rows].to(lm_head_weight.dtype)
        logits = torch.nn.functional.linear(chunk, lm_head_weight, lm_head_bias)
        if logit_scale != 1.0 or final_logit_softcapping is not None:
            logits = logits.float() * logit_scale  # tanh in float32, as TRL's fused head computes it
            if final_logit_softcapping is not None:
                logits = final_logit_softcapping * torch.tanh(logits / final_logit_softcapping)
        out[start : start + rows] = _entropy_nats(logits / temperature, top_k)
    return (out / math.log(vocab)).reshape(hidden.shape[:-1])


def horizon_weights(norm_entropy: torch.Tensor, mask: torch.Tensor, alpha: float) -> torch.Tensor:
    """``w_t = exp(-alpha * sum_{s<=t} H_s)`` over completion tokens, detached.

    Computed as a cumulative sum in log space; alpha = 0 gives exactly 1.  The log-weights are capped at
    ``LOG_WEIGHT_CAP`` so that negative alpha (which grows the weights) cannot overflow float32.  For
    alpha >= 0 the cap never applies; far along a completion a large alpha may take weights to float32's 0,
    which only means no gradient there (the first token keeps ``exp(-alpha * H_1) >= exp(-alpha)``).
    ``alpha`` is the config's, checked there once (:data:`~saah_lib.method.methods.ALPHA_RANGE`).
    """
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


#: How each loss type normalises its summed per-token loss: by each completion's token count, by the
#: micro-batch's, by the accumulation window's (all processes), or by no token count at all.
PER_COMPLETION = ("grpo", "sapo")
PER_MICRO_BATCH = ("bnpo",)
PER_WINDOW = ("dapo", "cispo", "vespo")
NO_TOKEN_COUNT = ("dr_grpo", "luspo")
assert set(PER_COMPLETION + PER_MICRO_BATCH + PER_WINDOW + NO_TOKEN_COUNT) == set(LOSS_TYPES)


def normaliser_correction(weights: torch.Tensor, mask: torch.Tensor, loss_type: str,
                          sum_over_processes=None) -> torch.Tensor:
    """``count(m) / count(w * m)`` of the loss type's normaliser: multiplied into the weights it turns TRL's
    division by a token count into a division by the weighted count.

    ``[B, 1]`` for per-completion normalisers, a scalar otherwise (1 where no token count is used).
    ``sum_over_processes`` sums a tensor over processes (the window normaliser spans them). A count clamped
    at 1, as TRL clamps it; a weighted count of 0 (no tokens) divides by 1.
    """
    if loss_type not in LOSS_TYPES:
        raise ValueError(f"unknown loss_type {loss_type!r}: expected one of {', '.join(LOSS_TYPES)}")
    if loss_type in NO_TOKEN_COUNT:
        return torch.ones((), dtype=weights.dtype, device=weights.device)
    weighted = weights * mask
    if loss_type in PER_COMPLETION:
        count, weighted_count = mask.sum(-1, keepdim=True), weighted.sum(-1, keepdim=True)
    else:
        count, weighted_count = mask.sum(), weighted.sum()
        if loss_type in PER_WINDOW and sum_over_processes is not None:
            count, weighted_count = sum_over_processes(torch.stack([count, weighted_count]))
    weighted_count = torch.where(weighted_count > 0, weighted_count, torch.ones_like(weighted_count))
    return count.clamp(min=1.0) / weighted_count


def advantage_factors(weights: torch.Tensor, mask: torch.Tensor, loss_type: str,
                      sum_over_processes=None) -> torch.Tensor:
    """Per-token factors ``[B, T]`` for the advantages TRL's loss reads: the weight times the normaliser
    correction, detached.  Floored at float32's smallest normal number so that a weight that underflowed to 0
    cannot turn a negative advantage into -0.0, which TRL's sign tests read as non-negative."""
    weights = weights.detach().float()
    factors = weights * normaliser_correction(weights, mask.float(), loss_type, sum_over_processes)
    return factors.clamp(min=torch.finfo(torch.float32).tiny)


def _masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    total = mask.sum()
    return (x * mask).sum() / total if total > 0 else torch.full((), float("nan"), device=x.device)


@torch.no_grad()
def weight_statistics(norm_entropy: torch.Tensor, weights: torch.Tensor, mask: torch.Tensor,
                      advantages: torch.Tensor) -> dict[str, torch.Tensor]:
    """The logged means of a micro-batch: ``entropy_norm``, ``weight_mean``, ``weight_neg_mean`` (over the
    tokens of negative-advantage rollouts; NaN without one) and ``neg_frac``."""
    mask = mask.float()
    negative_rows = (advantages.reshape(-1) < 0).float().reshape(-1, 1)
    nan = torch.full((), float("nan"), device=mask.device)
    return {
        "entropy_norm": _masked_mean(norm_entropy.float(), mask),
        "weight_mean": _masked_mean(weights.float(), mask),
        "weight_neg_mean": _masked_mean(weights.float(), mask * negative_rows),
        "neg_frac": negative_rows.mean() if negative_rows.numel() else nan,
    }
