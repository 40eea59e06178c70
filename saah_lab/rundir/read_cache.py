"""A cache of what reading one run folder gives, so that reading a root of many runs again costs little.

Reading a run checks every line and every per-problem record (:mod:`saah_lab.rundir.reader`), and a user's
``results/local`` after a few sweeps holds hundreds of runs.  :func:`cached` keeps each result
in a file of its own under the cache folder, with the *fingerprint* it was computed for: the content (a hash,
not sizes or times, which a rewrite within one clock tick would not change) of every file in the run folder that
is a result (:func:`saah_lib.rundir.layout.is_ignored`: not its checkpoints), and the source of this library.
A result is used only where both fingerprints match, so a run that changed, or code that changed, is read
again; the fingerprint is taken before the reading, so a run that changes while it is read is read again next
time.  An entry that cannot be read is computed again and replaced; the cache never changes a result.

Where: ``$SAAH_READ_CACHE`` (a folder; ``off`` switches the cache off), else ``$XDG_CACHE_HOME/saah_lib/runs``
(``~/.cache/saah_lib/runs``).  Nothing is written into a results root.
"""

from __future__ import annotations

import functools
import hashlib
import os
import pickle
import tempfile
from pathlib import Path
from typing import Callable, TypeVar

from saah_lib.rundir import layout

CACHE_ENV = "SAAH_READ_CACHE"
T = TypeVar("T")
_PACKAGE = Path(__file__).resolve().parents[1]


def cache_folder() -> Path | None:
    """The cache folder, or None when ``$SAAH_READ_CACHE`` is ``off``."""
    chosen = os.environ.get(CACHE_ENV, "")
    if chosen.lower() == "off":
        return None
    if chosen:
        return Path(chosen)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "saah_lib" / "runs"


@functools.cache
def code_fingerprint() -> str:
    """A hash of every source file of this library: results computed by other code are not reused."""
    digest = hashlib.blake2b(digest_size=16)
    for path in sorted(_PACKAGE.rglob("*.py")):
        digest.update(str(path.relative_to(_PACKAGE)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def folder_fingerprint(folder: Path) -> str:
    """A hash of the names and contents of every result file in ``folder`` (symbolic links by their target)."""
    digest = hashlib.blake2b(digest_size=16)
    digest.update(code_fingerprint().encode())
    for here, dirnames, filenames in os.walk(folder):
        dirnames[:] = sorted(d for d in dirnames if not _ignored(folder, Path(here) / d))
        for name in sorted(filenames):
            path = Path(here) / name
            if _ignored(folder, path):
                continue
            digest.update(str(path.relative_to(folder)).encode() + b"\0")
            digest.update(os.readlink(path).encode() if path.is_symlink() else _content(path))
            digest.update(b"\0")
    return digest.hexdigest()


def _ignored(folder: Path, path: Path) -> bool:
    return layout.is_ignored(Path("runs") / folder.name / path.relative_to(folder))


def _content(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as error:  # gone or unreadable while listed: a fingerprint no later listing repeats
        return f"unreadable: {error}".encode()


def _entry(folder: Path, what: str) -> Path | None:
    where = cache_folder()
    if where is None:
        return None
    name = hashlib.blake2b(f"{folder}\0{what}".encode(), digest_size=16).hexdigest()
    return where / f"{name}.pickle"


def cached(folder: Path, what: str, compute: Callable[[], T]) -> T:
    """``compute()`` for ``folder``, or its result kept from an earlier call on the same folder content and code
    (``what`` names the result; the folder's path as given is part of the key, as results name it)."""
    entry = _entry(Path(folder), what)
    if entry is None:
        return compute()
    fingerprint = folder_fingerprint(Path(folder))
    try:
        with open(entry, "rb") as f:
            kept_for, value = pickle.load(f)  # a file this module wrote into the user's own cache folder
        if kept_for == fingerprint:
            return value
    except (OSError, EOFError, pickle.UnpicklingError, ValueError, TypeError, AttributeError, ImportError):
        pass  # no entry, or one that cannot be read: computed again
    value = compute()
    _store(entry, fingerprint, value)
    return value


def _store(entry: Path, fingerprint: str, value) -> None:
    """Write an entry in one rename (a reader beside sees the old entry or the new one); a cache that cannot be
    written is no error (the result is computed again next time)."""
    temporary = None
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=entry.parent, prefix=".")
        with os.fdopen(handle, "wb") as f:
            pickle.dump((fingerprint, value), f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(temporary, entry)
    except (OSError, pickle.PicklingError):
        if temporary is not None:
            Path(temporary).unlink(missing_ok=True)
