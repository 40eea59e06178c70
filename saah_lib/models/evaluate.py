"""Greedy Pass@1 of a model: one greedy completion per problem, scored by :mod:`saah_lib.tasks.scoring`.

Greedy means plain argmax on every backend: the settings come from this module, never from the
checkpoint's ``generation_config.json`` (Qwen2.5-Instruct ships sampling defaults and a repetition
penalty there, which ``generate`` would otherwise apply to ``hf`` and not to ``compiled``).
"""

from __future__ import annotations

from contextlib import contextmanager
from itertools import takewhile

import torch
from transformers import GenerationConfig

from saah_lib.models.backends import evaluation_backend
from saah_lib.models.rollout import build_engine, eval_mode
from saah_lib.models.sampling import SamplingSettings
from saah_lib.progress import bar
from saah_lib.tasks.problems import Problem
from saah_lib.tasks.prompts import make_prompt
from saah_lib.tasks.scoring import EvalResult, score_completions

#: What greedy evaluation decodes with, on every backend.
GREEDY = SamplingSettings(do_sample=False)


def _completion_text(ids: list[int], tokenizer) -> str:
    """Decode generated ids up to the first end-of-sequence, keeping tag tokens."""
    stop = {tokenizer.eos_token_id, tokenizer.pad_token_id} - {None}
    return tokenizer.decode(list(takewhile(lambda t: t not in stop, ids)), skip_special_tokens=False)


@contextmanager
def run_generation_config(model):
    """Inside, ``generate`` sees an empty generation config: every setting it uses is one we pass.

    ``generate`` fills each setting not passed from the model's ``generation_config`` (loaded from the
    checkpoint); with an empty one those are transformers' neutral defaults. Restored on exit.  A model whose
    ``generation_config`` is None (which transformers' own ``generate`` cannot use) generates so too.
    """
    holders = [m for m in model.modules() if _holds_generation_config(m)]
    saved = [(m, m.generation_config) for m in holders]
    try:
        for m in holders:
            m.generation_config = GenerationConfig()
        yield model
    finally:
        for m, config in saved:
            m.generation_config = config


def _holds_generation_config(module) -> bool:
    """A module that generates with a generation config: one that holds one, or a generating model set to None."""
    config = getattr(module, "generation_config", None)
    return isinstance(config, GenerationConfig) or (config is None and hasattr(module, "generation_config")
                                                    and callable(getattr(module, "generate", None)))


@torch.no_grad()
def greedy_completions(model, tokenizer, prompts: list[str], *, max_new_tokens: int = 512,
                       batch_size: int = 64, progress: bool = True, desc: str = "eval",
                       generation_backend: str = "hf", engine=None) -> list[str]:
    """Greedy completions for ``prompts``, batched with left padding, in input order.

    Prompts are batched by length (less padding). ``generation_backend``: ``hf`` (``model.generate``), ``compiled``
    (:mod:`saah_lib.models.rollout`) or ``auto`` (compiled); ``vllm`` evaluates like ``auto`` since evaluation runs on
    the trainer's own model. ``engine`` reuses a ``StaticRollout`` (and its compiled graphs) across calls: its cache
    is sized once for the longest of ``prompts`` and freed when the call returns (``release``). If the compiled step
    fails to compile, ``engine.health`` records it loudly and this and every later call sharing it decode with ``hf``.
    """
    if tokenizer.pad_token_id is None:
        raise ValueError("the tokenizer needs a pad token for batched generation")
    device = next(model.parameters()).device
    backend = evaluation_backend(generation_backend)
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    out: list[str | None] = [None] * len(prompts)
    batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    prompt_ids = None
    if backend == "compiled":
        prompt_ids = tokenizer(prompts, add_special_tokens=False)["input_ids"]
        if engine is None:
            engine = build_engine(max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id,
                                  eos_token_ids=tokenizer.eos_token_id, device=device, name="evaluation")
        engine.reserve(max(map(len, prompt_ids)))  # one cache length for every batch: one graph
    try:
        with eval_mode(model):
            for batch in bar(batches, desc=desc, progress=progress, leave=False):
                new_tokens = None
                if backend == "compiled" and not engine.health.fell_back:
                    ids = [prompt_ids[i] for i in batch]
                    new_tokens = engine.health.run_or_fall_back(
                        lambda: _static_greedy(model, ids, engine, batch_size), desc)
                if new_tokens is None:
                    new_tokens = _hf_greedy(model, tokenizer, [prompts[i] for i in batch], max_new_tokens)
                for i, ids in zip(batch, new_tokens):
                    out[i] = _completion_text(ids, tokenizer)
    finally:
        if engine is not None:
            engine.release()  # the evaluation's caches are not held while training; its graph is kept
    return out  # type: ignore[return-value]


def _hf_greedy(model, tokenizer, texts: list[str], max_new_tokens: int) -> list[list[int]]:
    device = next(model.parameters()).device
    enc = tokenizer(texts, return_tensors="pt", padding=True, padding_side="left",
                    add_special_tokens=False).to(device)
    with run_generation_config(model):
        gen = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False,
                             pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
    return gen[:, enc["input_ids"].shape[1]:].tolist()


def _static_greedy(model, ids: list[list[int]], engine, batch_size: int) -> list[list[int]]:
    """One batch of token ids through the static engine; a short last batch is padded with repeats so the
    compiled decode step keeps its shape (rows are independent, the repeats are dropped)."""
    n = len(ids)
    ids = ids + [ids[-1]] * (batch_size - n)
    completions, _ = engine.generate(model, ids, GREEDY)
    return completions[:n]


def evaluate_pass_at_1(model, tokenizer, problems: list[Problem], *, max_new_tokens: int = 512,
                       batch_size: int = 64, progress: bool = True, desc: str = "eval",
                       generation_backend: str = "hf", engine=None) -> EvalResult:
    prompts = [make_prompt(p.question, tokenizer) for p in problems]
    completions = greedy_completions(model, tokenizer, prompts, max_new_tokens=max_new_tokens,
                                     batch_size=batch_size, progress=progress, desc=desc,
                                     generation_backend=generation_backend, engine=engine)
    return score_completions(problems, completions)
