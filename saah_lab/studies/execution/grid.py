"""A study's whole grid in one command, on one machine or a Ray cluster.

    python -m saah_lab.studies.execution.grid plan paper --seeds 0 1 2   # every run, its state, resources, hours, disk
    python -m saah_lab.studies.execution.grid run paper --seeds 0 1 2 --address auto

``plan`` trains nothing.  ``run`` holds the results root for the whole study, skips complete runs and resumes
interrupted ones from their last intact checkpoint; a worker or node that dies is retried (``--max-retries``).
On a cluster the results root must be on a filesystem every node sees at the same path (docs/cluster.md).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import socket
import sys
from pathlib import Path

from saah_lab.rundir.lock import FolderLockedError, study_lock
from saah_lab.rundir.manifest import write_manifest
from saah_lab.studies import confirm, extended, mini
from saah_lab.studies.execution.engine import TaskFailed
from saah_lab.studies.execution.runner import (
    Job,
    Plan,
    StepSeconds,
    check_no_foreign_runs,
    foreign_runs,
    job_state,
    pending,
    run_plan,
    steps_left,
)
from saah_lab.studies.execution.timing import Timings
from saah_lab.studies.plans import PAPER_SEED, STUDIES, ablation_plan, study_plan
from saah_lab.studies.verify.bits import compare_studies, write_report
from saah_lab.studies.verify.verdict import closing_lines, committed_mkl_kernels
from saah_lib.jsonio import atomic_write_json
from saah_lib.models.names import tiny_warm_start_seed, warm_start_location
from saah_lib.models.warmstart import read_build_info
from saah_lib.numerics import cpu_numerics_record
from saah_lib.paths import BENCH_RESULTS, LOCAL_RESULTS, MINI_ROOT, RERUN_ROOT, in_repo, repo_relative
from saah_lib.rundir import layout
from saah_lib.rundir.folder import RunFolderError
from saah_lib.training.config import RunConfig, make_config

#: keys a benchmark file may give its steady per-step seconds under, most specific first
STEP_SECONDS_KEYS = ("steady_step_seconds", "step_seconds", "median_step_s")
UNMEASURED = "unmeasured: run `make gpu-check` first"
ADAM_BYTES_PER_PARAMETER = 12  # a float32 weight and Adam's two float32 moments, in every checkpoint
#: (hidden, layers, intermediate, key/value width) from config.json on the hub: the size of a paper checkpoint's LoRA
ARCHITECTURES = {"Qwen/Qwen2.5-1.5B-Instruct": (1536, 28, 8960, 256),
                 "Qwen/Qwen2.5-3B-Instruct": (2048, 36, 11008, 256)}
LOG_MB_PER_STEP = 0.008  # a tiny run's logs per step, as results/mini/runs/*/ hold them
COMMITTED_STUDIES = ("mini", "extended", "confirm")  # rerun into results/rerun/<study>, with a manifest when done
CONNECT_TIMEOUT_S = 10.0  # how long ``run --address host:port`` waits for the cluster's head to answer
ABLATION_OPTIONS = ("alphas", "profile", "method")


def default_root(study: str, command: str) -> Path | None:
    """``plan`` reads a study's own root; ``run`` of a committed study writes a rerun root (never the committed one:
    the confirmatory study was trained into ``results/confirm`` with ``--results-dir results/confirm``)."""
    if study in COMMITTED_STUDIES and command == "run":
        return RERUN_ROOT / study
    if study == "paper":
        return LOCAL_RESULTS / "paper"
    return None


MAX_STEP_SECONDS = 86_400.0  # a longer step in a benchmark file is a damaged file


def step_seconds_problem(value) -> str | None:
    """Why ``value`` is no step time (a finite number of seconds, above 0, at most a day), or None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"{value!r} is not a number of seconds"
    if not math.isfinite(value) or not 0 < value <= MAX_STEP_SECONDS:
        return f"{value!r} is not a step time (finite, above 0 s, at most {MAX_STEP_SECONDS:.0f} s)"
    return None


