"""LoRA dropout's CPU time in the SmolLM2 step's shapes: torch's ``nn.Dropout`` against ``GapDropout``, alternated.

    python -m bench.dropout --out results/bench

The paper-shape step (:mod:`bench.smollm2_step`) drops LoRA inputs (float32, p = 0.05) of 7 projections x 30 layers x
8 chunks of 2 completions of 424 tokens, in the forward and again in the recompute, which has a backward: 3,360 calls.
Each repeat times one step's calls with each implementation in turn (A B A B ...: the machine's drift slows both
alike). Writes ``<CPU model>-lora-dropout.json``: CPU seconds per step, each repeat, the medians and their ratio.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch
from torch import nn

from bench.models import file_stem
from bench.options import LOCAL_BENCH
from saah_lib.jsonio import atomic_write_json
from saah_lib.models.dropout import GapDropout
from saah_lib.numerics import cpu_description

SHAPES = ((2, 424, 576),) * 6 + ((2, 424, 1536),)  # q, k, v, o, gate, up; down
CALLS_PER_SHAPE = 30 * 8  # layers x chunks, each once in the forward and once in the recompute


def step_cpu_seconds(dropout: nn.Module, inputs: list[torch.Tensor]) -> float:
    started = time.process_time()
    for _ in range(CALLS_PER_SHAPE):
        for x in inputs:
            with torch.no_grad():
                dropout(x)
            dropout(x).backward(x)
    return time.process_time() - started


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.dropout", description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="alternations of the two (default: 3)")
    parser.add_argument("--out", type=Path, default=LOCAL_BENCH, help=f"folder of the JSON (default: {LOCAL_BENCH})")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    inputs = [torch.randn(shape, requires_grad=True) for shape in SHAPES]
    kinds = {"torch nn.Dropout": nn.Dropout(0.05).train(), "GapDropout": GapDropout(0.05).train()}
    seconds = {name: [] for name in kinds}
    for _ in range(args.repeats):
        for name, dropout in kinds.items():
            seconds[name].append(step_cpu_seconds(dropout, inputs))
    medians = {name: statistics.median(values) for name, values in seconds.items()}
    cpu = cpu_description()["cpu_model"] or "cpu"
    report = {"command": "python -m bench.dropout" + (f" --repeats {args.repeats}" if args.repeats != 3 else ""),
              "cpu": cpu, "torch": torch.__version__, "torch_threads": 1,
              "calls_per_step": CALLS_PER_SHAPE * len(SHAPES) * 2,
              "cpu_s_per_step": {name: [round(s, 3) for s in values] for name, values in seconds.items()},
              "median_cpu_s_per_step": {name: round(s, 3) for name, s in medians.items()},
              "ratio_torch_to_gap": round(medians["torch nn.Dropout"] / medians["GapDropout"], 2)}
    atomic_write_json(args.out / f"{file_stem(cpu)}-lora-dropout.json", report)
    print(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
