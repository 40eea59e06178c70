"""``make gpu-bench``: stock TRL against ours in one process and one 10-minute GPU call, and where a decode
step's time goes.

    python -m bench.gpu                        # CUDA: qwen2.5-1.5b; CPU: tiny
    python -m bench.gpu --profile qwen2.5-3b --time-budget-s 480

Three parts (:func:`run_gpu_bench`), each on a model built afresh (the Qwen profiles: their architecture with
random weights) with the same config, prompts, seed and forced full-length completions: ``ours``
(``SAAHGRPOTrainer``, compiled rollouts), ``trl`` (stock ``GRPOTrainer`` with its own ``generate``) and
``decode_profile`` (the compiled decode step under torch's profiler, :mod:`bench.decode`);
then the same-run ratios stock/ours and each part's generation milliseconds per decoded token.

``--time-budget-s`` bounds the run; ``parts`` says what each part did (``done``, ``shortened``, ``skipped``,
``failed``, or ``running`` in a run cut off there) and why. One JSON, ``<device>-gpu-bench-<profile>.json`` in
``--out`` (default ``results/local/bench``), is rewritten after every part, so a cut-off run keeps its data.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from peft import get_peft_model
from transformers import Qwen2Config

from bench.decode import decode_profile, prepare_cuda_graph_profiling
from bench.models import (
    SMALL_QWEN2,
    build_model,
    device_name,
    model_description,
    model_dtype,
    random_qwen2,
    result_file,
)
from bench.options import LOCAL_BENCH, MIN_COMPILED_STEPS, PROFILES, VARIANTS, BenchOptions, profile_config, sa_variant
from bench.trainers import StopBeforeDeadline, time_variant
from saah_lab.rundir.provenance import package_versions
from saah_lab.training.launch import parse_overrides
from saah_lab.training.run import lora_config
from saah_lib.jsonio import atomic_write_json
from saah_lib.training.config import RunConfig

PARTS = ("ours", "trl", "decode_profile")
#: Rollouts the profile part runs: one to compile and warm up, one timed, one profiled.
PROFILE_ROLLOUTS = 3


@dataclass(frozen=True)
class GpuBenchOptions:
    profile: str
    trl_steps: int
    ours_steps: int | None  # None: MIN_COMPILED_STEPS - warmup when compiling, else trl_steps
    warmup: int
    completion_tokens: int | None  # None: the profile's
    prompt_tokens: int
    time_budget_s: float
    rollout_compile: bool
    compile_backend: str
    window_tokens: int
    model_dir: str | None = None
    overrides: dict = field(default_factory=dict)
    out: Path | None = None
    command: str = "python -m bench.gpu"

    def __post_init__(self):
        if self.profile not in PROFILES:
            raise ValueError(f"profile must be one of {', '.join(PROFILES)}, got {self.profile!r}")
        for name in ("trl_steps", "warmup", "prompt_tokens", "window_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.ours_steps is not None and self.ours_steps < 1:
            raise ValueError(f"ours_steps must be >= 1, got {self.ours_steps}")
        if self.completion_tokens is not None and self.completion_tokens < 3:
            raise ValueError(f"completion_tokens must be >= 3 (a profiled window needs 2 decode calls), "
                             f"got {self.completion_tokens}")
        if not (self.time_budget_s > 0 and math.isfinite(self.time_budget_s)):
            raise ValueError(f"time_budget_s must be a positive number of seconds, got {self.time_budget_s}")
        if self.rollout_compile and self.warmup + self.steps_of_ours() < MIN_COMPILED_STEPS:
            raise ValueError(f"--warmup + --ours-steps is {self.warmup + self.steps_of_ours()}; with compilation on "
                             f"it must be at least {MIN_COMPILED_STEPS}, so that recompiles (dynamo gives up after 8) "
                             "show")

    def steps_of_ours(self) -> int:
        if self.ours_steps is not None:
            return self.ours_steps
        return max(MIN_COMPILED_STEPS - self.warmup, 1) if self.rollout_compile else self.trl_steps

    def out_dir(self) -> Path:
        return LOCAL_BENCH if self.out is None else Path(self.out)

    def bench_options(self, steps: int) -> BenchOptions:
        """What the benchmark's trainer timing reads: steps, prompts, compilation."""
        return BenchOptions(profile=self.profile, steps=steps, warmup=self.warmup, model_dir=self.model_dir,
                            prompt_tokens=self.prompt_tokens, rollout_compile=self.rollout_compile,
                            compile_backend=self.compile_backend, overrides=self.overrides, out=self.out)


