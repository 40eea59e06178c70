"""Reading and writing JSON and JSON-lines files, the one way the project does it.

Two write disciplines keep files readable at every instant: a whole file is written to a temporary file in the same
folder and renamed over the target (:func:`atomic_write_text`, :func:`atomic_write_json`, :func:`write_jsonl`); a log
grows by appending one complete line per call (:func:`append_jsonl`). Readers report every bad line by number
(:func:`scan_jsonl`); a log still being written may end in a torn line, which :func:`read_jsonl` drops unless the file
is finished.  Values are written JSON-safe: NaN and infinities become null.

A whole-file write killed before its rename leaves a hidden temporary file (``.<name>.<random>.tmp``) beside the
target; the next writer of that folder removes it (:func:`remove_temp_files`).  Written files get the ordinary
permissions of a new file (``0666`` less the umask), as ``open()`` gives.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import math
import os
import re
import secrets
import shutil
from pathlib import Path
from typing import Any, Iterable

#: The temporary file of an atomic write: hidden, beside its target, ``.<name>.<random>.tmp``
#: (the random part of ``tempfile.mkstemp``, used before, is matched too).
TEMP_FILE_RE = re.compile(r"\..+\.[A-Za-z0-9_]+\.tmp")


#: What torch's zip writer says when a write comes up short, without the operating system's reason.
TORCH_SHORT_WRITE = ("unexpected pos", "file write failed")
#: Free space below which a short write is taken for a full disk.
LOW_SPACE_BYTES = 1 << 20


class DiskFullError(OSError):
    """A write failed because the disk is full; the message says so and names what was being written."""


def _free_bytes(path: Path) -> int:
    """Free bytes on the file system of ``path`` (or of its nearest existing folder)."""
    for folder in (path, *path.parents):
        if folder.exists():
            return shutil.disk_usage(folder).free
    return 0


def is_disk_full(error: BaseException, path: str | os.PathLike) -> bool:
    """Whether ``error``, raised while writing ``path``, comes from a full disk.

    An ``OSError`` says so by its errno; libraries that wrap it say so in their message, except torch's
    zip writer, which reports only a short write: that counts when the disk is (almost) full.
    """
    if isinstance(error, OSError) and error.errno == errno.ENOSPC:
        return True
    text = str(error)
    if "No space left on device" in text:
        return True
    return any(s in text for s in TORCH_SHORT_WRITE) and _free_bytes(Path(path)) < LOW_SPACE_BYTES


def disk_full_error(what: str, path: str | os.PathLike) -> DiskFullError:
    """The error to raise for a full disk while ``what`` (e.g. "writing the log") at ``path``."""
    return DiskFullError(errno.ENOSPC, f"No space left on device while {what} {path}; free some space on that "
                                       "disk and run again (what was written before is kept)")


def json_safe(value: Any) -> Any:
    """JSON-safe copy: NaN/inf become null, tuples and paths plain values."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "item") and callable(value.item):  # numpy / torch scalars
        return json_safe(value.item())
    return value


def dumps(record: Any) -> str:
    return json.dumps(json_safe(record), allow_nan=False)


def _new_temp_file(path: Path) -> tuple[int, Path]:
    """A new temporary file beside ``path``, opened for writing.

    Not ``tempfile.mkstemp``: that creates files with mode 0600, which the rename would hand on to
    the result.  Mode 0666 here is reduced by the umask exactly as for a file made by ``open()``.
    """
    while True:
        tmp = path.parent / f".{path.name}.{secrets.token_hex(6)}.tmp"
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), tmp
        except FileExistsError:  # another writer drew the same name: draw again
            continue


def atomic_write_text(path: Path, text: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = _new_temp_file(path)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as error:
        tmp.unlink(missing_ok=True)
        if isinstance(error, OSError) and is_disk_full(error, path):
            raise disk_full_error("writing", path) from error
        raise


def remove_temp_files(folder: str | os.PathLike) -> list[Path]:
    """Remove the temporary files that interrupted atomic writes left in ``folder`` (not its subfolders).

    Call it only as the folder's one writer (holding its lock, :mod:`saah_lab.rundir.lock`): the
    temporary file of a write still in progress would be removed too.
    """
    folder = Path(folder)
    if not folder.is_dir():
        return []
    stale = sorted(p for p in folder.iterdir() if TEMP_FILE_RE.fullmatch(p.name) and p.is_file())
    for path in stale:
        path.unlink(missing_ok=True)
    return stale


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(json_safe(obj), indent=2, allow_nan=False) + "\n")


