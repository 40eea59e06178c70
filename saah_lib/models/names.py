"""What a ``model_name`` names, and where its files are (light: no torch).

A model is named by a hub id (``Qwen/Qwen2.5-1.5B-Instruct``), by a folder, or
by :data:`TINY_WARMSTART`, the CPU model that :mod:`saah_lib.models.warmstart`
builds on first use.  A run records the name in its ``config.json``, so the
name must mean the same in every clone: a folder inside the repository is
recorded relative to the repository root, any other folder absolutely.
"""

from __future__ import annotations

from pathlib import Path

from huggingface_hub import constants as hub_constants
from huggingface_hub import try_to_load_from_cache

from saah_lib.paths import TINY_WARMSTART_DIR, in_repo, repo_relative

TINY_WARMSTART = "tiny-warmstart"
# Earlier runs named the warm start by the folder it was built in.
_TINY_WARMSTART_FORMER_NAMES = ("results/mini/warmstart/model",)


def looks_like_path(name: str) -> bool:
    """A model name that names a folder rather than a hub id."""
    return name.startswith(("/", "./", "../", "~")) or in_repo(name).exists()


def canonical_model_name(name: str) -> str:
    """The name a run records: hub ids and :data:`TINY_WARMSTART` unchanged, folders portable.

    A folder inside the repository becomes repo-relative, another folder absolute;
    the warm start's former folder names (also as absolute paths) become :data:`TINY_WARMSTART`.
    """
    if name == TINY_WARMSTART:
        return name
    if any(name == former or name.endswith("/" + former) for former in _TINY_WARMSTART_FORMER_NAMES):
        return TINY_WARMSTART
    if not looks_like_path(name):
        return name
    if not in_repo(name).exists():
        return name  # kept as written ("./model"), so it still names a folder and its absence is reported
    return repo_relative(name)


def model_location(name: str) -> str:
    """Where to load ``name`` from: a folder (absolute) or a hub id as is."""
    name = canonical_model_name(name)
    if name == TINY_WARMSTART:
        return str(TINY_WARMSTART_DIR)
    return str(in_repo(name)) if looks_like_path(name) else name


def model_folder_problem(name: str) -> str | None:
    """Why a local model folder cannot be loaded (missing, or no model in it); None for hub ids and the warm start."""
    name = canonical_model_name(name)
    if name == TINY_WARMSTART or not looks_like_path(name):
        return None
    folder = Path(model_location(name))
    if not folder.is_dir():
        return f"model folder {name!r} does not exist"
    if not any((folder / f).is_file() for f in ("config.json", "adapter_config.json")):
        return f"folder {name!r} holds no model (no config.json)"
    return None


def offline_hub_problem(name: str) -> str | None:
    """Why a hub id cannot be loaded with the hub offline (``HF_HUB_OFFLINE``): no folder of that name
    in the repository and no copy in the local hub cache.  None for folders, the warm start, a cached
    model, or when the hub may be reached."""
    name = canonical_model_name(name)
    if name == TINY_WARMSTART or looks_like_path(name) or not hub_constants.HF_HUB_OFFLINE:
        return None
    try:
        cached = try_to_load_from_cache(name, "config.json")
    except ValueError as err:  # huggingface_hub's HFValidationError: not a valid hub id either
        return f"{name!r} is neither a folder (no {in_repo(name)}) nor a hub id ({err})"
    if isinstance(cached, str):
        return None
    return (f"{name!r} is not a folder (no {in_repo(name)}) and the hub is offline (HF_HUB_OFFLINE=1) "
            "with no cached copy of it; give the model's folder, or unset HF_HUB_OFFLINE to download it")
