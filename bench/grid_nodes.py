"""Time a fixed part of the extended study on one local Ray node and on two loopback nodes, with the same CPUs.

    python -m bench.grid_nodes [--runs 6] [--steps 60] [--out results/bench/grid-nodes.json]

The runs (:func:`bench_configs`): the first ``--runs`` CPU runs of the extended study's plan on warm start 0,
``--steps`` steps each, trained from the warm start already built in ``cache/`` (a missing one is an error).
They are trained twice, each time into a fresh results root: ``one_local_node``, the grid's own way on one
machine (a local Ray instance with 2 CPUs, :func:`train`), and ``two_sandbox_nodes``, two Ray nodes of 1 CPU
each on loopback addresses (tools/ray_sandbox.py, :func:`train_in_sandbox`): what a study on a cluster does,
squeezed onto this machine. Per configuration: ``wall_s`` (the ``run_plan`` call), ``runs_s`` (each run's own
wall time) and ``scheduling_overhead_per_run_s`` = (wall - sum(runs_s) / 2) / runs: what each run cost beyond
its own training when 2 run at a time; the sandbox's also ``cluster_start_and_stop_s``. ``ratio_two_nodes_to_one``
= two-node wall / one-node wall. The two roots' runs are compared bit for bit.

Not a test: it loads both cores for minutes and its figures depend on the machine's load.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from saah_lab.studies import extended
from saah_lab.studies.runner import Plan, run_job, run_plan
from saah_lab.studies.timing import Timings
from saah_lab.studies.verify.bits import compare_run
from saah_lib.models.names import tiny_warm_start_name
from saah_lib.models.warmstart import read_build_info
from saah_lib.numerics import cpu_description
from saah_lib.paths import BENCH_RESULTS, REPO_ROOT, tiny_warmstart_dir

DEFAULT_OUT = BENCH_RESULTS / "grid-nodes.json"
SANDBOX = REPO_ROOT / "tools" / "ray_sandbox.py"
SLOTS = 2


def bench_configs(root: Path, n_runs: int, steps: int) -> list:
    """The first ``n_runs`` runs of the extended plan on warm start 0 that do not wait for the matched alpha
    (GRPO and SA-AH-GRPO at the main alpha, seeds 0, 1, 2, ...), ``steps`` steps each."""
    seeds = tuple(range(n_runs))  # two runs per seed are planned without the alpha: more seeds than needed
    configs = extended.planned_configs(root, warm_starts=(0,), seeds=seeds, steps=steps, topk_ks=())
    return configs[:n_runs]


def train(root: Path, n_runs: int, steps: int, address: str | None) -> dict:
    """Train the runs into ``root`` (which must be new); the timings of the ``run_plan`` call."""
    configs = bench_configs(root, n_runs, steps)
    plan = Plan("bench", root, [run_job(c) for c in configs])
    start = time.perf_counter()
    entries = run_plan(plan, Timings(root / "timings.json"), address=address, slots=SLOTS)
    wall = time.perf_counter() - start
    runs_s = {e["run_id"]: e["wall_s"] for e in entries}
    overhead = (wall - sum(runs_s.values()) / SLOTS) / len(runs_s)
    return {"wall_s": round(wall, 2), "runs_s": runs_s, "sum_runs_s": round(sum(runs_s.values()), 2),
            "scheduling_overhead_per_run_s": round(overhead, 2), "root": str(root)}


def train_in_sandbox(root: Path, n_runs: int, steps: int) -> dict:
    out = root.parent / "sandbox.json"
    start = time.perf_counter()
    done = subprocess.run([sys.executable, str(SANDBOX), "--node", "num_cpus=1", "--node", "num_cpus=1", "--",
                           sys.executable, __file__, "--inside-sandbox", "--runs", str(n_runs), "--steps",
                           str(steps), "--root", str(root), "--out", str(out)], capture_output=True, text=True)
    total = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"the sandbox run failed ({done.returncode}):\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    result = json.loads(out.read_text())
    result["cluster_start_and_stop_s"] = round(total - result["wall_s"], 2)
    result["nodes"] = "2 x 1 CPU"
    return result


def same_bits(a: Path, b: Path, run_ids) -> bool:
    return all(compare_run(a / "runs" / r, b / "runs" / r)["identical"] for r in run_ids)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.grid_nodes", description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=6, help="runs (default 6)")
    parser.add_argument("--steps", type=int, default=60, help="steps per run (default 60, the study's)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"the JSON file (default {DEFAULT_OUT})")
    parser.add_argument("--root", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--inside-sandbox", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.runs < 1 or args.steps < 1:
        parser.error("--runs and --steps must be at least 1")
    if args.inside_sandbox:
        args.out.write_text(json.dumps(train(args.root, args.runs, args.steps, "auto")))
        return 0
    build = read_build_info(tiny_warmstart_dir(0))
    if build is None:
        parser.error(f"{tiny_warm_start_name(0)} is not built in cache/: run `make mini` (or the extended study) first")
    with tempfile.TemporaryDirectory(prefix="saah-bench-nodes-") as tmp:
        cpu = cpu_description()
        report = {"ray": importlib.metadata.version("ray"), "python": platform.python_version(), "cpus": os.cpu_count(),
                  "cpu_model": cpu["cpu_model"], "cpu_flags": cpu["cpu_flags"],
                  "load_average_before": [round(x, 2) for x in os.getloadavg()],
                  "settings": {"runs": args.runs, "steps": args.steps, "slots": SLOTS,
                               "warm_start": tiny_warm_start_name(0)}}
        local = train(Path(tmp) / "local", args.runs, args.steps, None)
        report["one_local_node"] = {**local, "nodes": f"1 x {SLOTS} CPU"}
        report["two_sandbox_nodes"] = train_in_sandbox(Path(tmp) / "sandbox", args.runs, args.steps)
        report["ratio_two_nodes_to_one"] = round(report["two_sandbox_nodes"]["wall_s"] / local["wall_s"], 3)
        report["identical_bits"] = same_bits(Path(tmp) / "local", Path(tmp) / "sandbox", local["runs_s"])
        report["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
        for side in ("one_local_node", "two_sandbox_nodes"):
            report[side].pop("root")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
