"""Train the mini study's runs with a defect planted, and record their final Pass@1 (the power of level 2).

    .venv/bin/python tools/plant_defects.py                      # every defect, 8 runs each
    .venv/bin/python tools/plant_defects.py --defects alpha_ignored --runs tiny-sa-a5.9-s0

Each defect of ``tests/planted_defects/planted.py`` (the reward's correctness term dropped, the KL term's
sign flipped, evaluation on the training problems, SA's weights on positive-advantage rollouts, alpha
ignored) is planted through ``tests/planted_defects/sitecustomize.py`` into fresh processes of
``python -m saah_lab.training.launch``, pinned as every study process, two at a time, each from the
shipped warm start.  Per defect and run the file records the final Pass@1 (and its problems): the
planted-defect tests (``tests/studies/verify/test_planted_defects.py``) hold the level-2 rule to it
against the committed ``results/mini``.  The default runs: the main comparison (grpo, ah and sa at
alpha 0.5) at seeds 0 and 1, and ah and sa at the paper-matched alpha 5.9, seed 0.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PLANTED = REPO / "tests" / "planted_defects"
OUT = REPO / "tests" / "studies" / "verify" / "data" / "planted_defects.json"
DEFAULT_RUNS = [f"tiny-{m}-a{a}-s{s}" for s in (0, 1) for m, a in (("grpo", "0"), ("ah", "0.5"), ("sa", "0.5"))]
DEFAULT_RUNS += ["tiny-ah-a5.9-s0", "tiny-sa-a5.9-s0"]


def parse_run_id(run_id: str) -> tuple[str, float, int]:
    """``tiny-<method>-a<alpha>-s<seed>`` -> (method, alpha, seed)."""
    _, method, rest = run_id.split("-", 2)
    alpha, seed = rest[1:].rsplit("-s", 1)
    return method, float(alpha), int(seed)


def train(defect: str, run_id: str, results_dir: Path) -> dict:
    method, alpha, seed = parse_run_id(run_id)
    env = {**os.environ, "SAAH_PLANTED_DEFECT": defect, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(PLANTED), str(REPO)])}
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "saah_lab.training.launch", "--profile", "tiny", "--method", method,
                           "--alpha", str(alpha), "--seed", str(seed), "--results-dir", str(results_dir),
                           "--no-progress"], env=env, cwd=REPO, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"{defect} {run_id} failed:\n{done.stderr[-3000:]}")
    evals = [json.loads(line) for line in (results_dir / "runs" / run_id / "eval.jsonl").read_text().splitlines()]
    final = evals[-1]
    print(f"{defect} {run_id}: final Pass@1 {final['pass_at_1']:.3f} ({time.perf_counter() - started:.0f} s)",
          flush=True)
    return {"method": method, "alpha": alpha, "seed": seed, "step": final["step"], "pass_at_1": final["pass_at_1"],
            "n": final.get("n")}


def main(argv=None) -> None:
    sys.path.insert(0, str(PLANTED))
    from planted import DEFECTS

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--defects", nargs="+", choices=sorted(DEFECTS), default=list(DEFECTS))
    parser.add_argument("--runs", nargs="+", default=DEFAULT_RUNS, help="run ids of the mini study")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    record = json.loads(args.out.read_text()) if args.out.is_file() else {"runs": {}}
    with tempfile.TemporaryDirectory(prefix="planted-") as tmp, ThreadPoolExecutor(args.jobs) as pool:
        for defect in args.defects:
            folder = Path(tmp) / defect
            results = pool.map(lambda run_id, d=defect, f=folder: (run_id, train(d, run_id, f)), args.runs)
            record["runs"].setdefault(defect, {}).update(dict(results))
            record["command"] = "tools/plant_defects.py " + " ".join(argv if argv is not None else sys.argv[1:])
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")  # after each defect
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
