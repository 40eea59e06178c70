"""Where the time of a mini run, the tiny warm start's build and a SmolLM2 step goes, against the FLOP floor.

    python -m bench.run_profile                   # a mini run (60 steps) and a tenth of the build
    python -m bench.run_profile --no-mini --smollm2 bfloat16-static:1 --before 415d203   # before and after
    python -m bench.run_profile --no-mini --smollm2-ops bfloat16-static   # which ops, by CPU time

Each part runs the project's own code on one torch thread (the mini run and build as ``make mini`` does; the
SmolLM2 step as :mod:`.smollm2_step` builds it), with a clock around the methods that do one kind of work
(:class:`SectionClock`: exclusive wall and CPU time, so the shares add up). What no clock covers inside
``train()`` is TRL's and transformers' bookkeeping; outside it, the run's setup. Each share is set against its
floor (:func:`run_floor`, :func:`profile_build`, :func:`step_floor`): its matmul FLOPs at this thread's measured
matmul rate (:func:`matmul_gflops`; for SmolLM2 per CPU second, in its dtype). A share far above its floor is
overhead; one near it is compute. The build runs ``--sft-steps`` of its SFT steps (its weights are not kept). The
mini run runs on TRL's ``generate`` (``hf``) and on the default, and the two are compared bit for bit. One JSON
per machine, ``<CPU model>-run-profile.json`` in ``--out`` (default ``results/local/bench``, git-ignored).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import platform
import pstats
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import torch
from accelerate import Accelerator

from bench import smollm2_step
from bench.files import out_folder_problem, scratch_folder
from bench.models import device_name, file_stem
from bench.options import LOCAL_BENCH
from saah_lab.studies.mini import planned_configs
from saah_lab.studies.verify.bits import compare_run
from saah_lab.training import run as run_module
from saah_lab.training.study_trainer import StudyTrainer
from saah_lib.jsonio import atomic_write_json, read_jsonl
from saah_lib.models import warmstart
from saah_lib.models.loading import load_model_and_tokenizer, resolve_model
from saah_lib.numerics import cpu_description
from saah_lib.paths import LOCAL_RESULTS, REPO_ROOT, repo_relative
from saah_lib.progress import quiet_libraries
from saah_lib.tasks.prompts import make_prompt
from saah_lib.training.callbacks import PassAtOneCallback, TrainLogCallback
from saah_lib.training.config import make_config

_INHERITED = object()  # a clocked method that its class inherits: restored by deleting the wrapper


class SectionClock:
    """Exclusive wall and process CPU seconds and calls per category of clocked methods (nested calls subtract
    from the caller).  CPU seconds are what compare on a loaded machine, where wall time includes waiting."""

    def __init__(self):
        self.seconds: dict[str, float] = defaultdict(float)
        self.cpu_seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self._stack: list[list] = []  # [category, wall start, CPU start, wall and CPU seconds of clocked callees]

    @contextmanager
    def section(self, category: str):
        frame = [category, time.perf_counter(), time.process_time(), 0.0, 0.0]
        self._stack.append(frame)
        try:
            yield
        finally:
            self._stack.pop()
            spent, spent_cpu = time.perf_counter() - frame[1], time.process_time() - frame[2]
            self.seconds[category] += spent - frame[3]
            self.cpu_seconds[category] += spent_cpu - frame[4]
            self.calls[category] += 1
            if self._stack:
                self._stack[-1][3] += spent
                self._stack[-1][4] += spent_cpu

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
        return {c: {"seconds": round(s, 3), "share": round(s / total_s, 4),
                    "cpu_seconds": round(self.cpu_seconds[c], 3), "calls": self.calls[c]}
                for c, s in sorted(self.seconds.items(), key=lambda item: -item[1])}


def matmul_gflops(size: int = 512, seconds: float = 1.0, dtype: torch.dtype = torch.float32,
                  clock=time.perf_counter) -> float:
    """This thread's matmul rate (GFLOP/s) on ``size``-square ``dtype`` matrices: the floor's yardstick.  With
    ``clock=time.process_time`` it is per CPU second, which a loaded machine's waiting does not dilute."""
    a, b = torch.randn(size, size, dtype=dtype), torch.randn(size, size, dtype=dtype)
    a @ b
    runs, start = 0, clock()
    while clock() - start < seconds:
        a @ b
        runs += 1
    return 2 * size**3 * runs / (clock() - start) / 1e9


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


