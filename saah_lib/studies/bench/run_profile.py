"""Where the time of one mini run and of the tiny warm start's build goes, against this machine's FLOP floor.

    python -m saah_lib.studies.bench.run_profile                   # a mini run (60 steps) and a tenth of the build
    python -m saah_lib.studies.bench.run_profile --steps 4 --sft-steps 24 --out results/local/bench

Each part runs the project's own code as ``make mini`` does (one torch thread, the pinned CPU numerics), with a
clock wrapped around the methods that do one kind of work (:class:`SectionClock`: exclusive time, so the shares
add up to the part's wall time). What no clock covers inside ``train()`` is TRL's and transformers' bookkeeping;
outside it, the run's setup. Each share is set against its floor (:func:`run_floor`, :func:`profile_build`): its
matmul FLOPs at the single-thread fp32 matmul rate measured here first (:func:`matmul_gflops`). A share far
above its floor is overhead; one near it is compute. The build runs ``--sft-steps`` of its SFT steps (the
per-step figures carry over; the weights it makes are not kept).

One JSON per machine, ``<CPU model>-run-profile.json`` in ``--out`` (default ``results/local/bench``, git-ignored).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import platform
import pstats
import sys
import tempfile
import time
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import torch
from accelerate import Accelerator

from saah_lib.jsonio import atomic_write_json, read_jsonl
from saah_lib.models import warmstart
from saah_lib.models.loading import load_model_and_tokenizer, resolve_model
from saah_lib.numerics import cpu_description
from saah_lib.paths import repo_relative
from saah_lib.progress import quiet_libraries
from saah_lib.studies.bench import device_name
from saah_lib.studies.bench.files import out_folder_problem
from saah_lib.studies.bench.options import LOCAL_BENCH
from saah_lib.studies.mini import planned_configs
from saah_lib.tasks.prompts import make_prompt
from saah_lib.training import run as run_module
from saah_lib.training.callbacks import PassAtOneCallback, TrainLogCallback
from saah_lib.training.study_trainer import StudyTrainer

_INHERITED = object()  # a clocked method that its class inherits: restored by deleting the wrapper


class SectionClock:
    """Exclusive wall seconds and calls per category of clocked methods (nested calls subtract from the caller)."""

    def __init__(self):
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self._stack: list[list] = []  # [category, start, seconds of clocked callees]

    @contextmanager
    def section(self, category: str):
        frame = [category, time.perf_counter(), 0.0]
        self._stack.append(frame)
        try:
            yield
        finally:
            self._stack.pop()
            spent = time.perf_counter() - frame[1]
            self.seconds[category] += spent - frame[2]
            self.calls[category] += 1
            if self._stack:
                self._stack[-1][2] += spent

    @contextmanager
    def clocked(self, owners: list[tuple[type, str, object]]):
        """Wrap ``owner.method`` for each ``(owner, method, category)``; ``category`` is a name or a function of
        nothing that names it at call time.  The originals are restored on exit."""
        originals = [(owner, name, vars(owner).get(name, _INHERITED)) for owner, name, _ in owners]

        def wrapped(function, category):
            def call(*args, **kwargs):
                with self.section(category() if callable(category) else category):
                    return function(*args, **kwargs)
            return call

        try:
            for owner, name, category in owners:
                setattr(owner, name, wrapped(getattr(owner, name), category))
            yield self
        finally:
            for owner, name, original in originals:
                if original is _INHERITED:
                    delattr(owner, name)
                else:
                    setattr(owner, name, original)

    def shares(self, total_s: float) -> dict[str, dict]:
        return {c: {"seconds": round(s, 3), "share": round(s / total_s, 4), "calls": self.calls[c]}
                for c, s in sorted(self.seconds.items(), key=lambda item: -item[1])}


def matmul_gflops(size: int = 512, seconds: float = 1.0) -> float:
    """This thread's fp32 matmul rate (GFLOP/s) on ``size``-square matrices: the floor's yardstick."""
    a, b = torch.randn(size, size), torch.randn(size, size)
    a @ b
    runs, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        a @ b
        runs += 1
    return 2 * size**3 * runs / (time.perf_counter() - start) / 1e9


def top_functions(profiler: cProfile.Profile, limit: int = 25) -> list[str]:
    """The functions with the most own time, as pstats prints them."""
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(limit)
    lines = [line.rstrip() for line in text.getvalue().splitlines()]
    start = next((i for i, line in enumerate(lines) if line.lstrip().startswith("ncalls")), 0)
    return [line for line in lines[start:] if line]


# ---- a mini run


def run_categories():
    """The methods a mini run's clocks wrap, by category."""
    def scoring():  # the same method scores with and without gradients
        return "loss forward" if torch.is_grad_enabled() else "scoring forwards (reference log-probs)"

    return [
        (run_module, "run_training", "setup (data, model, trainer build)"),
        (StudyTrainer, "train", "TRL bookkeeping (batching, advantages, callbacks)"),
        (StudyTrainer, "_generate_single_turn", "generation"),
        (StudyTrainer, "_calculate_rewards", "reward scoring"),
        (StudyTrainer, "_get_per_token_logps_and_entropies", scoring),
        (StudyTrainer, "_compute_loss", "loss forward"),
        (Accelerator, "backward", "backward"),
        (torch.optim.AdamW, "step", "optimizer step"),
        (StudyTrainer, "_save_checkpoint", "checkpoint writes"),
        (PassAtOneCallback, "_evaluate", "evaluations"),
        (TrainLogCallback, "on_log", "train log and metrics"),
    ]


