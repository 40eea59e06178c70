"""Benchmarks and profiling of the library and the lab: how fast, how much memory, where the time goes.

Nothing on the paper's path imports this package (tests/test_layout.py); the grid planner reads the step times
it measured from the committed ``results/bench/*.json`` files. Each command is a short script over the shared
pieces of the step benchmark: ``options`` (what to measure), ``models`` (what is measured), ``trainers`` (step
times), ``rollouts`` and ``decode`` (generation outside the trainer), ``profiling`` (counting ops and kernels),
``files`` (where a measurement goes while it is taken).  One-off probes whose measurements are committed in
``results/bench`` are not kept here: the docs that cite their figures name the commit that has each script
(``git checkout <commit> -- bench`` brings back that commit's package, whose command list names it).

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
    "bench.dropout": "LoRA dropout's CPU time in the SmolLM2 step's shapes: torch's against GapDropout, alternated",
}

apply_once()
refuse_a_module_that_is_no_command(__name__, COMMANDS)
