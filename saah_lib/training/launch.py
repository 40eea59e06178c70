"""Command-line entry point for one training run, for ``accelerate launch`` on several GPUs.

    accelerate launch --num_processes 8 -m saah_lib.training.launch --profile qwen2.5-1.5b --method sa
    python -m saah_lib.training.launch --profile tiny --method sa --steps 2     # one process

Every process builds the same config; ``saah_lib.training.distributed`` splits each
step's completions between them, and only the main process evaluates and logs.
Any other SAAHConfig field goes through ``--set name=value`` (a JSON value).
"""

from __future__ import annotations

import argparse
import json

from saah_lib.rundir.lock import FolderLockedError  # light: no torch


def parse_overrides(pairs: list[str]) -> dict:
    out = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep:
            raise ValueError(f"--set expects name=value, got {pair!r}")
        try:
            out[name] = json.loads(value)
        except json.JSONDecodeError:
            out[name] = value  # a bare string
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description="one SA-AH-GRPO training run (works under accelerate launch)")
    p.add_argument("--profile", default="tiny")
    p.add_argument("--method", default="sa")
    p.add_argument("--alpha", type=float, default=None)
    p.add_argument("--steps", type=int, default=None)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--run-id", default=None)
    p.add_argument("--results-dir", default=None)
    p.add_argument("--generation-backend", default=None, help="auto | hf | compiled | vllm")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="NAME=VALUE")
    p.add_argument("--no-progress", dest="progress", action="store_false")
    args = p.parse_args(argv)

    from saah_lib.training.config import make_config
    from saah_lib.training.run import run_training

    cfg = make_config(args.profile, method=args.method, alpha=args.alpha, steps=args.steps, seed=args.seed,
                      run_id=args.run_id, results_dir=args.results_dir, generation_backend=args.generation_backend,
                      **parse_overrides(args.overrides))
    try:
        return run_training(cfg, progress=args.progress)
    except FolderLockedError as err:  # another process trains this run: say so, without a traceback
        p.exit(1, f"error: {err}\n")


if __name__ == "__main__":
    main()