def _bench_record(path: Path) -> dict:
    """A benchmark file's JSON object; a ValueError naming the file when it cannot be one (torn, edited)."""
    try:
        record = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"benchmark file {path} cannot be read ({type(error).__name__}: {error}); "
                         "measure again (`make gpu-check`) or move it away") from None
    if not isinstance(record, dict):
        raise ValueError(f"benchmark file {path} holds a {type(record).__name__}, not a JSON object")
    return record


def bench_step_seconds(path: Path) -> float | None:
    """The per-step seconds a benchmark file gives: a top-level key, else the slowest of our trainer's variants; a
    figure that is not a step time (NaN, negative, a boolean, ...) is a ValueError naming the file and key."""
    record = _bench_record(path)
    key = next((k for k in STEP_SECONDS_KEYS if record.get(k) is not None), None)
    figures = [(key, record[key])] if key else [("a variant's median_step_s", v.get("median_step_s"))
                                                for v in record.get("variants") or []
                                                if isinstance(v, dict) and v.get("trainer") == "ours"]
    for name, value in figures:
        problem = step_seconds_problem(value)
        if problem:
            raise ValueError(f"benchmark file {path}: {name} {problem}")
    return max((float(v) for _, v in figures), default=None)


def step_seconds_source(profile: str, gpu: bool, given: float | None,
                        bench_dir: Path = BENCH_RESULTS) -> tuple[float | None, str]:
    """(seconds per step, where the figure comes from): ``--step-seconds``, a benchmark of this profile on
    the device in ``results/bench/``, or none measured."""
    if given is not None:
        return given, "--step-seconds"
    device = "*" if gpu else f"cpu-{platform.machine()}"  # a GPU plan: any GPU device's benchmark
    # `make gpu-check` writes <device>-preflight.json, naming the profile it measured inside
    files = [p for kind in (profile, "preflight") for p in sorted(bench_dir.glob(f"{device}-{kind}.json"))
             if p.is_file() and not (gpu and p.name.startswith("cpu-"))
             and (kind == profile or _bench_record(p).get("profile") == profile)]
    measured = [(s, p.name) for p in files if (s := bench_step_seconds(p)) is not None]
    if not measured:
        return None, UNMEASURED
    seconds, name = max(measured)  # several devices measured: the slowest, so that the estimate is not short
    return seconds, f"measured: {repo_relative(bench_dir / name)}"


