"""How the static rollout engine turns logits into tokens: ``generate``'s warpers, then the exponential race.

``process_logits`` applies temperature, top-k, top-p and min-p in ``generate``'s order, after the repetition penalty
(``penalise_repeats``). ``race_sample`` draws ``argmax_i p_i / E_i`` with independent ``E_i ~ Exp(1)``, so token ``i``
wins with probability ``p_i / sum(p)``: the algorithm ``torch.multinomial(probs, 1)`` itself runs, without its input
checks, which read the probabilities on the host (two device-to-host syncs per call). Hence:

* eager, or compiled with ``eager``/``aot_eager``, it gives ``torch.multinomial``'s tokens for a seed and leaves the
  generator in the same state (``tests/models/test_sampling.py``);
* compiled with inductor it draws through inductor's own random kernels: the same distribution (a chi-square test),
  other tokens for a seed, another generator state;
* probabilities that are NaN or negative are flagged without a sync and raise when the rollout ends
  (``invalid_probabilities``), where ``torch.multinomial`` would stop at once.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch

#: ``generate`` keywords that only say where and how long to decode; the engine takes these from its own
#: arguments (pad, end-of-sequence and maximum length) or has no use for them (the cache kind).
NON_SAMPLING_KEYS = frozenset({"max_new_tokens", "pad_token_id", "bos_token_id", "eos_token_id",
                               "cache_implementation", "disable_compile"})
#: Values of a ``generate`` keyword that leave sampling unchanged (what refusing a setting must allow).
NEUTRAL_VALUES = (None, 1, 1.0, 0, 0.0, False, [], ())


@dataclass(frozen=True)
class SamplingSettings:
    """Every sampling setting the static engine implements; anything else is refused by name.

    ``repetition_penalty`` follows ``generate``'s processor: a logit of a token already in the row (prompt or
    completion, not the left padding) is divided by the penalty when positive, multiplied when negative.
    """

    do_sample: bool = True
    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    min_p: float | None = None
    min_new_tokens: int = 0
    repetition_penalty: float = 1.0

    def __post_init__(self):
        if not self.temperature > 0:
            raise ValueError(f"temperature must be > 0, got {self.temperature}")
        if not self.repetition_penalty > 0:
            raise ValueError(f"repetition_penalty must be > 0, got {self.repetition_penalty}")

    @classmethod
    def from_generation_kwargs(cls, kwargs: dict) -> "SamplingSettings":
        """From TRL's ``generation_kwargs`` dict; a setting this engine does not implement is an error naming it."""
        known = {f.name for f in fields(cls)} | NON_SAMPLING_KEYS
        for key, value in kwargs.items():
            if key not in known and value not in NEUTRAL_VALUES:
                raise ValueError(f"generation_backend='compiled' does not implement the generation setting "
                                 f"{key}={value!r}; drop it or use generation_backend='hf'")
        return cls(do_sample=bool(kwargs.get("do_sample", True)),
                   temperature=float(kwargs.get("temperature") or 1.0),
                   top_k=kwargs.get("top_k") or None,
                   top_p=kwargs.get("top_p"), min_p=kwargs.get("min_p"),
                   min_new_tokens=int(kwargs.get("min_new_tokens") or 0),
                   repetition_penalty=float(kwargs.get("repetition_penalty") or 1.0))


def penalise_repeats(logits: torch.Tensor, seen: torch.Tensor, penalty: float) -> torch.Tensor:
    """``generate``'s repetition penalty on the tokens marked in ``seen`` (batch, vocab) bool."""
    penalised = torch.where(logits < 0, logits * penalty, logits / penalty)
    return torch.where(seen, penalised, logits)


def process_logits(logits: torch.Tensor, s: SamplingSettings) -> torch.Tensor:
    """Temperature, top-k, top-p and min-p, as ``generate``'s warpers apply them (float32 in and out)."""
    if s.temperature != 1.0:
        logits = logits / s.temperature
    if s.top_k is not None and s.top_k > 0:
        k = min(s.top_k, logits.size(-1))
        kth = torch.topk(logits, k).values[..., -1, None]
        logits = logits.masked_fill(logits < kth, -float("inf"))
    if s.top_p is not None and s.top_p < 1.0:
        sorted_logits, sorted_idx = torch.sort(logits, descending=False)
        cum = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        remove_sorted = cum <= (1 - s.top_p)
        remove_sorted[..., -1:] = False  # keep at least one token
        remove = remove_sorted.scatter(1, sorted_idx, remove_sorted)
        logits = logits.masked_fill(remove, -float("inf"))
    if s.min_p is not None and s.min_p > 0:
        probs = logits.softmax(dim=-1)
        threshold = s.min_p * probs.max(dim=-1, keepdim=True).values
        logits = logits.masked_fill(probs < threshold, -float("inf"))
    return logits


def race_sample(probs: torch.Tensor) -> torch.Tensor:
    """One token per row of ``probs`` (rows sum to 1), as ``torch.multinomial(probs, 1)`` draws it; no host sync."""
    noise = torch.empty_like(probs).exponential_()
    return (probs / noise).argmax(dim=-1)


def invalid_probabilities(probs: torch.Tensor) -> torch.Tensor:
    """A 0-dim bool tensor: some probability is NaN or negative (what ``torch.multinomial`` refuses)."""
    return ~(probs >= 0).all()
