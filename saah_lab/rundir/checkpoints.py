"""Trainer checkpoints of a run folder (``<run>/checkpoints/checkpoint-N/``): which one a run resumes from.

Resuming takes the newest *intact* one (:func:`checkpoint_problem`); newer damaged ones are moved to
``checkpoints/damaged/``, never deleted.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import re
import zipfile
from pathlib import Path
from typing import Callable, Mapping

from saah_lib.rundir.folder import RunFolderError
from saah_lib.rundir.layout import DAMAGED_CHECKPOINTS
from saah_lib.training.profiles import fields_with

TRAINER_STATE = "trainer_state.json"  # written last: a checkpoint without it is an interrupted save
#: What transformers' ``Trainer._save_checkpoint`` writes into every checkpoint of our runs (5.x, full
#: fine-tuning and LoRA alike; checked against a real run in tests/training/test_run.py), besides the RNG
#: state (one file per process) and the weights (:data:`WEIGHTS`).
ALWAYS_WRITTEN = (TRAINER_STATE, "optimizer.pt", "scheduler.pt", "training_args.bin", "tokenizer_config.json")
#: Model weights, one set of which every checkpoint holds: (config file, weight files it may come with).
WEIGHTS = {
    "full model": ("config.json", ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")),
    "LoRA adapter": ("adapter_config.json", ("adapter_model.safetensors", "adapter_model.bin")),
}
# Files torch.load reads on resume (weights_only=True; scaler.pt exists only with fp16 mixed precision).
TORCH_STATE_FILES = ("optimizer.pt", "scheduler.pt", "scaler.pt", "pytorch_model.bin", "adapter_model.bin")


def missing_files(folder: Path, world_size: int = 1) -> list[str]:
    """The files of a complete save that ``folder`` lacks (weights: one complete set of either kind)."""
    rng = ["rng_state.pth"] if world_size <= 1 else [f"rng_state_{i}.pth" for i in range(world_size)]
    missing = [name for name in (*ALWAYS_WRITTEN, *rng) if not (folder / name).is_file()]
    weight_sets = []
    for kind, (config, weights) in WEIGHTS.items():
        present = [w for w in weights if (folder / w).is_file()]
        if (folder / config).is_file() and present:
            index = folder / "model.safetensors.index.json"
            if index.name not in present:
                return missing
            try:  # a sharded model: every shard its index names
                shards = set(json.loads(index.read_text())["weight_map"].values())
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
                return [*missing, f"{index.name} does not list its shards ({error})"]
            return missing + sorted(shard for shard in shards if not (folder / shard).is_file())
        weight_sets.append(f"{config} with {' or '.join(weights)} ({kind})")
    return missing + ["model or adapter weights: " + "; or ".join(weight_sets)]


def unreadable_file(folder: Path) -> str | None:
    """The first file of ``folder`` that does not load as the trainer will load it, and why; None when all do."""
    for path in sorted(folder.glob("*.json")):
        try:
            json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
            return f"{path.name} does not parse ({error})"
    from safetensors import safe_open

    for path in sorted(folder.glob("*.safetensors")):
        try:
            with safe_open(str(path), framework="pt") as handle:
                handle.keys()
        except Exception as error:  # safetensors raises its own error types for torn files
            return f"{path.name} does not load ({type(error).__name__}: {error})"
    # training_args.bin is a pickle that transformers never loads on resume and unpickling would run code:
    # its archive's CRCs are checked instead
    args = folder / "training_args.bin"
    try:
        with zipfile.ZipFile(args) as archive:
            whole = archive.testzip() is None
    except (OSError, zipfile.BadZipFile, EOFError):
        whole = not args.is_file()
    if not whole:
        return f"{args.name} does not load (not a whole torch archive)"
    import torch
    from transformers.trainer_pt_utils import safe_globals

    for path in [folder / name for name in TORCH_STATE_FILES] + sorted(folder.glob("rng_state*.pth")):
        if not path.is_file():
            continue
        try:
            with safe_globals():
                torch.load(path, map_location="cpu", weights_only=True)
        except Exception as error:  # torch raises several types for torn or foreign files
            return f"{path.name} does not load ({type(error).__name__}: {error})"
    return None


def checkpoint_problem(folder: Path, step: int | None = None, world_size: int = 1) -> str | None:
    """What stops the trainer from resuming exactly from ``folder``, or None when it is complete and readable.

    Complete: every file of :data:`ALWAYS_WRITTEN` (its trainer state recording ``step``), the RNG state of each
    of ``world_size`` processes, one set of :data:`WEIGHTS`. Without an optimizer, scheduler or RNG state
    transformers would go on, but the run would no longer retrace the uninterrupted one. Readable: as
    :func:`unreadable_file`; bytes changed inside tensor data are not caught (safetensors has no checksums).
    """
    folder = Path(folder)
    state_path = folder / TRAINER_STATE
    if not state_path.is_file():
        return f"no {TRAINER_STATE} (the save was interrupted)"
    missing = missing_files(folder, world_size)
    if missing:
        return f"incomplete: no {', '.join(missing)}"
    problem = unreadable_file(folder)
    if problem is not None:
        return problem
    record = json.loads(state_path.read_text())
    recorded = record.get("global_step") if isinstance(record, dict) else None
    if step is not None and recorded != step:
        return f"{TRAINER_STATE} records step {recorded}, not {step}"
    return None


def checkpoints(checkpoints_dir: Path) -> dict[int, Path]:
    """Every ``checkpoint-N`` folder of ``checkpoints_dir``, by step, oldest first (intact or not)."""
    found = {int(m[1]): p for p in Path(checkpoints_dir).glob("checkpoint-*")
             if (m := re.fullmatch(r"checkpoint-(\d+)", p.name)) and p.is_dir()}
    return dict(sorted(found.items()))


def resume_point(checkpoints_dir: Path, world_size: int = 1) -> tuple[Path | None, dict[Path, str]]:
    """The newest intact checkpoint (None if none), and ``{damaged folder: what is wrong}`` for every newer one.
    Older checkpoints are not opened."""
    damaged = {}
    for step, path in reversed(checkpoints(checkpoints_dir).items()):
        problem = checkpoint_problem(path, step, world_size)
        if problem is None:
            return path, damaged
        damaged[path] = problem
    return None, damaged


def set_aside(checkpoint: Path) -> Path:
    """Move a damaged checkpoint to ``checkpoints/damaged/<name>`` and return its new path: out of
    ``checkpoint-*``, it is neither overwritten when the resumed run saves that step again nor counted (or
    removed) by the trainer's checkpoint rotation."""
    target_dir = checkpoint.parent / DAMAGED_CHECKPOINTS
    target_dir.mkdir(parents=True, exist_ok=True)
    target, n = target_dir / checkpoint.name, 1
    while target.exists():  # the same step damaged twice: keep both
        n += 1
        target = target_dir / f"{checkpoint.name}.{n}"
    os.replace(checkpoint, target)
    return target


