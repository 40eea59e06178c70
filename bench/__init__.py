"""Benchmarks and profiling of the library and the lab: how fast, how much memory, where the time goes.

Nothing on the paper's path imports this package (tests/test_layout.py); the grid planner reads the step times
it measured from the committed ``results/bench/*.json`` files. Each command is a short script over the shared
pieces of the step benchmark: ``options`` (what to measure), ``models`` (what is measured), ``trainers`` (step
times), ``rollouts`` and ``decode`` (generation outside the trainer), ``profiling`` (counting ops and kernels),
``files`` (where a measurement goes while it is taken).

Importing it pins the CPU numerics as the studies do, before any command imports torch.
"""

from saah_lib import refuse_a_module_that_is_no_command
from saah_lib.numerics import apply_once

#: Every ``python -m bench...`` command, with what it does (``python -m bench`` lists them).
COMMANDS = {
    "bench": "list these commands",
    "bench.step": "the step-time benchmark against stock TRL (make bench)",
    "bench.preflight": "checks before the grid on a new GPU, with a verdict (make gpu-check)",
    "bench.gpu": "stock TRL against ours in one process, and a profiled decode step (make gpu-bench)",
    "bench.smollm2_step": "peak memory and CPU time of a SmolLM2-135M training step, before/after",
    "bench.run_profile": "where a mini run's and the warm-start build's time goes, against the FLOP floor",
    "bench.measure_compiles": "compiles and static-state memory of a GSM8K-shaped compiled run",
    "bench.measure_rollout": "CPU measurements of the compiled rollout: log-prob gap, guard cost, memory",
    "bench.profile_rollout_before": "host syncs and eager ops per token of the rollout engine at an earlier commit",
    "bench.cpu_numerics_probe": "which environment settings change the bits of a CPU study",
    "bench.grid_nodes": "a part of the extended study on one local Ray node against two loopback nodes",
    "bench.grid_overhead": "what the Ray engine costs a study: starting Ray, scheduling per task",
    "bench.watchdog": "the CPU the study watchdog spends per look, against an earlier revision's",
    "bench.report_scaling": "how the report's reading and rendering scale with the number of runs",
    "bench.make_target": "a make target timed against a baseline form of itself, alternated",
    "bench.install": "make setup's install with pip and with uv, alternated, each into a fresh venv",
}

apply_once()
refuse_a_module_that_is_no_command(__name__, COMMANDS)
