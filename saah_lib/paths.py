"""Where things live: the repository root and every folder the project reads or writes.

One convention for the whole package: a *relative* path (a config's ``results_dir``, a notebook parameter, a
command-line flag) means relative to the repository root, whatever the working directory is, so a notebook
opened in JupyterLab (working directory ``notebooks/``) and the same notebook run by papermill from the root use
the same folders. :func:`in_repo` applies the convention; :func:`repo_relative` is its inverse, used for every
path a result records (a committed file never holds a path of the machine that wrote it).

The tiny warm starts (:mod:`saah_lib.models.warmstart`) the committed studies trained from ship in
:data:`SHIPPED_WARM_STARTS` (every file's sha256 in its ``files.json``), so that a rerun on any CPU trains from
the same starting model. A build, itself a check, goes to the git-ignored :data:`TINY_WARMSTART_DIR` (another
seed's to :func:`tiny_warmstart_dir`); each study root records the build it used (``warmstart_build.json``:
settings, sha256 of the weights).
"""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent

RESULTS = REPO_ROOT / "results"
MINI_ROOT = RESULTS / "mini"  # the committed CPU mini study
EXTENDED_ROOT = RESULTS / "extended"  # the committed extended CPU study
CONFIRM_ROOT = RESULTS / "confirm"  # the committed confirmatory study (its plan committed first, alone)
RERUN_ROOT = RESULTS / "rerun"  # git-ignored: what `make mini` reruns
LOCAL_RESULTS = RESULTS / "local"  # git-ignored: single runs (notebooks 01-03, training.launch) by default
PAPER_REPORTED = RESULTS / "paper_reported"  # the paper's numbers, transcribed
BENCH_RESULTS = RESULTS / "bench"
REAL_MODEL_RECORD = RESULTS / "real_model" / "smollm2_discount.json"  # saah_lab.studies.real_model's measurement
REAL_STUDY_ROOT = RESULTS / "real_study"  # SmolLM2-135M-Instruct trained: saah_lab.studies.real_study
#: the committed studies: only a promote replaces one, and no rerun ever writes into one
COMMITTED_STUDY_ROOTS = (MINI_ROOT, EXTENDED_ROOT, CONFIRM_ROOT, REAL_STUDY_ROOT)

PAPER_TABLES = REPO_ROOT / "paper" / "generated"
FIGURES = REPO_ROOT / "figures"
NOTEBOOKS = REPO_ROOT / "notebooks"

CACHE = REPO_ROOT / "cache"  # git-ignored build products
TINY_WARMSTART_DIR = CACHE / "tiny-warmstart"  # the warm start built with seed 0
SMOLLM2_WARMSTART_DIR = CACHE / "smollm2-warmstart"  # SmolLM2 after its format warm-up (real_study builds it)
SHIPPED_WARM_STARTS = RESULTS / "warm_starts"  # the committed studies' warm starts, one folder each


def _warm_start_folder_name(seed: int) -> str:
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"a warm-start seed is an integer >= 0, got {seed!r}")
    return "tiny-warmstart" if seed == 0 else f"tiny-warmstart-s{seed}"


def tiny_warmstart_dir(seed: int = 0) -> Path:
    """Where the tiny warm start of ``seed`` is built: seed 0 in :data:`TINY_WARMSTART_DIR`,
    any other in ``cache/tiny-warmstart-s<seed>``."""
    return CACHE / _warm_start_folder_name(seed)


def shipped_warm_start_dir(seed: int = 0) -> Path:
    """Where the committed copy of the tiny warm start of ``seed`` lies, if one ships (it may not exist)."""
    return SHIPPED_WARM_STARTS / _warm_start_folder_name(seed)


def in_repo(path: str | os.PathLike) -> Path:
    """``path`` as an absolute path: relative paths are taken relative to the repository root."""
    path = Path(path).expanduser()
    return path if path.is_absolute() else REPO_ROOT / path


def repo_relative(path: str | os.PathLike) -> str:
    """``path`` relative to the repository when it lies inside it (POSIX form), else absolute.

    What a run records must not depend on where the repository was cloned.
    """
    path = in_repo(path).resolve()
    try:
        return path.relative_to(REPO_ROOT.resolve()).as_posix()
    except ValueError:
        return str(path)
