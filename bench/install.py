"""`make setup`'s install from requirements.lock with pip and with uv, alternated, each into a fresh venv.

    python -m bench.install --rounds 2 --out results/bench

Each trial (:func:`trial`) does what `make setup` does, into a new venv under a temporary folder: the venv and
torch (the same step for both tools: timed, not compared), then the lock file and saah_lib itself (editable,
--no-deps) with the tool under test (uv's own install counted: make setup would have to do it). Both tools start
cold (no cache) and download from PyPI alone (``--isolated`` drops this machine's pip configuration: its local
wheel folder and indexes, which uv does not read either), so the comparison is download, resolution and install,
the same work for both. The tools alternate (pip, uv, uv, pip, ...) so that a drift in the network's speed falls
on both. Writes ``<cpu>-setup-uv-vs-pip.json`` (the CPU's model name, as the other benches).
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from saah_lib.numerics import cpu_description  # stdlib only: runs with any python3

UV_VERSION = "0.13.9"
TORCH = "torch==2.13.0"


def _timed(cmd: list[str], env: dict | None = None) -> float:
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        raise SystemExit(f"failed ({done.returncode}): {' '.join(cmd)}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    return time.perf_counter() - start


def trial(tool: str, lock: Path, base_python: str, workdir: Path) -> dict:
    """One install with ``tool`` into a fresh venv under ``workdir``, each step timed.

    1. ``python -m venv``; ``pip install torch==2.13.0`` (from the wheel on disk where there is one);
    2. the lock file and saah_lib itself, with the tool under test:
       - pip: ``pip install --isolated --no-cache-dir -r requirements.lock`` then ``pip install --isolated
         --no-cache-dir --no-deps -e .``;
       - uv: ``pip install --isolated --no-cache-dir uv==<version>``, then ``uv pip install --no-cache -r
         requirements.lock`` and ``uv pip install --no-cache --no-deps -e .``.
    """
    venv = workdir / f"venv-{tool}"
    shutil.rmtree(venv, ignore_errors=True)
    py = str(venv / "bin" / "python")
    record = {"tool": tool}
    record["venv_s"] = _timed([base_python, "-m", "venv", str(venv)])
    record["torch_s"] = _timed([py, "-m", "pip", "install", "-q", TORCH])
    pip = [py, "-m", "pip", "install", "-q", "--isolated", "--no-cache-dir"]
    if tool == "pip":
        record["tool_install_s"] = 0.0
        record["lock_s"] = _timed(pip + ["-r", str(lock)])
        record["editable_s"] = _timed(pip + ["--no-deps", "-e", "."])
    else:
        record["tool_install_s"] = _timed(pip + [f"uv=={UV_VERSION}"])
        uv = [str(venv / "bin" / "uv"), "pip", "install", "-q", "--no-cache", "--python", py]
        record["lock_s"] = _timed(uv + ["-r", str(lock)])
        record["editable_s"] = _timed(uv + ["--no-deps", "-e", "."])
    record["compared_s"] = record["tool_install_s"] + record["lock_s"] + record["editable_s"]
    listed = subprocess.run([py, "-m", "pip", "list", "--format=json"], capture_output=True, text=True, check=True)
    record["packages"] = len(json.loads(listed.stdout))
    check = subprocess.run([py, "-c", "import saah_lib.training.trainer, ray, papermill, scipy, matplotlib"],
                           cwd=workdir, capture_output=True, text=True, check=False)
    record["imports_ok"] = check.returncode == 0
    shutil.rmtree(venv)
    return record


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.install", description=__doc__.split("\n")[0])
    p.add_argument("--lock", type=Path, default=REPO / "requirements.lock")
    p.add_argument("--rounds", type=int, default=2, help="trials per tool (alternated)")
    p.add_argument("--out", type=Path, default=REPO / "results" / "local" / "bench")
    p.add_argument("--python", default=getattr(sys, "_base_executable", sys.executable),
                   help="the python that makes the venvs (make setup: python3)")
    args = p.parse_args(argv)
    if args.rounds < 1:
        p.error("--rounds must be at least 1")
    order = [("pip", "uv") if r % 2 == 0 else ("uv", "pip") for r in range(args.rounds)]
    trials = []
    with tempfile.TemporaryDirectory(prefix="bench-setup-") as tmp:
        for pair in order:
            for tool in pair:
                trials.append(trial(tool, args.lock.resolve(), args.python, Path(tmp)))
                print(json.dumps(trials[-1]), flush=True)
    summary = {tool: {"compared_s_median": statistics.median(t["compared_s"] for t in trials if t["tool"] == tool),
                      "lock_s_median": statistics.median(t["lock_s"] for t in trials if t["tool"] == tool)}
               for tool in ("pip", "uv")}
    summary["pip_over_uv"] = summary["pip"]["compared_s_median"] / summary["uv"]["compared_s_median"]
    cpu = cpu_description()
    name = (cpu["cpu_model"] or "unknown-cpu").replace(" ", "_")
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"{name}-setup-uv-vs-pip.json"
    lock = args.lock.resolve()
    path.write_text(json.dumps({
        "command": " ".join(["python -m bench.install", *(argv if argv is not None else sys.argv[1:])]),
        "cpu": cpu, "python": platform.python_version(), "uv": UV_VERSION,
        "lock": lock.relative_to(REPO).as_posix() if lock.is_relative_to(REPO) else lock.name,
        "cache": "none: pip --no-cache-dir, uv --no-cache; PyPI only (pip --isolated)",
        "trials": trials, "summary": summary}, indent=1) + "\n")
    print(f"wrote {path.relative_to(REPO) if path.is_relative_to(REPO) else path}: {json.dumps(summary)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
