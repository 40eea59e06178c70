"""The files a run writes under ``<results>/runs/<run_id>/`` (docs/results_layout.md).

Two write disciplines keep results readable at every instant:
whole files (``config.json``, rewritten logs) are written to a temporary file
and renamed over the target; logs grow by appending one complete line per
``write`` call; a reader of a log still being written drops a trailing line that
is not valid JSON, and a reader of a finished run reports it (``read_jsonl(finished=True)``).
On resume, lines logged after the checkpoint being resumed are dropped, so a
step is neither lost nor duplicated.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import subprocess
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Any, Iterable

#: The keys of one ``train_log.jsonl`` line: the step, the step's wall time,
#: and each key below taken from the logs TRL hands to callbacks (ours -> TRL's).
TRAIN_LOG_FROM_TRL = {
    "reward_mean": "reward",
    "reward_std": "reward_std",
    "reward_correct": "rewards/reward_correct/mean",
    "reward_format": "rewards/reward_format/mean",
    "reward_present": "rewards/reward_present/mean",
    "reward_steps": "rewards/reward_steps/mean",
    "kl": "kl",
    "entropy_norm": "saah/entropy_norm",
    "weight_mean": "saah/weight_mean",
    "weight_neg_mean": "saah/weight_neg_mean",
    "neg_frac": "saah/neg_frac",
    "completion_length": "completions/mean_length",
    "loss": "loss",
    "learning_rate": "learning_rate",
    "grad_norm": "grad_norm",
    "entropy_nats": "entropy",
    "clip_frac": "clip_ratio/region_mean",
    "frac_groups_below_threshold": "saah/frac_groups_below_threshold",
    "frac_truncated": "completions/clipped_ratio",
}
TRAIN_LOG_KEYS = ("step", *TRAIN_LOG_FROM_TRL, "step_time")
#: The keys of one ``eval.jsonl`` line.
EVAL_KEYS = ("step", "pass_at_1", "ci95", "n", "n_correct")

TRACKED_PACKAGES = ("saah_lib", "torch", "transformers", "trl", "peft", "accelerate", "datasets", "tokenizers")


def _clean(value: Any) -> Any:
    """JSON-safe copy: NaN/inf become null, tuples and paths plain values."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "item") and callable(value.item):  # numpy / torch scalars
        return _clean(value.item())
    return value


def dumps(record: Any) -> str:
    return json.dumps(_clean(record), allow_nan=False)


def atomic_write_text(path: Path, text: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(_clean(obj), indent=2, allow_nan=False) + "\n")


def write_jsonl(path: Path, records: Iterable[dict]) -> None:
    atomic_write_text(path, "".join(dumps(r) + "\n" for r in records))


def append_jsonl(path: Path, record: dict) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    line = dumps(record) + "\n"
    with open(path, "a") as f:
        f.write(line)  # one write of one whole line
        f.flush()
        os.fsync(f.fileno())


def scan_jsonl(path: Path) -> tuple[list[tuple[int, Any]], list[tuple[int, str]]]:
    """Every non-blank line of a JSON-lines file, parsed: ``([(line, record)], [(line, problem)])``.

    Nothing is dropped silently: a line that is not valid JSON is reported
    with its 1-based line number.  A missing file has no lines.
    """
    path = Path(path)
    if not path.is_file():
        return [], []
    records, problems = [], []
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            records.append((i, json.loads(line)))
        except json.JSONDecodeError as exc:
            problems.append((i, f"not valid JSON ({exc.msg})"))
    return records, problems


def read_jsonl(path: Path, strict: bool = True, finished: bool = False) -> list:
    """All records of a JSON-lines file.

    A log that may still be appended to (``finished=False``) may end in a torn
    line (a writer killed mid-write); that last line is ignored.  In a
    finished file (``finished=True``) it is an error like any other.  A bad
    line raises a ValueError naming the file and line with ``strict``;
    otherwise it is skipped with a warning.
    """
    path = Path(path)
    records, problems = scan_jsonl(path)
    last = records[-1][0] if records else 0
    for i, problem in problems:
        if not finished and i > last and i == problems[-1][0]:
            continue  # the torn tail of a log still being written
        if strict:
            raise ValueError(f"{path}: line {i}: {problem}")
        logging.getLogger(__name__).warning("%s: line %d: skipping it: %s", path, i, problem)
    return [r for _, r in records]


def trained_and_evaluated(logged_steps: Iterable[int], evaluated_steps: Iterable[int], steps: int) -> bool:
    """The one definition of a complete run: trained to ``steps`` and evaluated at step ``steps``."""
    logged = list(logged_steps)
    return bool(logged) and max(logged) >= steps and steps in set(evaluated_steps)


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


def provenance(repo: Path | None = None) -> dict:
    return {"git_commit": git_commit(repo), "versions": package_versions()}


# Sub-folder of checkpoints/ where damaged checkpoints are set aside on resume.
DAMAGED_CHECKPOINTS = "damaged"
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


