"""Step-time, memory and evaluation-throughput benchmark: ours against stock TRL.

    python -m bench.step --profile tiny                 # CPU
    python -m bench.step --profile qwen2.5-1.5b --generation-backend hf compiled   # GPU, random weights

Variants timed on the same model, data and seed (:func:`run_benchmark`): stock ``GRPOTrainer``
(``loss_type="bnpo"``), and ours for ``grpo``, ``ah`` and ``sa`` with exact entropy and with top-K = 500, each
of ours once per generation backend. The Qwen profiles use the exact Qwen2.5 architectures with random weights
(a step's cost does not depend on the values) and force every completion to full length, the worst case. Per
step the generation time is recorded apart from the rest; the first step's excess over the steady median is the
one-time compile/warm-up cost. ``compiled`` variants also record their compile health
(:mod:`saah_lib.models.compile_health`) and train enough steps for dynamo's recompile limit to show. The JSON
goes to ``results/local/bench/`` (git-ignored) unless ``--out`` names a folder, rewritten after every variant
into its partial file (:mod:`bench.files`). Pieces: ``options`` (what to measure), ``models``
(what is measured), ``trainers`` (step times), ``rollouts`` (rollouts and evaluation outside the trainer).
"""

from __future__ import annotations

import sys

import torch

from bench.files import scratch_folder, write_complete, write_partial
from bench.models import (
    QWEN25_ARCHITECTURES,
    build_model,
    device_name,
    model_description,
    model_dtype,
    qwen25_config,
    result_file,
)
from bench.options import MIN_COMPILED_STEPS, VARIANTS, BenchOptions, parse_args, profile_config
from bench.rollouts import eval_throughput, rollout_comparison, rollout_profile
from bench.trainers import step_ratios, time_variant
from saah_lab.rundir.provenance import package_versions
from saah_lib.models.backends import resolve_backend

__all__ = ["BenchOptions", "QWEN25_ARCHITECTURES", "device_name", "main", "qwen25_config", "run_benchmark"]


def bench_config(options: BenchOptions):
    """The profile's config with the benchmark's step count and completion length, made once."""
    return profile_config(options.profile, options.max_completion_length, options.overrides,
                          max_steps=options.warmup + options.steps)


def _runs(options: BenchOptions, backends: list[str]) -> list[tuple]:
    variants = [v for v in VARIANTS if not options.variants or v[0] in options.variants]
    runs = [(v, "hf") for v in variants if v[1] == "trl"]
    return runs + [(v, b) for b in backends for v in variants if v[1] != "trl"]


def run_benchmark(options: BenchOptions) -> dict:
    on_cuda = torch.cuda.is_available()
    if not on_cuda:
        # two OpenMP threads on two shared cores can stall a step many-fold; one thread is steady
        torch.set_num_threads(options.threads)
    cfg = bench_config(options)
    dtype = model_dtype(cfg)

    def model_factory():
        return build_model(options.profile, dtype, options.num_layers, model_dir=options.model_dir)

    backends = list(dict.fromkeys(resolve_backend(b) for b in options.generation_backends))
    runs = _runs(options, backends)
    compiles = options.compiles(on_cuda)
    if any(b == "compiled" for _, b in runs) and compiles and options.warmup + options.steps < MIN_COMPILED_STEPS:
        raise ValueError(f"--warmup + --steps is {options.warmup + options.steps}; with compilation on it must be "
                         f"at least {MIN_COMPILED_STEPS}, so that recompiles (dynamo gives up after 8) show")
    out_dir = options.out_dir()
    path = result_file(out_dir, options.profile)
    report = {
        "device": device_name(), "profile": options.profile,
        "model": model_description(options.profile, options.model_dir), "dtype": str(dtype),
        "num_layers_override": options.num_layers, "completions_per_step": cfg.trainer.completions_per_step,
        "max_completion_length": cfg.trainer.max_completion_length, "full_length": options.full_length,
        "prompt_tokens": options.prompt_tokens, "warmup_steps": options.warmup, "timed_steps": options.steps,
        "cpu_threads": None if on_cuda else options.threads,
        "lora": cfg.use_lora, "gradient_checkpointing": cfg.trainer.activation_checkpointing,
        "generation_backends": backends, "rollout_compile": compiles,
        "compile_backend": (options.compile_backend or "inductor") if compiles else None, "complete": False,
        "variants": [], "ratios": {}, "rollout": None, "rollout_profile": None, "eval": None,
        "versions": package_versions(), "command": options.command,
    }
    with scratch_folder(out_dir, "trainer_tmp") as scratch:
        for variant, backend in runs:
            report["variants"].append(time_variant(variant, model_factory, cfg, options, scratch, backend))
            report["ratios"] = step_ratios(report["variants"])
            write_partial(path, report)  # after every variant: a cut-off run keeps what it measured, apart
    if options.rollout_repeats:
        report["rollout"] = rollout_comparison(model_factory, cfg, options)
        write_partial(path, report)
    if options.rollout_profile:
        report["rollout_profile"] = rollout_profile(model_factory, cfg, options)
        write_partial(path, report)
    if options.eval_problems:
        report["eval_by_backend"] = {b: eval_throughput(model_factory, cfg, options, b) for b in backends}
        report["eval"] = report["eval_by_backend"][backends[-1]]
    report["complete"] = True
    write_complete(path, report)
    print(summary_line(report) + f"\nwrote {path}")
    return report


def summary_line(report: dict) -> str:
    parts = [f"{report['device']} {report['profile']}:"]
    for v in report["variants"]:
        parts.append(f"{v['variant']} {v['median_step_s']:.3f}s (gen {v['median_generation_s']:.3f}s)")
        if v.get("compile_health"):
            h = v["compile_health"]
            parts.append(f"{v['variant']} graphs {h['compiled_graphs']} recompiles {h['recompiles']} "
                         f"breaks {h['graph_breaks']} fallback {'yes' if h['fallback'] else 'no'}")
    parts += [f"{k}={v:.3f}" for k, v in report["ratios"].items()]
    if report.get("rollout_profile"):
        r = report["rollout_profile"]["static"]
        parts.append(f"static rollout {r['host_syncs_per_token']:.3f} syncs/token, "
                     f"{r['eager_ops_per_token']:.2f} eager ops/token")
    if report.get("rollout"):
        r = report["rollout"]
        parts.append(f"rollout hf {r['hf']['median_s']:.3f}s compiled {r['compiled']['median_s']:.3f}s")
    if report["eval"]:
        parts.append(f"eval {report['eval']['problems_per_s']:.2f} problems/s")
    return " | ".join(parts)


def main(argv=None) -> dict:
    return run_benchmark(parse_args(list(sys.argv[1:] if argv is None else argv)))


if __name__ == "__main__":
    main()
