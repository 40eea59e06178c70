"""The scheduler of every study: Ray core tasks, on one machine or a cluster, with one code path.

Ray does the scheduling: each :class:`Task` takes its dependencies' ObjectRefs as arguments (Ray starts it once
they are done and fails it with them), and a task whose worker or node is lost runs again up to ``max_retries``
times (tasks resume from their checkpoints; a task's own exception is not retried: it would recur).  What Ray
does not do is here: the CPU-numerics pin in every worker (:mod:`saah_lib.numerics`, through the job's
``runtime_env``), :class:`TaskFailed` naming a failed task's node and worker log, a local instance on loopback
with its own temp dir and auth token (:func:`ray_session`), and SIGTERM handled as Ctrl-C: either ends the
session, and Ray kills the tasks of a driver gone (one killed outright leaves its instance to :mod:`.watchdog`).
``address`` "auto" or "host:port" joins a cluster (docs/cluster.md).  Ray's public API and environment variables
only (tests/studies/test_ray_public_api.py).
"""

from __future__ import annotations

import contextlib
import graphlib
import logging
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator
from unittest import mock

import psutil

from saah_lab.studies.execution.watchdog import STOP, SWEEP, kill_instance
from saah_lib.numerics import MODE_VARIABLE, apply_cpu_numerics, numerics_mode

# Ray reads this switch once, when first imported. Off, its lookup of this host's address answers 127.0.0.1
# instead of the external address it guesses from a socket towards a public DNS server, so a local instance
# stays on loopback. Given to Ray's import only (a later `ray start --address` would refuse to join with it
# off); ray_session refuses a local instance where Ray was imported before this module without it.
CLUSTER_SWITCH = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
_SWITCH_BEFORE = os.environ.get(CLUSTER_SWITCH)
os.environ[CLUSTER_SWITCH] = "0"
import ray  # noqa: E402
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # noqa: E402

if _SWITCH_BEFORE is None:
    del os.environ[CLUSTER_SWITCH]
else:
    os.environ[CLUSTER_SWITCH] = _SWITCH_BEFORE

LOOPBACK = "127.0.0.1"
LOCAL_OBJECT_STORE_BYTES = 256 * 2**20  # results and arguments are small; Ray's default is 30% of memory
LOCAL_START_ATTEMPTS = 3  # see _start_local
WAIT_SLICE_S = 0.5  # how often the driver wakes while it waits, so that Ctrl-C is handled at once
WATCHDOG = Path(__file__).with_name("watchdog.py")
# Ray keeps the first auth token it reads for the rest of the process: every local instance gets this one.
_TOKEN = secrets.token_hex(32)


@dataclass(frozen=True)
class Task:
    """One unit of a study: ``fn(**kwargs)`` in a worker, after the tasks named in ``deps``."""

    id: str
    fn: Callable[..., dict]
    kwargs: dict
    deps: tuple[str, ...] = ()
    num_cpus: float = 1.0
    num_gpus: float = 0.0


class TaskFailed(RuntimeError):
    """A task that failed for good: its own exception, or its worker or node lost more often than retried.

    ``others``: the further tasks that failed or could not run for it; ``results``: the finished tasks' results.
    """

    def __init__(self, task_id: str, node: str | None, log_path: str | None, error: str,
                 others: tuple[str, ...] = (), results: dict | None = None):
        self.task_id, self.node, self.log_path, self.error, self.others = task_id, node, log_path, error, others
        self.results = results or {}
        where = f"on node {node or 'unknown'}, worker log {log_path or 'unknown'}"
        also = f"\n(also not completed: {', '.join(others)})" if others else ""
        super().__init__(f"task {task_id} failed {where}:\n{error}{also}")


def pin_env_vars(environ=os.environ) -> dict[str, str]:
    """A worker's environment for this process's CPU-numerics mode: pinned, the pinned settings and their
    record; native, only the mode, so that the worker's own ``import saah_lib`` drops a pinned node's settings."""
    env = {MODE_VARIABLE: numerics_mode(environ)}
    apply_cpu_numerics(env)
    return env


