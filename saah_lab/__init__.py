"""The paper's lab, built on the library :mod:`saah_lib` (which never imports it).

Its folders follow the data, each importing only from those before it (tests/test_layout.py)::

    rundir/      reading and checking run folders, locks, checkpoints, provenance, a results root's manifest
    training/    one whole run with its folder and command, the notebooks' parameters
    analysis/    summaries and statistics over runs
    report/      LaTeX tables, sentences and figures
    studies/     the CPU studies; their execution (runner, Ray engine, grid); reproduction checks

The benchmarks and profiling are the top-level package ``bench``, above the lab (nothing here imports it).

The names below are what the notebooks call, resolved on first use.
"""

from __future__ import annotations

import importlib

from saah_lib import COMMANDS as LIBRARY_COMMANDS
from saah_lib import refuse_a_module_that_is_no_command

#: Every ``python -m`` command of the lab, with what it does (``python -m saah_lab`` lists them).
COMMANDS = {
    "saah_lab": "list these commands and the library's",
    "saah_lab.training.launch": "one training run (also under accelerate launch); --print-config shows the config",
    "saah_lab.studies.mini": "the CPU mini study: rerun and compare with the committed one (make mini), promote",
    "saah_lab.studies.extended": "the powered CPU study (make extended); --plan prints its runs and time estimate",
    "saah_lab.studies.execution.grid": ("a study's whole grid on Ray, one machine or a cluster: plan (runs, "
                                        "GPU-hours), run"),
    "saah_lab.studies.matched_alpha": "measure the paper-matched alpha on a warm start (the studies do it first)",
    "saah_lab.studies.execution.timing": "each stage's wall time of finished studies, side by side (make mini-timing)",
    "saah_lab.studies.verify": "compare one run with the matching committed run, number by number",
    "saah_lab.studies.verify.calibration": "the reproduction check's false-alarm rate and power, by simulation",
    "saah_lab.studies.topk": "the top-K entropy error of a model's rollouts",
    "saah_lab.analysis.crossed_simulation": "the evidence's test on simulated studies: false positives and power",
    "saah_lab.studies.real_model": "the discount on a real instruct model (SmolLM2-135M) on GSM8K prompts",
    "saah_lab.studies.regime": "which warm-up puts SmolLM2 in the paper's entropy regime (the real study's pilot)",
    "saah_lab.studies.real_study": "SmolLM2-135M-Instruct trained by grpo, ah and sa on 2 CPU cores (make real-study)",
    "saah_lab.report.render": "every table and figure from the committed results and your own runs",
    "saah_lab.report.paper_inputs": "record (make paper) or check what paper/main.pdf was built from",
    "saah_lab.rundir.manifest": "write or check a results root's MANIFEST.json",
}
#: The library's commands and the lab's: everything ``python -m`` runs.
ALL_COMMANDS = {**LIBRARY_COMMANDS, **COMMANDS}

_PUBLIC = {
    "run_training": "saah_lab.training.run",
    "baseline_for": "saah_lab.training.run",
    "ResultSet": "saah_lab.analysis.resultset",
    "read_paper_reported": "saah_lab.analysis.reported",
    "plot_run": "saah_lab.report.plots",
    "plot_alpha_ablation": "saah_lab.report.plots",
    "render_report": "saah_lab.report.render",
    "run_ablation": "saah_lab.studies.execution.grid",
}
__all__ = sorted(_PUBLIC)


def __getattr__(name: str):
    if name not in _PUBLIC:
        raise AttributeError(f"module 'saah_lab' has no attribute {name!r}")
    value = getattr(importlib.import_module(_PUBLIC[name]), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(list(globals()) + __all__)


refuse_a_module_that_is_no_command(__name__, COMMANDS)
