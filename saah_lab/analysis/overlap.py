"""Which runs two study roots share (a study whose runs overlap another's is no independent evidence for them):
two folders of one run id hold the same run when their settings (not where and when it ran), evaluations (byte for
byte) and training logs (but the step's wall time) are equal."""

from __future__ import annotations

from pathlib import Path

from saah_lib.jsonio import read_jsonl
from saah_lib.models.names import canonical_model_name
from saah_lib.rundir import layout
from saah_lib.rundir.folder import RunDir

#: Config fields that say where or when a run happened, not what it computed.
NOT_SETTINGS = {"results_dir", "resolved_model", "git_commit", "git_dirty", "versions", "segments"}
#: Logged values that measure the machine, not the run.
TIMING_KEYS = {"step_time"}


def _settings(run: RunDir) -> dict:
    config = {k: v for k, v in (run.read_config() or {}).items() if k not in NOT_SETTINGS}
    if isinstance(config.get("model_name"), str):
        config["model_name"] = canonical_model_name(config["model_name"])  # a run may name its warm start by folder
    return config


def _train_values(run: RunDir) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in TIMING_KEYS} for r in read_jsonl(run.train_log_path)]


def _bytes(path: Path) -> bytes | None:
    return path.read_bytes() if path.is_file() else None


def same_run(a_dir: Path, b_dir: Path) -> bool:
    """Whether two run folders hold the same run (module docstring)."""
    a, b = RunDir(Path(a_dir)), RunDir(Path(b_dir))
    if _settings(a) != _settings(b) or _bytes(a.eval_path) != _bytes(b.eval_path):
        return False
    files_a, files_b = a.sample_files(), b.sample_files()
    if files_a.keys() != files_b.keys() or any(_bytes(files_a[s]) != _bytes(files_b[s]) for s in files_a):
        return False
    return _train_values(a) == _train_values(b)


def shared_runs(root_a: Path, root_b: Path) -> dict:
    """``{"shared": [run ids the same in both], "differ": [same id, different run], "n_a", "n_b"}``."""
    ids_a = {p.name for p in layout.folders(root_a, layout.RUNS)}
    ids_b = {p.name for p in layout.folders(root_b, layout.RUNS)}
    shared, differ = [], []
    for run_id in sorted(ids_a & ids_b):
        same = same_run(layout.run_dir(root_a, run_id), layout.run_dir(root_b, run_id))
        (shared if same else differ).append(run_id)
    return {"shared": shared, "differ": differ, "n_a": len(ids_a), "n_b": len(ids_b)}
