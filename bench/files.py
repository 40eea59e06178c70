"""Where a measurement's file goes while it is taken: a complete measurement is replaced only by a complete one.

A benchmark or preflight report is rewritten after every stage into its *partial* file beside the final one
(``<device>-<profile>.partial.json``), which no reader takes for a measurement (the grid planner reads
``<device>-<profile>.json`` and ``<device>-preflight.json`` only).  When the last stage is done the final file
is replaced in one step (:func:`saah_lib.jsonio.atomic_write_json`) and the partial one removed: a run cut
off keeps what it measured apart, and the last complete measurement stands.  The trainer's output of a timed
variant goes to a scratch folder that is removed however the run ends.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from pathlib import Path

from saah_lib.jsonio import atomic_write_json


def out_folder_problem(out: Path) -> str | None:
    """Why ``--out`` cannot hold a report (it, or a folder above it, is a file), or None: checked before any
    measurement, which would otherwise fail only when it writes its report, minutes later."""
    for path in (out, *out.parents):
        if path.exists():
            return None if path.is_dir() else f"--out {out}: {path} is a file, not a folder"
    return None


def partial_path(path: Path) -> Path:
    """``<name>.partial.json`` beside ``path``: the report of a measurement still being taken."""
    return path.with_name(f"{path.stem}.partial.json")


def write_partial(path: Path, report: dict) -> None:
    """What was measured so far, apart from the complete measurement at ``path``."""
    atomic_write_json(partial_path(path), report)


def write_complete(path: Path, report: dict) -> None:
    """Replace the measurement at ``path`` in one step, then drop the partial report."""
    atomic_write_json(path, report)
    partial_path(path).unlink(missing_ok=True)


@contextlib.contextmanager
def scratch_folder(parent: Path, name: str):
    """A new hidden folder under ``parent`` for files nobody keeps (checkpoints of a timed variant), removed
    on the way out, whether the block finished, failed or was interrupted."""
    parent.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=parent))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
