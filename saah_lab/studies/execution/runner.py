"""A study is a plan: the warm starts, baselines and runs it needs, each a job with the jobs it waits for.

:func:`run_plan` builds what is missing and trains what is pending as tasks of :mod:`.engine` (Ray, on this
machine or a cluster, one code path).  Everything a job writes lies under the study's results root, which every
worker must see (a shared filesystem on a cluster).  A complete run is skipped; an interrupted one resumes from
its last intact checkpoint, whether Ray retries it or the study is run again.  The caller holds the root
(:func:`saah_lab.rundir.lock.study_lock`): one writer per root.
"""

from __future__ import annotations

import heapq
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch
from tqdm import tqdm

from saah_lab.rundir.manifest import sha256_of
from saah_lab.studies.execution.engine import Task, run_tasks
from saah_lab.studies.execution.timing import Timings, measured
from saah_lab.studies.matched_alpha import ensure_matched_alpha, read_matched_alpha
from saah_lab.training.run import baseline_for, run_training
from saah_lib.jsonio import atomic_write_json, read_json
from saah_lib.models.names import tiny_warm_start_name
from saah_lib.models.warmstart import build_warm_start, built_with_other_kernels, read_build_info
from saah_lib.numerics import cpu_numerics_record
from saah_lib.paths import shipped_warm_start_dir, tiny_warmstart_dir
from saah_lib.progress import last_step
from saah_lib.rundir import layout
from saah_lib.rundir.folder import RunDir, RunFolderError, changes_text
from saah_lib.training.config import RunConfig, make_config

BASELINE_NAME = "tiny-warmstart"  # the baseline folder of every tiny study: the warm start, evaluated once


@dataclass(frozen=True)
class Job:
    """One unit of a study: its engine task (id ``kind:name``; kind warmstart, baseline, alpha or run), a run's
    optimiser steps, and the folder its output lies in."""

    kind: str
    name: str
    task: Task
    steps: int = 0
    folder: Path | None = None
    expected_s: float | None = None  # a job other than a run: its seconds as last recorded (for the ETA)

    @classmethod
    def of(cls, kind: str, name: str, fn: Callable[..., dict], kwargs: dict, deps: tuple[str, ...] = (), *,
           num_cpus: float = 1.0, num_gpus: float = 0.0, steps: int = 0, folder: Path | None = None,
           expected_s: float | None = None) -> Job:
        return cls(kind, name, Task(f"{kind}:{name}", fn, kwargs, tuple(deps), num_cpus, num_gpus), steps, folder,
                   expected_s)

    id = property(lambda self: self.task.id)
    kwargs = property(lambda self: self.task.kwargs)
    deps = property(lambda self: self.task.deps)
    num_cpus = property(lambda self: self.task.num_cpus)
    num_gpus = property(lambda self: self.task.num_gpus)

    @property
    def profile(self) -> str | None:
        """A run's profile (which per-step time its estimate takes); None for the other kinds."""
        return self.kwargs["config"].get("profile") if self.kind == "run" else None


@dataclass
class Plan:
    """A study's jobs, in a valid order, and what the driver writes as each finishes (``record``)."""

    study: str
    root: Path
    jobs: list[Job]
    profile: str = "tiny"
    record: dict[str, Callable[[dict | None], None]] = field(default_factory=dict)

    @property
    def runs(self) -> list[Job]:
        return [j for j in self.jobs if j.kind == "run"]

    @property
    def gpu(self) -> bool:
        return any(j.num_gpus for j in self.jobs)

    def only(self, run_names) -> Plan:
        """The plan restricted to some runs (and every non-run job, which they may need)."""
        wanted = set(run_names)
        unknown = sorted(wanted - {j.name for j in self.runs})
        if unknown:
            raise ValueError(f"--runs names {', '.join(unknown)}, not in the {self.study} plan; "
                             f"its runs: {', '.join(j.name for j in self.runs)}")
        jobs = [j for j in self.jobs if j.kind != "run" or j.name in wanted]
        return Plan(self.study, self.root, jobs, self.profile, self.record)