#: The trainer fields that shape what a run computes: a checkpoint saved under other values is another run's.
#: The per-process batch fields are left out: they change with the number of processes.
IDENTITY_FIELDS = (*fields_with("checkpoint"), "loss_type")
#: A full model's shape in its ``config.json``: a checkpoint of another model differs in one of them.
MODEL_SHAPE_FIELDS = ("model_type", "vocab_size", "hidden_size", "num_hidden_layers", "intermediate_size",
                      "num_attention_heads", "num_key_value_heads")
#: A LoRA adapter's settings in its ``adapter_config.json``.
ADAPTER_FIELDS = ("r", "lora_alpha", "target_modules")


class _Recorded:
    """Whatever object a pickle names, kept as its arguments and state: nothing is imported or run."""

    args: tuple = ()  # built by __new__ alone (pickle's NEWOBJ), an object has no arguments

    def __new__(cls, *args, **kwargs):
        return object.__new__(cls)

    def __init__(self, *args, **kwargs):
        self.args = args

    def __setstate__(self, state):
        self.state = state


class _RecordingUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        return type(name, (_Recorded,), {})

    def persistent_load(self, pid):
        return None  # a tensor's storage: not needed to read the settings


def saved_training_args(checkpoint: Path) -> dict:
    """The fields of ``checkpoint``'s ``training_args.bin`` (a pickled config in a torch archive), as plain values.

    Every class the pickle names becomes a record of its arguments, so no code of the file runs (an enum such
    as ``SchedulerType('cosine')`` reads as ``'cosine'``). A ValueError names the file when it holds no fields.
    """
    path = Path(checkpoint) / "training_args.bin"
    try:
        with zipfile.ZipFile(path) as archive:
            pickled = next(n for n in archive.namelist() if n.endswith("/data.pkl"))
            args = _RecordingUnpickler(io.BytesIO(archive.read(pickled))).load()
    # a damaged or foreign pickle fails in many ways (opcodes on the wrong objects among them)
    except (OSError, StopIteration, zipfile.BadZipFile, pickle.UnpicklingError, EOFError, ValueError, AttributeError,
            TypeError, IndexError, KeyError) as error:
        raise ValueError(f"{path}: cannot read the run's training arguments ({type(error).__name__}: "
                         f"{error})") from None
    state = getattr(args, "state", None)
    if not isinstance(state, dict):
        raise ValueError(f"{path}: holds no training arguments")
    return {name: (v.args[0] if len(v.args) == 1 else v.args) if isinstance(v, _Recorded) else v
            for name, v in state.items()}