TRL_VARIANT = next(v for v in VARIANTS if v[1] == "trl")


class TimedFactory:
    """The model factory of a trainer part, timing each build (a 1.5B random init takes seconds)."""

    def __init__(self, options: GpuBenchOptions, dtype: torch.dtype):
        self.options, self.dtype, self.build_s = options, dtype, None

    def __call__(self):
        start = time.perf_counter()
        built = build_model(self.options.profile, self.dtype, None, model_dir=self.options.model_dir)
        self.build_s = time.perf_counter() - start
        return built


def profile_model(options: GpuBenchOptions, cfg: RunConfig, dtype: torch.dtype):
    """(model, tokenizer, description): on CUDA the profile's model, on CPU the 2-layer Qwen2; with LoRA adapters
    (unmerged, as the trainer's rollouts run them) when the config trains LoRA."""
    if torch.cuda.is_available():
        model, tokenizer = build_model(options.profile, dtype, None, model_dir=options.model_dir)
        description = model_description(options.profile, options.model_dir)
    else:
        model, tokenizer = random_qwen2(Qwen2Config(**SMALL_QWEN2), dtype)
        description = "random 2-layer Qwen2"
    if cfg.use_lora:
        model = get_peft_model(model, lora_config(cfg))
        description += ", LoRA unmerged"
    return model, tokenizer, description


# ---------------------------------------------------------------------- parts


def per_token(variant: dict, cfg: RunConfig) -> dict:
    """The trainer part's figures with its generation time per decoded token position."""
    n_new = cfg.trainer.max_completion_length
    return {**variant, "generation_ms_per_token": 1000 * variant["median_generation_s"] / n_new,
            "steady_steps": len(variant["step_times_s"]) - 1}


def run_trainer_part(variant, options: GpuBenchOptions, cfg: RunConfig, steps: int, backend: str,
                     deadline: float, min_steps: int) -> tuple[dict, bool]:
    """One variant's steps (stopped early before ``deadline``, never before ``min_steps``); (figures, shortened)."""
    factory = TimedFactory(options, model_dtype(cfg))
    stop = StopBeforeDeadline(deadline, min_steps)
    with tempfile.TemporaryDirectory(prefix="gpu-bench-") as scratch:  # the trainer's folder: nothing kept
        result = time_variant(variant, factory, cfg, options.bench_options(steps), Path(scratch), backend,
                              callbacks=[stop])
    return {**per_token(result, cfg), "model_build_s": factory.build_s, "planned_steps": options.warmup + steps}, \
        stop.stopped_early


def profile_estimate_s(ours: dict | None) -> float | None:
    """Seconds the profile part should take, from part 1: a model build, the compile and its rollouts."""
    if not ours:
        return None
    compile_s = (ours.get("compile_health") or {}).get("compile_s") or ours["one_time_cost_s"]
    return ours["model_build_s"] + compile_s + PROFILE_ROLLOUTS * ours["median_generation_s"]


def ratios(ours: dict | None, trl: dict | None) -> dict:
    """Stock TRL over ours, same run: above 1 is ours faster."""
    if not ours or not trl:
        return {}
    pairs = {"step": "median_step_s", "generation": "median_generation_s", "rest": "median_rest_s"}
    return {name: trl[key] / ours[key] for name, key in pairs.items() if ours[key] > 0}


# ---------------------------------------------------------------------- the run


class Report:
    """The JSON being written: each part's figures and state, rewritten at every change."""

    def __init__(self, path: Path, data: dict):
        self.path, self.data = path, data

    def write(self) -> None:
        atomic_write_json(self.path, self.data)

    def start(self, part: str) -> float:
        self.data["parts"][part] = {"status": "running"}
        self.write()
        return time.perf_counter()

    def end(self, part: str, started: float, status: str, reason: str | None = None, result=None) -> None:
        self.data["parts"][part] = {"status": status, "seconds": time.perf_counter() - started, "reason": reason}
        if result is not None:
            self.data[part] = result
        self.data["ratios"] = ratios(self.data.get("ours"), self.data.get("trl"))
        self.write()

    def skip(self, part: str, reason: str) -> None:
        self.data["parts"][part] = {"status": "skipped", "seconds": 0.0, "reason": reason}
        self.write()


