"""Stops the local Ray instance of a driver that died without stopping it (``kill -9``, the OOM killer): the
kernel kills its GCS server and raylet with the driver, but not the raylet's agents and workers.
:func:`.engine.ray_session` starts this script (it imports only psutil, so it is up at once) in a session of
its own beside each instance it starts::

    python saah_lab/studies/execution/watchdog.py DRIVER_PID MARKER TEMP_DIR     (stdin: a pipe from the driver)

The driver writes ``stop`` into the pipe when it ends normally, ``sweep`` when interrupted (kill the instance,
``TEMP_DIR`` is the driver's to remove); the pipe closing without either, or the parent changing, means the
driver died: kill and remove ``TEMP_DIR``.  The instance: the processes whose ``RAY_AUTH_TOKEN_PATH`` is
``MARKER`` and their descendants as seen while the driver lived (agents rename themselves, hiding their
environment, and outlive the raylet as no one's children).
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
LOOK_S = 0.5  # how often it notes the instance and checks its parent (a fork of a dead driver may hold the pipe)
SWEEP_S = 2.0  # how long it looks for the instance's processes after the driver died: a worker may be starting


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
    """The processes the driver started for the instance (they carry the marker), and all their descendants (the
    process table read once per call, not once per process asked, twice a second for a whole study)."""
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
    return [p for p in psutil.process_iter(["pid"]) if p.pid != os.getpid() and carries(p, marker)]


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
