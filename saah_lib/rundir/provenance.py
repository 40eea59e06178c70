"""Provenance: what produced a result (git commit, package versions, CPU numerics), recorded in every config."""

from __future__ import annotations

import subprocess
from importlib import metadata
from pathlib import Path
from typing import Iterable

from saah_lib.numerics import RECORD_KEY, cpu_numerics_record
from saah_lib.paths import REPO_ROOT

TRACKED_PACKAGES = ("saah_lib", "torch", "transformers", "trl", "peft", "accelerate", "datasets", "tokenizers")


def git_commit(cwd: Path | None = None) -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=cwd,
                               capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return out.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


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
    return {"git_commit": git_commit(repo), "versions": package_versions(), RECORD_KEY: cpu_numerics_record()}