def _guarded(report: Report, part: str, run) -> None:
    """Run one part; an error fails that part, named in the report, and the later parts still run."""
    started = report.start(part)
    try:
        result, status, reason = run()
    except Exception as error:  # the report names it; the parts after it may still measure
        report.end(part, started, "failed", f"{type(error).__name__}: {error}"[:2000])
        print(f"gpu-bench: {part} FAILED: {type(error).__name__}: {error}", flush=True)
        return
    report.end(part, started, status, reason, result)
    print(f"gpu-bench: {part} {status}{f' ({reason})' if reason else ''}", flush=True)


def run_gpu_bench(options: GpuBenchOptions) -> dict:
    """The three parts, in this order, and their ratios.

    1. ``ours``: ``SAAHGRPOTrainer`` with ``compiled`` rollouts and the profile's ``sa`` variant (top-500 on the
       Qwen profiles); with compilation on, at least ``MIN_COMPILED_STEPS`` steps, so that recompiles would show.
    2. ``trl``: stock ``GRPOTrainer`` with its own ``generate``, one warm-up and a few steady steps.
    3. ``decode_profile``: kernels per token by class, device-busy time, idle fraction and the gaps between
       kernels. On CPU a 2-layer Qwen2 (the preflight's) and its ATen ops, so that the whole script is tested
       before a GPU sees it.

    Under ``--time-budget-s`` TRL stops after the step that would take it past its deadline (never before its
    warm-up and one steady step), which leaves the profile its estimated time (part 1's build, compile and three
    rollouts); a profile that no longer fits is skipped.
    """
    threads = torch.get_num_threads()
    try:
        return _run(options)
    finally:
        torch.set_num_threads(threads)  # the CPU runs take one thread; the caller's count comes back


def _run(options: GpuBenchOptions) -> dict:
    start = time.monotonic()
    end = start + options.time_budget_s
    on_cuda = torch.cuda.is_available()
    if on_cuda:
        prepare_cuda_graph_profiling()  # before the first compiled rollout records a CUDA graph
    else:
        torch.set_num_threads(1)  # as the benchmark: one thread is steady on shared cores
    cfg = profile_config(options.profile, options.completion_tokens, options.overrides)
    dtype = model_dtype(cfg)
    path = result_file(options.out_dir(), f"gpu-bench-{options.profile}")
    report = Report(path, {
        "device": device_name(), "profile": options.profile, "cuda": on_cuda, "torch": torch.__version__,
        "model": model_description(options.profile, options.model_dir), "dtype": str(dtype),
        "completions_per_step": cfg.trainer.completions_per_step,
        "max_completion_length": cfg.trainer.max_completion_length, "full_length": True,
        "prompt_tokens": options.prompt_tokens, "lora": cfg.use_lora,
        "gradient_checkpointing": cfg.trainer.activation_checkpointing, "warmup_steps": options.warmup,
        "rollout_compile": options.rollout_compile, "compile_backend": options.compile_backend,
        "time_budget_s": options.time_budget_s, "parts": {}, "ours": None, "trl": None, "decode_profile": None,
        "ratios": {}, "complete": False, "versions": package_versions(), "command": options.command,
    })
    variant = sa_variant(cfg)
    ours_min = MIN_COMPILED_STEPS if options.rollout_compile else options.warmup + 1

    def ours():
        result, shortened = run_trainer_part(variant, options, cfg, options.steps_of_ours(), "compiled", end, ours_min)
        return result, "shortened" if shortened else "done", "time budget" if shortened else None

    _guarded(report, "ours", ours)
    reserve = profile_estimate_s(report.data["ours"]) or 0.0
    if end - time.monotonic() <= reserve:
        report.skip("trl", f"time budget: {end - time.monotonic():.1f} s left, the profile needs {reserve:.1f} s")
    else:
        def trl():
            result, shortened = run_trainer_part(TRL_VARIANT, options, cfg, options.trl_steps, "hf", end - reserve,
                                                 options.warmup + 1)
            return result, "shortened" if shortened else "done", "time budget" if shortened else None

        _guarded(report, "trl", trl)
    left = end - time.monotonic()
    if report.data["ours"] and left < reserve:
        report.skip("decode_profile", f"time budget: {left:.1f} s left, the profile needs {reserve:.1f} s")
    else:
        def profile():
            model, tokenizer, description = profile_model(options, cfg, dtype)
            result = decode_profile(model, tokenizer, cfg, prompt_tokens=options.prompt_tokens,
                                    compile_backend=options.compile_backend, window_tokens=options.window_tokens)
            return {"model": description, **result}, "done", None

        _guarded(report, "decode_profile", profile)
    report.data["complete"] = True
    report.data["seconds"] = time.monotonic() - start
    report.write()
    print(summary_lines(report.data) + f"\nwrote {path}", flush=True)
    return report.data


