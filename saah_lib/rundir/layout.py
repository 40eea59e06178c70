"""The layout of a results root: folder and file names, and the keys of each log (docs/results_layout.md).

Every other module asks here where a run's files are; none spells a file name itself::

    <root>/runs/<run_id>/       config.json, train_log.jsonl, eval.jsonl, eval_samples/step_XXXX.jsonl,
                                token_entropies.jsonl, compile_health.json, checkpoints/checkpoint-N/
    <root>/baselines/<name>/    config.json, eval.jsonl, eval_samples/step_0000.jsonl
    <root>/MANIFEST.json, .study.lock, and a study's records (below)

What is *not* a result, for every reader and the manifest alike: :func:`is_ignored`.
"""

from __future__ import annotations

import os
from pathlib import Path, PurePath

RUNS = "runs"
BASELINES = "baselines"
KINDS = (RUNS, BASELINES)

CONFIG_FILE = "config.json"
TRAIN_LOG_FILE = "train_log.jsonl"
EVAL_FILE = "eval.jsonl"
SAMPLES_DIR = "eval_samples"
TOKEN_ENTROPIES_FILE = "token_entropies.jsonl"
COMPILE_HEALTH_FILE = "compile_health.json"  # the compiled backend's graphs, recompiles, syncs, fallback
CHECKPOINTS_DIR = "checkpoints"
DAMAGED_CHECKPOINTS = "damaged"  # checkpoints/damaged/: checkpoints set aside on resume
MANIFEST_FILE = "MANIFEST.json"
RUN_LOCK_FILE = ".run.lock"  # in a run or baseline folder: held by the one process writing it
STUDY_LOCK_FILE = ".study.lock"  # in a results root: held by the one study process writing it
PYCACHE = "__pycache__"
#: Names a run id may not take: ``__pycache__`` is skipped by every reader, and ``checkpoints``
#: folders are git-ignored (``results/**/checkpoints/``), so such a run would never be committed.
RESERVED_NAMES = (PYCACHE, CHECKPOINTS_DIR)
# Files of a study root beside runs/ and baselines/
WARMSTART_RECORD_FILE = "warmstart_build.json"  # the warm start's build record and weight hashes
ANSWER_KINDS_FILE = "answer_kinds.json"  # answers by kind at the first and last evaluation of each run
TIMINGS_FILE = "timings.json"  # wall time and peak memory of each stage
EXTENDED_TIMINGS_FILE = "extended_timings.json"  # the same for the extended study
TOPK_ERROR_FILE = "topk_entropy_error.json"  # the top-K entropy measurement
MATCHED_ALPHA_FILE = "paper_matched_alpha.json"  # the paper-matched alpha and the measurement behind it
ALPHA_RANGE_FILE = "alpha_range.json"  # the alphas matching the paper's other logged weights, and the drift in training
STUDY_PLAN_FILE = "study_plan.json"  # a study's plan: its primary comparison, pairs, warm starts and runs
WARMSTART_RECORDS_FILE = "warmstart_builds.json"  # build records of every warm start of a study, by name

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


def run_dir(root: str | os.PathLike, run_id: str) -> Path:
    return Path(root) / RUNS / run_id


def baseline_dir(root: str | os.PathLike, name: str) -> Path:
    return Path(root) / BASELINES / name


def samples_file(step: int) -> str:
    """The name of the per-problem file of the evaluation at ``step``."""
    return f"step_{step:04d}.jsonl"


def is_ignored(relative: str | os.PathLike) -> bool:
    """True for a path (relative to a results root) that holds no result, the one rule of the reader and the
    manifest alike: the manifest, any hidden part (locks, atomic writes' temporary files, notebook checkpoints),
    any ``__pycache__``, and ``checkpoints/`` directly in a run or baseline folder (git-ignored trainer state;
    a run copied to ``runs/checkpoints/`` is a run for both)."""
    parts = PurePath(relative).parts
    if parts == (MANIFEST_FILE,):
        return True
    if any(p.startswith(".") or p == PYCACHE for p in parts):
        return True
    return len(parts) >= 3 and parts[0] in KINDS and parts[2] == CHECKPOINTS_DIR


def folders(root: str | os.PathLike, kind: str = RUNS) -> list[Path]:
    """The run (or baseline) folders under ``root``, sorted by name (none that :func:`is_ignored`)."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    path = Path(root) / kind
    if not path.is_dir():
        return []
    return sorted(p for p in path.iterdir() if p.is_dir() and not is_ignored(Path(kind) / p.name))


def symlinks(root: str | os.PathLike, under: str | os.PathLike = "") -> list[Path]:
    """Every symbolic link under ``root / under`` (that folder included) that :func:`is_ignored` does not skip,
    without following any: the manifest and the reader refuse links alike (one would read a linked folder that
    the other does not list)."""
    root = Path(root)
    start = root / under
    found = [start] if start != root and start.is_symlink() else []
    if start.is_symlink():
        return found
    for folder, dirnames, filenames in os.walk(start, followlinks=False):
        here = Path(folder)
        entries = [here / name for name in (*dirnames, *filenames)]
        found += [p for p in entries if p.is_symlink() and not is_ignored(p.relative_to(root))]
        # descend into real folders that hold results (os.walk never enters linked ones)
        dirnames[:] = [name for name in dirnames if not is_ignored((here / name).relative_to(root))]
    return sorted(found)


def link_problem(link: Path) -> str:
    """The message for a symbolic link found in a results root."""
    return (f"{link}: a symbolic link (to {os.readlink(link)}), not a results file or folder; copy what it "
            "points at, or remove it")