def check_tasks(tasks: list[Task]) -> list[Task]:
    """Unique ids, known dependencies, no dependency circle (an error names the task); the tasks, each after
    the tasks it depends on."""
    ids = [t.id for t in tasks]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise ValueError(f"task ids must be unique; repeated: {', '.join(duplicates)}")
    by_id = {t.id: t for t in tasks}
    for task in tasks:
        if not callable(task.fn):
            raise TypeError(f"task {task.id}: fn is {task.fn!r}, not a function")
        missing = [d for d in task.deps if d not in by_id]
        if missing:
            raise ValueError(f"task {task.id} depends on {', '.join(missing)}, not among the tasks")
    try:
        return [by_id[i] for i in graphlib.TopologicalSorter({t.id: t.deps for t in tasks}).static_order()]
    except graphlib.CycleError as error:  # its cycle runs from a task to those that depend on it
        raise ValueError("dependency circle: " + " -> ".join(reversed(error.args[1]))) from None


@ray.remote(num_cpus=0)
class _Attempts:
    """Where each task's latest attempt runs, told by the worker as it starts: a dead worker cannot say it, and
    Ray's error for a lost worker names neither node nor log.  One per run_tasks call."""

    def __init__(self):
        self.where: dict[str, dict] = {}

    def started(self, task_id: str, where: dict) -> None:
        self.where[task_id] = where

    def last(self, task_id: str) -> dict:
        return self.where.get(task_id, {})


@ray.remote
def _execute(attempts, task_id: str, fn: Callable[..., dict], kwargs: dict, *_dependencies) -> dict:
    """``fn(**kwargs)``; ``_dependencies`` (unused) are the ObjectRefs Ray waits for before it starts this."""
    # Ray points a worker's file descriptor 2 at its log file, worker-*.err in its node's temp dir.
    log = next((f.path for f in psutil.Process().open_files() if f.fd == 2), None)
    where = {"node_ip": ray.util.get_node_ip_address(), "node_id": ray.get_runtime_context().get_node_id(),
             "pid": os.getpid(), "log": log}
    # Sent before the work, not awaited (a worker lost before the actor is up goes unrecorded: "unknown").
    attempts.started.remote(task_id, where)
    try:
        return {"result": fn(**kwargs), "where": where}
    except Exception:
        # An actor runs one caller's calls in order: awaiting this one puts the record in before the driver asks.
        with contextlib.suppress(ray.exceptions.RayError):
            ray.get(attempts.started.remote(task_id, where))
        raise


def _collect(refs: dict, on_finish) -> tuple[dict[str, dict], dict[str, Exception]]:
    """Results and errors by task id, in the order the tasks end; ``on_finish`` as each succeeds."""
    results, errors = {}, {}
    waiting = list(refs)
    while waiting:  # in slices, so that Ctrl-C and SIGTERM are handled at once
        done, waiting = ray.wait(waiting, num_returns=1, timeout=WAIT_SLICE_S)
        for ref in done:
            task = refs[ref]
            try:
                out = ray.get(ref)
            except ray.exceptions.RayError as error:
                errors[task.id] = error
                continue
            results[task.id] = out["result"]
            if on_finish is not None:
                on_finish(task, out["result"], out["where"]["node_ip"])
    return results, errors


def _failure(tasks: list[Task], results: dict, errors: dict, attempts, max_retries: int) -> TaskFailed:
    """The first task to fail of itself (its dependencies done), with its node and log; the others by name."""
    deps = {t.id: t.deps for t in tasks}
    first = next(i for i in errors if not any(d in errors for d in deps[i]))
    error = errors[first]
    if isinstance(error, ray.exceptions.RayTaskError):
        text = str(error)  # the task's own traceback
    else:
        text = (f"{type(error).__name__}: its worker or node was lost "
                f"{max_retries + 1} time(s) (max_retries={max_retries}): {error}")
    where = ray.get(attempts.last.remote(first))
    others = tuple(i for i in errors if i != first)
    return TaskFailed(first, where.get("node_ip"), where.get("log"), text, others, results)


