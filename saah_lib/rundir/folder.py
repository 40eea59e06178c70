"""One run (or baseline) folder as the trainer writes it: :class:`RunDir`.

``config.json`` is replaced atomically, logs grow one complete line at a time (:mod:`saah_lib.jsonio`), an
evaluation's per-problem file is complete before its line points at it, and on resume the lines logged after
the checkpoint are dropped (:meth:`RunDir.truncate_after`), so a step is neither lost nor duplicated.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterable

from saah_lib.jsonio import append_jsonl, atomic_write_json, json_safe, read_json, read_jsonl, write_jsonl
from saah_lib.rundir import layout


def trained_and_evaluated(logged_steps: Iterable[int], evaluated_steps: Iterable[int], steps: int) -> bool:
    """The one definition of a complete run: trained to ``steps`` and evaluated at step ``steps``."""
    logged = list(logged_steps)
    return bool(logged) and max(logged) >= steps and steps in set(evaluated_steps)


class RunFolderError(ValueError):
    """A run folder that holds another run, or records without ``config.json``; the message names the folder and
    what differs, nothing was changed, and commands print it without a traceback."""


def changes_text(changed: dict[str, tuple]) -> str:
    """``learning_rate: 0.001 -> 0.0005, n_train: 800 -> 32`` (recorded -> given)."""
    return ", ".join(f"{k}: {recorded!r} -> {given!r}" for k, (recorded, given) in changed.items())


class RunDir:
    """Reads and writes one run folder (``<root>/runs/<run_id>/``) or baseline folder."""

    # Fields a resume may change: they change speed (and, compiled, which tokens a seed draws), not the
    # distribution sampled from (tests/models/test_rollout.py) nor what is computed.
    RESUMABLE_DIFFERENCES = {"results_dir", "eval_batch_size", "generation_backend", "vllm_mode",
                             "vllm_server_base_url", "vllm_gpu_memory_utilization"}

    def __init__(self, run_dir: Path):
        self.dir = Path(run_dir)
        self.config_path = self.dir / layout.CONFIG_FILE
        self.train_log_path = self.dir / layout.TRAIN_LOG_FILE
        self.eval_path = self.dir / layout.EVAL_FILE
        self.samples_dir = self.dir / layout.SAMPLES_DIR
        self.checkpoints_dir = self.dir / layout.CHECKPOINTS_DIR
        self.token_entropy_path = self.dir / layout.TOKEN_ENTROPIES_FILE
        self.compile_health_path = self.dir / layout.COMPILE_HEALTH_FILE

    # ------------------------------------------------------------------ config
    def read_config(self) -> dict | None:
        return read_json(self.config_path)

    def write_config(self, config: dict, extra: dict) -> None:
        """Write config.json; refuse to reuse a run id that was run with other settings."""
        self.check_settings(config)
        atomic_write_json(self.config_path, {**config, **extra})

    def _changes(self, config: dict, resumable: bool) -> dict[str, tuple]:
        existing = self.read_config()
        if existing is None:
            return {}
        return {k: (existing.get(k), v) for k, v in sorted(json_safe(config).items()) if existing.get(k) != v
                and (k in self.RESUMABLE_DIFFERENCES) == resumable and (k in existing or not resumable)}

    def setting_changes(self, config: dict) -> dict[str, tuple]:
        """``{field: (recorded, given)}`` for each setting a resume may not change that config.json records
        otherwise; {} when there is no config.json."""
        return self._changes(config, resumable=False)

    def resumed_changes(self, config: dict) -> dict[str, tuple]:
        """The same for the settings a resume may change (one a run from before it existed lacks is no change)."""
        return self._changes(config, resumable=True)

    def check_settings(self, config: dict) -> None:
        """Raise if config.json records other settings than ``config`` (beyond those a resume may change)."""
        changed = self.setting_changes(config)
        if changed:
            raise RunFolderError(
                f"run {self.dir.name!r} already exists with different settings ({changes_text(changed)}) in "
                f"{self.dir}; nothing was changed; choose another run_id or delete the folder"
            )

    def check_identified(self) -> None:
        """Raise when the folder holds logs or checkpoints but no ``config.json``: nothing says whose they are,
        so neither resuming them nor writing a new ``config.json`` over them can be right."""
        if self.config_path.exists():
            return
        found = [p for p in (self.train_log_path, self.eval_path, self.token_entropy_path) if p.exists()]
        found += sorted(self.checkpoints_dir.glob("checkpoint-*")) + sorted(self.samples_dir.glob("step_*.jsonl"))[:1]
        if found:
            raise RunFolderError(
                f"run folder {self.dir} holds {', '.join(p.name for p in found)} but no {self.config_path.name}, "
                "so nothing records the settings they were trained with; nothing was changed. Restore its "
                f"{self.config_path.name}, or move the folder away to train the run again.")

    # ------------------------------------------------------------------ logs
    def log_step(self, record: dict) -> None:
        append_jsonl(self.train_log_path, record)

    def log_eval(self, record: dict, samples: list[dict]) -> None:
        # samples first: an eval line only ever points at a complete samples file
        write_jsonl(self.samples_path(record["step"]), samples)
        append_jsonl(self.eval_path, record)

    def samples_path(self, step: int) -> Path:
        return self.samples_dir / layout.samples_file(step)

    def sample_files(self) -> dict[int, Path]:
        """The per-problem evaluation files on disk, by step, in step order; a file named for a step otherwise
        than :func:`~saah_lib.rundir.layout.samples_file` (``step_60.jsonl``) is a ValueError naming it and the
        step's file, so that no reader picks one of two files for a step."""
        found, aliases = {}, []
        for p in sorted(self.samples_dir.glob("step_*.jsonl")):
            m = re.fullmatch(r"step_(\d+)\.jsonl", p.name)
            if m and p == self.samples_path(int(m[1])):
                found[int(m[1])] = p
            elif m:
                aliases.append((int(m[1]), p))
        if aliases:
            raise ValueError("; ".join(
                f"{p}: another name for the samples of step {step}, whose file is {self.samples_path(step)}"
                f"{' (also present)' if step in found else ''}; keep one file per step, so named"
                for step, p in aliases))
        return dict(sorted(found.items()))

    def log_token_entropies(self, records: list[dict]) -> None:
        for r in records:
            append_jsonl(self.token_entropy_path, r)

    def write_compile_health(self, record: dict) -> None:
        """Replace this training process's record in compile_health.json, keeping those of processes that
        started before ``record["from_step"]`` (a later one's steps are being redone)."""
        existing = read_json(self.compile_health_path) or {"processes": []}
        earlier = [p for p in existing["processes"] if p["from_step"] < record["from_step"]]
        atomic_write_json(self.compile_health_path, {"processes": [*earlier, record]})

    def train_log(self) -> list[dict]:
        return read_jsonl(self.train_log_path)

    def evals(self) -> list[dict]:
        return read_jsonl(self.eval_path)

    def evaluated_steps(self) -> set[int]:
        return {r["step"] for r in self.evals()}

    # ------------------------------------------------------------------ resume
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
