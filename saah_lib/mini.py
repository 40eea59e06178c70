"""The CPU mini study behind ``make mini``: the whole paper pipeline at toy scale.

Stages: build the warm-started tiny model -> evaluate it (the baseline) ->
train grpo / ah(0.5) / sa(0.5) over several seeds -> the alpha sweeps of ah and
sa -> tables and figures. Each stage's wall time and peak memory go to
``<root>/timings.json``. Every stage is resumable: finished runs are skipped.

``make mini`` runs all of it into a fresh rerun root and compares the result with
the committed study (``rerun_and_verify``); ``make mini-promote`` makes a finished
rerun the committed study (``promote``).

Each alpha sweep reuses two runs of the main comparison: alpha = 0 is the
``grpo`` run (the weights are exactly 1 at alpha = 0, see tests/test_loss.py)
and alpha = 0.5 is the ``ah`` or ``sa`` run of the same seed.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import psutil

from saah_lib.config import REPO_ROOT, TINY_MODEL_DIR, make_config
from saah_lib.manifest import MANIFEST_NAME, sha256_of, write_manifest
from saah_lib.runlog import atomic_write_json

MAIN_METHODS = (("grpo", 0.0), ("ah", 0.5), ("sa", 0.5))
SEEDS = (0, 1, 2)
SWEEP_ALPHAS = (-0.25, 0.1, 0.25)  # plus 0 (the grpo run) and 0.5 (the main ah / sa run)
SWEEP_METHODS = ("ah", "sa")  # both swept at the same alphas and seed
BASELINE_NAME = "tiny-warmstart"
COMMITTED_ROOT = REPO_ROOT / "results" / "mini"
RERUN_ROOT = REPO_ROOT / "results" / "rerun" / "mini"  # git-ignored
PROMOTED_FOLDERS = ("runs", "baselines")
PROMOTED_FILES = ("warmstart_build.json", "answer_kinds.json", "timings.json")


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


def planned_runs(seeds: tuple[int, ...] = SEEDS) -> list[tuple[str, float, int]]:
    runs = [(method, alpha, seed) for seed in seeds for method, alpha in MAIN_METHODS]
    runs += [(method, alpha, seeds[0]) for method in SWEEP_METHODS for alpha in SWEEP_ALPHAS]
    return runs


def planned_configs(root: Path, seeds: tuple[int, ...] = SEEDS, steps: int | None = None):
    return [make_config("tiny", method=m, alpha=a, seed=sd, steps=steps, results_dir=str(root))
            for m, a, sd in planned_runs(seeds)]


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


def warm_start_record(model_dir: Path) -> dict:
    """The warm start's build record plus hashes of its weights and tokenizer (bit-identity check)."""
    from saah_lib.tiny_model import read_build_info

    record = dict(read_build_info(model_dir) or {})
    for key, name in (("weights_sha256", "model.safetensors"), ("tokenizer_sha256", "tokenizer.json")):
        path = Path(model_dir) / name
        if path.is_file():
            record[key] = sha256_of(path)
    return record


def run_mini_study(root: Path, seeds: tuple[int, ...] = (0, 1, 2), steps: int | None = None,
                   figures: bool = True, progress: bool = True, jobs: int = 2,
                   tables_dir: Path | None = None, figures_dir: Path | None = None) -> dict:
    """Every stage of the study into ``root``; tables and figures into the given folders
    (default: the committed ``paper/generated`` and ``figures``)."""
    from saah_lib.tiny_model import build_warm_start
    from saah_lib.train import baseline_for

    root.mkdir(parents=True, exist_ok=True)
    timings = Timings(root / "timings.json")

    with timings.stage("warm start") as info:
        build_warm_start(TINY_MODEL_DIR, progress=progress)
        build = warm_start_record(TINY_MODEL_DIR)
        # The model folder is git-ignored; its build record is committed.
        atomic_write_json(root / "warmstart_build.json", build)
        info["build_seconds"] = build.get("build_seconds")
        info["warm_start_pass_at_1_heldout"] = build.get("heldout_pass_at_1")

    with timings.stage("baseline") as info:
        result = baseline_for(make_config("tiny", results_dir=str(root)), BASELINE_NAME, progress=progress)
        info["pass_at_1"] = result["pass_at_1"]

    configs = planned_configs(root, seeds, steps)
    with timings.stage(f"train {len(configs)} runs, {jobs} at a time") as info:
        info["runs"] = train_all(configs, jobs, timings)

    write_answer_kinds(root)
    write_manifest(root)  # the figures notebook checks the results against it
    if figures:
        with timings.stage("tables and figures"):
            render_figures(root, tables_dir=tables_dir, figures_dir=figures_dir)
        write_manifest(root)  # again: timings.json gained the figures stage
    return timings.record


def rerun_and_verify(committed: Path = COMMITTED_ROOT, rerun: Path = RERUN_ROOT, *, resume: bool = False,
                     jobs: int = 2, progress: bool = True) -> dict:
    """``make mini``: rerun the whole study into ``rerun`` (never over ``committed``), draw its
    tables and figures there, and compare everything with the committed study.

    The report (``<rerun>/reproduction.{json,md}``) is returned; a rerun that differs is
    reported, not raised: the report says what differs and by how much.
    """
    from saah_lib.reproduce import compare_studies, write_report

    committed, rerun = Path(committed), Path(rerun)
    if rerun.resolve() == committed.resolve():
        raise ValueError(f"the rerun root {rerun} is the committed study; choose another folder")
    if rerun.exists() and not resume:
        shutil.rmtree(rerun)  # a rerun starts fresh; --resume continues an interrupted one
    tables_dir, figures_dir = rerun / "generated", rerun / "figures"
    run_mini_study(rerun, jobs=jobs, progress=progress, tables_dir=tables_dir, figures_dir=figures_dir)
    committed_tables = REPO_ROOT / "paper" / "generated"
    tables = {f"paper/generated/{p.name}": (p, tables_dir / p.name) for p in sorted(committed_tables.glob("mini_*.tex"))}
    report = compare_studies(committed, rerun, tables=tables, run_ids=[c.run_id for c in planned_configs(rerun)])
    json_path, md_path = write_report(report, rerun)
    print(f"\n{md_path.read_text()}\nreport: {json_path} and {md_path}\n{report['verdict']}", flush=True)
    return report


