"""How the report's reading and rendering scale with the number of runs in a results root (issue 39, item 15).

Builds N tiny synthetic runs (``tests/conftest.py``'s ``make_run``: 20 steps, an evaluation every 5 steps on
100 problems, GRPO, AH and SA over N/3 seeds) and times ``python -m saah_lab.report.render --only ROOT`` into a
temporary folder, each in a fresh process, for the code of this checkout and of a baseline revision (exported
with ``git archive``), side by side, with the wall and CPU seconds and the process's peak resident memory.

    python -m bench.report_scaling --sizes 100 1000 --baseline-rev 73d8913 --out results/bench/report-scaling.json
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from conftest import make_run  # noqa: E402

from saah_lib.jsonio import atomic_write_json  # noqa: E402

METHODS = (("grpo", 0.0), ("ah", 0.5), ("sa", 0.5))


def build_root(root: Path, n_runs: int) -> Path:
    """``n_runs`` complete tiny runs under ``root/runs``, ids in the default form (``tiny-sa-a0.5-s7``)."""
    for i in range(n_runs):
        method, alpha = METHODS[i % len(METHODS)]
        seed = i // len(METHODS) + 1
        # Pass@1 within [0.40, 0.90] however many seeds (make_run's default grows with the seed)
        evals = {s: round(0.40 + 0.01 * s + 0.01 * (seed % 30), 2) for s in range(0, 21, 5)}
        make_run(root, f"tiny-{method}-a{alpha:g}-s{seed}", "tiny", method, alpha, seed, steps=20, eval_every=5,
                 evals=evals)
    return root


def time_render(code: Path, root: Path, out: Path) -> dict:
    """One render of ``root`` by the code in ``code`` in a fresh process: wall seconds, peak RSS in MB, exit."""
    env = {**os.environ, "PYTHONPATH": str(code)}
    package = "saah_lab" if (code / "saah_lab").is_dir() else "saah_lib"  # a revision from before the lab's package
    command = ["/usr/bin/time", "-f", "%M %U %S", sys.executable, "-m", f"{package}.report.render", "--only", str(root),
               "--tables-dir", str(out / "tables"), "--figures-dir", str(out / "figures")]
    start = time.perf_counter()
    done = subprocess.run(command, env=env, cwd=code, capture_output=True, text=True)
    wall = time.perf_counter() - start
    peak_kb, user_s, system_s = done.stderr.strip().splitlines()[-1].split()  # /usr/bin/time's last line
    # CPU seconds beside wall seconds: on a machine busy with other work the wall time says more about the others
    return {"wall_s": round(wall, 2), "cpu_s": round(float(user_s) + float(system_s), 2),
            "peak_rss_mb": round(int(peak_kb) / 1024, 1), "exit": done.returncode,
            "stderr_tail": done.stderr.strip().splitlines()[-3:-1] if done.returncode else []}


def export(rev: str, into: Path) -> Path:
    archive = subprocess.run(["git", "-C", str(REPO), "archive", rev], check=True, capture_output=True).stdout
    into.mkdir(parents=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.report_scaling", description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--baseline-rev", help="a git revision to time beside this checkout (none: this one only)")
    parser.add_argument("--out", type=Path, required=True, help="the JSON file written")
    args = parser.parse_args(argv)
    codes = {}
    result = {"command": " ".join(sys.argv), "cpu": platform.processor() or platform.machine(),
              "cores": os.cpu_count(), "load_average_at_start": os.getloadavg(), "sizes": {}}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        if args.baseline_rev:
            codes["baseline"] = export(args.baseline_rev, tmp / "baseline")
            result["baseline_rev"] = args.baseline_rev
        # a copy of this checkout's packages: edits made while this runs change nothing measured
        codes["new"] = tmp / "new"
        for package in ("saah_lib", "saah_lab"):
            shutil.copytree(REPO / package, codes["new"] / package, ignore=shutil.ignore_patterns("__pycache__"))
        for n in args.sizes:
            root = build_root(tmp / f"root{n}", n)
            timings = {}
            for name, code in codes.items():
                timings[name] = time_render(code, root, tmp / f"out{n}-{name}")
                print(n, name, timings[name], flush=True)
            result["sizes"][str(n)] = timings
            shutil.rmtree(root)
    result["load_average_at_end"] = os.getloadavg()  # the machine's other work slows every figure here
    atomic_write_json(args.out, result)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
