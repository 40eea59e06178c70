"""What a ``model_name`` names, and where its files are (light: no torch).

A model is named by a hub id (``Qwen/Qwen2.5-1.5B-Instruct``), by a folder, or by the name of a tiny warm start,
the CPU model that :mod:`saah_lib.models.warmstart` builds on first use: :data:`TINY_WARMSTART` (built with seed
0) or ``tiny-warmstart-s<N>`` (built with seed N, an independent starting point; :func:`tiny_warm_start_name`).
A run records the name in its ``config.json``, so the name must mean the same in every clone: a folder inside
the repository is recorded relative to the repository root, any other folder absolutely.
"""

from __future__ import annotations

import re
from pathlib import Path

from huggingface_hub import constants as hub_constants
from huggingface_hub import try_to_load_from_cache

from saah_lib.paths import in_repo, repo_relative, shipped_warm_start_dir, tiny_warmstart_dir

TINY_WARMSTART = "tiny-warmstart"
# Other names of the warm start in run records: the folder it was built in.
_TINY_WARMSTART_FORMER_NAMES = ("results/mini/warmstart/model",)
_OTHER_WARM_START = re.compile(rf"{TINY_WARMSTART}-s([1-9][0-9]*)")
#: The tiny profile's model label of the seed-0 warm start; others add ``-w<N>`` (:func:`tiny_warm_start_label`).
TINY_LABEL = "tiny"


def tiny_warm_start_name(seed: int = 0) -> str:
    """The model name of the tiny warm start built with ``seed``: ``tiny-warmstart``, ``tiny-warmstart-s<N>``."""
    tiny_warmstart_dir(seed)  # checks the seed
    return TINY_WARMSTART if seed == 0 else f"{TINY_WARMSTART}-s{seed}"


def tiny_warm_start_seed(name: str) -> int | None:
    """The build seed of a tiny warm start's name (former names included), or None for any other model."""
    name = canonical_model_name(name)
    if name == TINY_WARMSTART:
        return 0
    match = _OTHER_WARM_START.fullmatch(name)
    return int(match.group(1)) if match else None


def tiny_warm_start_label(seed: int = 0) -> str:
    """The model label that tables and figures give runs from the warm start of ``seed``: runs from
    different warm starts are different starting models, so they are never averaged into one row."""
    tiny_warmstart_dir(seed)
    return TINY_LABEL if seed == 0 else f"{TINY_LABEL}-w{seed}"


def looks_like_path(name: str) -> bool:
    """A model name that names a folder rather than a hub id."""
    return name.startswith(("/", "./", "../", "~")) or in_repo(name).exists()


def canonical_model_name(name: str) -> str:
    """The name a run records: hub ids and :data:`TINY_WARMSTART` unchanged, folders portable.

    A folder inside the repository becomes repo-relative, another folder absolute;
    the warm start's former folder names (also as absolute paths) become :data:`TINY_WARMSTART`.
    """
    if name == TINY_WARMSTART or _OTHER_WARM_START.fullmatch(name):
        return name
    if any(name == former or name.endswith("/" + former) for former in _TINY_WARMSTART_FORMER_NAMES):
        return TINY_WARMSTART
    if not looks_like_path(name):
        return name
    if not in_repo(name).exists():
        return name  # kept as written ("./model"), so it still names a folder and its absence is reported
    return repo_relative(name)


def warm_start_location(seed: int) -> Path:
    """The tiny warm start of ``seed`` that runs load: its committed copy where one ships (every CPU then
    trains from the same bits), else the cached build (built on first use: ``loading.resolve_model``)."""
    shipped = shipped_warm_start_dir(seed)
    return shipped if shipped.is_dir() else tiny_warmstart_dir(seed)


def model_location(name: str) -> str:
    """Where to load ``name`` from: a folder (absolute) or a hub id as is."""
    seed = tiny_warm_start_seed(name)
    if seed is not None:
        return str(warm_start_location(seed))
    name = canonical_model_name(name)
    return str(in_repo(name)) if looks_like_path(name) else name


def model_folder_problem(name: str) -> str | None:
    """Why a local model folder cannot be loaded (missing, or no model in it); None for hub ids and the warm start."""
    name = canonical_model_name(name)
    if tiny_warm_start_seed(name) is not None or not looks_like_path(name):
        return None
    folder = Path(model_location(name))
    if not folder.is_dir():
        return f"model folder {name!r} does not exist"
    if not any((folder / f).is_file() for f in ("config.json", "adapter_config.json")):
        return f"folder {name!r} holds no model (no config.json)"
    return None


def offline_hub_problem(name: str) -> str | None:
    """Why a hub id cannot be loaded with the hub offline (``HF_HUB_OFFLINE``): no folder of that name
    in the repository and no copy in the local hub cache.  None for folders, the tiny warm starts (any
    seed: built on first use), a cached model, or when the hub may be reached."""
    name = canonical_model_name(name)
    if tiny_warm_start_seed(name) is not None or looks_like_path(name) or not hub_constants.HF_HUB_OFFLINE:
        return None
    try:
        cached = try_to_load_from_cache(name, "config.json")
    except ValueError as err:  # huggingface_hub's HFValidationError: not a valid hub id either
        return f"{name!r} is neither a folder (no {in_repo(name)}) nor a hub id ({err})"
    if isinstance(cached, str):
        return None
    return (f"{name!r} is not a folder (no {in_repo(name)}) and the hub is offline (HF_HUB_OFFLINE=1) "
            "with no cached copy of it; give the model's folder, or unset HF_HUB_OFFLINE to download it")
