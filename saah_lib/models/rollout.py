"""Fast rollouts: a static-shape decode loop that ``torch.compile`` can capture once.

Why this exists: ``model.generate`` with a dynamic cache spends most of a GPU
step launching kernels (about 90 ms per decode step for Qwen2.5-1.5B against
~7 ms once compiled with a static cache), and TRL builds its generation config
with ``disable_compile=True``. This module decodes with

* a static KV cache (``transformers.StaticCache``) of ``bucket + max_new_tokens``,
* prompt lengths left-padded up to one of a few static sizes (``prompt_bucket``),
* a fixed completion budget and a full-length 2D attention mask, so every decode
  step has the same shapes and a compiled step never recompiles,
* LoRA adapters merged into the base weights for the rollout and the base
  weights copied back bit for bit afterwards (``merged_lora``).

Sampling follows ``generate``'s order: min-new-tokens, temperature, top-k,
top-p, min-p, then ``torch.multinomial``; finished rows emit the pad token.
The returned log-probabilities are ``log_softmax(logits / temperature)`` at the
sampled token, the quantity TRL's training forward computes, so the importance
ratio at the start of a step is 1.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

import torch
from peft.tuners.lora import LoraLayer
from transformers import StaticCache

# Prompt lengths are padded up to the first of these (then to multiples of the last).
PROMPT_BUCKETS = (64, 128, 256, 512, 1024)


def prompt_bucket(length: int, buckets: tuple[int, ...] = PROMPT_BUCKETS) -> int:
    """The static padded length for a prompt batch whose longest prompt has ``length`` tokens."""
    for b in buckets:
        if length <= b:
            return b
    step = buckets[-1]
    return -(-length // step) * step


@dataclass(frozen=True)
class SamplingSettings:
    do_sample: bool = True
    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    min_p: float | None = None
    min_new_tokens: int = 0

    @classmethod
    def from_generation_kwargs(cls, kwargs: dict) -> "SamplingSettings":
        """From TRL's ``generation_kwargs`` dict; settings this engine does not implement are an error."""
        penalty = kwargs.get("repetition_penalty")
        if penalty not in (None, 1.0):
            raise ValueError(f"generation_backend='compiled' does not implement repetition_penalty={penalty}; "
                             "use generation_backend='hf'")
        for key in ("suppress_tokens", "num_beams", "stop_strings"):
            if kwargs.get(key) not in (None, 1, [], ()):
                raise ValueError(f"generation_backend='compiled' does not implement {key}; use generation_backend='hf'")
        return cls(do_sample=bool(kwargs.get("do_sample", True)),
                   temperature=float(kwargs.get("temperature") or 1.0),
                   top_k=kwargs.get("top_k") or None,
                   top_p=kwargs.get("top_p"), min_p=kwargs.get("min_p"),
                   min_new_tokens=int(kwargs.get("min_new_tokens") or 0))


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


# ---------------------------------------------------------------------- LoRA


@contextmanager
def merged_lora(model):
    """Merge active LoRA adapters into the base weights; afterwards copy the saved base weights back.

    Copying back (instead of PEFT's ``unmerge``, which subtracts in the weight's
    dtype) keeps the base weights bit-identical in bf16. Adapter weights are never
    written. A model without LoRA layers passes through untouched.
    """
    saved = []
    for module in model.modules():
        if isinstance(module, LoraLayer) and not module.merged:
            base = module.get_base_layer()
            saved.append((module, base.weight.detach().clone()))
    try:
        with torch.no_grad():
            for module, _ in saved:
                module.merge(adapter_names=list(module.active_adapters))
        yield model
    finally:
        with torch.no_grad():
            for module, weight in saved:
                module.get_base_layer().weight.copy_(weight)
                module.merged_adapters.clear()


# ---------------------------------------------------------------------- engine


