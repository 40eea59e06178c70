"""Rollouts and greedy evaluation outside the trainer: throughput, ``generate`` against the static engine."""

from __future__ import annotations

import statistics

import torch

from bench.models import device, prompts_dataset
from bench.options import BenchOptions
from bench.profiling import count_ops, profile_rollout
from bench.trainers import timed
from saah_lib.models.evaluate import greedy_completions
from saah_lib.models.rollout import build_engine
from saah_lib.models.sampling import SamplingSettings
from saah_lib.tasks.synthetic import generate_problems
from saah_lib.training.config import RunConfig


def engine_for(tokenizer, max_new_tokens: int, eos_token_ids, options: BenchOptions, name: str,
               longest_prompt: int | None = None):
    """An engine as the trainer makes one: its cache sized once for ``longest_prompt`` when given (one graph)."""
    return build_engine(max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id,
                        eos_token_ids=eos_token_ids, device=device(), compile=options.rollout_compile,
                        compile_backend=options.compile_backend, name=name, longest_prompt=longest_prompt)


def eval_throughput(model_factory, cfg: RunConfig, options: BenchOptions, backend: str = "hf") -> dict:
    """Greedy evaluation of ``options.eval_problems`` problems; the compile, if any, is timed apart."""
    model, tokenizer = model_factory()
    model = model.to(device())
    prompts = [p.question for p in generate_problems(options.eval_problems, seed=1)]
    engine = None
    if backend == "compiled":
        engine = engine_for(tokenizer, cfg.eval_max_new_tokens, tokenizer.eos_token_id, options, "evaluation")

    def evaluate(texts):
        return timed(lambda: greedy_completions(model, tokenizer, texts, max_new_tokens=cfg.eval_max_new_tokens,
                                                batch_size=cfg.eval_batch_size, progress=False,
                                                generation_backend=backend, engine=engine))

    warmup_s = evaluate(prompts[: cfg.eval_batch_size]) if engine is not None and engine.compile else None
    seconds = evaluate(prompts)
    out = {"problems": options.eval_problems, "generation_backend": backend,
           "max_new_tokens": cfg.eval_max_new_tokens, "seconds": seconds, "warmup_s": warmup_s,
           "problems_per_s": options.eval_problems / seconds,
           "projected_s_for_500": 500 * seconds / options.eval_problems}
    if engine is not None:
        out["compile_health"] = engine.health.record()
    return out


def _rollout_inputs(model_factory, cfg: RunConfig, options: BenchOptions):
    """The model in eval mode on its device, and one step's prompts as text and as token ids."""
    model, tokenizer = model_factory()
    model = model.to(device()).eval()
    prompts = list(prompts_dataset(cfg.trainer.completions_per_step, tokenizer, options.prompt_tokens)["prompt"])
    ids = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
    return model, tokenizer, prompts, ids


def _generate_kwargs(model, tokenizer, prompts, cfg: RunConfig) -> dict:
    enc = tokenizer(prompts, return_tensors="pt", padding=True, padding_side="left",
                    add_special_tokens=False).to(model.device)
    n_new = cfg.trainer.max_completion_length
    return dict(**enc, max_new_tokens=n_new, min_new_tokens=n_new, do_sample=True, temperature=cfg.trainer.temperature,
                top_k=0, pad_token_id=tokenizer.pad_token_id)


def rollout_comparison(model_factory, cfg: RunConfig, options: BenchOptions) -> dict:
    """Rollouts only: ``model.generate`` against the static engine on the same prompts, alternated
    ``rollout_repeats`` times so that background load hits both alike."""
    model, tokenizer, prompts, ids = _rollout_inputs(model_factory, cfg, options)
    engine = engine_for(tokenizer, cfg.trainer.max_completion_length, [], options, "rollout",
                        longest_prompt=max(map(len, ids)))
    sampling = SamplingSettings(do_sample=True, temperature=cfg.trainer.temperature)
    generate_kwargs = _generate_kwargs(model, tokenizer, prompts, cfg)
    runs = {"hf": lambda: model.generate(**generate_kwargs), "compiled": lambda: engine.generate(model, ids, sampling)}
    times = {"hf": [], "compiled": []}
    for _ in range(options.rollout_repeats + 1):  # the first round is warm-up (and compilation on CUDA)
        for name, fn in runs.items():
            with torch.no_grad():
                times[name].append(timed(fn))
    out = {"completions": len(ids), "new_tokens": cfg.trainer.max_completion_length, "repeats": options.rollout_repeats}
    for name, ts in times.items():
        out[name] = {"first_s": ts[0], "median_s": statistics.median(ts[1:]), "times_s": [round(t, 4) for t in ts]}
    out["compiled/hf"] = out["compiled"]["median_s"] / out["hf"]["median_s"]
    out["compile_health"] = engine.health.record()
    return out


def rollout_profile(model_factory, cfg: RunConfig, options: BenchOptions) -> dict:
    """Host syncs and eager ops per token of one rollout, counted by the profiler: the static engine
    (compiled and warmed up first when it compiles) and ``generate``."""
    model, tokenizer, prompts, ids = _rollout_inputs(model_factory, cfg, options)
    n_new = cfg.trainer.max_completion_length
    # the end-of-sequence token is live (the finished-batch check runs) but never sampled: full length
    engine = engine_for(tokenizer, n_new, [tokenizer.eos_token_id], options, "rollout",
                        longest_prompt=max(map(len, ids)))
    sampling = SamplingSettings(do_sample=True, temperature=cfg.trainer.temperature, min_new_tokens=n_new)
    generate_kwargs = _generate_kwargs(model, tokenizer, prompts, cfg)
    with torch.no_grad():
        engine.generate(model, ids, sampling)  # compiles
        static = profile_rollout(engine, model, ids, sampling)
        model.generate(**generate_kwargs)  # warm-up
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            model.generate(**generate_kwargs)
    return {"completions": len(ids), "new_tokens": n_new, "compiled": engine.compile,
            "compile_backend": engine.compile_backend, "static": static,
            "hf_generate_whole_call": count_ops(prof.events(), n_new, region=None),
            "compile_health": engine.health.record()}