def summary_lines(data: dict) -> str:
    lines = [f"{data['device']} {data['profile']} ({data['seconds']:.0f} s of a {data['time_budget_s']:.0f} s budget)"]
    for part, label in (("ours", "ours (compiled)"), ("trl", "stock TRL (hf)")):
        r = data.get(part)
        if r:
            lines.append(f"{label:17s} step {r['median_step_s']:.3f} s, generation {r['median_generation_s']:.3f} s "
                         f"({r['generation_ms_per_token']:.2f} ms/token), {r['steady_steps']} steady steps")
    if data["ratios"]:
        lines.append("stock/ours        " + ", ".join(f"{k} {v:.2f}x" for k, v in data["ratios"].items()))
    p = data.get("decode_profile")
    if p:
        k = p["kernels"]
        idle = "" if k["idle_fraction"] is None else f", idle {k['idle_fraction']:.0%}"
        classes = ", ".join(f"{c} {v['per_token']:.0f}" for c, v in k["by_class"].items())
        lines.append(f"decode step       {p['window']['wall_ms_per_token']:.3f} ms, {k['kernels_per_token']:.0f} "
                     f"{k['source']} per token ({classes}), busy {k.get('busy_us_per_token', 0) / 1000:.3f} ms{idle}")
    for part, state in data["parts"].items():
        if state["status"] != "done":
            lines.append(f"{part:17s} {state['status'].upper()}: {state.get('reason') or ''}"[:400])
    return "\n".join(lines)


def parse_args(argv: list[str]) -> GpuBenchOptions:
    on_cuda = torch.cuda.is_available()
    p = argparse.ArgumentParser(prog="python -m bench.gpu",
                                description="stock TRL against ours in one process, and a profiled decode step")
    p.add_argument("--profile", default=None, choices=PROFILES,
                   help="(default: qwen2.5-1.5b on CUDA, tiny on CPU)")
    p.add_argument("--trl-steps", type=int, default=3,
                   help="stock TRL's steady steps after the warm-up (default: 3; a 1.5B step takes ~25 s)")
    p.add_argument("--ours-steps", type=int, default=None,
                   help=f"our steady steps after the warm-up (default: {MIN_COMPILED_STEPS} steps with the warm-up "
                        "when compiling, so that recompiles would show; else as --trl-steps)")
    p.add_argument("--warmup", type=int, default=1, help="untimed steps first, each part (default: 1)")
    p.add_argument("--completion-tokens", type=int, default=None if on_cuda else 24,
                   help="rollout length, every completion forced to it (default: the profile's on CUDA, 24 on CPU)")
    p.add_argument("--prompt-tokens", type=int, default=192, help="prompt length in tokens (default: 192)")
    p.add_argument("--time-budget-s", type=float, default=480.0,
                   help="seconds the whole run may take: later parts are shortened or skipped to fit (default: 480)")
    p.add_argument("--rollout-compile", choices=["on", "off"], default="on",
                   help="compile our decode step in training (default: on; the profile always compiles)")
    p.add_argument("--compile-backend", default=None,
                   help="torch.compile backend (default: inductor on CUDA, aot_eager on CPU)")
    p.add_argument("--window-tokens", type=int, default=32,
                   help="decode steps in the profiled window, from the middle of a rollout (default: 32)")
    p.add_argument("--model-dir", default=None,
                   help="this model folder instead of the profile's model (on CPU the profiled decode step keeps the "
                        "2-layer Qwen2)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="NAME=VALUE",
                   help="a config field of the profile (JSON value), e.g. --set use_lora=true")
    p.add_argument("--out", default=None,
                   help=f"folder of the JSON (default: {LOCAL_BENCH.relative_to(LOCAL_BENCH.parents[2])}, "
                        "git-ignored)")
    a = vars(p.parse_args(argv))  # each option's dest is its GpuBenchOptions field
    return GpuBenchOptions(**{
        **a, "profile": a["profile"] or ("qwen2.5-1.5b" if on_cuda else "tiny"),
        "rollout_compile": a["rollout_compile"] == "on",
        "compile_backend": a["compile_backend"] or ("inductor" if on_cuda else "aot_eager"),
        "overrides": parse_overrides(a["overrides"]), "out": None if a["out"] is None else Path(a["out"]),
        "command": " ".join(["python -m bench.gpu", *argv])})


def main(argv=None) -> dict:
    return run_gpu_bench(parse_args(list(sys.argv[1:] if argv is None else argv)))


if __name__ == "__main__":
    main()