@contextmanager
def _environment(**values: str | None) -> Iterator[None]:
    """Environment variables set (None: unset) for the duration (the processes Ray starts inherit them)."""
    # patch.dict puts back the whole environment as it was, the unset variables included
    with mock.patch.dict(os.environ, {k: v for k, v in values.items() if v is not None}):
        for key in [k for k, v in values.items() if v is None]:
            os.environ.pop(key, None)
        yield


def _check_loopback() -> None:
    """Refuse a local instance, or a loopback address to join, that Ray would turn into this host's external
    address."""
    address = ray.util.get_node_ip_address()
    if address != LOOPBACK:
        raise RuntimeError(
            f"Ray would use {address} for this host, not {LOOPBACK}: it was imported before "
            f"saah_lab.studies.execution.engine with {CLUSTER_SWITCH} not 0. Import "
            f"saah_lab.studies.execution.engine (or any study command) before ray, or set {CLUSTER_SWITCH}=0 in the "
            "environment.")


def _start_local(token: Path, **init_args) -> None:
    """``ray.init`` a local instance, up to :data:`LOCAL_START_ATTEMPTS` times: Ray gives a new node a fixed 30 s
    to register, which an overloaded machine can exceed; a failed start's processes (they carry our token) are
    killed first. A start that fails otherwise or is interrupted is shut down and left to the watchdog's sweep."""
    for attempt in range(1, LOCAL_START_ATTEMPTS + 1):
        try:
            ray.init(**init_args)
            return
        except BaseException as error:  # Ray raises a bare Exception for a timeout
            ray.shutdown()
            if "timed out during startup" not in str(error) or attempt == LOCAL_START_ATTEMPTS:
                raise
        kill_instance(str(token))


@contextmanager
def _watchdog(token: Path, temp_dir: Path) -> Iterator[None]:
    """A watchdog (:mod:`.watchdog`) for the instance whose processes carry ``token``: told ``stop`` as this
    context ends, it acts only if this process dies first.  Ended by an exception other than :class:`TaskFailed`
    (Ctrl-C as the instance starts or stops: one at the terminal also reaches the raylet, whose agents then
    outlive ``ray.shutdown``), it is told ``sweep``: it kills what it saw of the instance, and this process waits."""
    watchdog = subprocess.Popen([sys.executable, str(WATCHDOG), str(os.getpid()), str(token), str(temp_dir)],
                                stdin=subprocess.PIPE, start_new_session=True)
    word = STOP
    try:
        yield
    except TaskFailed:  # the instance was stopped in order (ray_session)
        raise
    except BaseException:
        word = SWEEP
        raise
    finally:
        try:
            watchdog.stdin.write(word)
            watchdog.stdin.close()
            watchdog.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            watchdog.kill()
            watchdog.wait()


@contextmanager
def ray_session(address: str | None = None, num_cpus: float | None = None, num_gpus: float | None = None,
                env_vars: dict | None = None) -> Iterator[None]:
    """Connect to Ray for the duration: start a local instance (``address=None``) or join one (left running).

    The local instance listens on 127.0.0.1 only, bounds its object store, keeps its files in a temp dir of its
    own (several instances on one host do not collide) and uses token auth from a file there: with
    ``RAY_AUTH_MODE`` unset and a token path given, Ray turns auth on for this process and those it starts (a
    bare ``ray.init()`` would write ``~/.ray/auth_token``; Ray keeps mode and token for the rest of the process,
    so joining a cluster after it takes a new process).  Whatever it started it stops, and it removes its temp
    dir, unless a task failed: the worker log that :class:`TaskFailed` names is in there.
    """
    if ray.is_initialized():
        raise RuntimeError("Ray is already initialised in this process; run_tasks connects and disconnects itself")
    runtime_env = {"env_vars": {**pin_env_vars(), **(env_vars or {})}}
    quiet = {"logging_level": logging.ERROR, "log_to_driver": False, "configure_logging": True}
    if address is not None:
        if address.rsplit(":", 1)[0] in ("localhost", LOOPBACK):
            _check_loopback()
        ray.init(address=address, runtime_env=runtime_env, **quiet)
        try:
            yield
        finally:
            ray.shutdown()
        return
    _check_loopback()
    # Short path: Ray's Unix socket paths below it must stay within 107 bytes.
    temp_dir = Path(tempfile.mkdtemp(prefix="saah-ray-", dir="/tmp"))
    token = temp_dir / "auth_token"
    token.write_text(_TOKEN)
    token.chmod(0o600)
    # Ray nices its workers to 15 by default: here they are the study's work, not a background load.
    env = {"RAY_AUTH_MODE": None, "RAY_AUTH_TOKEN": None, "RAY_AUTH_TOKEN_PATH": str(token), CLUSTER_SWITCH: "0",
           "RAY_USAGE_STATS_ENABLED": "0", "RAY_worker_niceness": os.environ.get("RAY_worker_niceness", "0")}
    try:
        with _watchdog(token, temp_dir), _environment(**env):
            _start_local(token, num_cpus=num_cpus, num_gpus=num_gpus, _node_ip_address=LOOPBACK,
                         include_dashboard=False, object_store_memory=LOCAL_OBJECT_STORE_BYTES,
                         _temp_dir=str(temp_dir), runtime_env=runtime_env, **quiet)
            try:
                yield
            finally:
                ray.shutdown()
    except TaskFailed:  # the failure names a worker log in this folder: kept for the user to read
        raise
    except BaseException:
        shutil.rmtree(temp_dir, ignore_errors=True)
        raise
    shutil.rmtree(temp_dir, ignore_errors=True)


