"""One writer per folder: an operating-system lock on a run folder (:func:`run_lock`) or a study root
(:func:`study_lock`).

The lock is ``fcntl.flock`` on a hidden file in the folder (its name in :mod:`saah_lib.rundir.layout`).
The kernel releases it when the holding process ends, however it ends, so a lock left by a killed
process is never an obstacle: the file's existence means nothing, only a held flock does.  The
holder writes its pid into the file, so a second writer's error says who holds the folder.  The
holder removes the file when it releases the lock (it is not a result).

Works on local file systems of Linux and macOS; on a network file system ``flock`` may not be honoured
between machines.
"""

from __future__ import annotations

import errno
import fcntl
import os
import time
from contextlib import contextmanager
from pathlib import Path

from saah_lib.rundir.layout import RUN_LOCK_FILE, STUDY_LOCK_FILE


class FolderLockedError(RuntimeError):
    """Another process holds the folder's lock; the message names the folder and the holder's pid."""


class FolderLock:
    """An exclusive, non-blocking ``flock`` on ``<folder>/<name>``; ``what`` names the folder in errors."""

    def __init__(self, folder: str | os.PathLike, name: str, what: str):
        self.folder = Path(folder)
        self.path = self.folder / name
        self.what = what
        self.fd: int | None = None

    def acquire(self) -> FolderLock:
        if self.fd is not None:
            raise RuntimeError(f"{self.what}: this lock is already held by this object")
        self.folder.mkdir(parents=True, exist_ok=True)
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as err:
                holder = _holder_pid(fd)
                os.close(fd)
                if err.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise
                raise FolderLockedError(
                    f"{self.what} is being written by another process (pid {holder or 'unknown'}, "
                    f"lock {self.path}); two writers would interleave their lines. Wait for it to finish "
                    "or stop it, then start again.") from None
            if _same_file(fd, self.path):
                break
            # the previous holder removed the file between our open and our lock: lock the new one
            os.close(fd)
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self.fd = fd
        return self

    def release(self) -> None:
        if self.fd is None:
            return
        # removed while still locked, so a process that opened the old file re-checks and retries
        self.path.unlink(missing_ok=True)
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)
        self.fd = None

    def __enter__(self) -> FolderLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def _same_file(fd: int, path: Path) -> bool:
    try:
        return os.fstat(fd).st_ino == os.stat(path).st_ino
    except FileNotFoundError:
        return False


def _holder_pid(fd: int, wait_s: float = 0.5) -> int | None:
    """The pid the holder wrote into the lock file (it writes it just after locking, so wait a moment)."""
    deadline = time.monotonic() + wait_s
    while True:
        text = os.pread(fd, 32, 0).decode(errors="replace").strip()
        if text.isdigit() or time.monotonic() > deadline:
            return int(text) if text.isdigit() else None
        time.sleep(0.02)


def run_lock(run_dir: str | os.PathLike) -> FolderLock:
    """The lock of one run (or baseline) folder, held by the process that trains or evaluates into it."""
    run_dir = Path(run_dir)
    return FolderLock(run_dir, RUN_LOCK_FILE, f"run {run_dir.name!r} ({run_dir})")


# Study roots held by this process: the lock is re-entrant within one process (a study's `verify`
# holds its root and calls the `run` stage, which holds it too), exclusive between processes.
_STUDY_LOCKS: dict[Path, list] = {}


@contextmanager
def study_lock(root: str | os.PathLike):
    """Hold the results root ``root`` for one study process (re-entrant within that process)."""
    key = Path(root).resolve()
    if key in _STUDY_LOCKS:
        _STUDY_LOCKS[key][1] += 1
    else:
        lock = FolderLock(root, STUDY_LOCK_FILE, f"results root {root}").acquire()
        _STUDY_LOCKS[key] = [lock, 1]
    try:
        yield _STUDY_LOCKS[key][0]
    finally:
        _STUDY_LOCKS[key][1] -= 1
        if _STUDY_LOCKS[key][1] == 0:
            _STUDY_LOCKS.pop(key)[0].release()
