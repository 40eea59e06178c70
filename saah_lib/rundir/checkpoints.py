"""Trainer checkpoints of a run folder: which one a run resumes from, and what to do with damaged ones.

A checkpoint is ``<run>/checkpoints/checkpoint-N/`` as the trainer writes it.
Resuming takes the newest *intact* one (:func:`checkpoint_problem`); newer
damaged ones are moved to ``checkpoints/damaged/``, never deleted.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from saah_lib.rundir.layout import DAMAGED_CHECKPOINTS

# Files a trainer checkpoint may hold that torch.load reads (transformers loads
# each with weights_only=True; the RNG state needs numpy's types allowed).
TORCH_STATE_FILES = ("optimizer.pt", "scheduler.pt", "scaler.pt", "rng_state.pth")


def checkpoint_problem(folder: Path, step: int | None = None) -> str | None:
    """What stops the trainer from resuming from ``folder``, or None when every file loads.

    Checked: ``trainer_state.json`` exists, parses and (given ``step``) records
    that step; every other JSON file parses (model config, adapter config,
    tokenizer files); there are model or adapter weights and every
    ``.safetensors`` file's header and data extent are intact; the optimizer,
    scheduler, scaler and RNG states load with ``torch.load(weights_only=True)``,
    as the trainer will load them.  This catches files torn by a crash during
    saving, truncated copies and edited JSON; it cannot catch bytes changed
    inside tensor data (safetensors has no checksums).
    """
    folder = Path(folder)
    state_path = folder / "trainer_state.json"
    if not state_path.is_file():
        return "no trainer_state.json (the save was interrupted)"
    for path in sorted(folder.glob("*.json")):
        try:
            record = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
            return f"{path.name} does not parse ({error})"
        if path == state_path and step is not None and (
                not isinstance(record, dict) or record.get("global_step") != step):
            return f"trainer_state.json records step {record.get('global_step') if isinstance(record, dict) else None}, not {step}"
    weights = sorted(folder.glob("*.safetensors"))
    if not weights and not (folder / "pytorch_model.bin").is_file() and not (folder / "adapter_model.bin").is_file():
        return "no model or adapter weights"
    from safetensors import safe_open

    for path in weights:
        try:
            with safe_open(str(path), framework="pt") as handle:
                handle.keys()
        except Exception as error:  # safetensors raises its own error types for torn files
            return f"{path.name} does not load ({type(error).__name__}: {error})"
    import torch
    from transformers.trainer_pt_utils import safe_globals

    for path in [folder / name for name in TORCH_STATE_FILES] + sorted(folder.glob("rng_state_*.pth")):
        if not path.is_file():
            continue
        try:
            with safe_globals():
                torch.load(path, map_location="cpu", weights_only=True)
        except Exception as error:  # torch raises several types for torn or foreign files
            return f"{path.name} does not load ({type(error).__name__}: {error})"
    return None


def checkpoints(checkpoints_dir: Path) -> dict[int, Path]:
    """Every ``checkpoint-N`` folder of ``checkpoints_dir``, by step, oldest first (intact or not)."""
    checkpoints_dir = Path(checkpoints_dir)
    if not checkpoints_dir.is_dir():
        return {}
    found = {}
    for p in checkpoints_dir.iterdir():
        m = re.fullmatch(r"checkpoint-(\d+)", p.name)
        if m and p.is_dir():
            found[int(m.group(1))] = p
    return dict(sorted(found.items()))


def resume_point(checkpoints_dir: Path) -> tuple[Path | None, dict[Path, str]]:
    """The newest checkpoint whose files all load, and the newer ones that do not.

    Checkpoints are tried newest first (see :func:`checkpoint_problem`); the
    first intact one is returned (None when there is none) together with
    ``{damaged folder: what is wrong}`` for every newer one.  Older
    checkpoints are not opened.
    """
    damaged = {}
    for step, path in reversed(checkpoints(checkpoints_dir).items()):
        problem = checkpoint_problem(path, step)
        if problem is None:
            return path, damaged
        damaged[path] = problem
    return None, damaged


def set_aside(checkpoint: Path) -> Path:
    """Move a damaged checkpoint to ``checkpoints/damaged/<name>`` and return its new path.

    Nothing is deleted: out of ``checkpoint-*`` the folder is neither
    overwritten when the resumed run saves that step again nor counted (and
    possibly removed, or counted instead of an intact one) by the trainer's
    checkpoint rotation (``save_total_limit``).
    """
    target_dir = checkpoint.parent / DAMAGED_CHECKPOINTS
    target_dir.mkdir(parents=True, exist_ok=True)
    target, n = target_dir / checkpoint.name, 1
    while target.exists():  # the same step damaged twice: keep both
        n += 1
        target = target_dir / f"{checkpoint.name}.{n}"
    os.replace(checkpoint, target)
    return target


def resume_checkpoint(run) -> Path | None:
    """The newest intact checkpoint of ``run`` (a :class:`~saah_lib.rundir.folder.RunDir`); newer damaged
    ones are set aside, never deleted.

    A damaged checkpoint (a file that does not load, see
    ``checkpoint_problem``) is moved to ``checkpoints/damaged/`` with a
    message naming it, and the run resumes from the previous intact one, as
    it would after a crash just before the damaged save.

    With no intact checkpoint left, what happens depends on the damage.  If
    every folder is an interrupted save (no ``trainer_state.json``, which the
    trainer writes last), the run starts over from step 0, as it always has
    after a crash during its first save.  If a finished save was damaged
    later, starting over would throw away the whole run's training, so it is
    an error naming the folders, and nothing is changed: they may be
    repairable, or the user moves them away to start over.
    """
    checkpoint, damaged = resume_point(run.checkpoints_dir)
    finished = [folder for folder in damaged if (folder / "trainer_state.json").is_file()]
    if checkpoint is None and finished:
        details = "; ".join(f"{folder}: {problem}" for folder, problem in damaged.items())
        raise RuntimeError(
            f"run {run.dir.name!r} cannot resume: no intact checkpoint ({details}). Nothing was changed. "
            f"Restore or repair these checkpoints, or move them out of {run.checkpoints_dir} "
            "to train the run again from step 0."
        )
    for folder, problem in damaged.items():
        moved = set_aside(folder)
        fallback = checkpoint.name if checkpoint else "the start (no intact checkpoint is left)"
        print(f"checkpoint {folder} is damaged: {problem}. It was moved to {moved} (nothing deleted) "
              f"and the run resumes from {fallback}.")
    return checkpoint
