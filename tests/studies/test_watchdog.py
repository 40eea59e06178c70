"""The watchdog's view of an instance: which processes it would kill after the driver died (the kill itself, on a
real Ray instance, is tests/studies/test_engine.py's ctrl-c / kill-9 test)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil

from saah_lab.studies.execution.watchdog import MARKER_VARIABLE, instance_tree

# A chain of ``depth`` processes below the one started: each starts the next, then sleeps.
CHAIN = """
import subprocess, sys, time
depth = int(sys.argv[1])
if depth:
    subprocess.Popen([sys.executable, "-c", sys.argv[2], str(depth - 1), sys.argv[2]])
time.sleep(120)
"""


def _chain(depth: int, env: dict) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", CHAIN, str(depth), CHAIN], env=env)


def _descendants(proc: subprocess.Popen, count: int) -> list[int]:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        below = psutil.Process(proc.pid).children(recursive=True)
        if len(below) == count:
            return [p.pid for p in below]
        time.sleep(0.1)
    raise AssertionError(f"process {proc.pid} did not start its {count} descendants")


def test_the_instance_is_the_marked_children_and_every_descendant_of_theirs(tmp_path):
    marker = str(tmp_path / "auth_token")
    unmarked_env = {k: v for k, v in os.environ.items() if k != MARKER_VARIABLE}
    marked = _chain(2, {**unmarked_env, MARKER_VARIABLE: marker})  # its descendants inherit the marker
    other_instance = _chain(1, {**unmarked_env, MARKER_VARIABLE: str(tmp_path / "another_token")})
    unmarked = _chain(1, unmarked_env)
    started = [marked, other_instance, unmarked]
    try:
        below_marked = _descendants(marked, 2)
        others = [other_instance.pid, unmarked.pid, *_descendants(other_instance, 1), *_descendants(unmarked, 1)]

        tree = [p.pid for p in instance_tree(os.getpid(), marker)]

        assert sorted(tree) == sorted([marked.pid, *below_marked])
        assert not set(tree) & set(others)
        assert instance_tree(os.getpid(), str(tmp_path / "no_such_token")) == []
        # a driver further down: its own marked child and what that started
        assert sorted(p.pid for p in instance_tree(marked.pid, marker)) == sorted(below_marked)
    finally:
        for proc in started:
            for child in psutil.Process(proc.pid).children(recursive=True):
                child.kill()
            proc.kill()
            proc.wait()
