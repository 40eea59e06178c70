"""Several processes: the batch arithmetic for N GPUs, and a real two-process CPU launch."""

import json
import os
import subprocess
import sys

import pytest

from saah_lib.paths import REPO_ROOT
from saah_lib.training.config import make_config
from saah_lib.training.distributed import batch_layout


@pytest.mark.parametrize("profile", ["tiny", "qwen2.5-1.5b", "qwen2.5-3b"])
@pytest.mark.parametrize("n", [1, 2, 4, 8])
def test_every_process_count_keeps_the_completions_per_step(profile, n):
    cfg = make_config(profile)
    t = cfg.trainer
    layout = batch_layout(t.prompts_per_step * t.num_generations, t.num_generations, t.gradient_accumulation_steps, n)
    assert layout.completions_per_step == t.prompts_per_step * t.num_generations == 16
    assert layout.completions_per_step % t.num_generations == 0  # whole groups per generation batch
    if n == 1:  # one process: exactly the config's own split, so single-GPU and CPU runs are unchanged
        assert (layout.per_device_batch_size, layout.gradient_accumulation_steps) == (8, 2)
    if n == 8:
        assert (layout.per_device_batch_size, layout.gradient_accumulation_steps) == (2, 1)


def test_uneven_splits_are_refused_with_the_reason():
    with pytest.raises(ValueError, match="cannot be split over 3 processes"):
        batch_layout(16, 4, 2, 3)
    # 6 completions in groups of 4: a generation batch must hold whole groups
    with pytest.raises(ValueError, match="num_generations=4"):
        batch_layout(6, 4, 1, 2)


def test_the_trainer_config_follows_the_launchers_world_size(monkeypatch):
    t = make_config("qwen2.5-1.5b").trainer
    assert (t.per_device_train_batch_size, t.gradient_accumulation_steps) == (8, 2)
    # under accelerate launch with 8 processes (WORLD_SIZE itself would make TRL set up a process group here)
    monkeypatch.setattr("saah_lib.training.config.world_size", lambda: 8)
    with pytest.raises(ValueError, match="generation_batch_size \\(2\\)"):  # TRL sees 1 process: 2 of 16
        make_config("qwen2.5-1.5b")


@pytest.mark.slow
def test_accelerate_launch_with_two_cpu_processes_trains_and_logs_once(tiny_random_model_dir, tmp_path):
    repo = REPO_ROOT
    env = {**os.environ, "PYTHONPATH": str(repo), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--num_processes", "2", "--cpu",
           "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
           "-m", "saah_lib.training.launch", "--profile", "tiny", "--method", "sa", "--steps", "2", "--no-progress",
           "--results-dir", str(tmp_path), "--run-id", "ddp",
           "--set", f"model_name={tiny_random_model_dir}", "--set", "max_completion_length=8",
           "--set", "eval_max_new_tokens=8", "--set", "n_eval=4", "--set", "n_train=16",
           "--set", "save_steps=100", "--set", "eval_every=100"]
    done = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    run = tmp_path / "runs" / "ddp"
    steps = [json.loads(line)["step"] for line in (run / "train_log.jsonl").read_text().splitlines()]
    assert steps == [1, 2]  # one line per step: only the main process logs
    evals = [json.loads(line)["step"] for line in (run / "eval.jsonl").read_text().splitlines()]
    assert evals == [0, 2]
