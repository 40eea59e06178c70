"""Stops the local Ray instance of a driver that died without stopping it (``kill -9``, the OOM killer).

The kernel kills an instance's GCS server and raylet with the driver (``PR_SET_PDEATHSIG``), but not what
the raylet started: its agents and workers, which would run on.  :func:`saah_lab.studies.execution.engine.ray_session`
starts this beside each instance it starts, as a script (it imports only psutil, so it is up at once), in a
session of its own (a Ctrl-C at the terminal reaches the driver, which stops the instance and then this)::

    python saah_lab/studies/execution/watchdog.py DRIVER_PID MARKER TEMP_DIR     (stdin: a pipe from the driver)

A driver that ends normally writes ``stop`` into the pipe; one interrupted writes ``sweep``: the watchdog
SIGKILLs the instance's processes (``TEMP_DIR`` is the driver's to remove).  The pipe closing without either,
or the watchdog's parent changing, means the driver died: it SIGKILLs them and removes ``TEMP_DIR``.  Those
are the processes whose ``RAY_AUTH_TOKEN_PATH`` is ``MARKER`` (a token file in the instance's own temp dir)
and all their descendants as seen while the driver lived: the agents rename themselves, which hides their
environment, and once the raylet is dead they are no one's children.
"""

from __future__ import annotations

import os
import select
import shutil
import sys
import time

import psutil

STOP = b"stop"
SWEEP = b"sweep"
MARKER_VARIABLE = "RAY_AUTH_TOKEN_PATH"
#: How often the watchdog notes the instance's processes and checks that its parent is still the driver (a fork
#: of the driver may hold the pipe open after the driver died).
LOOK_S = 0.5
#: How long it keeps looking for processes of the instance after the driver died: a worker may be starting.
SWEEP_S = 2.0


def watch(pipe: int, driver_pid: int, marker: str) -> tuple[bytes, list[psutil.Process]]:
    """Block until the driver closes the pipe (what it said: ``stop``, ``sweep``) or dies (``b""``); with the
    instance's processes seen meanwhile."""
    said, seen = b"", {}
    while True:
        ready, _, _ = select.select([pipe], [], [], LOOK_S)
        if ready:
            chunk = os.read(pipe, 64)
            if chunk:
                said += chunk
                continue
            if said.strip() == SWEEP:  # the driver lives, waiting: its instance as it is now, too
                seen.update((proc.pid, proc) for proc in instance_tree(driver_pid, marker))
            return said.strip(), list(seen.values())
        if os.getppid() != driver_pid:
            return b"", list(seen.values())
        seen.update((proc.pid, proc) for proc in instance_tree(driver_pid, marker))


def carries(proc: psutil.Process, marker: str) -> bool:
    try:
        return proc.environ().get(MARKER_VARIABLE) == marker
    except psutil.Error:  # gone meanwhile, or not ours to read
        return False


def instance_tree(driver_pid: int, marker: str) -> list[psutil.Process]:
    """The processes the driver started for the instance (they carry the marker), and all their descendants.

    The process table is read once per call, for the driver's descendants: asking each of the instance's
    processes for its own would read it once per process asked, twice a second, for as long as a study runs."""
    try:
        below = psutil.Process(driver_pid).children(recursive=True)
    except psutil.Error:
        return []
    children: dict[int, list[psutil.Process]] = {}
    for proc in below:
        try:
            children.setdefault(proc.ppid(), []).append(proc)
        except psutil.Error:  # gone meanwhile
            continue
    tree = [p for p in children.get(driver_pid, []) if p.pid != os.getpid() and carries(p, marker)]
    for proc in tree:  # grows as it goes: each process's children join the end
        tree += children.get(proc.pid, [])
    return tree


def instance_processes(marker: str) -> list[psutil.Process]:
    """Live processes of the instance (their environment names its token file), this one excepted."""
    found = []
    for proc in psutil.process_iter(["pid"]):
        if proc.pid != os.getpid() and carries(proc, marker):
            found.append(proc)
    return found


def alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def kill_instance(marker: str, seen: list[psutil.Process] = (), sweep_s: float = SWEEP_S) -> int:
    """SIGKILL the instance's processes (``seen`` and those carrying ``marker``) until none has been found for
    ``sweep_s``; returns how many were killed.  ``is_running`` guards against a pid used again meanwhile."""
    killed, quiet_since, first = 0, time.monotonic(), list(seen)
    while time.monotonic() - quiet_since < sweep_s:
        victims = [p for p in first + instance_processes(marker) if alive(p)]
        first = []
        for proc in victims:
            try:
                proc.kill()
                killed += 1
            except psutil.Error:
                pass
        if victims:
            psutil.wait_procs(victims, timeout=2)
            quiet_since = time.monotonic()
        else:
            time.sleep(0.2)
    return killed


def main(argv: list[str]) -> int:
    driver_pid, marker, temp_dir = int(argv[0]), argv[1], argv[2]
    said, seen = watch(sys.stdin.fileno(), driver_pid, marker)
    if said == STOP:
        return 0
    kill_instance(marker, seen)
    if said != SWEEP:  # the driver died: no one else removes its files
        shutil.rmtree(temp_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