def profile_run(steps: int | None, gflops: float, with_cprofile: bool = False, generation_backend: str = "auto",
                keep_in: Path | None = None) -> dict:
    """One mini run (SA-AH-GRPO at the main alpha, seed 0) decoding with ``generation_backend``, into a scratch
    root (or ``keep_in``, kept), clocked (and, with ``with_cprofile``, under cProfile, which slows Python-heavy
    parts)."""
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(keep_in or scratch)
        sa = next(c for c in planned_configs(root, (0,), steps) if c.trainer.method == "sa")
        cfg = make_config("tiny", method="sa", alpha=sa.trainer.alpha, seed=sa.trainer.seed, max_steps=steps,
                          results_dir=str(root), generation_backend=generation_backend)
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
    report = {"run_id": cfg.run_id, "generation_backend": generation_backend, "run_dir": str(run_dir),
              "steps": cfg.trainer.max_steps, "parameters": parameters,
              "mean_prompt_tokens": round(prompt_tokens, 1), "wall_s": round(wall, 2),
              "under_cprofile": with_cprofile, "categories": with_floors(clock.shares(wall), floors)}
    if profiler:
        report["top_functions_by_own_time"] = top_functions(profiler)
    return report


def with_floors(shares: dict[str, dict], floors: dict[str, float], measure: str = "seconds") -> dict[str, dict]:
    """Each share with a floor gets ``floor_s`` and ``times_floor``: its ``measure`` (wall or CPU seconds) over
    the floor."""
    for category, entry in shares.items():
        if category in floors:
            entry["floor_s"] = round(floors[category], 3)
            entry["times_floor"] = round(entry[measure] / floors[category], 1) if floors[category] else None
    return shares


# ---- a SmolLM2 step


def step_floor(*, body: int, head: int, lora: int, layers: int, attention_width: int, prompt_tokens: list[int],
               completion_tokens: float, gflops: float) -> dict[str, float]:
    """Floor seconds of one GRPO step's matmuls at ``gflops``, one sequence per entry of ``prompt_tokens`` (p
    tokens, then ``completion_tokens`` c; L = p + c).  A forward is 2 FLOPs per weight and token: the ``body``
    matrices over L tokens, the LM ``head`` over the c tokens whose log-probs are kept, the ``lora`` adapter over
    L, and causal attention's two products, 2 * layers * width * L**2.  Generation decodes the same tokens (with
    the adapter); the reference forward runs without it; the backward gives input gradients through every
    matrix (2 per weight, attention's four products) and weight gradients for the adapter only (2 more)."""
    tokens = sum(p + completion_tokens for p in prompt_tokens)
    attention = 2 * layers * attention_width * sum((p + completion_tokens) ** 2 for p in prompt_tokens)
    frozen = 2 * body * tokens + 2 * head * completion_tokens * len(prompt_tokens) + attention
    adapter = 2 * lora * tokens
    per_flop = 1 / (gflops * 1e9)
    return {"generation": (frozen + adapter) * per_flop,
            "scoring forwards (reference log-probs)": frozen * per_flop,
            "loss forward": (frozen + adapter) * per_flop,
            "backward": (frozen + attention + 2 * adapter) * per_flop}


