"""Fast rollouts: a static-shape decode loop that ``torch.compile`` captures once per shape.

Why: ``model.generate`` with a dynamic cache spends most of a GPU step launching kernels, and TRL builds its
generation config with ``disable_compile=True`` (the per-token times of both, measured on one H100:
``results/bench/NVIDIA_H100_80GB_HBM3-gpu-bench-qwen2.5-1.5b.json``). The engine (:class:`StaticRollout`) keeps one
cache length and one static state per batch size, runs one compiled call per token (model, sampling, log-prob,
finished flags), and decodes in eval mode on every backend. Compiled, LoRA stays unmerged (the policy the training
forward scores, exactly); eager (CPU), it is merged for the rollout (:func:`merged_lora`: the same policy, rounded
once more in low precision). Sampling follows ``generate``'s order (:mod:`saah_lib.models.sampling`); the returned
log-probabilities are ``log_softmax(logits / temperature)`` at the sampled token, TRL's training forward's quantity,
so the importance ratio at the start of a step is 1 up to the dtype's rounding. The design, its guarantees and the
tests that hold them: docs/gpu.md, "The compiled rollout backend".
"""

from __future__ import annotations

import os
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, fields

import torch
import torch._functorch.config as functorch_config
import torch._inductor.config as inductor_config
from peft.tuners.lora import LoraLayer
from torch._inductor import list_mode_options
from torch._inductor.runtime.cache_dir_utils import cache_dir as inductor_cache_dir
from torch.compiler import skip_guard_on_all_nn_modules_unsafe
from torch.profiler import record_function
from transformers import StaticCache

from saah_lib.models.attention import gqa_attention
from saah_lib.models.compile_health import CompileHealth, RecompileError
from saah_lib.models.sampling import (
    SamplingSettings,
    invalid_probabilities,
    penalise_repeats,
    process_logits,
    race_sample,
)

# Prompt lengths are padded up to the first of these (then to multiples of the last).
PROMPT_BUCKETS = (64, 128, 256, 512, 1024)
#: A cache reserved up front holds the longest prompt rounded up to this many tokens (or its bucket, if less).
RESERVE_MULTIPLE = 64
#: Compiled decoding reads "has every row ended?" on the host once per this many tokens.
EARLY_EXIT_EVERY = 16
#: transformers' (and PEFT's) forward hooks that only set requires_grad on the input embeddings' output.
INPUT_GRAD_HOOKS = ("make_inputs_require_grads", "make_inputs_require_grad")

__all__ = ["PROMPT_BUCKETS", "EARLY_EXIT_EVERY", "SamplingSettings", "StaticRollout", "build_engine", "eval_mode",
           "decoding_state", "drop_orphaned_input_grad_hooks", "prompt_bucket", "reserved_capacity", "completion_lists",
           "static_state_bytes"]


