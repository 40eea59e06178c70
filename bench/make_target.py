"""A make target timed against a baseline form of itself, alternated in one run on this machine.

The baseline is the same target with other make variables, for instance the test suite as xdist handed it out
before (``TEST_ARGS=--dist load``; pytest keeps the last ``--dist`` it is given). Each round runs both, the
order swapped every round (baseline first in even rounds), so that a drift in the machine's speed falls on both.
``make setup`` runs once first, untimed. Per trial: wall seconds, the CPU seconds of the processes make waited
for, the exit status and pytest's summary line. Writes ``<cpu>-make-<target>.json`` (the CPU's model name, as the
other benches) and exits 1 if any trial failed.

    python -m bench.make_target test --baseline "TEST_ARGS=--dist load" --rounds 1 --out results/bench
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from saah_lib.numerics import cpu_description  # stdlib only: runs with any python3

#: pytest's last line: "1558 passed in 493.97s (0:08:13)", "2 failed, 10 passed, 1 warning in 3.10s"
PYTEST_SUMMARY = re.compile(r"^=*\s*(\d+ (passed|failed|error|errors|skipped).* in [\d.]+s.*?)\s*=*$")

#: what make hands its sub-makes in the environment
MAKE_PASSES_ON = ("MAKEFLAGS", "MFLAGS", "MAKEOVERRIDES", "MAKELEVEL")


def pytest_summary(output: str) -> str | None:
    """pytest's final summary line in ``output``, without its ``=`` rule; None if there is none."""
    found = [m.group(1) for line in output.splitlines() if (m := PYTEST_SUMMARY.match(line.strip()))]
    return found[-1] if found else None


def own_make_environment(assigned: set[str]) -> dict[str, str]:
    """This process's environment without what a calling make hands on (run from `make test ...`, its
    command-line variables arrive here as environment variables and in ``MAKEFLAGS``) and without the variables
    either form assigns: the current form then gets the Makefile's own value, not the caller's."""
    return {k: v for k, v in os.environ.items() if k not in MAKE_PASSES_ON and k not in assigned}


def trial(make: list[str], target: str, variables: list[str], variant: str, env: dict[str, str]) -> dict:
    """One timed ``make target VAR=value ...`` in the repository."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([*make, target, *variables], cwd=REPO, capture_output=True, text=True, check=False,
                          env=env)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"variant": variant, "command": shlex.join(["make", target, *variables]), "wall_s": round(wall, 2),
            "user_s": round(after.ru_utime - before.ru_utime, 2), "sys_s": round(after.ru_stime - before.ru_stime, 2),
            "exit_status": done.returncode, "pytest": pytest_summary(done.stdout + done.stderr),
            "output_tail": None if done.returncode == 0 else (done.stdout + done.stderr)[-3000:]}


def summarise(trials: list[dict]) -> dict:
    """Median wall seconds of each variant and the baseline's over the current's (None below the clock's 0.01 s)."""
    median = {v: statistics.median(t["wall_s"] for t in trials if t["variant"] == v) for v in ("baseline", "current")}
    ratio = round(median["baseline"] / median["current"], 3) if median["current"] > 0 else None
    return {"baseline_wall_s_median": median["baseline"], "current_wall_s_median": median["current"],
            "baseline_over_current": ratio}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(prog="python -m bench.make_target", description=__doc__.split("\n")[0])
    p.add_argument("target", help="the make target, e.g. test")
    p.add_argument("--baseline", action="append", default=[], metavar="VAR=VALUE",
                   help="a make variable of the baseline form (repeatable)")
    p.add_argument("--current", action="append", default=[], metavar="VAR=VALUE",
                   help="a make variable of the current form (repeatable; default: none, the target as it is)")
    p.add_argument("--rounds", type=int, default=1, help="rounds of one trial of each, alternated")
    p.add_argument("--make", default="make", help="the make program and its options, one string")
    p.add_argument("--out", type=Path, default=REPO / "results" / "local" / "bench")
    args = p.parse_args(argv)
    if args.rounds < 1:
        p.error("--rounds must be at least 1")
    if not args.baseline:
        p.error("give the baseline form: --baseline VAR=VALUE")
    for assignment in args.baseline + args.current:
        if "=" not in assignment:
            p.error(f"not a make variable assignment (VAR=VALUE): {assignment!r}")
    make = shlex.split(args.make)
    env = own_make_environment({a.partition("=")[0] for a in args.baseline + args.current})
    setup = subprocess.run([*make, "setup"], cwd=REPO, capture_output=True, text=True, check=False, env=env)
    if setup.returncode != 0:
        print(f"make setup failed ({setup.returncode}):\n{(setup.stdout + setup.stderr)[-3000:]}", file=sys.stderr)
        return 1
    forms = {"baseline": args.baseline, "current": args.current}
    trials = []
    for r in range(args.rounds):
        for variant in (("baseline", "current") if r % 2 == 0 else ("current", "baseline")):
            trials.append(trial(make, args.target, forms[variant], variant, env))
            shown = {k: v for k, v in trials[-1].items() if k != "output_tail"}
            print(json.dumps(shown), flush=True)
    cpu = cpu_description()
    name = (cpu["cpu_model"] or "unknown-cpu").replace(" ", "_")
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"{name}-make-{args.target}.json"
    failed = [t for t in trials if t["exit_status"] != 0]
    report = {"command": shlex.join(["python", "-m", "bench.make_target", *argv]), "cpu": cpu,
              "cores": len(os.sched_getaffinity(0)), "trials": trials,
              "summary": None if failed else summarise(trials)}
    path.write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {path.relative_to(REPO) if path.is_relative_to(REPO) else path}: {json.dumps(report['summary'])}")
    if failed:
        print(f"{len(failed)} of {len(trials)} trials failed: " + "; ".join(
            f"{t['command']} exited {t['exit_status']}" for t in failed), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