def pending(configs) -> list:
    """The configs whose run folder is not complete yet."""
    return [c for c in configs if not RunDir(c.run_dir).is_complete(c.trainer.max_steps)]


def job_state(job: Job) -> tuple[str, int | None]:
    """``("done", None)``, ``("partial", last logged step)`` or ``("pending", None)``."""
    if job.kind == "run":
        if job.folder is None:  # its alpha is measured first: it cannot exist yet
            return "pending", None
        run = RunDir(job.folder)
        if run.is_complete(job.steps):
            return "done", None
        logged = run.train_log() if run.dir.is_dir() else []
        return ("partial", logged[-1]["step"]) if logged else ("pending", None)
    if job.kind == "warmstart":  # a build with other kernels is built again
        info = read_build_info(job.folder)
        done = info is not None and info.get("seed") == job.kwargs["seed"] and not built_with_other_kernels(info)
    elif job.kind == "baseline":
        done = job.folder.is_dir() and any(r["step"] == 0 for r in RunDir(job.folder).evals())
    elif job.kind == "alpha":
        done = (Path(job.kwargs["root"]) / layout.MATCHED_ALPHA_FILE).is_file()
    else:
        raise ValueError(f"unknown job kind {job.kind!r} ({job.id})")
    return ("done" if done else "pending"), None


def foreign_runs(plan: Plan) -> dict[str, str]:
    """``{run id: what its folder records otherwise}`` for each planned run whose folder's config.json records
    other settings (a run under a planned id, trained otherwise), or cannot be read.  A run whose alpha is
    measured first has no folder yet."""
    found = {}
    for job in plan.runs:
        if job.folder is None or "matched_alpha_from" in job.kwargs:
            continue
        try:
            changed = RunDir(job.folder).setting_changes(RunConfig.from_dict(job.kwargs["config"]).run_settings())
        except ValueError as error:  # not valid JSON or not UTF-8: the message names the file
            found[job.name] = str(error)
            continue
        if changed:
            found[job.name] = f"{job.folder / layout.CONFIG_FILE} records {changes_text(changed)} (recorded -> planned)"
    return found


def check_no_foreign_runs(plan: Plan) -> None:
    """Raise naming each planned run whose folder holds a run trained otherwise (counted as done or resumed, it
    would be another run in the study under a planned id)."""
    foreign = foreign_runs(plan)
    if foreign:
        listing = "\n".join(f"  {name}: {text}" for name, text in foreign.items())
        raise RunFolderError(
            f"{len(foreign)} run folder(s) of the {plan.study} plan in {plan.root} hold runs trained with other "
            f"settings than planned; nothing was changed. Move them away (or plan them with the settings they "
            f"were trained with):\n{listing}")


# ---- what a worker runs (module-level, so that the engine can send them to another machine)


def _visible_root(root: str) -> Path:
    """The results root as this worker sees it; a clear error where it cannot see it (no shared filesystem)."""
    path = Path(root)
    if not path.is_dir():
        raise FileNotFoundError(
            f"results root {root} is not visible on node {socket.gethostname()}: every node of the cluster must "
            "see the study's results root at the same path (a shared filesystem; docs/cluster.md)")
    return path


def _timed(fn, *args, **kwargs) -> dict:
    with measured() as cost:
        out = fn(*args, **kwargs)
    return {**(out if isinstance(out, dict) else {}), **cost}


def build_progress_file(seed: int) -> Path:
    """Where a warm-start build in a worker leaves its progress for the driver's ETA (beside the cached build)."""
    folder = tiny_warmstart_dir(seed)
    return folder.with_name(f".{folder.name}.progress.json")