def prompt_bucket(length: int, buckets: tuple[int, ...] = PROMPT_BUCKETS) -> int:
    """The static padded length for a prompt batch whose longest prompt has ``length`` tokens."""
    step = buckets[-1]
    return next((b for b in buckets if length <= b), -(-length // step) * step)


def reserved_capacity(longest_prompt: int, buckets: tuple[int, ...] = PROMPT_BUCKETS) -> int:
    """Prompt slots of a cache reserved for prompts of up to ``longest_prompt`` tokens.

    The smaller of the prompt's bucket and the length rounded up to ``RESERVE_MULTIPLE``: attention reads
    the whole static cache at every token (the mask hides the unused slots, it does not skip them), so
    every slot of spare capacity costs decode time, and one reservation per run needs no coarse buckets.
    """
    return min(prompt_bucket(longest_prompt, buckets), -(-longest_prompt // RESERVE_MULTIPLE) * RESERVE_MULTIPLE)


@contextmanager
def eval_mode(model):
    """Every module in eval mode inside; each module's own mode restored on exit."""
    modes = [(m, m.training) for m in model.modules()]
    try:
        model.eval()
        yield model
    finally:
        for module, mode in modes:
            module.training = mode


@contextmanager
def merged_lora(model):
    """Each active LoRA adapter folded into its base layer's weight inside, as PEFT's merge marks it; the
    weights and marks as they were on exit.

    Why: unmerged, every projection of a decode step runs three matrix products instead of one. The merged
    weight is a new tensor, ``W + get_delta_weight`` rounded once to W's dtype; the original tensor is put
    back, not un-merged by subtraction (which in bfloat16 would not give W back). For no-grad decoding only.
    """
    layers = [m for m in model.modules() if isinstance(m, LoraLayer) and not m.merged and not m.disable_adapters
              and any(a in m.lora_A for a in m.active_adapters)]
    kept = []
    try:
        with torch.no_grad():
            for layer in layers:
                weight = layer.get_base_layer().weight
                adapters = [a for a in layer.active_adapters if a in layer.lora_A]
                delta = sum(layer.get_delta_weight(a).float() for a in adapters)
                kept.append((layer, weight, weight.data, adapters))
                weight.data = (weight.data.float() + delta).to(weight.dtype)
                layer.merged_adapters.extend(adapters)
        yield model
    finally:
        for layer, weight, data, adapters in kept:
            weight.data = data
            for a in adapters:
                layer.merged_adapters.remove(a)


def _input_embeddings(model):
    try:
        return model.get_input_embeddings()
    except (AttributeError, NotImplementedError):
        return None


@contextmanager
def decoding_state(model):
    """The model as every decode call sees it, whoever calls and whatever TRL toggled before.

    Inside: every module in eval mode (the rollout policy), every ``gradient_checkpointing`` flag
    False, the input-gradient hooks of transformers and PEFT detached from the input embeddings, and
    the cache-copy-free attention (``gqa_attention``). All are restored exactly on exit. Checkpointing
    and those hooks change no decoded value (checkpointing acts only in training mode; the hooks only
    mark the embeddings' output as requiring grad), but TRL toggles them around every generation, and
    the engine's module-state check would then see a changed model at every step.
    """
    checkpointing = [(m, m.gradient_checkpointing) for m in model.modules()
                     if isinstance(getattr(m, "gradient_checkpointing", None), bool)]
    embeddings = _input_embeddings(model)
    hooks = dict(embeddings._forward_hooks) if embeddings is not None else {}
    try:
        for hook_id, hook in hooks.items():
            if getattr(getattr(hook, "__code__", None), "co_name", None) in INPUT_GRAD_HOOKS:
                del embeddings._forward_hooks[hook_id]
        for module, _ in checkpointing:
            module.gradient_checkpointing = False
        with eval_mode(model), gqa_attention(model):
            yield model
    finally:
        if embeddings is not None:
            embeddings._forward_hooks.clear()
            embeddings._forward_hooks.update(hooks)  # same hooks, same order
        for module, flag in checkpointing:
            module.gradient_checkpointing = flag


def drop_orphaned_input_grad_hooks(model) -> int:
    """Remove input-gradient hooks that transformers registered and no longer tracks; returns how many.

    ``gradient_checkpointing_enable`` registers a new ``make_inputs_require_grads`` hook on the input
    embeddings and keeps only the newest handle (``_require_grads_hooks``); the disable call removes
    it only for a model loaded with transformers' own PEFT integration. TRL disables and re-enables
    checkpointing around every generation, so a PEFT-wrapped model gains two such hooks per step,
    all doing what the tracked one does. Removing the untracked ones changes no value.
    """
    embeddings = _input_embeddings(model)
    tracked = {h.id for m in model.modules() for h in getattr(m, "_require_grads_hooks", None) or ()}
    if embeddings is None or not tracked:
        return 0  # nothing tracked: we cannot tell an orphan from a hook someone needs
    orphans = [hook_id for hook_id, hook in embeddings._forward_hooks.items()
               if getattr(hook.__code__, "co_name", None) == "make_inputs_require_grads" and hook_id not in tracked]
    for hook_id in orphans:
        del embeddings._forward_hooks[hook_id]
    return len(orphans)


def module_state(model) -> dict:
    """Per module: what the compiled step's module guards would check (hooks, mode, adapters), by name."""
    state = {"<model object>": id(model)}
    for name, m in model.named_modules():
        adapters = getattr(m, "active_adapters", None) if isinstance(m, LoraLayer) else None
        state[name] = (type(m).__name__, m.training, tuple(m._forward_hooks), tuple(m._forward_pre_hooks),
                       getattr(m, "disable_adapters", None) if isinstance(m, LoraLayer) else None,
                       tuple(adapters or ()), getattr(m, "merged", None) if isinstance(m, LoraLayer) else None)
    return state


@dataclass
class DecodeBuffers:
    """The decode state of one (batch, cache length) shape, updated in place at static addresses."""

    tokens: torch.Tensor  # (batch, max_new_tokens) sampled tokens, pad after a row's end
    logps: torch.Tensor  # (batch, max_new_tokens) float32 log-probabilities of those tokens
    finished: torch.Tensor  # (batch,) bool: the row has emitted an end-of-sequence token
    all_finished: torch.Tensor  # () bool: every row has
    t: torch.Tensor  # () long: index of the next token to sample
    last: torch.Tensor  # (batch, 1) long: the token sampled last, fed to the next step
    start: torch.Tensor  # (batch, 1) long: each row's prompt length (position of its first new token)
    mask: torch.Tensor  # (batch, cache length) attention mask: prompt padding 0, all else 1
    eos: torch.Tensor  # (vocab,) bool: the end-of-sequence tokens
    invalid: torch.Tensor  # () bool: some sampling distribution had a NaN or negative probability
    seen: torch.Tensor  # (batch, vocab) bool: tokens already in the row, for the repetition penalty

    @classmethod
    def allocate(cls, batch: int, cache_len: int, max_new_tokens: int, vocab: int, eos_token_ids, device):
        def zeros(*shape, dtype=torch.long):
            return torch.zeros(shape, dtype=dtype, device=device)

        eos = zeros(vocab, dtype=torch.bool)
        eos[[e for e in eos_token_ids if e < vocab]] = True
        buffers = cls(tokens=zeros(batch, max_new_tokens), logps=zeros(batch, max_new_tokens, dtype=torch.float32),
                      finished=zeros(batch, dtype=torch.bool), all_finished=zeros(dtype=torch.bool), t=zeros(),
                      last=zeros(batch, 1), start=zeros(batch, 1), mask=zeros(batch, cache_len), eos=eos,
                      invalid=zeros(dtype=torch.bool), seen=zeros(batch, vocab, dtype=torch.bool))
        for tensor in buffers.tensors():
            torch._dynamo.mark_static_address(tensor)  # mutated in the graph: CUDA graphs need fixed addresses
        return buffers

    def tensors(self) -> list[torch.Tensor]:
        return [getattr(self, f.name) for f in fields(self)]

    def reset(self, prompt_mask: torch.Tensor, lengths: torch.Tensor, seen_ids: torch.Tensor,
              pad_token_id: int) -> None:
        bucket = prompt_mask.size(1)
        self.seen.zero_()
        self.seen.scatter_(1, seen_ids, True)
        self.tokens.fill_(pad_token_id)
        self.logps.zero_()
        self.finished.zero_()
        self.all_finished.zero_()
        self.invalid.zero_()
        self.t.zero_()
        self.start.copy_(lengths[:, None])
        self.mask[:, :bucket].copy_(prompt_mask)
        self.mask[:, bucket:] = 1  # later slots: the causal mask hides what is not written yet


def _forward(model, input_ids, position_ids, attention_mask, cache) -> torch.Tensor:
    out = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                past_key_values=cache, use_cache=True, logits_to_keep=1)
    return out.logits[:, -1, :].float()


def _advance(buf: DecodeBuffers, logits: torch.Tensor, sampling: SamplingSettings, pad_token_id: int) -> None:
    """Sample token ``buf.t`` of every row from ``logits`` and write it, its log-prob and the flags into ``buf``."""
    raw = logits  # the training forward scores raw logits: no penalty, no warpers
    if sampling.repetition_penalty != 1.0:
        logits = penalise_repeats(logits, buf.seen, sampling.repetition_penalty)
    if sampling.min_new_tokens > 0:
        logits = logits.masked_fill(buf.eos & (buf.t < sampling.min_new_tokens), -float("inf"))
    if sampling.do_sample:
        probs = process_logits(logits, sampling).softmax(dim=-1)
        buf.invalid.logical_or_(invalid_probabilities(probs))  # checked once the rollout ends: no sync here
        nxt = race_sample(probs)
    else:
        nxt = logits.argmax(dim=-1)
    scaled = raw / sampling.temperature if sampling.temperature != 1.0 else raw
    logp = scaled.log_softmax(dim=-1).gather(1, nxt[:, None]).squeeze(1)
    nxt = torch.where(buf.finished, pad_token_id, nxt)
    logp = torch.where(buf.finished, 0.0, logp)
    column = buf.t.view(1)
    buf.tokens.index_copy_(1, column, nxt[:, None])
    buf.logps.index_copy_(1, column, logp[:, None])
    finished = buf.finished | buf.eos[nxt]
    buf.finished.copy_(finished)
    buf.all_finished.copy_(finished.all())
    buf.last.copy_(nxt[:, None])
    if sampling.repetition_penalty != 1.0:
        buf.seen.scatter_(1, nxt[:, None], True)
    buf.t.add_(1)


def _decode_step(model, cache, buf: DecodeBuffers, sampling: SamplingSettings, pad_token_id: int):
    """Feed the last token, sample the next one: the function that is compiled, one graph per shape."""
    logits = _forward(model, buf.last, buf.start + buf.t - 1, buf.mask, cache)
    _advance(buf, logits, sampling, pad_token_id)


#: Bits per vector register of the ATen capabilities that ATEN_CPU_CAPABILITY can name.
_CAPABILITY_BITS = {"avx2": 256, "avx512": 512}


def align_inductor_cpu_isa() -> None:
    """Tell inductor the vector width of the pinned CPU capability explicitly (``cpp.simdlen``).

    Why: with ``ATEN_CPU_CAPABILITY=avx2`` on an AVX-512 CPU (the pinned numerics of :mod:`saah_lib.numerics`)
    and ``cpp.simdlen`` left unset, torch 2.13's inductor compiled ``exponential_`` into a kernel that left half
    of a small output unwritten (uninitialised values, so the race sampler drew a wrong distribution;
    ``tests/models/test_sampling.py``). Naming the same 256-bit width through ``cpp.simdlen`` gives correct
    draws.  A width the user set is left alone.
    """
    capability = os.environ.get("ATEN_CPU_CAPABILITY", "").strip().lower()
    if inductor_config.cpp.simdlen is None and capability in _CAPABILITY_BITS:
        inductor_config.cpp.simdlen = _CAPABILITY_BITS[capability]


def enable_compile_caches() -> dict:
    """Inductor's FX graph cache and AOTAutograd's cache on; returns what is in force and the folder.

    Why: every run of a grid compiles the same decode graphs (same model, batch sizes and cache lengths);
    with both caches a later process loads the compiled code from disk instead of compiling it. Both are
    torch's defaults, set here so that a changed default cannot turn them off. The folder is inductor's:
    ``$TORCHINDUCTOR_CACHE_DIR``, else ``<temporary directory>/torchinductor_<user>``, shared by the
    processes of one machine. ``TORCHINDUCTOR_FX_GRAPH_CACHE=0`` / ``TORCHINDUCTOR_AUTOGRAD_CACHE=0`` win.
    """
    inductor_config.fx_graph_cache = True
    functorch_config.enable_autograd_cache = True
    return {"fx_graph_cache": bool(inductor_config.fx_graph_cache),
            "autograd_cache": bool(functorch_config.enable_autograd_cache),
            "cache_dir": inductor_cache_dir()}


def build_engine(*, max_new_tokens: int, pad_token_id: int, eos_token_ids, device, compile: bool | None = None,
                 compile_backend: str | None = None, health: CompileHealth | None = None,
                 name: str = "rollout", longest_prompt: int | None = None) -> "StaticRollout":
    """The one way the package makes an engine: ``compile=None`` compiles on CUDA only (on CPU a
    compiled step is slower than eager and is used by tests and the preflight only).
    ``longest_prompt`` (tokens) sizes the cache up front (``StaticRollout.reserve``)."""
    if compile is None:
        compile = torch.device(device).type == "cuda"
    engine = StaticRollout(max_new_tokens=max_new_tokens, pad_token_id=pad_token_id, eos_token_ids=eos_token_ids,
                           compile=compile, compile_backend=compile_backend, health=health, name=name)
    if longest_prompt is not None:
        engine.reserve(longest_prompt)
    return engine


def static_state_bytes(cache: StaticCache, buffers: "DecodeBuffers") -> int:
    """Bytes held by one static state: the KV cache's layers (once allocated) and the decode buffers."""
    tensors = [t for layer in cache.layers for t in (getattr(layer, "keys", None), getattr(layer, "values", None),
                                                      getattr(layer, "cumulative_length", None))
               if isinstance(t, torch.Tensor)]
    return sum(t.numel() * t.element_size() for t in tensors + buffers.tensors())


class StaticRollout:
    """Static-shape batched decoding for one causal LM.

    ``compile=True`` wraps the one-token decode step in ``torch.compile`` (``fullgraph=True``; inductor with
    CUDA graphs, ``mode="reduce-overhead"``, on CUDA); the prefill stays eager. The cache has one length for the
    engine (``cache_len``: the prompt capacity plus ``max_new_tokens``), so each batch size has one graph. The
    prompt capacity is set up front by ``reserve`` (or ``prompt_capacity``); a longer prompt than reserved grows
    it, at the price of one more graph per batch size. ``release`` frees the static states; the next call
    allocates them again. ``health`` counts what compilation did and is shared with the run's other engine;
    ``name`` keys this engine's graphs in it.
    """

    def __init__(self, *, max_new_tokens: int, pad_token_id: int, eos_token_ids, compile: bool = False,
                 compile_mode: str | None = None, compile_backend: str | None = None,
                 buckets: tuple[int, ...] = PROMPT_BUCKETS, early_exit_every: int | None = None,
                 health: CompileHealth | None = None, name: str = "rollout", prompt_capacity: int | None = None):
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        self.max_new_tokens = max_new_tokens
        self.pad_token_id = pad_token_id
        eos = [] if eos_token_ids is None else [eos_token_ids] if isinstance(eos_token_ids, int) else eos_token_ids
        self.eos_token_ids = sorted({int(e) for e in eos if e is not None})
        self.compile = compile
        self.merge_lora = not compile
        self.compile_mode = compile_mode
        self.compile_backend = compile_backend or "inductor"
        self.buckets = tuple(buckets)
        # Stop once every row has ended, checked every N tokens (a host sync). Uncompiled: every token, as
        # generate does, so that the global RNG advances exactly as on TRL's path; compiled: every 16, so
        # the host can queue decode steps (CUDA-graph replays) ahead.
        self.early_exit_every = early_exit_every or (EARLY_EXIT_EVERY if compile else 1)
        self.health = health if health is not None else CompileHealth()
        self.name = name
        self.prompt_capacity: int | None = None  # prompt tokens the cache has room for (a bucket)
        self._states: dict = {}  # (batch, device, dtype) -> (StaticCache, DecodeBuffers), at cache_len
        self._compiled_step = None
        self.compiled_steps_seen: set = set()  # (batch, cache_len) shapes the compiled step has run with
        self._module_state: dict | None = None  # module_state of the model the compiled step was built for
        if prompt_capacity is not None:
            self.reserve(prompt_capacity)

    @property
    def cache_len(self) -> int | None:
        """Slots of every KV cache of this engine: the prompt capacity plus ``max_new_tokens``."""
        return None if self.prompt_capacity is None else self.prompt_capacity + self.max_new_tokens

    def reserve(self, longest_prompt: int) -> int:
        """Make room for prompts of up to ``longest_prompt`` tokens; returns the cache length.

        Call it once with the longest prompt a run can bring (the data set's longest tokenised prompt):
        every later batch then decodes at this one length. Growing drops the states of the old length.
        """
        capacity = reserved_capacity(longest_prompt, self.buckets)
        if self.prompt_capacity is None or capacity > self.prompt_capacity:
            self.prompt_capacity = capacity
            self.release()
        return self.cache_len

    def prompt_width(self, longest_prompt: int) -> int:
        """The padded prompt length of a batch whose longest prompt has ``longest_prompt`` tokens: its bucket,
        within the reserved capacity. A prompt beyond the capacity grows it by whole buckets (a new shape)."""
        if self.prompt_capacity is None or longest_prompt > self.prompt_capacity:
            self.reserve(prompt_bucket(longest_prompt, self.buckets))
        return min(prompt_bucket(longest_prompt, self.buckets), self.prompt_capacity)

    def held_bytes(self) -> int:
        """Bytes the engine's static states hold now (KV caches and decode buffers)."""
        return sum(static_state_bytes(cache, buffers) for cache, buffers in self._states.values())

    def release(self) -> int:
        """Free every static state (the compiled step is kept); returns the bytes released.

        The next call allocates its state again at the same length: the same graph, no recompile (on
        CUDA the CUDA graph is recorded again for the new addresses).
        """
        held = self.held_bytes()
        self._states.clear()
        return held

    def _decode_fn(self, device):
        if not self.compile:
            return _decode_step
        if self._compiled_step is None:
            mode = None
            if self.compile_backend == "inductor":  # modes are inductor's
                mode = self.compile_mode or ("reduce-overhead" if torch.device(device).type == "cuda" else None)
                if torch.device(device).type == "cpu":
                    align_inductor_cpu_isa()
                self.health.compile_caches = enable_compile_caches()
            # Guards on nn modules cost more host time per call than a GPU decode step on a 28-layer PEFT model
            # (results/bench/cpu-rollout-measurements.json); one check per rollout of what they would have
            # caught replaces them (module_state).
            options = {"guard_filter_fn": skip_guard_on_all_nn_modules_unsafe}
            if mode is not None:  # torch.compile refuses a mode beside options: the mode goes in as its options
                options.update(list_mode_options(mode, dynamic=False))
            self._compiled_step = torch.compile(_decode_step, backend=self.compile_backend, fullgraph=True,
                                                dynamic=False, options=options)
            self.health.configure(self.compile_backend, mode, device)
        return self._compiled_step

    def _static_state(self, model, batch: int, device, dtype):
        key = (batch, str(device), dtype)
        state = self._states.get(key)
        if state is None or state[1].mask.size(1) != self.cache_len:  # the mask spans the cache
            self._states.pop(key, None)  # freed before the new one is allocated
            head = model.get_output_embeddings()
            vocab = head.weight.size(0) if head is not None else model.config.vocab_size
            cache = StaticCache(config=model.config, max_cache_len=self.cache_len)
            buffers = DecodeBuffers.allocate(batch, self.cache_len, self.max_new_tokens, vocab, self.eos_token_ids,
                                             device)
            self._states[key] = state = (cache, buffers)
        return state

    @torch.no_grad()
    def generate(self, model, prompt_ids: list[list[int]], sampling: SamplingSettings):
        """Completions for ``prompt_ids`` (lists of token ids, unpadded).

        Returns ``(completion_ids, logprobs)``: per row, the tokens up to and including the first EOS (TRL's
        completion mask), and the matching per-token log-probabilities under ``temperature`` only.
        """
        device = next(model.parameters()).device
        dtype = next(model.parameters()).dtype
        batch = len(prompt_ids)
        lengths = torch.tensor([len(p) for p in prompt_ids])
        if (lengths == 0).any():
            raise ValueError("every prompt needs at least one token")
        bucket = self.prompt_width(int(lengths.max()))  # within the capacity reserved up front, if any
        ids = torch.full((batch, bucket), self.pad_token_id, dtype=torch.long)
        for i, p in enumerate(prompt_ids):
            ids[i, bucket - len(p):] = torch.tensor(p, dtype=torch.long)
        prompt_mask = (torch.arange(bucket) >= (bucket - lengths)[:, None]).long()
        # positions as generate computes them for left padding: cumsum(mask) - 1, pads at 1
        positions = (prompt_mask.cumsum(-1) - 1).masked_fill(prompt_mask == 0, 1)

        cache, buf = self._static_state(model, batch, device, dtype)
        cache.reset()
        buf.reset(prompt_mask.to(device), lengths.to(device), _seen_ids(ids, lengths).to(device),
                  self.pad_token_id)
        decode = self._decode_fn(device)
        key = (self.name, batch, self.cache_len)
        # compiled: LoRA stays unmerged (a graph per model state); eager: merged, one product per projection
        with decoding_state(model), merged_lora(model) if self.merge_lora else nullcontext():
            if self.compile:
                self._check_module_state(model, key)
            with record_function("rollout.prefill"):  # eager: its shape (batch, bucket) needs no graph
                logits = self._prefill(model, prompt_ids, ids, positions, buf.mask, cache)
            with record_function("rollout.decode"):
                _advance(buf, logits, sampling, self.pad_token_id)
                steps = self._decode(model, cache, buf, sampling, decode, key)
        self.health.rollouts += 1
        self.health.token_steps += steps
        tokens = buf.tokens[:, :steps].to("cpu", copy=True)  # the buffers are reused by the next call
        logps = buf.logps[:, :steps].to("cpu", copy=True)
        if buf.invalid.item():
            raise ValueError("a sampling distribution contained a NaN or negative probability "
                             "(what torch.multinomial refuses): the model's logits are not finite")
        return completion_lists(tokens, logps, self.eos_token_ids)

    def _prefill(self, model, prompt_ids, ids, positions, mask, cache) -> torch.Tensor:
        """The prompts' forward into ``cache``; the last position's logits of every row.

        GRPO repeats each prompt ``num_generations`` times in a row: each distinct prompt is encoded once, in a
        state of their own batch size, and its keys, values and logits copied to every row that repeats it.
        """
        index_of, distinct = {}, []  # each distinct prompt's index, and the row it first appears in
        for row, prompt in enumerate(prompt_ids):
            if index_of.setdefault(tuple(prompt), len(distinct)) == len(distinct):
                distinct.append(row)
        if len(distinct) == len(prompt_ids):
            return _forward(model, ids.to(mask.device), positions.to(mask.device), mask, cache)
        inverse = torch.tensor([index_of[tuple(prompt)] for prompt in prompt_ids])
        small, _ = self._static_state(model, len(distinct), mask.device, next(model.parameters()).dtype)
        small.reset()
        logits = _forward(model, ids[distinct].to(mask.device), positions[distinct].to(mask.device),
                          mask[distinct], small)
        inverse = inverse.to(mask.device)
        for big_layer, small_layer in zip(cache.layers, small.layers):
            if not big_layer.is_initialized:
                big_layer.lazy_initialization(small_layer.keys[inverse], small_layer.values[inverse])
            torch.index_select(small_layer.keys, 0, inverse, out=big_layer.keys)
            torch.index_select(small_layer.values, 0, inverse, out=big_layer.values)
            big_layer.cumulative_length.copy_(small_layer.cumulative_length)
        return logits[inverse]

    def _check_module_state(self, model, key) -> None:
        """The model's modules as the compiled step was built for them, or a :class:`RecompileError`.

        The compiled step does not guard on modules (see ``_decode_fn``), so a hook added, a mode or
        an adapter switched, or another model would otherwise go unseen by the graph.
        """
        state = module_state(model)
        if self._module_state is None:
            self._module_state = state
            return
        if state != self._module_state:
            changed = next((name for name in state.keys() | self._module_state.keys()
                            if state.get(name) != self._module_state.get(name)), "the model")
            self.health.recompiles += 1
            raise RecompileError(f"the model changed since the decode step was compiled for {key[0]} batch {key[1]}, "
                                 f"cache length {key[2]}: module {changed!r} (hooks, mode or adapters: "
                                 f"{self._module_state.get(changed)} -> {state.get(changed)})")

    def _decode(self, model, cache, buf: DecodeBuffers, sampling: SamplingSettings, decode, key) -> int:
        """Tokens 1.. of every row, one decode call each; returns how many tokens were sampled."""
        if self.compile:
            self.compiled_steps_seen.add(key[1:])
        args = (model, cache, buf, sampling, self.pad_token_id)
        steps = 1
        with self.health.watching() if self.compile else nullcontext():
            for t in range(1, self.max_new_tokens):
                if self.eos_token_ids and t % self.early_exit_every == 0:
                    self.health.host_syncs += 1
                    if buf.all_finished.item():
                        break
                if self.compile:
                    self.health.call(key, decode, *args)
                else:
                    decode(*args)
                steps = t + 1
        return steps


def _seen_ids(ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """The prompt tokens of each row, its padding slots repeating the first one: what the penalty counts.

    ``generate`` leaves the left padding out of the repetition penalty (``prompt_ignore_length``).
    """
    bucket = ids.size(1)
    is_pad = torch.arange(bucket)[None, :] < (bucket - lengths)[:, None]
    first = ids.gather(1, (bucket - lengths)[:, None])
    return torch.where(is_pad, first, ids)


def completion_lists(tokens: torch.Tensor, logps: torch.Tensor, eos_token_ids):
    """Cut each row after its first EOS, as TRL's generation path does."""
    is_eos = torch.isin(tokens, torch.tensor(list(eos_token_ids), dtype=tokens.dtype))
    n = tokens.size(1)
    ends = torch.where(is_eos.any(1), is_eos.int().argmax(1) + 1, torch.full((tokens.size(0),), n)).tolist()
    ids = [row[:end] for row, end in zip(tokens.tolist(), ends)]
    lps = [row[:end] for row, end in zip(logps.tolist(), ends)]
    return ids, lps
