"""What every CPU study does, in order: warm start, baseline, then the planned runs.

A study (:mod:`saah_lib.studies.mini`, :mod:`saah_lib.studies.extended`) is a
plan, a list of :class:`~saah_lib.training.config.RunConfig`, handed to
:func:`run_study`.  Runs already complete are skipped, so an interrupted study
continues where it stopped.  Each stage's wall time and peak memory go to the
study's timings file.

One study process at a time writes a results root: :func:`run_study` holds the
root's lock (:func:`saah_lib.rundir.lock.study_lock`), so a second study (a
``--resume`` while the first still runs, say) stops with an error naming the
first.  The training workers die with the study process however it ends
(:func:`die_with_parent`): a killed study leaves no worker training on beside
the next one.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from multiprocessing import get_context
from pathlib import Path

import torch

from saah_lib.jsonio import atomic_write_json, remove_temp_files
from saah_lib.models.loading import resolve_model
from saah_lib.models.names import TINY_WARMSTART
from saah_lib.models.warmstart import build_warm_start, read_build_info
from saah_lib.numerics import cpu_numerics_record
from saah_lib.paths import TINY_WARMSTART_DIR
from saah_lib.rundir import layout
from saah_lib.rundir.folder import RunDir
from saah_lib.rundir.lock import study_lock
from saah_lib.rundir.manifest import sha256_of
from saah_lib.studies.timing import PeakMemory, Timings
from saah_lib.training.config import make_config
from saah_lib.training.run import baseline_for, run_training

BASELINE_NAME = "tiny-warmstart"  # the baseline folder of every tiny study: the warm start, evaluated once
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>: the signal a process gets when its parent ends


def pending(configs) -> list:
    """The configs whose run folder is not complete yet."""
    return [c for c in configs if not RunDir(c.run_dir).is_complete(c.trainer.max_steps)]


def _train_one(cfg) -> dict:
    """One run in a worker process: a single torch thread (the models are tiny), and silent:
    the parent prints one line per finished run (:func:`run_line`)."""
    torch.set_num_threads(1)
    start = time.perf_counter()
    with PeakMemory() as memory:
        run_training(cfg, progress=False)
    numerics = cpu_numerics_record()  # the worker's own: spawned, it set up torch itself
    return {"run_id": cfg.run_id, "wall_s": round(time.perf_counter() - start, 2),
            "peak_rss_mb": round(memory.peak / 2**20, 1),
            "cpu_capability": numerics["capability"], "torch_threads": numerics["torch_threads"]}


def die_with_parent(parent_pid: int) -> None:
    """Worker initializer: end this worker when the process that started it ends, however it ends.

    On Linux the kernel sends SIGKILL at the parent's death (``prctl(PR_SET_PDEATHSIG)``); elsewhere a
    watchdog thread notices that the parent changed.  Either way a worker found orphaned at once
    (its parent died before this ran) exits here.
    """
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    else:
        threading.Thread(target=_exit_when_orphaned, args=(parent_pid,), daemon=True).start()
    if os.getppid() != parent_pid:
        os._exit(1)


def _exit_when_orphaned(parent_pid: int, interval_s: float = 0.5) -> None:
    while os.getppid() == parent_pid:
        time.sleep(interval_s)
    os._exit(1)


def run_line(index: int, total: int, entry: dict, evals: list[dict]) -> str:
    """``[3/15] tiny-sa-a0.5-s0: 52 s, 590 MB, Pass@1 0.270 -> 0.420`` (first and last evaluation)."""
    text = f"[{index}/{total}] {entry['run_id']}: {entry['wall_s']:.0f} s, {entry['peak_rss_mb']:.0f} MB"
    if evals:
        text += f", Pass@1 {evals[0]['pass_at_1']:.3f} -> {evals[-1]['pass_at_1']:.3f}"
    return text


def train_all(configs, jobs: int) -> list[dict]:
    """Train every config, ``jobs`` worker processes at a time, printing one line per finished run.

    The workers die with this process (:func:`die_with_parent`).
    """
    done = []
    print(f"training {len(configs)} runs, {jobs} at a time; one line as each finishes", flush=True)
    with ProcessPoolExecutor(max_workers=jobs, mp_context=get_context("spawn"), initializer=die_with_parent,
                             initargs=(os.getpid(),)) as pool:
        futures = {pool.submit(_train_one, cfg): cfg for cfg in configs}
        for future in as_completed(futures):
            entry = future.result()
            done.append(entry)
            print(run_line(len(done), len(futures), entry, RunDir(futures[future].run_dir).evals()), flush=True)
    return sorted(done, key=lambda e: e["run_id"])


def warm_start_record(model_dir: Path = TINY_WARMSTART_DIR) -> dict:
    """The warm start's build record plus hashes of its weights and tokenizer (bit-identity check)."""
    record = dict(read_build_info(model_dir) or {})
    for key, name in (("weights_sha256", "model.safetensors"), ("tokenizer_sha256", "tokenizer.json")):
        path = Path(model_dir) / name
        if path.is_file():
            record[key] = sha256_of(path)
    return record


def run_study(root: Path, configs, *, jobs: int = 2, timings_file: str = layout.TIMINGS_FILE,
              progress: bool = True, rebuild_warm_start: bool = False) -> Timings:
    """Warm start (built once here, not by each worker), its record, the baseline, then every pending run.

    ``rebuild_warm_start`` builds the warm start even when a cached build would do (to time a fresh clone).

    Returns the :class:`~saah_lib.studies.timing.Timings` so a study can add stages; the caller writes
    the manifest (:func:`saah_lib.rundir.manifest.write_manifest`) when it is done.  The root is held
    (:func:`~saah_lib.rundir.lock.study_lock`) throughout: a second study process stops at once.
    """
    root = Path(root)
    with study_lock(root):
        remove_temp_files(root)  # left by a write that a kill interrupted; we are the root's one writer
        return _run_stages(root, configs, jobs, timings_file, progress, rebuild_warm_start)


def _run_stages(root: Path, configs, jobs: int, timings_file: str, progress: bool,
                rebuild_warm_start: bool) -> Timings:
    timings = Timings(root / timings_file)
    with timings.stage("warm start") as info:
        if rebuild_warm_start:
            build_warm_start(force=True, progress=progress)
        resolve_model(TINY_WARMSTART, progress=progress)
        build = warm_start_record()
        # The model folder is a git-ignored cache; its build record is committed with the study.
        atomic_write_json(root / layout.WARMSTART_RECORD_FILE, build)
        info["build_seconds"] = build.get("build_seconds")
        info["warm_start_pass_at_1_heldout"] = build.get("heldout_pass_at_1")
    with timings.stage("baseline") as info:
        result = baseline_for(make_config("tiny", results_dir=str(root)), BASELINE_NAME, progress=progress)
        info["pass_at_1"] = result["pass_at_1"]
    todo = pending(configs)
    if todo:
        with timings.stage(f"train {len(todo)} runs, {jobs} at a time") as info:
            info["runs"] = train_all(todo, jobs)
    return timings