class RunLog:
    """Reads and writes one run folder."""

    # Fields that may differ when a run is resumed (they don't change what is computed).
    # The generation backend changes speed, not what is sampled (tests/test_rollout.py), so a
    # run may resume under another one; runs from before those fields existed resume too.
    RESUMABLE_DIFFERENCES = {"results_dir", "eval_batch_size", "generation_backend", "vllm_mode",
                             "vllm_server_base_url", "vllm_gpu_memory_utilization"}

    def __init__(self, run_dir: Path):
        self.dir = Path(run_dir)
        self.config_path = self.dir / "config.json"
        self.train_log_path = self.dir / "train_log.jsonl"
        self.eval_path = self.dir / "eval.jsonl"
        self.samples_dir = self.dir / "eval_samples"
        self.checkpoints_dir = self.dir / "checkpoints"
        self.token_entropy_path = self.dir / "token_entropies.jsonl"

    # ------------------------------------------------------------------ config
    def read_config(self) -> dict | None:
        return json.loads(self.config_path.read_text()) if self.config_path.exists() else None

    def write_config(self, config: dict, extra: dict) -> None:
        """Write config.json; refuse to reuse a run id that was run with other settings."""
        existing = self.read_config()
        if existing is not None:
            changed = sorted(
                k for k, v in _clean(config).items()
                if k not in self.RESUMABLE_DIFFERENCES and existing.get(k) != v
            )
            if changed:
                details = ", ".join(f"{k}: {existing.get(k)!r} -> {_clean(config)[k]!r}" for k in changed)
                raise ValueError(
                    f"run {self.dir.name!r} already exists with different settings ({details}); "
                    "choose another run_id or delete the folder"
                )
        atomic_write_json(self.config_path, {**config, **extra})

    # ------------------------------------------------------------------ logs
    def log_step(self, record: dict) -> None:
        append_jsonl(self.train_log_path, record)

    def log_eval(self, record: dict, samples: list[dict]) -> None:
        # samples first: an eval line only ever points at a complete samples file
        write_jsonl(self.samples_path(record["step"]), samples)
        append_jsonl(self.eval_path, record)

    def samples_path(self, step: int) -> Path:
        return self.samples_dir / f"step_{step:04d}.jsonl"

    def sample_files(self) -> dict[int, Path]:
        """The per-problem evaluation files on disk, by step, in step order."""
        if not self.samples_dir.is_dir():
            return {}
        found = {}
        for p in self.samples_dir.glob("step_*.jsonl"):
            m = re.fullmatch(r"step_(\d+)\.jsonl", p.name)
            if m:
                found[int(m.group(1))] = p
        return dict(sorted(found.items()))

    def log_token_entropies(self, records: list[dict]) -> None:
        for r in records:
            append_jsonl(self.token_entropy_path, r)

    def train_log(self) -> list[dict]:
        return read_jsonl(self.train_log_path)

    def evals(self) -> list[dict]:
        return read_jsonl(self.eval_path)

    def evaluated_steps(self) -> set[int]:
        return {r["step"] for r in self.evals()}

    # ------------------------------------------------------------------ resume
    def checkpoints(self) -> dict[int, Path]:
        """Every ``checkpoints/checkpoint-N`` folder, by step, oldest first (intact or not)."""
        if not self.checkpoints_dir.is_dir():
            return {}
        found = {}
        for p in self.checkpoints_dir.iterdir():
            m = re.fullmatch(r"checkpoint-(\d+)", p.name)
            if m and p.is_dir():
                found[int(m.group(1))] = p
        return dict(sorted(found.items()))

    def resume_point(self) -> tuple[Path | None, dict[Path, str]]:
        """The newest checkpoint whose files all load, and the newer ones that do not.

        Checkpoints are tried newest first (see ``checkpoint_problem``); the
        first intact one is returned (None when there is none) together with
        ``{damaged folder: what is wrong}`` for every newer one.  Older
        checkpoints are not opened.
        """
        damaged = {}
        for step, path in reversed(self.checkpoints().items()):
            problem = checkpoint_problem(path, step)
            if problem is None:
                return path, damaged
            damaged[path] = problem
        return None, damaged

    def last_checkpoint(self) -> Path | None:
        """The newest intact trainer checkpoint (see ``resume_point``), or None."""
        return self.resume_point()[0]

    def set_aside(self, checkpoint: Path) -> Path:
        """Move a damaged checkpoint to ``checkpoints/damaged/<name>`` and return its new path.

        Nothing is deleted: out of ``checkpoint-*`` the folder is neither
        overwritten when the resumed run saves that step again nor counted (and
        possibly removed, or counted instead of an intact one) by the trainer's
        checkpoint rotation (``save_total_limit``).
        """
        target_dir = self.checkpoints_dir / DAMAGED_CHECKPOINTS
        target_dir.mkdir(parents=True, exist_ok=True)
        target, n = target_dir / checkpoint.name, 1
        while target.exists():  # the same step damaged twice: keep both
            n += 1
            target = target_dir / f"{checkpoint.name}.{n}"
        os.replace(checkpoint, target)
        return target

    def truncate_after(self, step: int) -> None:
        """Drop every record logged after ``step`` (the step the run resumes from)."""
        for path in (self.train_log_path, self.eval_path, self.token_entropy_path):
            if path.exists():
                write_jsonl(path, [r for r in read_jsonl(path) if r["step"] <= step])
        for sample_step, p in self.sample_files().items():
            if sample_step > step:
                p.unlink()

    def is_complete(self, steps: int) -> bool:
        return trained_and_evaluated((r["step"] for r in self.train_log()), self.evaluated_steps(), steps)