class StaticRollout:
    """Static-shape batched decoding for one causal LM.

    ``compile=True`` wraps the one-token decode step in ``torch.compile`` (with
    CUDA graphs, ``mode="reduce-overhead"``, on CUDA); the prefill stays eager.
    Caches are kept per (batch, bucket) so repeated calls reuse one graph.
    """

    def __init__(self, *, max_new_tokens: int, pad_token_id: int, eos_token_ids, compile: bool = False,
                 compile_mode: str | None = None, compile_backend: str | None = None, buckets: tuple[int, ...] = PROMPT_BUCKETS,
                 early_exit_every: int | None = None):
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        self.max_new_tokens = max_new_tokens
        self.pad_token_id = pad_token_id
        eos = [] if eos_token_ids is None else [eos_token_ids] if isinstance(eos_token_ids, int) else eos_token_ids
        self.eos_token_ids = sorted({int(e) for e in eos if e is not None})
        self.compile = compile
        self.compile_mode = compile_mode
        self.compile_backend = compile_backend or "inductor"
        self.buckets = tuple(buckets)
        # Stop once every row has ended, checked every N tokens (a host sync). Uncompiled: every token, as
        # generate does, so the global RNG advances exactly as on TRL's path and runs stay reproducible
        # across backends; compiled: every 16, so the CPU can queue CUDA-graph replays ahead.
        self.early_exit_every = early_exit_every or (16 if compile else 1)
        self._caches: dict = {}
        self._compiled_step = None
        self.compiled_steps_seen: set = set()  # (batch, bucket) shapes the compiled step has run with

    # -------------------------------------------------------------- model calls
    @staticmethod
    def _step(model, input_ids, position_ids, attention_mask, cache):
        out = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                    past_key_values=cache, use_cache=True, logits_to_keep=1)
        return out.logits[:, -1, :].float()

    def _decode_fn(self):
        if not self.compile:
            return self._step
        if self._compiled_step is None:
            mode = self.compile_mode or ("reduce-overhead" if torch.cuda.is_available() else None)
            if self.compile_backend != "inductor":
                mode = None  # modes are inductor's
            self._compiled_step = torch.compile(self._step, backend=self.compile_backend, mode=mode,
                                                fullgraph=False, dynamic=False)
        return self._compiled_step

    def _cache(self, model, batch: int, length: int, device, dtype):
        key = (batch, length, str(device), dtype)
        cache = self._caches.get(key)
        if cache is None:
            cache = StaticCache(config=model.config, max_cache_len=length)
            self._caches = {key: cache}  # keep one: a new shape drops the old buffers
        else:
            cache.reset()
        return cache

    # -------------------------------------------------------------- generation
    @torch.no_grad()
    def generate(self, model, prompt_ids: list[list[int]], sampling: SamplingSettings,
                 generator: torch.Generator | None = None):
        """Completions for ``prompt_ids`` (lists of token ids, unpadded).

        Returns ``(completion_ids, logprobs)``: per row, the tokens up to and
        including the first EOS (TRL's completion mask), and the matching
        per-token log-probabilities under ``temperature`` only.
        """
        device = next(model.parameters()).device
        dtype = next(model.parameters()).dtype
        batch = len(prompt_ids)
        lengths = torch.tensor([len(p) for p in prompt_ids])
        if (lengths == 0).any():
            raise ValueError("every prompt needs at least one token")
        bucket = prompt_bucket(int(lengths.max()), self.buckets)
        total = bucket + self.max_new_tokens

        ids = torch.full((batch, bucket), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((batch, total), dtype=torch.long)
        for i, p in enumerate(prompt_ids):
            ids[i, bucket - len(p):] = torch.tensor(p, dtype=torch.long)
        mask[:, :bucket] = (torch.arange(bucket) >= (bucket - lengths)[:, None]).long()
        mask[:, bucket:] = 1  # future slots: the causal mask hides what is not written yet
        ids, mask = ids.to(device), mask.to(device)
        # positions as generate computes them for left padding: cumsum(mask) - 1, pads at 1
        positions = mask[:, :bucket].cumsum(-1) - 1
        positions = positions.masked_fill(mask[:, :bucket] == 0, 1)
        next_position = lengths.to(device)[:, None]  # (batch, 1)

        cache = self._cache(model, batch, total, device, dtype)
        eos = torch.tensor(self.eos_token_ids, device=device, dtype=torch.long)
        tokens = torch.full((batch, self.max_new_tokens), self.pad_token_id, dtype=torch.long, device=device)
        logps = torch.zeros((batch, self.max_new_tokens), dtype=torch.float32, device=device)
        finished = torch.zeros(batch, dtype=torch.bool, device=device)

        logits = self._step(model, ids, positions, mask, cache)  # prefill: eager, one shape per bucket
        decode = self._decode_fn()
        if self.compile:
            self.compiled_steps_seen.add((batch, bucket))
        steps_run = 0
        for t in range(self.max_new_tokens):
            if t > 0:
                logits = decode(model, tokens[:, t - 1 : t], next_position + (t - 1), mask, cache)
                if self.compile:
                    logits = logits.clone()  # CUDA-graph outputs are overwritten by the next replay
            if t < sampling.min_new_tokens and eos.numel():
                logits[:, eos] = -float("inf")
            scaled = logits / sampling.temperature if sampling.temperature != 1.0 else logits
            if sampling.do_sample:
                probs = process_logits(logits, sampling).softmax(dim=-1)
                nxt = torch.multinomial(probs, num_samples=1, generator=generator).squeeze(1)
            else:
                nxt = logits.argmax(dim=-1)
            step_logp = scaled.log_softmax(dim=-1).gather(1, nxt[:, None]).squeeze(1)
            nxt = torch.where(finished, torch.full_like(nxt, self.pad_token_id), nxt)
            tokens[:, t] = nxt
            logps[:, t] = torch.where(finished, torch.zeros_like(step_logp), step_logp)
            if eos.numel():
                finished = finished | torch.isin(nxt, eos)
            steps_run = t + 1
            if eos.numel() and (t + 1) % self.early_exit_every == 0 and bool(finished.all()):
                break

        tokens, logps = tokens[:, :steps_run].cpu(), logps[:, :steps_run].cpu()
        return completion_lists(tokens, logps, self.eos_token_ids)


def completion_lists(tokens: torch.Tensor, logps: torch.Tensor, eos_token_ids):
    """Cut each row after its first EOS, as TRL's generation path does."""
    is_eos = torch.isin(tokens, torch.tensor(list(eos_token_ids), dtype=tokens.dtype))
    n = tokens.size(1)
    ends = torch.where(is_eos.any(1), is_eos.int().argmax(1) + 1, torch.full((tokens.size(0),), n))
    ids = [tokens[i, : ends[i]].tolist() for i in range(tokens.size(0))]
    lps = [logps[i, : ends[i]].tolist() for i in range(tokens.size(0))]
    return ids, lps
