"""Which folders a study command may read, write or replace, checked before it does anything; each refusal is
a :class:`Refused` naming the path. A promote swaps the committed folder so that at every moment one of two names
holds the whole study (:func:`replace_folder`).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path

from saah_lib.jsonio import read_json, read_text, scan_jsonl
from saah_lib.paths import COMMITTED_STUDY_ROOTS, repo_relative
from saah_lib.rundir import layout

#: How each study's root names its study: a study plan naming it, or (the SmolLM2 study, ``real``, in a root
#: written before it had a plan) a warm-start record holding the paper-matched alpha its build measured.
SIGNS = {"real": f"a {layout.STUDY_PLAN_FILE} naming the real study or a {layout.WARMSTART_RECORD_FILE} with a "
                 "paper_matched_alpha"}


class Refused(ValueError):
    """A study command refuses a folder, file or value it was given; the message names it. Nothing was written."""


class NotARerunRoot(Refused):
    """The rerun root is a committed study, or holds what no earlier rerun of the study wrote; nothing was deleted."""


def refuse_committed(rerun: str | os.PathLike) -> None:
    """A :class:`NotARerunRoot` if ``rerun`` is, holds or lies inside a committed study root."""
    here = Path(rerun).resolve()
    for committed in COMMITTED_STUDY_ROOTS:
        root = committed.resolve()
        if here == root or root.is_relative_to(here) or here.is_relative_to(root):
            raise NotARerunRoot(f"the rerun root {rerun} is or holds the committed study {repo_relative(committed)}, "
                                "or lies in it; a rerun never writes there: choose another --rerun-root")


def check_promotable(rerun: str | os.PathLike) -> Path:
    """``rerun`` if it is a folder and no committed study (checked before its lock, whose file would create it)."""
    refuse_committed(rerun)
    if not Path(rerun).is_dir():
        raise Refused(f"{rerun}: no such folder, so no rerun to promote")
    return Path(rerun)


def _record(path: Path) -> dict:
    try:
        found = read_json(path, default={})
    except (OSError, ValueError) as err:
        raise Refused(f"{path} cannot be read ({err})") from None
    return found if isinstance(found, dict) else {}


def study_in(root: str | os.PathLike) -> str | None:
    """The study whose records ``root`` holds (:data:`SIGNS`), or None."""
    root = Path(root)
    named = _record(root / layout.STUDY_PLAN_FILE).get("study")
    if named:
        return str(named)
    return "real" if "paper_matched_alpha" in _record(root / layout.WARMSTART_RECORD_FILE) else None


def check_study_root(root: str | os.PathLike, study: str, *, new: bool = False) -> Path:
    """``root``, or a :class:`Refused` naming what it lacks: a ``study`` root holds ``runs/`` and the study's
    records (:data:`SIGNS`). With ``new`` (a root to run or resume into), any folder without another study's
    records, or none yet, will do."""
    root = Path(root)
    found = study_in(root) if root.is_dir() else None
    if found not in (None, study):
        raise Refused(f"{root} is the {found} study's root, not the {study} study's: give the {study} study's root")
    if new:
        return root
    sign = SIGNS.get(study, f"a {layout.STUDY_PLAN_FILE} naming the {study} study")
    if not root.is_dir():
        raise Refused(f"{root}: no such folder, so no {study} study there; give the {study} study's root")
    if found is None or not (root / layout.RUNS).is_dir():
        lacks = sign if found is None else f"a {layout.RUNS}/ folder"
        raise Refused(f"{root} is not a {study} study root: it has no {lacks}")
    return root


def check_results_root(root: str | os.PathLike) -> Path:
    """``root``, or a :class:`Refused` naming it: a manifest lists a study root (with ``runs/`` or a study plan)
    or a root that has one (``results/paper_reported``); anywhere else it would be an extra file of a root."""
    root = Path(root)
    if not any(p.exists() for p in (root / layout.RUNS, root / layout.STUDY_PLAN_FILE, root / layout.MANIFEST_FILE)):
        raise Refused(f"{root} is not a study root (no {layout.RUNS}/ folder, {layout.STUDY_PLAN_FILE} or "
                      f"{layout.MANIFEST_FILE} in it); give the study root itself, e.g. results/mini")
    return root


def refuse_damaged(rerun: Path, names: Iterable[str]) -> None:
    """A :class:`Refused` naming each of ``names`` under ``rerun`` that is missing, and each ``.json`` file or
    ``.jsonl`` line in them that does not parse (what no reader reads, :func:`layout.is_ignored`, aside)."""
    damaged = []
    for name in names:
        top = rerun / name
        if not top.exists():
            damaged.append(f"{top}: missing")
        files = [top] if top.is_file() else sorted(p for p in top.rglob("*") if p.is_file())
        for path in (p for p in files if not layout.is_ignored(p.relative_to(rerun))):
            if path.suffix == ".jsonl":
                damaged += [f"{path}: line {i}: {why}" for i, why in scan_jsonl(path)[1]]
            elif path.suffix == ".json":
                try:
                    json.loads(read_text(path))
                except ValueError as err:
                    damaged.append(f"{path}: not valid JSON ({err})")
    if damaged:
        raise Refused(f"{rerun} is damaged, so nothing was promoted:\n" + "\n".join(f"  {d}" for d in damaged))


def replace_folder(committed: str | os.PathLike, fill: Callable[[Path], None]) -> None:
    """Replace ``committed`` by a folder ``fill(staging)`` fills beside it: old renamed away, staged renamed in,
    old deleted. Interrupted anywhere, the old study is under its name or ``.<name>.replaced``, which the next
    call puts back first (:func:`restore_replaced`)."""
    committed = Path(committed)
    staging, old = (committed.with_name(f".{committed.name}.{s}") for s in ("promoting", "replaced"))
    restore_replaced(committed)
    shutil.rmtree(staging, ignore_errors=True)
    fill(staging)
    if committed.exists():
        os.rename(committed, old)
    os.rename(staging, committed)
    shutil.rmtree(old)


def restore_replaced(committed: str | os.PathLike) -> None:
    """Finish what an interrupted :func:`replace_folder` left: the old study back under its name if the new one
    was not renamed in yet, else the old one deleted."""
    committed = Path(committed)
    old = committed.with_name(f".{committed.name}.replaced")
    if not old.exists():
        return
    if committed.exists():
        shutil.rmtree(old)
    else:
        os.rename(old, committed)
        print(f"restored {committed} from {old.name}, left by an interrupted promote", flush=True)
