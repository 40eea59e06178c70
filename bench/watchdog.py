"""The CPU the study watchdog spends per look at a live Ray instance: this tree's ``instance_tree`` against the one
at a git revision, alternated in one process.

The watchdog (saah_lab/studies/watchdog.py) looks at the instance twice a second for as long as a study runs, on
the cores the runs train on. This starts the engine's local Ray instance (its token file's path, the marker, in
the environment of every process it starts; two workers up), checks that both versions see the same processes,
then times ``--calls`` looks of each per round, the order swapped every round. Writes ``<cpu>-watchdog-look.json``.

    python -m bench.watchdog --baseline-rev 9dfa421 --out results/bench
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import psutil

# before Ray is imported: the engine imports it with its loopback switch
from saah_lab.studies.engine import ray_session

# isort: split
import ray

from saah_lab.studies import watchdog
from saah_lib.numerics import cpu_description

WATCHDOG_FILE = "saah_lab/studies/watchdog.py"


def module_at(revision: str, folder: Path):
    """The watchdog module as it was at ``revision`` (read from git, loaded under another name)."""
    shown = subprocess.run(["git", "show", f"{revision}:{WATCHDOG_FILE}"], cwd=REPO, capture_output=True, text=True,
                           check=False)
    if shown.returncode != 0:
        raise SystemExit(f"--baseline-rev {revision}: git has no {WATCHDOG_FILE} there ({shown.stderr.strip()})")
    source = shown.stdout
    path = folder / "watchdog_at_revision.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("watchdog_at_revision", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _worker_pid() -> int:
    return os.getpid()


def cpu_ms_per_look(module, marker: str, calls: int) -> float:
    start = time.process_time()
    for _ in range(calls):
        module.instance_tree(os.getpid(), marker)
    return (time.process_time() - start) / calls * 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.watchdog", description=__doc__.splitlines()[0])
    parser.add_argument("--baseline-rev", required=True, help="the git revision whose watchdog is the baseline")
    parser.add_argument("--rounds", type=int, default=10, help="rounds, each timing both versions")
    parser.add_argument("--calls", type=int, default=20, help="looks per version per round")
    parser.add_argument("--out", type=Path, default=REPO / "results" / "bench", help="folder for the JSON file")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.calls < 1:
        parser.error("--rounds and --calls must be at least 1")

    with tempfile.TemporaryDirectory() as scratch:
        baseline = module_at(args.baseline_rev, Path(scratch))  # before Ray starts: a bad revision stops here
        # the engine's local instance: its processes carry its token file's path, the watchdog's marker
        with ray_session(num_cpus=2):
            marker = os.environ[watchdog.MARKER_VARIABLE]
            ray.get([ray.remote(_worker_pid).remote() for _ in range(4)])  # both workers started
            seen = {name: sorted(p.pid for p in module.instance_tree(os.getpid(), marker))
                    for name, module in (("baseline", baseline), ("current", watchdog))}
            if seen["baseline"] != seen["current"]:
                raise SystemExit(f"the two versions see different processes: {seen}")
            times = {"baseline": [], "current": []}
            for round_ in range(args.rounds):
                order = ("baseline", "current") if round_ % 2 == 0 else ("current", "baseline")
                for name in order:
                    module = baseline if name == "baseline" else watchdog
                    times[name].append(round(cpu_ms_per_look(module, marker, args.calls), 3))

    medians = {name: round(statistics.median(values), 3) for name, values in times.items()}
    report = {
        "command": " ".join(["python", "-m", "bench.watchdog", *(argv if argv is not None else sys.argv[1:])]),
        "cpu": cpu_description(), "cores": os.cpu_count(), "baseline_revision": args.baseline_rev,
        "processes_in_table": len(psutil.pids()),
        "instance_processes": len(seen["current"]), "looks_per_second": 1 / watchdog.LOOK_S,
        "cpu_ms_per_look": times,
        "summary": {f"{name}_cpu_ms_per_look_median": value for name, value in medians.items()}
        | {f"{name}_share_of_a_core": round(value / 1000 / watchdog.LOOK_S, 4) for name, value in medians.items()},
    }
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"{(report['cpu']['cpu_model'] or 'unknown-cpu').replace(' ', '_')}-watchdog-look.json"
    path.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report["summary"]), f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