def run_floor(run_dir: Path, parameters: int, prompt_tokens: float, cfg, gflops: float) -> dict[str, float]:
    """Floor seconds of the run's compute: matmul FLOPs (2 per parameter per token forward, 4 backward) at
    ``gflops``, with the completion lengths the run logged and ``prompt_tokens`` per prompt.  Evaluations are
    counted at their token limit (an upper bound on their floor)."""
    log = read_jsonl(run_dir / "train_log.jsonl")
    completions = cfg.trainer.num_generations * cfg.trainer.prompts_per_step
    completion_tokens = sum(r["completion_length"] for r in log) * completions
    sequence_tokens = completion_tokens + prompt_tokens * completions * len(log)
    eval_tokens = sum(e["n"] * cfg.eval_max_new_tokens for e in read_jsonl(run_dir / "eval.jsonl"))
    per_token = 2 * parameters / (gflops * 1e9)
    return {
        "generation": per_token * completion_tokens,
        "scoring forwards (reference log-probs)": per_token * sequence_tokens if cfg.trainer.beta else 0.0,
        "loss forward": per_token * sequence_tokens,
        "backward": 2 * per_token * sequence_tokens,
        "evaluations": per_token * eval_tokens,
    }


def mean_prompt_tokens(cfg, tokenizer) -> float:
    problems = run_module.load_split(cfg).train[:200]
    return sum(len(tokenizer(make_prompt(p.question, tokenizer))["input_ids"]) for p in problems) / len(problems)


def profile_run(steps: int | None, gflops: float, with_cprofile: bool = False) -> dict:
    """One mini run (SA-AH-GRPO at the main alpha, seed 0) into a scratch root, clocked (and, with
    ``with_cprofile``, under cProfile, which slows Python-heavy parts)."""
    with tempfile.TemporaryDirectory() as scratch:
        configs = planned_configs(Path(scratch), (0,), steps)
        cfg = next(c for c in configs if c.trainer.method == "sa")
        model, tokenizer = load_model_and_tokenizer(resolve_model(cfg.model_name, progress=False), cfg.dtype)
        parameters = sum(p.numel() for p in model.parameters())
        prompt_tokens = mean_prompt_tokens(cfg, tokenizer)
        del model
        torch.set_num_threads(1)
        clock, profiler = SectionClock(), cProfile.Profile() if with_cprofile else None
        with clock.clocked(run_categories()):
            start = time.perf_counter()
            if profiler:
                profiler.enable()
            run_dir = run_module.run_training(cfg, progress=False)
            if profiler:
                profiler.disable()
            wall = time.perf_counter() - start
        floors = run_floor(Path(run_dir), parameters, prompt_tokens, cfg, gflops)
    report = {"run_id": cfg.run_id, "steps": cfg.trainer.max_steps, "parameters": parameters,
              "mean_prompt_tokens": round(prompt_tokens, 1), "wall_s": round(wall, 2),
              "under_cprofile": with_cprofile, "categories": with_floors(clock.shares(wall), floors)}
    if profiler:
        report["top_functions_by_own_time"] = top_functions(profiler)
    return report


def with_floors(shares: dict[str, dict], floors: dict[str, float]) -> dict[str, dict]:
    for category, entry in shares.items():
        if category in floors:
            entry["floor_s"] = round(floors[category], 3)
            entry["times_floor"] = round(entry["seconds"] / floors[category], 1) if floors[category] else None
    return shares


# ---- the warm start's build


