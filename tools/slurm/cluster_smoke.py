"""Check a running Ray cluster the way the grid uses it: a task per CPU slot, each reporting its node and
torch's CPU kernels (the pinned ones on every node), run through saah_lab.studies.execution.engine.run_tasks.

    python tools/slurm/cluster_smoke.py [--address auto] [--tasks N]

Prints one line per task and ``cluster ok`` when every task ran under the pin; exits 1 otherwise.
"""

from __future__ import annotations

import argparse
import os
import sys

import saah_lib  # noqa: F401  (the CPU-numerics pin, before torch loads in this process)
from saah_lab.studies.execution.engine import Task, run_tasks
from saah_lib.numerics import PINNED_CAPABILITY, numerics_mode


def where_and_kernels(index: int) -> dict:
    import ray
    import torch

    return {"index": index, "node": ray.util.get_node_ip_address(), "pid": os.getpid(),
            "capability": torch.backends.cpu.get_cpu_capability()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--address", default="auto", help="the cluster to join (default: auto, from RAY_ADDRESS "
                        "or the Ray node on this machine)")
    parser.add_argument("--tasks", type=int, default=2, help="how many tasks (default 2)")
    args = parser.parse_args(argv)
    tasks = [Task(f"smoke-{i}", where_and_kernels, {"index": i}) for i in range(args.tasks)]
    results = run_tasks(tasks, address=args.address)
    for result in results.values():
        print(f"task {result['index']}: node {result['node']}, pid {result['pid']}, torch CPU kernels "
              f"{result['capability']}")
    pinned = numerics_mode() == "native" or all(r["capability"] == PINNED_CAPABILITY for r in results.values())
    print("cluster ok" if pinned else f"cluster NOT ok: a worker did not run the pinned {PINNED_CAPABILITY} kernels")
    return 0 if pinned else 1


if __name__ == "__main__":
    sys.exit(main())