def write_jsonl(path: Path, records: Iterable[dict]) -> None:
    atomic_write_text(path, "".join(dumps(r) + "\n" for r in records))


def append_jsonl(path: Path, record: dict) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    line = dumps(record) + "\n"
    try:
        with open(path, "a") as f:
            f.write(line)  # one write of one whole line
            f.flush()
            os.fsync(f.fileno())
    except OSError as error:  # a torn last line is what readers of a running log already skip
        if is_disk_full(error, path):
            raise disk_full_error("appending to", path) from error
        raise


def read_text(path: str | os.PathLike) -> str:
    """The text of a UTF-8 file; bytes that are not UTF-8 raise a ValueError naming the file and line."""
    path = Path(path)
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        column = error.start - (data.rfind(b"\n", 0, error.start) + 1) + 1
        raise ValueError(f"{path}: line {line}: not UTF-8 text (byte 0x{data[error.start]:02x} at column {column}: "
                         f"{error.reason})") from None


def scan_jsonl(path: Path) -> tuple[list[tuple[int, Any]], list[tuple[int, str]]]:
    """Every non-blank line of a JSON-lines file, parsed: ``([(line, record)], [(line, problem)])``.

    Nothing is dropped silently: a line that is not UTF-8 or not valid JSON
    is reported with its 1-based line number.  A missing file has no lines.
    """
    path = Path(path)
    return parse_jsonl(path.read_bytes()) if path.is_file() else ([], [])


def parse_jsonl(data: bytes) -> tuple[list[tuple[int, Any]], list[tuple[int, str]]]:
    """:func:`scan_jsonl` of a file's bytes already read (one read: what a reader checks held at one instant)."""
    records, problems = [], []
    # bytes.splitlines splits at \n, \r and \r\n only, as the log's writer does
    for i, raw in enumerate(data.splitlines(), 1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as error:
            problems.append((i, f"not UTF-8 text (byte 0x{raw[error.start]:02x} at column {error.start + 1})"))
            continue
        if not line.strip():
            continue
        try:
            records.append((i, json.loads(line)))
        except json.JSONDecodeError as exc:
            problems.append((i, f"not valid JSON ({exc.msg})"))
    return records, problems


def read_jsonl(path: Path, strict: bool = True, finished: bool = False) -> list:
    """All records of a JSON-lines file.

    A log that may still be appended to (``finished=False``) may end in a torn line (a writer killed mid-write);
    that last line is ignored.  In a finished file (``finished=True``) it is an error like any other.  A bad
    line raises a ValueError naming the file and line with ``strict``; otherwise it is skipped with a warning.
    """
    path = Path(path)
    records, problems = scan_jsonl(path)
    last = records[-1][0] if records else 0
    for i, problem in problems:
        if not finished and i > last and i == problems[-1][0]:
            continue  # the torn tail of a log still being written
        if strict:
            raise ValueError(f"{path}: line {i}: {problem}")
        logging.getLogger(__name__).warning("%s: line %d: skipping it: %s", path, i, problem)
    return [r for _, r in records]


def read_json(path: str | os.PathLike, default: Any = None) -> Any:
    """The parsed content of a JSON file, or ``default`` when the file does not exist."""
    path = Path(path)
    if not path.is_file():
        return default
    try:
        return json.loads(read_text(path))
    except json.JSONDecodeError as error:  # the same type, its msg naming the file and line
        raise json.JSONDecodeError(f"{path}: line {error.lineno}: not valid JSON ({error.msg})", error.doc,
                                   error.pos) from None


def sha256_of(path: Path) -> str:
    """The file's sha256, read in blocks (weights and logs of any size)."""
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()