def model_shape(trainer) -> dict[str, int]:
    """The counts :func:`step_floor` needs, from the trainer's (PEFT) model: the frozen linear weights less the
    LM head, the head (the embedding matrix too when tied: a lookup costs no matmul), the trainable (LoRA) ones."""
    model = trainer.accelerator.unwrap_model(trainer.model)
    linear = sum(m.weight.numel() for name, m in model.named_modules()
                 if isinstance(m, torch.nn.Linear) and not m.weight.requires_grad)
    head = model.get_output_embeddings().weight.numel()
    config = model.config
    width = config.num_attention_heads * getattr(config, "head_dim", config.hidden_size // config.num_attention_heads)
    return {"body": linear - head, "head": head, "lora": sum(p.numel() for p in model.parameters() if p.requires_grad),
            "layers": config.num_hidden_layers, "attention_width": width}


def cpu_has_bf16_instructions() -> dict[str, bool]:
    """Whether this CPU has native bf16 matmul instructions (the kernel's flags, as lscpu shows them)."""
    try:
        flags = next(line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags"))
    except (OSError, StopIteration):
        return {}
    flags = set(flags.split(":", 1)[1].split())
    return {flag: flag in flags for flag in ("avx512_bf16", "amx_bf16")}


def smollm2_configuration(name: str) -> dict:
    """A bounded configuration of :mod:`smollm2_step` by name, or by dtype (``bfloat16``: ``bfloat16-bounded``), or
    ``bfloat16-fast``: the static one without activation checkpointing (no recompute in the backward)."""
    bounded = {c["name"]: c for c in smollm2_step.configurations(baseline=False)}
    bounded["bfloat16-fast"] = dict(bounded["bfloat16-static"], name="bfloat16-fast", activation_checkpointing=False)
    setting = bounded.get(name) or bounded.get(f"{name}-bounded")
    if setting is None:
        raise ValueError(f"no SmolLM2 configuration {name!r}: float32, bfloat16 or one of {', '.join(bounded)}")
    return setting


def profile_smollm2_step(configuration: str, steps: int, gflops: float, data_dir: str | None, scratch: Path,
                         on_step=lambda partial: None, load=None) -> dict:
    """``steps`` steps of :mod:`smollm2_step`'s bounded ``configuration`` (:func:`smollm2_configuration`) on one
    thread, clocked; each category's CPU seconds against :func:`step_floor` at ``gflops`` (the rate in its
    dtype).  ``on_step`` gets the profile so far after each step; ``load`` replaces SmolLM2 (the tests' model)."""
    setting = smollm2_configuration(configuration)
    dtype = setting["dtype"]
    trainer = smollm2_step.build_trainer({**setting, "scratch": str(scratch)}, steps=steps, threads=1,
                                         data_dir=data_dir, load=load or smollm2_step.load_smollm2)
    shape = model_shape(trainer)
    tokenizer = trainer.processing_class
    prompt_tokens = [len(tokenizer(text)["input_ids"]) for text in trainer.train_dataset["prompt"]]
    clock, started, step_clock = SectionClock(), [], smollm2_step.StepClock(lambda: on_step(profile()))
    per_step = step_clock.steps

    def profile() -> dict:
        wall, cpu = time.perf_counter() - started[0], time.process_time() - started[1]
        logged = [e["completions/mean_length"] for e in trainer.state.log_history if "completions/mean_length" in e]
        completion = sum(logged) / len(logged) if logged else smollm2_step.MAX_COMPLETION_LENGTH
        sequences = [p for p in prompt_tokens for _ in range(smollm2_step.PER_PROMPT)]
        floor = step_floor(**shape, prompt_tokens=sequences, completion_tokens=completion, gflops=gflops)
        done = max(len(per_step), 1)
        floors = {category: seconds * done for category, seconds in floor.items()}
        recompute = floor["loss forward"] * done if setting["activation_checkpointing"] else 0.0
        return {"configuration": setting["name"], "dtype": dtype, "generation_backend": setting["generation_backend"],
                "steps": len(per_step), "shape": shape,
                "prompt_tokens": prompt_tokens, "mean_completion_tokens": logged,
                "wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "per_step": per_step,
                "unclocked_s": round(wall - sum(clock.seconds.values()), 2),  # train() itself while it runs
                "floor_s_per_step": round(sum(floor.values()), 2),
                "backward_checkpoint_recompute_floor_s": round(recompute, 3),
                "categories": with_floors(clock.shares(wall), floors, measure="cpu_seconds")}

    trainer.add_callback(step_clock)
    with clock.clocked(run_categories()):
        started.extend((time.perf_counter(), time.process_time()))
        trainer.train()
    return profile()


#: Ops listed by :func:`smollm2_training_ops`, the most own CPU time first.
TOP_OPS = 15


def smollm2_training_ops(configuration: str, data_dir: str | None, scratch: Path, load=None,
                         top: int = TOP_OPS) -> dict:
    """One more step of ``configuration`` whose training phase (loss forwards, backward with its checkpoint
    recompute, optimiser step) runs under torch's profiler: the ``top`` ops by own CPU time, with their share of
    the phase.  The rollout and the scoring forward are left out (a rollout's per-token events fill memory), and the
    profiler's overhead makes this step slower than the clocked ones: it says which ops, not how long."""
    setting = smollm2_configuration(configuration)
    trainer = smollm2_step.build_trainer({**setting, "scratch": str(scratch)}, steps=1, threads=1,
                                         data_dir=data_dir, load=load or smollm2_step.load_smollm2)
    profiler = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
    compute_loss, started = trainer.compute_loss, []

    def compute_loss_profiled(*args, **kwargs):  # the first loss forward starts the training phase
        if not started:
            profiler.start()
            started.append(True)
        return compute_loss(*args, **kwargs)

    trainer.compute_loss = compute_loss_profiled
    try:
        trainer.train()
    finally:
        if started:
            profiler.stop()
    ops = sorted(profiler.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
    total_s = sum(e.self_cpu_time_total for e in ops) / 1e6
    return {"configuration": setting["name"], "phase": "training (loss forwards, backward, optimiser step)",
            "self_cpu_s": round(total_s, 2),
            "ops": [{"op": e.key, "self_cpu_s": round(e.self_cpu_time_total / 1e6, 3),
                     "share": round(e.self_cpu_time_total / 1e6 / total_s, 4), "calls": e.count} for e in ops[:top]]}


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
    parser = argparse.ArgumentParser(prog="python -m bench.run_profile",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=None, help="the run's optimiser steps (default: the mini "
                                                                 "study's 60)")
    parser.add_argument("--sft-steps", type=int, default=240, help="SFT steps of the build, of 2,400 (default: 240)")
    parser.add_argument("--out", type=Path, default=LOCAL_BENCH,
                        help=f"folder for the JSON file (default: {repo_relative(LOCAL_BENCH)}, git-ignored)")
    parser.add_argument("--cprofile", action="store_true",
                        help="also run the run under cProfile and list the functions with the most own time")
    parser.add_argument("--smollm2", action="append", default=[], metavar="CONFIGURATION:STEPS",
                        help="also profile STEPS steps of a bounded configuration of the SmolLM2 step benchmark "
                             "(float32, bfloat16, bfloat16-static or bfloat16-fast; repeatable, run in the order given)")
    parser.add_argument("--smollm2-ops", default=None, metavar="CONFIGURATION",
                        help="also train one step of a bounded SmolLM2 configuration with its training phase under "
                             "torch's profiler, and list the ops with the most own CPU time")
    parser.add_argument("--before", default=None, metavar="REVISION",
                        help="also profile each --smollm2 configuration at this git revision (a temporary worktree "
                             "with this checkout's environment), just before this checkout's: before and after in "
                             "one run")
    parser.add_argument("--no-mini", dest="mini", action="store_false",
                        help="skip the mini run and the build (with --smollm2: profile SmolLM2 only)")
    parser.add_argument("--data-dir", default=None, help="GSM8K folder for --smollm2 (default: $SAAH_GSM8K_DIR)")
    args = parser.parse_args(argv)
    if args.steps is not None and args.steps < 1 or args.sft_steps < 1:
        parser.error("--steps and --sft-steps must be at least 1")
    try:
        args.smollm2 = [(name, int(steps)) for name, _, steps in (item.partition(":") for item in args.smollm2)]
        for name, _ in args.smollm2:
            smollm2_configuration(name)
    except ValueError as error:
        parser.error(f"--smollm2 takes CONFIGURATION:STEPS, such as bfloat16:2 ({error})")
    try:
        if args.smollm2_ops is not None:
            smollm2_configuration(args.smollm2_ops)
    except ValueError as error:
        parser.error(f"--smollm2-ops: {error}")
    if any(steps < 1 for _, steps in args.smollm2):
        parser.error("--smollm2 takes at least 1 step")
    if not args.mini and not args.smollm2 and args.smollm2_ops is None:
        parser.error("--no-mini leaves nothing to profile without --smollm2 or --smollm2-ops")
    if problem := out_folder_problem(args.out):
        parser.error(problem)
    return args


def profile_at_revision(revision: str, name: str, steps: int, data_dir: str | None) -> dict:
    """The SmolLM2 profile of ``name`` as the code at ``revision`` measures it, in a fresh process of a temporary
    git worktree (this checkout's interpreter); a configuration that revision lacks is its ``bfloat16-static``."""
    with tempfile.TemporaryDirectory() as scratch:
        tree, out = Path(scratch) / "tree", Path(scratch) / "out"
        subprocess.run(["git", "-C", str(REPO_ROOT), "worktree", "add", "--detach", str(tree), revision],
                       check=True, capture_output=True)
        try:
            known = subprocess.run([sys.executable, "-c", "from bench.smollm2_step import configurations; "
                                    "print(' '.join(c['name'] for c in configurations(False)))"],
                                   cwd=tree, capture_output=True, text=True, check=True).stdout.split()
            command = [sys.executable, "-m", "bench.run_profile", "--no-mini", "--out", str(out),
                       "--smollm2", f"{name if name in known else 'bfloat16-static'}:{steps}"]
            subprocess.run(command + (["--data-dir", data_dir] if data_dir else []), cwd=tree, check=True,
                           env={**os.environ, "PYTHONPATH": str(tree)})
            return json.loads(next(out.glob("*-run-profile.json")).read_text())["smollm2"]["profiles"][0]
        finally:
            subprocess.run(["git", "-C", str(REPO_ROOT), "worktree", "remove", "--force", str(tree)],
                           capture_output=True)


def profile_mini(args: argparse.Namespace, report: dict, out: Path, gflops: float) -> list[tuple[str, dict]]:
    """The mini run on TRL's ``generate`` and on the default, compared bit for bit, then the build; ``report``
    is written after each."""
    run_dirs = []  # in a scratch folder of this machine: compared, not reported
    with tempfile.TemporaryDirectory() as both:  # TRL's generate first (the default before), then today's
        for key, backend in (("run_on_hf", "hf"), ("run", "auto")):
            report[key] = profile_run(args.steps, gflops, args.cprofile, backend, keep_in=Path(both))
            run_dirs.append(Path(report[key].pop("run_dir")))
            atomic_write_json(out, report)
        # every logged number and evaluation completion of the two, bit for bit (their run ids differ)
        report["run_results_identical"] = compare_run(*run_dirs)["results_identical"]
    atomic_write_json(out, report)
    report["warm_start_build"] = profile_build(args.sft_steps, gflops)
    atomic_write_json(out, report)
    return [("run on TRL's generate", report["run_on_hf"]), ("run", report["run"]),
            ("warm_start_build", report["warm_start_build"])]


def smollm2_machine(rates: dict[str, float]) -> dict:
    """What sets a SmolLM2 step's pace on this machine: the matmul ``rates``, bf16 instructions, ATen's kernels,
    the load."""
    return {"matmul_gflops_per_cpu_s": {d: round(r, 1) for d, r in rates.items()},
            "cpu_bf16_instructions": cpu_has_bf16_instructions(),
            "aten_cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
            "cpus": os.cpu_count(), "omp_num_threads": os.environ.get("OMP_NUM_THREADS"), "profiles": []}


def profile_smollm2(args: argparse.Namespace, report: dict, out: Path) -> list[tuple[str, dict]]:
    """Each ``--smollm2`` configuration (after its ``--before`` revision's, when asked), then ``--smollm2-ops``;
    ``report`` is written after every step."""
    # per CPU second: the other cores' load must not dilute the rate the CPU seconds are set against
    rates = {dtype: matmul_gflops(dtype=getattr(torch, dtype), clock=time.process_time)
             for dtype in ("float32", "bfloat16")}
    smollm2 = report["smollm2"] = smollm2_machine(rates)
    parts = []
    profiles = smollm2["profiles"]
    with scratch_folder(LOCAL_RESULTS / "bench", "smollm2-profile") as scratch:
        for name, steps in args.smollm2:
            def write(partial, at=len(profiles)):
                profiles[at:] = [partial]
                smollm2["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
                atomic_write_json(out, report)

            if args.before:
                before = smollm2.setdefault("before", {"revision": args.before, "profiles": []})
                before["profiles"].append(profile_at_revision(args.before, name, steps, args.data_dir))
                atomic_write_json(out, report)
            rate = rates[smollm2_configuration(name)["dtype"]]
            write(profile_smollm2_step(name, steps, rate, args.data_dir, scratch, on_step=write))
            parts.append((f"SmolLM2 {profiles[-1]['configuration']}, {steps} steps", profiles[-1]))
        if args.smollm2_ops:
            smollm2["training_ops"] = smollm2_training_ops(args.smollm2_ops, args.data_dir, scratch)
            atomic_write_json(out, report)
            print_ops(smollm2["training_ops"])
    return parts


def print_ops(ops: dict) -> None:
    print(f"SmolLM2 {ops['configuration']}, training phase under the profiler: {ops['self_cpu_s']} CPU-s")
    for entry in ops["ops"][:8]:
        print(f"  {entry['op']}: {entry['self_cpu_s']:.2f} CPU-s ({100 * entry['share']:.1f}%), {entry['calls']} calls")


def print_parts(parts: list[tuple[str, dict]]) -> None:
    for name, part in parts:
        print(f"{name}: {part['wall_s']} s")
        for category, entry in part["categories"].items():
            floor = f", {entry['times_floor']}x its floor" if entry.get("times_floor") else ""
            print(f"  {category}: {entry['seconds']:.2f} s, {entry['cpu_seconds']:.2f} CPU-s "
                  f"({100 * entry['share']:.1f}%){floor}")


def main(argv=None) -> int:
    args = parse_args(argv)
    quiet_libraries()
    torch.set_num_threads(1)
    gflops = matmul_gflops()
    cpu = cpu_description()
    command = " ".join(["python -m bench.run_profile", *(argv if argv is not None else sys.argv[1:])])
    report = {"command": command, "device": device_name(), "cpu": cpu["cpu_model"], "platform": platform.platform(),
              "torch": torch.__version__, "torch_threads": 1, "matmul_gflops_fp32_one_thread": round(gflops, 1)}
    out = args.out / f"{file_stem(cpu['cpu_model'] or device_name())}-run-profile.json"  # one per machine
    parts = profile_mini(args, report, out, gflops) if args.mini else []
    if args.smollm2 or args.smollm2_ops:
        parts += profile_smollm2(args, report, out)
    print_parts(parts)
    print(f"wrote {repo_relative(out)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
