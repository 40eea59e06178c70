"""Measure what the Ray engine costs a study: starting or joining Ray, and the scheduling overhead per task.

    python -m bench.grid_overhead [--tasks 12] [--sleep 2] [--slots 2] [--out FILE] [--local-only]

On one local node (``run_tasks`` starting its own instance with ``--slots`` CPUs) and on a two-node
cluster of ``--slots // 2`` CPUs per node (tools/ray_sandbox.py, joined with ``address="auto"``), it runs
three task sets through ``run_tasks``, one call each (:func:`measure`). Every task notes when it started and
ended, and the driver when it heard of the end, so the per-task figures leave out the one-time start of Ray
and of the first workers, which the machine's load makes vary; ``fixed_s`` is that one-time part. Set
against a run's training time, the per-task figures say what fraction Ray adds to each.

Writes JSON to ``results/local/bench/grid_overhead.json`` (git-ignored) unless ``--out`` says otherwise, and
prints it. Not a test: the figures depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from saah_lab.studies.engine import Task, run_tasks
from saah_lib.paths import REPO_ROOT

DEFAULT_OUT = REPO_ROOT / "results" / "local" / "bench" / "grid_overhead.json"
SANDBOX = REPO_ROOT / "tools" / "ray_sandbox.py"


def stamped(seconds: float) -> dict:
    """A task that sleeps and says when it ran (a clock every node of this machine shares)."""
    start = time.time()
    time.sleep(seconds)
    return {"start": start, "end": time.time()}


def timed_run(tasks: list[Task], address: str | None, slots: int) -> tuple[float, dict, dict]:
    """(wall time, each task's start/end, when the driver heard of each end)."""
    heard = {}
    start = time.perf_counter()
    results = run_tasks(tasks, address=address, num_cpus=None if address else slots,
                        on_finish=lambda task, result, node: heard.setdefault(task.id, time.time()))
    return time.perf_counter() - start, results, heard


def _span(results: dict, heard: dict) -> tuple[float, float]:
    """(first start to last end, first start to the driver hearing of the last end)."""
    first = min(r["start"] for r in results.values())
    return max(r["end"] for r in results.values()) - first, max(heard.values()) - first


def measure(address: str | None, n_tasks: int, sleep_s: float, slots: int) -> dict:
    """The three task sets, on the given Ray (None: a local instance of ``slots`` CPUs).

    - ``chain``: ``n_tasks`` empty tasks, each waiting for the one before: per dependency, the time from one
      task's end to the next one's start (result back to the driver, passed on as the next task's argument,
      leased, started);
    - ``trivial``: ``n_tasks`` independent empty tasks: the time per task from the first start to the last end;
    - ``sleeping``: ``n_tasks`` tasks sleeping ``sleep_s`` on ``slots`` slots: per task, (first start to
      last end - ideal) / tasks, with ideal = ceil(tasks / slots) * sleep;
    - ``fixed_s`` of each: the call's wall time less its first start to its last report: starting or joining
      Ray, the first worker, stopping.
    """
    wall, results, heard = timed_run([Task(f"c{i}", stamped, {"seconds": 0}, deps=(f"c{i - 1}",) if i else ())
                                      for i in range(n_tasks)], address, slots)
    gaps = sorted(results[f"c{i + 1}"]["start"] - results[f"c{i}"]["end"] for i in range(n_tasks - 1))
    chain = {"wall_s": round(wall, 2), "fixed_s": round(wall - _span(results, heard)[1], 2),
             "per_dependency_s": {"median": round(statistics.median(gaps), 4), "max": round(gaps[-1], 4)}}

    wall, results, heard = timed_run([Task(f"t{i}", stamped, {"seconds": 0}) for i in range(n_tasks)], address,
                                     slots)
    span, reported = _span(results, heard)
    trivial = {"wall_s": round(wall, 2), "fixed_s": round(wall - reported, 2),
               "per_task_s": round(span / n_tasks, 4)}

    wall, results, heard = timed_run([Task(f"s{i}", stamped, {"seconds": sleep_s}) for i in range(n_tasks)],
                                     address, slots)
    span, reported = _span(results, heard)
    ideal = math.ceil(n_tasks / slots) * sleep_s
    sleeping = {"wall_s": round(wall, 2), "fixed_s": round(wall - reported, 2), "span_s": round(span, 2),
                "ideal_s": ideal, "per_task_overhead_s": round((span - ideal) / n_tasks, 4),
                "overhead_fraction": round((span - ideal) / ideal, 4)}
    return {"chain": chain, "trivial": trivial, "sleeping": sleeping}


def measure_in_sandbox(n_tasks: int, sleep_s: float, slots: int) -> dict:
    """The same on two sandbox nodes of slots // 2 CPUs each; also the cluster's own start and stop."""
    per_node = max(1, slots // 2)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "sandbox.json"
        start = time.perf_counter()
        done = subprocess.run([sys.executable, str(SANDBOX), "--node", f"num_cpus={per_node}", "--node",
                               f"num_cpus={per_node}", "--", sys.executable, __file__, "--inside-sandbox",
                               "--tasks", str(n_tasks), "--sleep", str(sleep_s), "--slots", str(2 * per_node),
                               "--out", str(out)], capture_output=True, text=True)
        total = time.perf_counter() - start
        if done.returncode != 0:
            raise RuntimeError(f"the sandbox run failed ({done.returncode}):\n{done.stdout[-2000:]}"
                               f"{done.stderr[-2000:]}")
        result = json.loads(out.read_text())
    result["sandbox_total_s"] = round(total, 2)  # two nodes started, the three measurements, torn down
    result["nodes"] = f"2 x {per_node} CPU"
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.grid_overhead", description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=12, help="tasks per measurement (default 12)")
    parser.add_argument("--sleep", type=float, default=2.0, help="seconds each sleeping task sleeps (default 2)")
    parser.add_argument("--slots", type=int, default=2, help="CPUs in all: the local node's, split over the two "
                        "sandbox nodes (default 2)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"the JSON file (default {DEFAULT_OUT})")
    parser.add_argument("--local-only", action="store_true", help="skip the two-node sandbox")
    parser.add_argument("--inside-sandbox", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.tasks < 1 or args.slots < 1 or args.sleep < 0:
        parser.error("--tasks and --slots must be at least 1, --sleep not negative")
    if args.inside_sandbox:
        args.out.write_text(json.dumps(measure("auto", args.tasks, args.sleep, args.slots)))
        return 0
    report = {"ray": importlib.metadata.version("ray"), "python": platform.python_version(), "cpus": os.cpu_count(),
              "load_average_before": [round(x, 2) for x in os.getloadavg()],
              "settings": {"tasks": args.tasks, "sleep_s": args.sleep, "slots": args.slots},
              "one_local_node": measure(None, args.tasks, args.sleep, args.slots)}
    if not args.local_only:
        report["two_sandbox_nodes"] = measure_in_sandbox(args.tasks, args.sleep, args.slots)
    report["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
