"""The CPU mini study behind ``make mini``: the whole paper pipeline at toy scale.

Stages: build the warm-started tiny model -> evaluate it (the baseline) ->
train grpo / ah(0.5) / sa(0.5) over several seeds -> the alpha sweep of ah ->
tables and figures. Each stage's wall time and peak memory go to
``<root>/timings.json``. Every stage is resumable: finished runs are skipped.

The alpha sweep reuses two runs of the main comparison: alpha = 0 is the
``grpo`` run (the ah weights are exactly 1 at alpha = 0, see tests/test_loss.py)
and alpha = 0.5 is the ``ah`` run of the same seed.
"""

from __future__ import annotations

import argparse
import platform
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import psutil

from saah_lib.config import TINY_MODEL_DIR, make_config
from saah_lib.manifest import write_manifest
from saah_lib.runlog import atomic_write_json

MAIN_METHODS = (("grpo", 0.0), ("ah", 0.5), ("sa", 0.5))
SWEEP_ALPHAS = (-0.25, 0.1, 0.25)  # plus 0 (the grpo run) and 0.5 (the ah run)
BASELINE_NAME = "tiny-warmstart"


class PeakMemory:
    """Samples this process's resident memory in a background thread."""

    def __init__(self, interval: float = 0.05):
        self.interval, self.peak = interval, 0
        self._stop = threading.Event()
        self._process = psutil.Process()

    def _sample(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, self._process.memory_info().rss)
            self._stop.wait(self.interval)

    def __enter__(self):
        self.peak = self._process.memory_info().rss
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


class Timings:
    def __init__(self, path: Path):
        self.path = path
        self.record = {
            "machine": {"platform": platform.platform(), "cpus": psutil.cpu_count(),
                        "memory_gb": round(psutil.virtual_memory().total / 2**30, 1)},
            "stages": [],
        }

    @contextmanager
    def stage(self, name: str, **info):
        print(f"\n=== {name}", flush=True)
        start = time.perf_counter()
        with PeakMemory() as memory:
            yield info
        entry = {"stage": name, "wall_s": round(time.perf_counter() - start, 2),
                 "peak_rss_mb": round(memory.peak / 2**20, 1), **info}
        self.record["stages"].append(entry)
        self.record["total_wall_s"] = round(sum(s["wall_s"] for s in self.record["stages"]), 2)
        atomic_write_json(self.path, self.record)
        print(f"--- {name}: {entry['wall_s']:.1f} s, peak RSS {entry['peak_rss_mb']:.0f} MB", flush=True)


def planned_runs(seeds: tuple[int, ...]) -> list[tuple[str, float, int]]:
    runs = [(method, alpha, seed) for seed in seeds for method, alpha in MAIN_METHODS]
    runs += [("ah", alpha, seeds[0]) for alpha in SWEEP_ALPHAS]
    return runs


def _train_one(cfg) -> dict:
    """One run in a worker process: a single torch thread (the models are tiny)."""
    import torch

    from saah_lib.train import run_training

    torch.set_num_threads(1)
    start = time.perf_counter()
    with PeakMemory() as memory:
        run_training(cfg, progress=False)
    return {"run_id": cfg.run_id, "wall_s": round(time.perf_counter() - start, 2),
            "peak_rss_mb": round(memory.peak / 2**20, 1)}


def train_all(configs, jobs: int, timings: Timings) -> list[dict]:
    """Train every config, ``jobs`` worker processes at a time, with one progress bar."""
    from concurrent.futures import ProcessPoolExecutor, as_completed
    from multiprocessing import get_context

    from tqdm.auto import tqdm

    done = []
    with ProcessPoolExecutor(max_workers=jobs, mp_context=get_context("spawn")) as pool:
        futures = [pool.submit(_train_one, cfg) for cfg in configs]
        with tqdm(total=len(futures), desc="training runs", unit="run") as bar:
            for future in as_completed(futures):
                entry = future.result()
                done.append(entry)
                bar.set_postfix_str(f"{entry['run_id']} {entry['wall_s']:.0f}s")
                bar.update()
    return sorted(done, key=lambda e: e["run_id"])