def saved_settings(checkpoint: Path, file: str) -> dict | None:
    """The settings one file of ``checkpoint`` records, as plain values (lists of names sorted:
    ``target_modules`` is saved in any order); None without that file (a LoRA checkpoint has no model config)."""
    path = Path(checkpoint) / file
    if not path.is_file():
        return None
    if file == "training_args.bin":
        return saved_training_args(checkpoint)
    record = json.loads(path.read_text())  # checkpoint_problem parsed it already
    if not isinstance(record, dict):
        raise ValueError(f"{path}: not a JSON object")
    return {k: sorted(v) if isinstance(v, list) and all(isinstance(x, str) for x in v) else v
            for k, v in record.items()}


def check_checkpoint_identity(run, checkpoint: Path, expected: Mapping[str, Mapping]) -> None:
    """Raise naming the folder and the fields when ``checkpoint`` records any field of ``expected`` (``{file:
    {field: value}}``) otherwise: it is another run's. A file or field it does not hold is not compared (a
    checkpoint saved before the field existed says nothing about it)."""
    differences = {}
    try:
        for file, fields in expected.items():
            saved = saved_settings(checkpoint, file)
            for name, value in fields.items():
                if saved is not None and name in saved and saved[name] != value:  # 1 == 1.0 too
                    differences[f"{file}: {name}"] = (saved[name], value)
    except (OSError, ValueError) as error:
        raise RunFolderError(f"run {run.dir.name!r} cannot resume from {checkpoint}: {error}. Nothing was "
                             "changed.") from None
    if differences:
        details = ", ".join(f"{name}: checkpoint {saved!r}, run {wanted!r}"
                            for name, (saved, wanted) in differences.items())
        raise RunFolderError(
            f"run {run.dir.name!r} cannot resume: its checkpoint {checkpoint} was saved by a training with other "
            f"settings ({details}), so it is another run's. Nothing was changed. Move that checkpoint out of "
            f"{run.checkpoints_dir} (to resume from an older one, or train again from step 0), or launch the run "
            "it belongs to.")


def check_logs_reach(run, checkpoint: Path) -> None:
    """Raise :class:`RunFolderError` when ``run``'s training log ends before ``checkpoint``'s step.

    The trainer logs a step before it saves it, so such a log was restored or edited apart from the
    checkpoints (which git does not keep): resuming would leave a gap, and nothing cuts a checkpoint back.
    """
    step = int(checkpoint.name.split("-")[1])
    logged = [r["step"] for r in run.train_log() if isinstance(r, dict) and isinstance(r.get("step"), int)]
    last = max(logged, default=0)
    if step > last:
        ends = f"ends at step {last}" if logged else "has no step"
        raise RunFolderError(
            f"run {run.dir.name!r} cannot resume: its checkpoint {checkpoint} is at step {step}, but its training "
            f"log {run.train_log_path} {ends}, so the log is older than the checkpoint. Nothing was changed. "
            f"Restore the logs that go with the checkpoint, or move the checkpoints after step {last} out of "
            f"{run.checkpoints_dir} to resume from an older one (or all of them to train again from step 0).")


def resume_checkpoint(run, world_size: int = 1, check: Callable[[Path], None] | None = None) -> Path | None:
    """The newest intact checkpoint of ``run`` (a :class:`~saah_lib.rundir.folder.RunDir`); newer damaged
    ones are set aside with a message, as after a crash just before the damaged save.

    Its training log must reach it (:func:`check_logs_reach`; the caller cuts later lines back). With no
    intact checkpoint left: if every folder is an interrupted save (no trainer state, written last), the run
    starts over from step 0; if a finished save was damaged later, starting over would throw away the whole
    run, so it is an error naming the folders. ``check`` (e.g. :func:`check_checkpoint_identity`) is called
    with the checkpoint before anything is moved: what it raises leaves the folder as it was.
    """
    checkpoint, damaged = resume_point(run.checkpoints_dir, world_size)
    if checkpoint is not None:
        check_logs_reach(run, checkpoint)
        if check is not None:
            check(checkpoint)
    finished = [folder for folder in damaged if (folder / TRAINER_STATE).is_file()]
    if checkpoint is None and finished:
        details = "; ".join(f"{folder}: {problem}" for folder, problem in damaged.items())
        raise RunFolderError(
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
