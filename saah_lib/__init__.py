"""SA-AH-GRPO: entropy-adaptive horizon weights for GRPO, with the studies that test them.

The package's folders follow the data, each importing only from those before it::

    paths, jsonio   where things live; reading and writing JSON
    numerics        the pinned CPU numerics, applied here, on import, before anything loads torch
    method/         loss, token weights, reward: pure functions of tensors and strings
    tasks/          problems, GSM8K, the synthetic CPU task, prompts, scoring
    models/         model names and loading, generation backends, greedy evaluation, the tiny warm start
    rundir/         the run folder: layout, writing, strict reading, checkpoints, manifest
    training/       the config, the TRL trainer subclass, callbacks, one run, several processes
    analysis/       per-run summaries, seeds aggregated, the paper's numbers, statistics
    report/         LaTeX tables and figures, the whole report at once
    studies/        the CPU studies, reproduction checks, the benchmark

The names below are what the notebooks and most users call; ``from saah_lib import
make_config`` imports only what that name needs (torch and TRL load on first use).
"""

from __future__ import annotations

import importlib

from saah_lib.numerics import apply_once

# First, before any module of the package can import torch: torch fixes its CPU kernels
# from the environment at its first operation (saah_lib.numerics says what is set and why).
apply_once()

_PUBLIC = {
    "SAAHConfig": "saah_lib.training.config",
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
    "run_alpha_sweep": "saah_lib.studies.sweep",
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
