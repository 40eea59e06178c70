"""Provenance: what produced a result (git commit, whether the tree was clean, package versions, CPU numerics),
recorded in every config. A run trained in several segments (resumed, maybe on another machine or commit) keeps
the first's at the top level and lists every segment under ``segments``.
"""

from __future__ import annotations

import subprocess
from importlib import metadata
from pathlib import Path
from typing import Iterable

from saah_lib.numerics import RECORD_KEY, cpu_numerics_record
from saah_lib.paths import REPO_ROOT

#: the config.json field listing each training segment's provenance and the steps it set out to cover
SEGMENTS_KEY = "segments"
PROVENANCE_KEYS = ("git_commit", "git_dirty", "versions", RECORD_KEY)
TRACKED_PACKAGES = ("saah_lib", "torch", "transformers", "trl", "peft", "accelerate", "datasets", "tokenizers")


def git_state(cwd: Path | None = None) -> tuple[str | None, bool | None]:
    """The checkout's commit (``-dirty`` appended where tracked files differ from it) and whether they differ;
    (None, None) outside a git checkout."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=10)
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=cwd,
                                capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None, None
    if out.returncode != 0 or status.returncode != 0:
        return None, None
    dirty = bool(status.stdout.strip())
    return out.stdout.strip() + ("-dirty" if dirty else ""), dirty


def package_versions(names: Iterable[str] = TRACKED_PACKAGES) -> dict[str, str | None]:
    versions = {}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def provenance(repo: Path = REPO_ROOT) -> dict:
    """Commit, versions, and the CPU numerics of this process as it is now (threads included: call it
    where the computation runs, after its thread count is set)."""
    commit, dirty = git_state(repo)
    return {"git_commit": commit, "git_dirty": dirty, "versions": package_versions(), RECORD_KEY: cpu_numerics_record()}


def with_segment(previous: dict | None, current: dict, from_step: int, to_step: int) -> dict:
    """The provenance fields of a run's config (``previous``: on disk, None for a new run) once a segment
    trains it from ``from_step`` towards ``to_step`` under ``current`` (:func:`provenance`); a config written
    before segments were recorded counts as one segment from step 0 to ``from_step``."""
    segment = {"from_step": from_step, "to_step": to_step, **current}
    if not previous or not any(k in previous for k in PROVENANCE_KEYS):
        return {**current, SEGMENTS_KEY: [segment]}
    first = {k: previous[k] for k in PROVENANCE_KEYS if k in previous}
    earlier = previous.get(SEGMENTS_KEY) or [{"from_step": 0, "to_step": from_step, **first}]
    return {**first, SEGMENTS_KEY: [*earlier, segment]}