def progress_writer(path: Path, every_s: float = 2.0) -> Callable[[int, int], None]:
    """``on_step(done, total)`` that writes ``{"done", "total", "elapsed_s"}`` to ``path`` at most every
    ``every_s`` seconds."""
    started, last = time.perf_counter(), [float("-inf")]

    def on_step(done: int, total: int) -> None:
        now = time.perf_counter()
        if now - last[0] >= every_s:
            last[0] = now
            atomic_write_json(path, {"done": done, "total": total, "elapsed_s": round(now - started, 2)})

    return on_step


def build_seconds_left(path: Path) -> float | None:
    """The seconds a build has left by its progress file (its pace so far), or None without a readable one."""
    try:
        record = read_json(path)
        done, total, elapsed = int(record["done"]), int(record["total"]), float(record["elapsed_s"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return elapsed / done * (total - done) if done > 0 else None


def _build_summary(folder: Path) -> dict:
    info = read_build_info(folder) or {}
    return {"build_seconds": info.get("build_seconds"), "warm_start_pass_at_1_heldout": info.get("heldout_pass_at_1")}


def warm_start_task(seed: int, root: str) -> dict:
    """Build the tiny warm start of this seed into the cache (where a committed copy ships, runs train from that
    and this build is a check of its own)."""
    _visible_root(root)
    progress_file = build_progress_file(seed)
    progress_file.unlink(missing_ok=True)  # a killed build's: not this one's pace
    try:
        with measured() as cost:
            build_warm_start(tiny_warmstart_dir(seed), seed=seed, progress=False,
                             on_step=progress_writer(progress_file))
    finally:
        progress_file.unlink(missing_ok=True)
    return {**_build_summary(tiny_warmstart_dir(seed)), **cost}


def baseline_task(config: dict, name: str) -> dict:
    """Evaluate the untrained model once, into ``<root>/baselines/<name>``."""
    cfg = RunConfig.from_dict(config)
    _visible_root(cfg.results_dir)
    if not torch.cuda.is_available():  # one thread, as every CPU run
        torch.set_num_threads(1)
    return _timed(lambda: {"pass_at_1": baseline_for(cfg, name, progress=False)["pass_at_1"]})


def matched_alpha_task(root: str, other_warm_starts: tuple[str, ...] = ()) -> dict:
    """The paper-matched alpha, measured once per root (saah_lab.studies.matched_alpha)."""
    path = _visible_root(root)
    return _timed(lambda: {"alpha": ensure_matched_alpha(path, other_warm_starts=list(other_warm_starts))})


def train_task(config: dict, matched_alpha_from: str | None = None, planned_ids: tuple[str, ...] = ()) -> dict:
    """One run in this worker, silent: on a CPU with one torch thread, on a GPU with the one Ray gave the task.
    ``matched_alpha_from``: the root whose recorded alpha the run takes (a run the plan holds already is not
    trained twice)."""
    if not torch.cuda.is_available():
        torch.set_num_threads(1)
    if matched_alpha_from is not None:
        cfg = make_config(config.pop("profile"), **config, alpha=read_matched_alpha(_visible_root(matched_alpha_from)))
    else:
        cfg = RunConfig.from_dict(config)
    _visible_root(cfg.results_dir)
    if matched_alpha_from is not None and cfg.run_id in planned_ids:
        return {"run_id": cfg.run_id, "wall_s": 0.0, "peak_rss_mb": 0.0, "same_as_planned": True}
    result = _timed(run_training, cfg, progress=False)
    numerics = cpu_numerics_record()  # the worker's own: it set up torch itself
    return {"run_id": cfg.run_id, "wall_s": result["wall_s"], "peak_rss_mb": result["peak_rss_mb"],
            "cpu_capability": numerics["capability"], "torch_threads": numerics["torch_threads"],
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}


def warm_start_job(root: Path, seed: int) -> Job:
    """The build of the warm start of ``seed``; its expected seconds are those its committed copy records."""
    shipped = read_build_info(shipped_warm_start_dir(seed)) or {}
    return Job.of("warmstart", tiny_warm_start_name(seed), warm_start_task, {"seed": seed, "root": str(root)},
                  folder=tiny_warmstart_dir(seed), expected_s=shipped.get("build_seconds"))


def waits_for_warm_start(warm: Job, seed: int) -> tuple[str, ...]:
    """Nothing where the committed copy of the warm start ships (jobs load that), else its build."""
    return () if shipped_warm_start_dir(seed).is_dir() else (warm.id,)


def baseline_job(cfg, name: str, deps: tuple[str, ...] = (), gpu: bool | None = None) -> Job:
    """The untrained model's evaluation: on a GPU if ``gpu`` (by default: a model not in float32)."""
    gpus = float(cfg.dtype != "float32" if gpu is None else gpu)
    return Job.of("baseline", name, baseline_task, {"config": cfg.to_dict(), "name": name}, deps, num_gpus=gpus,
                  folder=layout.baseline_dir(Path(cfg.results_dir), name))


def alpha_job(root: Path, others: tuple[str, ...], deps: tuple[str, ...]) -> Job:
    return Job.of("alpha", "paper-matched", matched_alpha_task, {"root": str(root), "other_warm_starts": others}, deps)


def run_job(cfg, deps: tuple[str, ...] = (), *, gpu: bool = False, cpus_per_gpu_run: float = 4.0) -> Job:
    """A run of the run function: on one CPU, or with ``gpu`` on one GPU and ``cpus_per_gpu_run`` CPUs."""
    resources = {"num_cpus": cpus_per_gpu_run, "num_gpus": 1.0} if gpu else {}
    return Job.of("run", cfg.run_id, train_task, {"config": cfg.to_dict()}, deps, steps=cfg.trainer.max_steps,
                  folder=cfg.run_dir, **resources)


def matched_run_job(root: Path, method: str, seed: int, label: str, deps: tuple[str, ...],
                    planned_ids: tuple[str, ...], **fields) -> Job:
    """A run at the paper-matched alpha before that alpha is measured: it reads it when it starts."""
    config = {"profile": "tiny", "method": method, "seed": seed, "results_dir": str(root), **fields}
    steps = make_config(**config).trainer.max_steps
    return Job.of("run", label, train_task, {"config": config, "matched_alpha_from": str(root),
                                             "planned_ids": planned_ids}, deps, steps=steps)


def warm_start_record(model_dir: Path) -> dict:
    """The warm start's build record plus hashes of its weights and tokenizer (bit-identity check)."""
    record = dict(read_build_info(model_dir) or {})
    for key, name in (("weights_sha256", "model.safetensors"), ("tokenizer_sha256", "tokenizer.json")):
        path = Path(model_dir) / name
        if path.is_file():
            record[key] = sha256_of(path)
    return record


def run_line(index: int, total: int, entry: dict, evals: list[dict], node: str | None = None,
             eta_s: float | None = None) -> str:
    """``[3/15] tiny-sa-a0.5-s0: 52 s, 590 MB, Pass@1 0.270 -> 0.420`` (first and last evaluation), node, ETA."""
    text = f"[{index}/{total}] {entry['run_id']}: {entry['wall_s']:.0f} s, {entry['peak_rss_mb']:.0f} MB"
    if evals:
        text += f", Pass@1 {evals[0]['pass_at_1']:.3f} -> {evals[-1]['pass_at_1']:.3f}"
    if node:
        text += f" (node {node})"
    if eta_s is not None:
        text += f"; {total - index} pending, ETA {tqdm.format_interval(eta_s)}"  # as tqdm's lines write times
    return text


def eta_seconds(work_s: list[float], slots: int) -> float:
    """Seconds until ``work_s`` (each unfinished job's, the running ones first) is done on ``slots`` slots, each
    next job on the slot that frees first.  Not tqdm's estimate (units left at the average rate): that is 80-90%
    off a simulated make mini (tests/studies/test_eta.py asks for 10%), and cannot read a build's pace."""
    free = [0.0] * max(1, slots)
    for work in work_s:
        heapq.heapreplace(free, free[0] + max(work, 0.0))
    return max(free)


def run_plan(plan: Plan, timings: Timings, *, address: str | None = None, max_retries: int = 1,
             step_seconds: StepSeconds = None, slots: int | None = None, env_vars: dict | None = None) -> list[dict]:
    """Build what is missing and train what is pending; the finished runs' entries (by run id).  ``step_seconds``
    and ``slots`` (runs at a time) give the progress lines' ETA.  Raises :class:`.engine.TaskFailed`."""
    plan.root.mkdir(parents=True, exist_ok=True)
    _record_done_jobs(plan, timings)
    todo = [j for j in plan.jobs if job_state(j)[0] != "done"]
    ids = {j.id for j in todo}
    tasks = [replace(j.task, deps=tuple(d for d in j.deps if d in ids)) for j in todo]  # the others are done
    driver = _Driver(plan, timings, todo, max(1, slots or os.cpu_count() or 1), step_seconds)
    _announce(plan, todo, driver.runs)
    if tasks:
        run_tasks(tasks, address=address, max_retries=max_retries, on_finish=driver.on_finish,
                  env_vars={**_forwarded_env(), **(env_vars or {})})
    if driver.runs:
        timings.add_stage(f"train {len(driver.runs)} runs", {"wall_s": round(time.perf_counter() - driver.started, 2),
                                                             "runs": sorted(driver.entries, key=lambda e: e["run_id"])})
    return sorted(driver.entries, key=lambda e: e["run_id"])


def _record_done_jobs(plan: Plan, timings: Timings) -> None:
    """Jobs other than runs done before (another study or root) recorded here; a cached warm start's build time
    goes into the timings, as a fresh clone's would."""
    for job in plan.jobs:
        if job.kind != "run" and job_state(job)[0] == "done" and job.id in plan.record:
            plan.record[job.id](None)
        if job.kind == "warmstart" and job_state(job)[0] == "done":
            timings.add_stage(_stage_label(job), _build_summary(job.folder))


def _announce(plan: Plan, todo: list[Job], runs: list[Job]) -> None:
    """The first lines: each warm-start build (whether the runs wait for it) and the runs to train."""
    for job in todo:
        if job.kind == "warmstart":
            beside = "beside the runs, a check of the copy they load" if job.id not in {
                d for j in runs for d in j.deps} else "first: the runs wait for it"
            print(f"{_stage_label(job)}: building {beside}; a line when done", flush=True)
    if runs:
        print(f"{len(runs)} runs to train ({len(plan.runs) - len(runs)} already complete); one line as each "
              "finishes", flush=True)


def _forwarded_env() -> dict[str, str]:
    """A cluster's workers do not inherit the driver's environment: what the runs read from it goes with them."""
    return {k: os.environ[k] for k in ("PYTHONPATH", "HF_HUB_OFFLINE", "TOKENIZERS_PARALLELISM", "SAAH_GSM8K_DIR",
                                       "HF_HUB_DISABLE_PROGRESS_BARS", "PYTHONWARNINGS")
            if k in os.environ}


class _Driver:
    """Records each job as it finishes and prints the runs' lines with the ETA."""

    def __init__(self, plan: Plan, timings: Timings, todo: list[Job], slots: int, step_seconds: StepSeconds):
        self.plan, self.timings, self.todo, self.slots, self.step_seconds = plan, timings, todo, slots, step_seconds
        self.runs = [j for j in todo if j.kind == "run"]
        self.by_id = {j.id: j for j in todo}
        self.entries: list[dict] = []
        self.finished: set[str] = set()
        self.started = time.perf_counter()
        self.to_train = {j.id: steps_left(j) for j in self.runs}  # a resumed run trains only its remaining steps here
        self.trained: dict[str, tuple[float, int]] = {}  # task id: (wall seconds, steps trained) of the runs done

    def left_s(self, job: Job, measured_per_step: float) -> tuple[float, bool]:
        """The seconds ``job`` has left and whether it has begun: a run's steps not logged at its seconds per step
        (the plan's, else this study's runs'); a build's by its pace, else its expected seconds less those gone."""
        if job.kind == "warmstart":
            by_pace = build_seconds_left(build_progress_file(job.kwargs["seed"]))
            if by_pace is not None:
                return by_pace, True
        if job.kind != "run":
            return max((job.expected_s or 0.0) - (time.perf_counter() - self.started), 0.0), False
        given = self.step_seconds.get(job.profile) if isinstance(self.step_seconds, dict) else self.step_seconds
        per_step = given or measured_per_step
        logged = last_step(job.folder / layout.TRAIN_LOG_FILE) if job.folder is not None else 0
        return max(job.steps - logged, 0) * per_step, logged > job.steps - self.to_train[job.id]

    def eta_s(self) -> float:
        """The seconds until the unfinished jobs are done: the begun ones first, on the slots that free first."""
        measured = sum(w for w, _ in self.trained.values()) / max(sum(n for _, n in self.trained.values()), 1)
        left = [self.left_s(j, measured) for j in self.todo if j.id not in self.finished]
        return eta_seconds([w for w, begun in left if begun] + [w for w, begun in left if not begun], self.slots)

    def on_finish(self, task, result: dict, node: str) -> None:
        job = self.by_id[task.id]
        self.finished.add(task.id)  # a matched run's task id holds a placeholder, not its run id
        if job.kind != "run":
            if job.id in self.plan.record:
                self.plan.record[job.id](result)
            self.timings.add_stage(_stage_label(job), result)
            if job.kind == "warmstart":
                print(f"{_stage_label(job)}: built in {result.get('wall_s', 0) / 60:.1f} min", flush=True)
            return
        self.entries.append(result)
        if not result.get("same_as_planned"):  # a matched run that another planned run already is: not trained
            self.trained[task.id] = (result["wall_s"], self.to_train[task.id])
        eta = self.eta_s()
        evals = RunDir(layout.run_dir(self.plan.root, result["run_id"])).evals()
        print(run_line(len(self.entries), len(self.runs), result, evals, node, eta), flush=True)


def _stage_label(job: Job) -> str:
    """The stage names of a study's timings file."""
    if job.kind == "alpha":
        return "paper-matched alpha"
    if job.kind == "warmstart":
        return "warm start" if job.name == BASELINE_NAME else f"warm start {job.name}"
    return "baseline" if job.name == BASELINE_NAME else f"baseline {job.name}"


def record_warm_start(root: Path, seed: int, records_file: str = layout.WARMSTART_RECORD_FILE):
    """The driver's record of a warm start in the study root (the model is a git-ignored cache; its record is
    committed); ``WARMSTART_RECORDS_FILE`` holds one per warm start.  None (built earlier): a record there stands."""
    def record(result) -> None:
        path = Path(root) / records_file
        records = read_json(path, default={}) if path.is_file() else {}
        name = tiny_warm_start_name(seed)
        if result is None and records and (records_file == layout.WARMSTART_RECORD_FILE or name in records):
            return  # nothing was built: the record already there stands
        build = warm_start_record(tiny_warmstart_dir(seed))
        if records_file == layout.WARMSTART_RECORD_FILE:
            atomic_write_json(path, build)
            return
        records[name] = build
        atomic_write_json(path, dict(sorted(records.items())))

    return record


#: Seconds per optimiser step: one figure for every run, or one per profile, or None (not measured).
StepSeconds = float | dict[str, float | None] | None


def steps_left(job: Job) -> int:
    """A run's optimiser steps still to train: none when complete, the rest after its last step when partial."""
    state, last = job_state(job)
    return 0 if state == "done" else job.steps - (last if state == "partial" else 0)