def build_categories():
    return [
        (warmstart, "_build_into", "other (problems, targets, model init)"),
        (warmstart, "build_tokenizer", "tokenizer"),
        (warmstart, "encode_sft_examples", "tokenising the SFT examples"),
        (warmstart, "collate_sft", "batching"),
        (warmstart, "sft_loss", "SFT forward"),
        (torch.Tensor, "backward", "SFT backward"),
        (torch.optim.AdamW, "step", "optimizer step"),
        (warmstart, "evaluate_pass_at_1", "held-out evaluation"),
    ]


def sft_step_tokens(examples: list[tuple[list[int], int]], batch_size: int) -> float:
    """Tokens one SFT step runs through the model, on average: the shared prefix once, then each example's rest
    (:func:`saah_lib.models.warmstart.sft_loss`)."""
    prefix = warmstart.shared_prefix_length(examples)
    rest = sum(len(ids) - prefix for ids, _ in examples) / len(examples)
    return prefix + batch_size * rest


def profile_build(sft_steps: int, gflops: float) -> dict:
    """The warm start's build recipe with ``sft_steps`` SFT steps, into a scratch folder, clocked; the floor from
    the tokens of the examples it encodes."""
    settings = replace(warmstart.WarmStartSettings(), sft_steps=sft_steps)
    clock, encoded, encode = SectionClock(), [], warmstart.encode_sft_examples

    def encode_and_keep(tokenizer, problems):
        encoded.extend(encode(tokenizer, problems))
        return encoded

    warmstart.encode_sft_examples = encode_and_keep
    try:
        with tempfile.TemporaryDirectory() as scratch, clock.clocked(build_categories()):
            start = time.perf_counter()
            record = warmstart._build_into(Path(scratch), 0, settings, progress=False)
            wall = time.perf_counter() - start
    finally:
        warmstart.encode_sft_examples = encode
    shares = clock.shares(wall)
    per_token = 2 * record["parameters"] / (gflops * 1e9)
    step_tokens = sft_step_tokens(encoded, settings.batch_size)
    floors = {"SFT forward": per_token * step_tokens * sft_steps, "SFT backward": 2 * per_token * step_tokens * sft_steps,
              "held-out evaluation": per_token * settings.n_heldout * settings.max_new_tokens}
    return {"sft_steps": sft_steps, "of_sft_steps": warmstart.WarmStartSettings().sft_steps,
            "parameters": record["parameters"], "wall_s": round(wall, 2), "categories": with_floors(shares, floors),
            "mean_tokens_per_sft_step": round(step_tokens, 1)}


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m saah_lib.studies.bench.run_profile",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=None, help="the run's optimiser steps (default: the mini "
                                                                 "study's 60)")
    parser.add_argument("--sft-steps", type=int, default=240, help="SFT steps of the build, of 2,400 (default: 240)")
    parser.add_argument("--out", type=Path, default=LOCAL_BENCH,
                        help=f"folder for the JSON file (default: {repo_relative(LOCAL_BENCH)}, git-ignored)")
    parser.add_argument("--cprofile", action="store_true",
                        help="also run the run under cProfile and list the functions with the most own time")
    args = parser.parse_args(argv)
    if args.steps is not None and args.steps < 1 or args.sft_steps < 1:
        parser.error("--steps and --sft-steps must be at least 1")
    if problem := out_folder_problem(args.out):
        parser.error(problem)
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    quiet_libraries()
    torch.set_num_threads(1)
    gflops = matmul_gflops()
    cpu = cpu_description()
    command = " ".join(["python -m saah_lib.studies.bench.run_profile", *(argv if argv is not None else sys.argv[1:])])
    report = {"command": command, "device": device_name(), "cpu": cpu["cpu_model"], "platform": platform.platform(),
              "torch": torch.__version__, "torch_threads": 1, "matmul_gflops_fp32_one_thread": round(gflops, 1)}
    out = args.out / f"{(cpu['cpu_model'] or device_name()).replace(' ', '_')}-run-profile.json"  # one per machine
    report["run"] = profile_run(args.steps, gflops, args.cprofile)
    atomic_write_json(out, report)
    report["warm_start_build"] = profile_build(args.sft_steps, gflops)
    atomic_write_json(out, report)
    for part in ("run", "warm_start_build"):
        print(f"{part}: {report[part]['wall_s']} s")
        for category, entry in report[part]["categories"].items():
            floor = f", {entry['times_floor']}x its floor" if entry.get("times_floor") else ""
            print(f"  {category}: {entry['seconds']:.2f} s ({100 * entry['share']:.1f}%){floor}")
    print(f"wrote {repo_relative(out)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
