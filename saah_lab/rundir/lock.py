"""One writer per folder: an operating-system lock on a run folder (:func:`run_lock`), a study root
(:func:`study_lock`) or the report's output folders.

:class:`filelock.FileLock` (``flock``) on a hidden file in the folder; a second writer is refused, not kept
waiting. The kernel releases the lock when its holder ends, however it ends, so a file a killed process left
is no obstacle. The holder writes its pid into the file (named in a second writer's error) and removes it on
release (it is not a result). On a network file system ``flock`` may not be honoured between machines.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from filelock import FileLock, Timeout

from saah_lib.rundir.layout import RUN_LOCK_FILE, STUDY_LOCK_FILE


class FolderLockedError(RuntimeError):
    """Another process holds the folder's lock; the message names the folder and the holder's pid."""


def _write_pid(fd: int) -> None:
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)


class FolderLock:
    """An exclusive lock on ``<folder>/<name>`` that refuses rather than waits; ``what`` names the folder in
    errors. With ``reentrant``, every FolderLock of that path in this process shares one hold (filelock's
    singleton), released when the last of them releases: a study's ``verify`` holds its root and calls the
    ``run`` stage, which holds it too."""

    def __init__(self, folder: str | os.PathLike, name: str, what: str, *, reentrant: bool = False):
        self.folder = Path(folder)
        self.path = self.folder / name
        self.what = what
        self.held = False
        # a moment's wait, not none: a holder releasing just now removes the file, and a writer that had opened
        # it must open the new one (filelock retries on an unlinked file)
        self._lock = FileLock(self.path, timeout=0.1, thread_local=False, is_singleton=reentrant,
                              on_acquired=_write_pid)

    def acquire(self) -> FolderLock:
        if self.held:
            raise RuntimeError(f"{self.what}: this lock is already held by this object")
        try:
            self._lock.acquire()
        except Timeout:
            raise FolderLockedError(
                f"{self.what} is being written by another process (pid {_holder_pid(self.path) or 'unknown'}, "
                f"lock {self.path}); two writers would interleave their lines. Wait for it to finish "
                "or stop it, then start again.") from None
        self.held = True
        return self

    def release(self) -> None:
        if not self.held:
            return
        if self._lock.lock_counter == 1:
            # filelock leaves the file; removed while still held, so a writer waiting on it retries (see above)
            self.path.unlink(missing_ok=True)
        self._lock.release()
        self.held = False

    def __enter__(self) -> FolderLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def _holder_pid(path: Path, wait_s: float = 0.5) -> int | None:
    """The pid the holder wrote into the lock file (it writes it just after locking, so wait a moment)."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            text = path.read_text(errors="replace").strip()
        except FileNotFoundError:
            text = ""
        if text.isdigit() or time.monotonic() > deadline:
            return int(text) if text.isdigit() else None
        time.sleep(0.02)


def run_lock(run_dir: str | os.PathLike) -> FolderLock:
    """The lock of one run (or baseline) folder, held by the process that trains or evaluates into it."""
    run_dir = Path(run_dir)
    return FolderLock(run_dir, RUN_LOCK_FILE, f"run {run_dir.name!r} ({run_dir})")


def study_lock(root: str | os.PathLike) -> FolderLock:
    """The lock of the results root ``root``, held by one study process (re-entrant within that process)."""
    return FolderLock(root, STUDY_LOCK_FILE, f"results root {root}", reentrant=True)