@contextmanager
def _sigterm_as_ctrl_c() -> Iterator[Callable[[], None]]:
    """SIGTERM (a scheduler's preemption or time limit, a plain ``kill``) ends the study as Ctrl-C does (the
    session ends, the instance stopped) instead of the process vanishing mid-way, once Ray is up; afterwards the
    handler from before: ``ray.init`` installs its own, which ``ray.shutdown`` leaves (a notebook kernel would
    then exit through it)."""
    if threading.current_thread() is not threading.main_thread():  # only the main thread may set handlers
        yield lambda: None
        return
    before = signal.getsignal(signal.SIGTERM)

    def interrupt(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    try:
        yield lambda: signal.signal(signal.SIGTERM, interrupt)
    finally:
        signal.signal(signal.SIGTERM, before)


def run_tasks(tasks, *, address: str | None = None, max_retries: int = 1, num_cpus: float | None = None,
              num_gpus: float | None = None, on_finish=None, env_vars: dict | None = None) -> dict[str, dict]:
    """Run every task once its dependencies are done; returns ``{task id: fn's result}``.

    ``address``: None starts a local Ray instance sized to the machine, or to ``num_cpus`` / ``num_gpus`` (GPUs
    beyond the real ones are scheduling labels only); "auto" or "host:port" joins a cluster.  ``max_retries``:
    Ray's reruns of a task whose worker or node was lost.  ``on_finish(task, result, node_ip)`` is called here as
    each task finishes; ``env_vars`` are set in every worker beside the pin.  Raises :class:`TaskFailed` once
    every task that could run has run, if any failed.
    """
    tasks = check_tasks(list(tasks))
    if max_retries < 0:
        raise ValueError(f"max_retries must be >= 0, got {max_retries}")
    if not tasks:
        return {}
    with _sigterm_as_ctrl_c() as on_sigterm, ray_session(address, num_cpus, num_gpus, env_vars):
        on_sigterm()  # after ray.init, whose own handler would exit at once
        # On the driver's node, which outlives any other node lost meanwhile.
        here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=True)
        attempts = _Attempts.options(scheduling_strategy=here).remote()
        refs = {}
        for task in tasks:  # each after its dependencies, which it takes as ObjectRef arguments
            refs[task.id] = _execute.options(name=task.id, num_cpus=task.num_cpus, num_gpus=task.num_gpus,
                                             max_retries=max_retries, retry_exceptions=False).remote(
                attempts, task.id, task.fn, task.kwargs, *(refs[d] for d in task.deps))
        # Ctrl-C, or an on_finish that raises, ends the session: Ray kills the tasks of a driver that disconnects.
        results, errors = _collect({refs[t.id]: t for t in tasks}, on_finish)
        if errors:
            raise _failure(tasks, results, errors, attempts, max_retries)
        return results
