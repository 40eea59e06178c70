"""Step times of stock TRL and of our variants, with the generation time split out."""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import torch
from transformers import TrainerCallback
from trl import GRPOConfig, GRPOTrainer

from bench.models import prompts_dataset
from bench.options import BenchOptions
from saah_lab.studies.execution.timing import PeakMemory
from saah_lab.training.run import lora_config, stock_grpo_kwargs
from saah_lab.training.study_trainer import StudyTrainer
from saah_lib.method.methods import MAIN_ALPHA, method_alpha
from saah_lib.method.reward import TRL_REWARD_FUNCS
from saah_lib.training.config import RunConfig
from saah_lib.training.trainer import SAAHGRPOConfig


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def timed(fn) -> float:
    """Wall seconds of ``fn()``, the device synchronised before and after (its queued work counted, no other)."""
    sync()
    start = time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - start


class GenerationTimer:
    """Mixin: accumulates the wall time of TRL's generation method (``generation_seconds``)."""

    generation_seconds = 0.0

    def _generate_single_turn(self, *args, **kwargs):
        sync()
        start = time.perf_counter()
        try:
            return super()._generate_single_turn(*args, **kwargs)
        finally:
            sync()
            self.generation_seconds += time.perf_counter() - start


class TimedGRPOTrainer(GenerationTimer, GRPOTrainer):
    pass


class TimedSAAHGRPOTrainer(GenerationTimer, StudyTrainer):
    pass


class StepClock(TrainerCallback):
    """Each step's wall time and the generation time inside it."""

    def __init__(self):
        self.durations: list[float] = []
        self.generation: list[float] = []
        self.trainer = None  # set after the trainer exists: its generation_seconds is read per step

    def on_step_begin(self, args, state, control, **kwargs):
        sync()
        self._start = time.perf_counter()
        self.trainer.generation_seconds = 0.0

    def on_step_end(self, args, state, control, **kwargs):
        sync()
        self.durations.append(time.perf_counter() - self._start)
        self.generation.append(self.trainer.generation_seconds)


class StopBeforeDeadline(TrainerCallback):
    """Ends training after a step when the next one, as long as the last, would end past ``deadline``
    (``time.monotonic()`` seconds), but never before ``min_steps`` steps: a time budget shortens a variant
    instead of overrunning it."""

    def __init__(self, deadline: float, min_steps: int):
        self.deadline, self.min_steps = deadline, min_steps
        self.stopped_early = False

    def on_step_begin(self, args, state, control, **kwargs):
        self._start = time.monotonic()

    def on_step_end(self, args, state, control, **kwargs):
        now = time.monotonic()
        step_s = now - self._start
        if state.global_step >= self.min_steps and now + step_s > self.deadline and state.global_step < args.max_steps:
            control.should_training_stop = True
            self.stopped_early = True


def variant_name(name: str, backend: str) -> str:
    """TRL's own generate keeps the plain name; other backends get a suffix."""
    return name if backend == "hf" or name == "trl-bnpo" else f"{name}@{backend}"


def _trainer(variant, cfg: RunConfig, options: BenchOptions, out_dir: Path, backend: str, model, tokenizer, callbacks):
    _, which, method, top_k = variant
    common = stock_grpo_kwargs(cfg, out_dir, progress=False)
    common.update(max_steps=options.warmup + options.steps, save_strategy="no",
                  generation_kwargs={"min_new_tokens": cfg.trainer.max_completion_length} if options.full_length else None)
    if which == "trl":
        trainer_cls, config = TimedGRPOTrainer, GRPOConfig(**common)
    else:
        config = SAAHGRPOConfig(method=method, alpha=method_alpha(method, MAIN_ALPHA), entropy_top_k=top_k,
                                reward_std_threshold=cfg.trainer.reward_std_threshold, generation_backend=backend,
                                rollout_compile=options.rollout_compile,
                                rollout_compile_backend=options.compile_backend, **common)
        trainer_cls = TimedSAAHGRPOTrainer
    return trainer_cls(model=model, reward_funcs=list(TRL_REWARD_FUNCS), args=config,
                       train_dataset=prompts_dataset(64, tokenizer, options.prompt_tokens),
                       processing_class=tokenizer, peft_config=lora_config(cfg), callbacks=list(callbacks))


def time_variant(variant, model_factory, cfg: RunConfig, options: BenchOptions, out_dir: Path,
                 backend: str = "hf", callbacks=()) -> dict:
    """Train ``warmup + steps`` steps of one variant and summarise its step times (``callbacks``: more
    trainer callbacks, e.g. :class:`StopBeforeDeadline`, which may end it sooner)."""
    name, which, method, top_k = variant
    model, tokenizer = model_factory()
    clock = StepClock()
    trainer = _trainer(variant, cfg, options, out_dir / variant_name(name, backend), backend, model, tokenizer,
                       [clock, *callbacks])
    clock.trainer = trainer
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    with PeakMemory() as rss:
        trainer.train()
    median = statistics.median(clock.durations[options.warmup:])
    median_generation = statistics.median(clock.generation[options.warmup:])
    result = {
        "variant": variant_name(name, backend), "trainer": which, "method": method, "entropy_top_k": top_k,
        "generation_backend": "hf" if which == "trl" else backend,
        "median_step_s": median, "step_times_s": [round(t, 4) for t in clock.durations],
        "median_generation_s": median_generation, "median_rest_s": median - median_generation,
        "generation_times_s": [round(t, 4) for t in clock.generation],
        # the first step's excess over the steady step: compilation, CUDA graph capture, allocator warm-up
        "first_step_s": clock.durations[0], "one_time_cost_s": clock.durations[0] - median,
        # exact when completions are forced to full length, an upper bound otherwise
        "completion_tokens_per_s": cfg.trainer.completions_per_step * cfg.trainer.max_completion_length / median,
        "peak_gpu_mem_gib": torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else None,
        "peak_rss_gib": rss.peak / 2**30,
    }
    if which == "ours" and backend == "compiled":
        result["compile_health"] = trainer.compile_health.record()
    del trainer, model
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return result


def step_ratios(results: list[dict]) -> dict:
    """Each variant against stock TRL, and ah/sa against our grpo with the same entropy and backend."""
    by_name = {r["variant"]: r["median_step_s"] for r in results}
    ratios = {}
    for name, t in by_name.items():
        if name != "trl-bnpo" and "trl-bnpo" in by_name:
            ratios[f"{name}/trl-bnpo"] = t / by_name["trl-bnpo"]
    for name, t in by_name.items():
        base_name, _, backend = name.partition("@")
        method, _, kind = base_name.partition("-")
        if method not in ("ah", "sa"):
            continue
        grpo = "grpo" if kind == "exact" else f"grpo-{kind}"
        grpo = f"{grpo}@{backend}" if backend else grpo
        if grpo in by_name:
            ratios[f"{name}/{grpo}"] = t / by_name[grpo]
    return ratios