def disk_mb(job: Job) -> float | None:
    """A run's folder when complete: its logs and the checkpoints it keeps (weights and Adam state)."""
    if job.kind != "run":
        return None
    config = job.kwargs["config"]
    cfg = make_config(**config) if "matched_alpha_from" in job.kwargs else RunConfig.from_dict(config)
    parameters = trainable_parameters(cfg)
    if parameters is None:
        return None
    kept = min(job.steps // cfg.trainer.save_steps, cfg.trainer.save_total_limit or math.inf)
    return (kept * parameters * ADAM_BYTES_PER_PARAMETER) / 2**20 + job.steps * LOG_MB_PER_STEP


def trainable_parameters(cfg) -> int | None:
    if cfg.use_lora:
        shape = ARCHITECTURES.get(cfg.model_name)
        if shape is None:
            return None
        hidden, layers, inner, kv = shape
        sizes = {"q_proj": (hidden, hidden), "k_proj": (hidden, kv), "v_proj": (hidden, kv), "o_proj": (hidden, hidden),
                 "gate_proj": (hidden, inner), "up_proj": (hidden, inner), "down_proj": (inner, hidden)}
        return layers * sum(cfg.lora_r * (a + b) for m, (a, b) in sizes.items() if m in cfg.lora_target_modules)
    seed = tiny_warm_start_seed(cfg.model_name)
    info = read_build_info(warm_start_location(seed)) if seed is not None else None
    return info.get("parameters") if info else None


def describe(plan: Plan, figures: dict[str, tuple[float | None, str]], slots: int) -> str:
    lines = [f"study {plan.study}: results root {repo_relative(plan.root)}"]
    counts = {"done": 0, "partial": 0, "pending": 0}
    foreign = foreign_runs(plan)
    for job in plan.jobs:
        state, last = job_state(job)
        if job.kind == "run":
            counts[state] += 1
        text = state if state != "partial" else f"partial (step {last} of {job.steps})"
        if job.name in foreign and job.kind == "run":
            text = "OTHER SETTINGS"
        need = f"{job.num_cpus:g} CPU" + (f", {job.num_gpus:g} GPU" if job.num_gpus else "")
        steps = f"{job.steps} steps" if job.kind == "run" else ""
        disk = disk_mb(job)
        size = f"disk {disk:,.0f} MB" if disk is not None else ("disk unknown" if job.kind == "run" else "")
        lines.append(f"  {job.kind:9s} {job.name:34s} {text:22s} {steps:10s} {need:14s} {size}".rstrip())
    kinds = {k: sum(j.kind == k for j in plan.jobs) for k in ("warmstart", "baseline", "alpha", "run")}
    lines.append(f"{kinds['run']} runs ({counts['done']} done, {counts['partial']} partial, {counts['pending']} "
                 f"pending), {kinds['baseline']} baselines, {kinds['warmstart']} warm starts")
    if foreign:
        lines.append(f"{len(foreign)} run folder(s) hold runs trained with other settings than planned (`run` "
                     "refuses to start until they are moved away):")
        lines += [f"  {name}: {text}" for name, text in foreign.items()]
    lines.append(estimate_line(plan, figures, slots))
    sizes = [d for d in map(disk_mb, plan.runs) if d is not None]
    if sizes:
        lines.append(f"disk: {sum(sizes) / 1024:.2f} GB for {len(sizes)} runs (checkpoints kept and logs)")
    return "\n".join(lines)


def estimate_line(plan: Plan, figures: dict[str, tuple[float | None, str]], slots: int) -> str:
    """The steps left and, with a per-step figure for every profile, runs x steps x seconds per step in hours,
    and the wall time at ``slots`` runs at a time (never shorter than the longest run alone)."""
    pending = [j for j in plan.runs if job_state(j)[0] != "done"]
    left = {j.id: steps_left(j) for j in pending}
    head = f"estimate: {len(pending)} runs to train, {sum(left.values())} steps"
    missing = [p for p, (s, _) in figures.items() if s is None]
    if not pending:
        return head
    if missing:
        of = "" if len(missing) == len(figures) else f" of {', '.join(missing)}"
        return f"{head}; seconds per step{of} {UNMEASURED}"
    if len({s for s, _ in figures.values()}) == 1:
        (seconds, _), *_ = figures.values()
        rate = f" x {seconds:.3g} s per step"
        sources = "per-step figure " + ", ".join(dict.fromkeys(source for _, source in figures.values()))
    else:
        by_profile = {p: sum(left[j.id] for j in pending if j.profile == p) for p in figures}
        rate = " (" + ", ".join(f"{by_profile[p]} of {p} x {s:.3g} s" for p, (s, _) in figures.items()) + ")"
        sources = "per-step figures " + "; ".join(f"{p}: {src}" for p, (_, src) in figures.items())
    run_hours = sum(left[j.id] * figures[j.profile][0] for j in pending) / 3600
    longest = max(j.steps * figures[j.profile][0] for j in pending) / 3600
    hours = max(run_hours / min(slots, len(pending)), longest)  # spread over the slots, the longest run alone
    text = f"{head}{rate} = {run_hours:.2f} h of {'GPU' if plan.gpu else 'CPU run'} time"
    if plan.gpu:
        text += f" = {run_hours:.2f} GPU-hours"
    return text + (f"; {hours:.2f} h wall at {slots} runs at a time (the longest run alone {longest:.2f} h); "
                   f"{sources}; optimiser steps only: evaluations, compiles, baselines and warm starts not included")


def run_study(plan: Plan, *, address: str | None, max_retries: int, step_seconds: StepSeconds,
              slots: int | None) -> list[dict]:
    """Hold the root, build what is missing and train what is pending; a finished committed study gets its
    manifest (mini: answer kinds too).  A run folder holding another run is an error before anything is written."""
    check_no_foreign_runs(plan)
    with study_lock(plan.root):
        check_no_foreign_runs(plan)  # again, now that no other driver writes the root
        if plan.study == "mini" and not [p for p in plan.root.iterdir() if p.name != layout.STUDY_LOCK_FILE]:
            # a root this command creates is a rerun of the mini study, which `mini verify` may clear later
            atomic_write_json(plan.root / mini.RERUN_MARKER, {"study": "mini"})
        timings_file = layout.EXTENDED_TIMINGS_FILE if plan.study == "extended" else layout.TIMINGS_FILE
        if not any(job_state(j)[0] != "done" for j in plan.jobs):
            print(f"nothing to do: every job of {plan.study} in {repo_relative(plan.root)} is done", flush=True)
            return []
        entries = run_plan(plan, Timings(plan.root / timings_file), address=address, max_retries=max_retries,
                           step_seconds=step_seconds, slots=slots)
        if plan.study in COMMITTED_STUDIES and all(job_state(j)[0] == "done" for j in plan.runs):
            if plan.study == "mini":
                mini.write_answer_kinds(plan.root)
            write_manifest(plan.root)
    return entries


def run_ablation(alphas, *, profile: str = "tiny", method: str = "ah", seed: int = 0, steps: int | None = None,
                 results_dir: str | Path = LOCAL_RESULTS, overrides: dict | None = None,
                 address: str | None = None) -> list[dict]:
    """One run per alpha as tasks of the engine (what notebook 03 runs); returns each run's state afterwards."""
    plan = ablation_plan(alphas, profile=profile, method=method, seed=seed, steps=steps,
                         results_dir=in_repo(results_dir), overrides=overrides)
    before = {j.name: job_state(j)[0] for j in plan.runs}
    run_study(plan, address=address, max_retries=1, step_seconds=None, slots=None)
    return [{"run_id": j.name, "alpha": j.kwargs["config"]["alpha"],
             "status": "already complete" if before[j.name] == "done" else "trained"} for j in plan.runs]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m saah_lab.studies.execution.grid",
                                     description=__doc__.splitlines()[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("command", choices=("plan", "run"), help="plan: print it; run: build and train what is missing")
    parser.add_argument("study", choices=STUDIES)
    parser.add_argument("--results-dir", type=in_repo, default=None,
                        help="the study's results root (plan: the study's own; run: results/rerun/<study> for the "
                             "committed studies mini, extended and confirm, results/local/<study> otherwise)")
    parser.add_argument("--seeds", type=int, nargs="+", default=None,
                        help=f"training seeds (paper: 0 unless given; the paper's own seed, as in the README: --seeds {PAPER_SEED})")
    parser.add_argument("--runs", nargs="+", default=None, help="only these run ids of the plan")
    parser.add_argument("--steps", type=int, default=None, help="every run's steps instead of the study's (paper: a "
                        "smoke test of the grid; its run ids then say -steps<N>)")
    parser.add_argument("--alphas", type=float, nargs="+", default=None, help="ablation: the alphas")
    parser.add_argument("--profile", default=None, help="ablation: the profile")
    parser.add_argument("--method", default=None, help="ablation: the method")
    parser.add_argument("--address", default=None, help="join a Ray cluster (auto or host:port); default: a local "
                        f"Ray instance sized to this machine; a host:port that does not answer within "
                        f"{CONNECT_TIMEOUT_S:g} s is an error")
    parser.add_argument("--max-retries", type=int, default=1, help="retries of a job whose worker or node died")
    parser.add_argument("--step-seconds", type=float, default=None, help="seconds per optimiser step for the estimate")
    parser.add_argument("--bench-dir", type=in_repo, default=None,
                        help="folder of the benchmark files (<device>-<profile>.json, <device>-preflight.json) whose "
                             "steady step times the estimate takes, per profile (None: results/bench)")
    parser.add_argument("--slots", type=int, default=None,
                        help="runs at a time for the estimate (default: this machine's CPUs, or 8 GPUs)")
    return parser


def check_options(args) -> None:
    """Every option acts on this study or is refused (a ValueError naming it) before the root is read or written."""
    ignored = [f"--{name}" for name in ABLATION_OPTIONS if getattr(args, name) is not None and args.study != "ablation"]
    if ignored:
        raise ValueError(f"{', '.join(ignored)}: options of the ablation study only; the {args.study} study's runs "
                         "are fixed by its plan")
    for name, values in (("--seeds", args.seeds), ("--alphas", args.alphas), ("--runs", args.runs)):
        repeated = sorted({v for v in values or () if list(values).count(v) > 1}, key=str)
        if repeated:
            raise ValueError(f"{name} repeats {', '.join(map(str, repeated))}: each is planned once; give it once")
    if args.study == "ablation" and args.seeds is not None and len(args.seeds) > 1:
        raise ValueError(f"--seeds {' '.join(map(str, args.seeds))}: the ablation trains one seed; run it once "
                         "per seed")
    if args.alphas is not None and not all(math.isfinite(a) for a in args.alphas):
        raise ValueError(f"--alphas {' '.join(map(str, args.alphas))}: every alpha must be a finite number")
    if args.steps is not None and args.steps < 1:
        raise ValueError(f"--steps {args.steps}: a run trains at least 1 step")
    if args.step_seconds is not None and step_seconds_problem(args.step_seconds):
        raise ValueError(f"--step-seconds {step_seconds_problem(args.step_seconds)}")
    if args.slots is not None and args.slots < 1:
        raise ValueError(f"--slots {args.slots}: at least 1 run at a time")
    if args.max_retries < 0:
        raise ValueError(f"--max-retries {args.max_retries}: 0 (never retry) or more")
    if args.bench_dir is not None and not args.bench_dir.is_dir():
        raise ValueError(f"--bench-dir {args.bench_dir} is not a folder (it should hold <device>-<profile>.json or "
                         "<device>-preflight.json files)")
    if args.results_dir is not None:
        existing = next(p for p in (args.results_dir, *args.results_dir.parents) if p.exists())
        if not existing.is_dir():
            raise ValueError(f"--results-dir {args.results_dir}: {existing} is a file, not a folder")
    if args.command == "run" and args.address is not None:
        check_address(args.address)


#: What a gRPC client (Ray's GCS and Ray Client speak gRPC) sends first: the HTTP/2 preface and an empty SETTINGS frame.
_HTTP2_HELLO = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
_HTTP2_SETTINGS = 4  # the frame type a gRPC server answers the preface with


def check_address(address: str, timeout: float = CONNECT_TIMEOUT_S) -> None:
    """``auto``, or a ``host:port`` (``ray://`` allowed) where a gRPC server (a Ray head) answers the HTTP/2
    preface within ``timeout`` seconds: Ray's own connection would retry for minutes before failing."""
    if address == "auto":
        return
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"--address {address!r}: expected auto or host:port (e.g. 10.0.0.5:6379, the head "
                         "node's address that `ray start --head` printed)")
    tls = os.environ.get("RAY_USE_TLS", "0") not in ("", "0")  # a TLS head answers a handshake, not the preface
    try:
        with socket.create_connection((host, int(port)), timeout=timeout) as connection:
            if tls:
                return
            connection.sendall(_HTTP2_HELLO)
            answer = connection.recv(9)
    except OSError as error:
        answer, why = b"", f"{type(error).__name__}: {error}"
    else:
        why = "the port accepts connections but does not answer as a Ray head (gRPC)"
    if len(answer) < 4 or answer[3] != _HTTP2_SETTINGS:
        raise ValueError(f"--address {address}: no Ray head answers there within {timeout:g} s ({why}); start it "
                         "(`ray start --head`) or check the address")


def make_plan(args) -> Plan:
    options = {k: getattr(args, k) for k in ABLATION_OPTIONS if getattr(args, k) is not None}
    root = args.results_dir or default_root(args.study, args.command)
    plan = study_plan(args.study, root=root, seeds=args.seeds, steps=args.steps, **options)
    return plan.only(args.runs) if args.runs else plan


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        check_options(args)
        plan = make_plan(args)
        profiles = dict.fromkeys(j.profile for j in plan.runs) or {plan.profile: None}  # those the runs train
        figures = {p: step_seconds_source(p, plan.gpu, args.step_seconds, args.bench_dir or BENCH_RESULTS)
                   for p in profiles}
    except ValueError as err:
        parser.exit(2, f"error: {err}\n")
    seconds = {p: s for p, (s, _) in figures.items()}
    slots = args.slots or (8 if plan.gpu else len(os.sched_getaffinity(0)))
    if args.command == "plan":
        head = tail = []
        if plan.study == "extended":  # its primary comparison, alpha, wall time, strangers in the root, MDE
            seeds = tuple(args.seeds or extended.SEEDS)
            configs = extended.planned_configs(plan.root, extended.WARM_STARTS, seeds, args.steps)
            todo = [c for c in pending(configs) if c.run_id in {j.name for j in plan.runs}]  # --runs, or all
            head, tail = extended.plan_summary(plan.root, configs, todo, slots, extended.WARM_STARTS, seeds,
                                               measure=True, pilot_root=MINI_ROOT)
        print("\n".join([*head, describe(plan, figures, slots), *tail]))
        return 0
    if plan.study == "confirm":
        try:  # a rerun is read as the committed study is: by its pre-registered plan
            confirm.carry_plan(plan.root)
        except ValueError as err:
            parser.exit(2, f"error: {err}\n")
    try:
        run_study(plan, address=args.address, max_retries=args.max_retries, step_seconds=seconds, slots=slots)
    except (FolderLockedError, RunFolderError) as err:
        parser.exit(1, f"error: {err}\n")
    except TaskFailed as err:
        parser.exit(1, f"error: {err.task_id} failed on node {err.node} after {args.max_retries} retries; its log: "
                       f"{err.log_path}\n{err.error}\n")
    except KeyboardInterrupt:
        parser.exit(130, "\ninterrupted: nothing is left running; the same command resumes where it stopped\n")
    print(f"{plan.study}: every planned run of {repo_relative(plan.root)} is complete"
          if all(job_state(j)[0] == "done" for j in plan.runs) else f"{plan.study}: not every run is complete",
          flush=True)
    complete = all(job_state(j)[0] == "done" for j in plan.jobs)
    if complete and plan.study == "confirm" and plan.root.resolve() != confirm.CONFIRM_ROOT.resolve():
        return verify_rerun(plan, confirm.CONFIRM_ROOT, confirm.study_conclusions)
    return 0 if complete else 1


def verify_rerun(plan: Plan, committed: Path, conclusions) -> int:
    """A finished rerun against its committed study, bits then conclusions, into ``<rerun>/reproduction.*``; the
    closing lines printed, the exit status returned."""
    report = compare_studies(committed, plan.root, run_ids=[j.name for j in plan.runs], conclusions=conclusions,
                             study_files=())
    json_path, _ = write_report(report, plan.root)
    kernels = committed_mkl_kernels(committed)
    status, closing = closing_lines(report, cpu_numerics_record(), kernels)
    print(f"report: {repo_relative(json_path)}\n" + "\n".join(closing), flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
