"""SA-AH-GRPO: entropy-adaptive horizon weights for GRPO, with the studies that test them.

The package's folders follow the data, each importing only from those before it (tests/test_layout.py)::

    library, paths, jsonio   which modules are the library; where things live; JSON
    numerics, progress       the pinned CPU numerics (applied by the studies' entry points); progress
    method/, tasks/          loss, token weights, reward; problems, GSM8K, the synthetic CPU task
    models/, rundir/         names, loading, generation, the tiny warm start; the run folder
    training/, analysis/     config, TRL trainer subclass, one run; summaries, statistics
    report/, studies/        LaTeX tables and figures; the CPU studies, reproduction checks, benchmark

The library (what ``pip install saah_lib`` needs, no Jupyter, Ray or plotting) and the artifact built
on it cut across these folders: :mod:`saah_lib.library`. The names below are what the notebooks and
most users call; ``from saah_lib import SAAHGRPOTrainer`` imports only what that name needs (torch and
TRL load on first use), and importing the package changes nothing in the process.
"""

from __future__ import annotations

import importlib
import sys

#: Every ``python -m`` command of the package, with what it does (``python -m saah_lib`` lists them).
COMMANDS = {
    "saah_lib": "list these commands",
    "saah_lib.training.launch": "one training run (also under accelerate launch); --print-config shows the config",
    "saah_lib.studies.mini": "the CPU mini study: rerun and compare with the committed one (make mini), promote",
    "saah_lib.studies.extended": "the powered CPU study (make extended); --plan prints its runs and time estimate",
    "saah_lib.studies.grid": "a study's whole grid on Ray, one machine or a cluster: plan (runs, GPU-hours), run",
    "saah_lib.studies.matched_alpha": "measure the paper-matched alpha on a warm start (the studies do it first)",
    "saah_lib.studies.timing": "each stage's wall time of finished studies, side by side (make mini-timing)",
    "saah_lib.studies.bench": "the step-time benchmark against stock TRL (make bench)",
    "saah_lib.studies.bench.smollm2_step": "peak memory and CPU time of a SmolLM2-135M training step, before/after",
    "saah_lib.studies.bench.run_profile": "where a mini run's and the warm-start build's time goes, against the FLOP floor",
    "saah_lib.studies.preflight": "checks before the grid on a new GPU, with a verdict (make gpu-check)",
    "saah_lib.studies.gpu_bench": "stock TRL against ours in one process, and a profiled decode step (make gpu-bench)",
    "saah_lib.studies.verify": "compare one run with the matching committed run, number by number",
    "saah_lib.studies.verify.calibration": "the reproduction check's false-alarm rate and power, by simulation",
    "saah_lib.studies.topk": "the top-K entropy error of a model's rollouts",
    "saah_lib.analysis.crossed_simulation": "the evidence's test on simulated studies: false positives and power",
    "saah_lib.studies.real_model": "the discount on a real instruct model (SmolLM2-135M) on GSM8K prompts",
    "saah_lib.tasks.gsm8k": "prepare: GSM8K's train.jsonl and test.jsonl from the hub, for offline machines",
    "saah_lib.report.render": "every table and figure from the committed results and your own runs",
    "saah_lib.rundir.manifest": "write or check a results root's MANIFEST.json",
    "saah_lib.numerics": "the pinned CPU numerics: env, kernelspec, kernel (docs/reproducibility.md)",
}

_PUBLIC = {
    "SAAHGRPOConfig": "saah_lib.training.config",
    "SAAHGRPOTrainer": "saah_lib.training.trainer",
    "RunConfig": "saah_lib.training.config",
    "make_config": "saah_lib.training.config",
    "run_training": "saah_lib.training.run",
    "baseline_for": "saah_lib.training.run",
    "RunDir": "saah_lib.rundir.folder",
    "read_jsonl": "saah_lib.jsonio",
    "ResultSet": "saah_lib.analysis.resultset",
    "read_paper_reported": "saah_lib.analysis.reported",
    "plot_run": "saah_lib.report.plots",
    "plot_alpha_ablation": "saah_lib.report.plots",
    "render_report": "saah_lib.report.render",
    "run_ablation": "saah_lib.studies.grid",
}
__all__ = sorted(_PUBLIC)


def __getattr__(name: str):
    if name not in _PUBLIC:
        raise AttributeError(f"module 'saah_lib' has no attribute {name!r}")
    value = getattr(importlib.import_module(_PUBLIC[name]), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(list(globals()) + __all__)


def _refuse_a_module_that_is_no_command() -> None:
    """``python -m saah_lib.<module>`` of a module without a command would run nothing and exit 0,
    even with ``--help``; name the commands instead and exit 2.

    While ``-m`` locates its module (this package is imported on the way), ``sys.argv[0]`` is
    ``"-m"`` and ``sys.orig_argv`` holds the module's name.
    """
    argv = getattr(sys, "orig_argv", [])
    if not sys.argv or sys.argv[0] != "-m" or "-m" not in argv[:-1]:
        return
    target = argv[argv.index("-m") + 1]
    if target.split(".")[0] != __name__ or target in COMMANDS or target.endswith(".__main__"):
        return
    lines = "\n".join(f"  python -m {name:28s} {text}" for name, text in COMMANDS.items())
    sys.stderr.write(f"{target} is a library module, not a command. The commands are:\n{lines}\n")
    raise SystemExit(2)


_refuse_a_module_that_is_no_command()