def promote(rerun: Path = RERUN_ROOT, committed: Path = COMMITTED_ROOT, figures: bool = True) -> None:
    """Make a finished rerun the committed study (explicitly, never as a side effect of ``make mini``).

    The committed folder is replaced in one rename; checkpoints are not copied;
    committed runs that ``make mini`` does not rerun (the extended study's) are
    kept; the git-ignored warm-start model folder stays where it is.
    """
    from saah_lib.runlog import RunLog

    rerun, committed = Path(rerun), Path(committed)
    unfinished = [cfg.run_id for cfg in planned_configs(rerun)
                  if not RunLog(rerun / "runs" / cfg.run_id).is_complete(cfg.steps)]
    if unfinished or not (rerun / "reproduction.json").is_file():
        raise ValueError(f"{rerun} is not a finished rerun (unfinished runs: {', '.join(unfinished) or 'none'}; "
                         "reproduction.json present: "
                         f"{(rerun / 'reproduction.json').is_file()}); run `make mini` first")
    staging = committed.with_name(f".{committed.name}.promoting")
    shutil.rmtree(staging, ignore_errors=True)
    for name in PROMOTED_FOLDERS:
        shutil.copytree(rerun / name, staging / name, ignore=shutil.ignore_patterns("checkpoints"))
        for kept in sorted((committed / name).glob("*")):
            if not (staging / name / kept.name).exists():
                shutil.copytree(kept, staging / name / kept.name, ignore=shutil.ignore_patterns("checkpoints"))
                print(f"kept {kept} (not rerun by make mini)")
    for kept in sorted(committed.glob("*.json")):
        if kept.name not in PROMOTED_FILES + (MANIFEST_NAME,):
            shutil.copy2(kept, staging / kept.name)
    for name in PROMOTED_FILES:
        shutil.copy2(rerun / name, staging / name)
    if (committed / "warmstart").is_dir():
        os.rename(committed / "warmstart", staging / "warmstart")
    old = committed.with_name(f".{committed.name}.replaced")
    shutil.rmtree(old, ignore_errors=True)
    if committed.exists():
        os.rename(committed, old)
    os.rename(staging, committed)
    shutil.rmtree(old, ignore_errors=True)
    print(f"promoted {rerun} to {committed}")
    write_manifest(committed)
    if figures:
        render_figures(committed)


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


def render_figures(mini_root: Path, tables_dir: Path | None = None, figures_dir: Path | None = None) -> None:
    """Run the figures notebook (the one ``make paper`` runs) on ``mini_root``.

    With ``tables_dir``/``figures_dir`` (a rerun) only the mini study's tables and
    figures are drawn, into those folders, so nothing committed is touched.
    """
    import papermill

    parameters = {"mini_root": str(mini_root)}
    out = REPO_ROOT / "results" / "04_figures.out.ipynb"
    if tables_dir is not None or figures_dir is not None:
        nowhere = str(Path(mini_root) / "no-such-source")
        parameters.update(tables_dir=str(tables_dir or Path(mini_root) / "generated"),
                          figures_dir=str(figures_dir or Path(mini_root) / "figures"),
                          results_root=nowhere, paper_reported_dir=nowhere, extended_root=nowhere)
        out = Path(mini_root).parent / f"{Path(mini_root).name}-04_figures.out.ipynb"  # outside the manifest's root
    papermill.execute_notebook(
        str(REPO_ROOT / "notebooks" / "04_figures.ipynb"), str(out),
        parameters=parameters, kernel_name="python3", cwd=str(REPO_ROOT), progress_bar=False,
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", nargs="?", default="verify", choices=("verify", "promote", "run", "answer-kinds"),
                        help="verify (default, `make mini`): rerun into --rerun-root and compare with --root; "
                             "promote: make a finished rerun the committed study; "
                             "run: run the study directly into --root; answer-kinds: rewrite <root>/answer_kinds.json")
    parser.add_argument("--root", type=Path, default=COMMITTED_ROOT, help="the committed study")
    parser.add_argument("--rerun-root", type=Path, default=RERUN_ROOT)
    parser.add_argument("--resume", action="store_true", help="continue an interrupted rerun instead of starting fresh")
    parser.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS), help="`run` only")
    parser.add_argument("--steps", type=int, default=None, help="`run` only: override the tiny profile's steps")
    parser.add_argument("--jobs", type=int, default=2, help="training runs in parallel (one thread each)")
    parser.add_argument("--no-figures", action="store_true")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    if args.command == "answer-kinds":
        write_answer_kinds(args.root)
        print(f"wrote {args.root / 'answer_kinds.json'}")
    elif args.command == "promote":
        promote(args.rerun_root, args.root, figures=not args.no_figures)
    elif args.command == "run":
        run_mini_study(args.root, tuple(args.seeds), args.steps, figures=not args.no_figures, jobs=args.jobs)
    else:
        rerun_and_verify(args.root, args.rerun_root, resume=args.resume, jobs=args.jobs)
    print(f"\n{args.command} done in {(time.perf_counter() - started) / 60:.1f} min", flush=True)


if __name__ == "__main__":
    main()