def run_mini_study(root: Path, seeds: tuple[int, ...] = (0, 1, 2), steps: int | None = None,
                   figures: bool = True, progress: bool = True, jobs: int = 2) -> dict:
    from saah_lib.tiny_model import build_warm_start, read_build_info
    from saah_lib.train import baseline_for

    root.mkdir(parents=True, exist_ok=True)
    timings = Timings(root / "timings.json")

    with timings.stage("warm start") as info:
        build_warm_start(TINY_MODEL_DIR, progress=progress)
        build = read_build_info(TINY_MODEL_DIR) or {}
        # The model folder is git-ignored; its build record is committed.
        atomic_write_json(root / "warmstart_build.json", build)
        info["build_seconds"] = build.get("build_seconds")
        info["warm_start_pass_at_1_heldout"] = build.get("heldout_pass_at_1")

    with timings.stage("baseline") as info:
        result = baseline_for(make_config("tiny", results_dir=str(root)), BASELINE_NAME, progress=progress)
        info["pass_at_1"] = result["pass_at_1"]

    runs = planned_runs(seeds)
    configs = [make_config("tiny", method=m, alpha=a, seed=sd, steps=steps, results_dir=str(root)) for m, a, sd in runs]
    with timings.stage(f"train {len(configs)} runs, {jobs} at a time") as info:
        info["runs"] = train_all(configs, jobs, timings)

    write_answer_kinds(root)
    write_manifest(root)  # the figures notebook checks the results against it
    if figures:
        with timings.stage("tables and figures"):
            render_figures(root)
        write_manifest(root)  # again: timings.json gained the figures stage
    return timings.record


def write_answer_kinds(root: Path) -> dict:
    """Per run: how many evaluation answers were correct, the planted intermediate-answer
    habit, or other errors, at the first and the last evaluation; to ``answer_kinds.json``.

    This shows which mistakes training removed (see ``warmstart_targets.sft_targets``).
    """
    from saah_lib.runlog import RunLog, read_jsonl
    from saah_lib.synthetic import count_answer_kinds

    summary = {}
    for run_dir in sorted((root / "runs").glob("*")):
        files = list(RunLog(run_dir).sample_files().items())
        if files:
            summary[run_dir.name] = {str(step): count_answer_kinds(read_jsonl(path))
                                     for step, path in (files[0], files[-1])}
    atomic_write_json(root / "answer_kinds.json", summary)
    return summary


def render_figures(mini_root: Path) -> None:
    """Run the figures notebook (the same one ``make paper`` runs)."""
    import papermill

    from saah_lib.config import REPO_ROOT

    papermill.execute_notebook(
        str(REPO_ROOT / "notebooks" / "04_figures.ipynb"), str(REPO_ROOT / "results" / "04_figures.out.ipynb"),
        parameters={"mini_root": str(mini_root)}, kernel_name="python3", cwd=str(REPO_ROOT), progress_bar=False,
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path("results/mini"))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=None, help="override the tiny profile's steps")
    parser.add_argument("--jobs", type=int, default=2, help="training runs in parallel (one thread each)")
    parser.add_argument("--no-figures", action="store_true")
    parser.add_argument("--answer-kinds-only", action="store_true",
                        help="only rewrite <root>/answer_kinds.json from the runs already there")
    args = parser.parse_args(argv)
    if args.answer_kinds_only:
        write_answer_kinds(args.root)
        print(f"wrote {args.root / 'answer_kinds.json'}")
        return
    record = run_mini_study(args.root, tuple(args.seeds), args.steps, figures=not args.no_figures, jobs=args.jobs)
    print(f"\nmini study done in {record['total_wall_s'] / 60:.1f} min; timings in {args.root / 'timings.json'}")


if __name__ == "__main__":
    main()
