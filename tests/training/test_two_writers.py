"""Two processes training one run id: the second stops with an error naming the first; the folder stays whole."""

import os
import signal
import subprocess
import sys
import time

import pytest

from saah_lab.rundir.lock import FolderLockedError
from saah_lab.rundir.reader import read_folders
from saah_lab.training.run import run_training
from saah_lib.paths import REPO_ROOT
from saah_lib.rundir.folder import RunDir
from saah_lib.rundir.layout import RUN_LOCK_FILE
from saah_lib.training.config import make_config

pytestmark = pytest.mark.slow

STEPS = 40
SETTINGS = dict(method="sa", alpha=0.5, max_steps=STEPS, seed=0, run_id="shared", n_train=32, n_eval=6,
                max_completion_length=12, eval_max_new_tokens=12, eval_batch_size=4, save_steps=5, eval_every=10,
                learning_rate=1e-3)


def launch(model_dir, results, **changes) -> subprocess.Popen:
    """``python -m saah_lab.training.launch`` with :data:`SETTINGS` (and ``changes``)."""
    cmd = [sys.executable, "-m", "saah_lab.training.launch", "--profile", "tiny", "--no-progress",
           "--results-dir", str(results), "--model-name", str(model_dir)]
    for name, value in {**SETTINGS, **changes}.items():
        cmd += [f"--{name.replace('_', '-')}", str(value)]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(cmd, env=env, cwd=results.parent, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def wait_for_lock(process: subprocess.Popen, run: RunDir, timeout_s: float = 300) -> None:
    """Until ``process`` holds the run's lock (its pid is in the lock file) and has logged a training step."""
    deadline = time.monotonic() + timeout_s
    lock = run.dir / RUN_LOCK_FILE
    while not (lock.is_file() and lock.read_text().strip() == str(process.pid) and run.train_log()):
        assert process.poll() is None, process.stderr.read().decode()[-3000:]
        assert time.monotonic() < deadline, "the first launch never took the run's lock"
        time.sleep(0.05)


def test_a_second_writer_is_refused_and_a_killed_writers_lock_is_taken_over(tiny_random_model_dir, tmp_path):
    results = tmp_path / "results"
    cfg = make_config("tiny", model_name=str(tiny_random_model_dir), results_dir=str(results), **SETTINGS)
    run = RunDir(cfg.run_dir)
    first = launch(tiny_random_model_dir, results)
    try:
        wait_for_lock(first, run)
        config_before = run.config_path.read_bytes()
        # the second writer: this process calling run_training on the same run id
        with pytest.raises(FolderLockedError, match=rf"run 'shared' .* is being written by another process "
                                                    rf"\(pid {first.pid},"):
            run_training(cfg, progress=False)
        assert first.poll() is None, "the first launch finished before the second tried: nothing was tested"
        assert run.config_path.read_bytes() == config_before  # the second wrote nothing
        logged = [r["step"] for r in run.train_log()]
        assert logged == list(range(1, len(logged) + 1))  # and truncated nothing
        first.send_signal(signal.SIGKILL)  # the first dies holding the lock
        first.wait()
    finally:
        first.kill()
        first.wait()
    assert len(run.train_log()) < STEPS

    run_training(cfg, progress=False)  # the lock of a killed process is no obstacle: the run resumes
    folders, problems = read_folders(results)  # strict: every line once, on schedule, whole
    assert problems == [] and [f.path.name for f in folders] == ["shared"]
    assert [r["step"] for r in folders[0].train_log] == list(range(1, STEPS + 1))
    assert [r["step"] for r in folders[0].evals] == [0, 10, 20, 30, 40]
    assert not (run.dir / RUN_LOCK_FILE).exists()


def test_two_launches_at_once_one_trains_the_other_is_refused(tiny_random_model_dir, tmp_path):
    """Both real ``launch`` processes; the first runs long enough (1000 steps) to outlive the second's start."""
    results = tmp_path / "results"
    run = RunDir(make_config("tiny", model_name=str(tiny_random_model_dir), results_dir=str(results),
                             **{**SETTINGS, "max_steps": 1000}).run_dir)
    first = launch(tiny_random_model_dir, results, max_steps=1000)
    try:
        wait_for_lock(first, run)
        second = launch(tiny_random_model_dir, results, max_steps=1000)
        _, err = second.communicate(timeout=600)
        assert second.returncode != 0 and f"is being written by another process (pid {first.pid}," in err.decode()
        assert first.poll() is None, "the first launch finished before the second tried: nothing was tested"
    finally:
        first.kill()
        first.wait()
    folders, problems = read_folders(results, tolerate_problems=True)
    logged = [r["step"] for r in folders[0].train_log]
    assert logged == list(range(1, len(logged) + 1))  # each step once: the second wrote no line
    assert [p for p in problems if "incomplete" not in p] == []  # stopped by the kill, not damaged
