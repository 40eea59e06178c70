"""Several processes: the batch arithmetic for N GPUs, and a real two-process CPU launch."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

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
    monkeypatch.setattr("saah_lib.training.grpo_config.world_size", lambda: 8)
    with pytest.raises(ValueError, match="generation_batch_size \\(2\\)"):  # TRL sees 1 process: 2 of 16
        make_config("qwen2.5-1.5b")


@pytest.mark.slow
def test_accelerate_launch_with_two_cpu_processes_trains_and_logs_once(tiny_random_model_dir, tmp_path):
    repo = REPO_ROOT
    env = {**os.environ, "PYTHONPATH": str(repo), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--num_processes", "2", "--cpu",
           "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
           "-m", "saah_lab.training.launch", "--profile", "tiny", "--method", "sa", "--steps", "2", "--no-progress",
           "--results-dir", str(tmp_path), "--run-id", "ddp",
           "--model-name", str(tiny_random_model_dir), "--max-completion-length", "8",
           "--eval-max-new-tokens", "8", "--n-eval", "4", "--n-train", "16", "--save-steps", "100",
           "--eval-every", "100"]
    done = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    run = tmp_path / "runs" / "ddp"
    steps = [json.loads(line)["step"] for line in (run / "train_log.jsonl").read_text().splitlines()]
    assert steps == [1, 2]  # one line per step: only the main process logs
    evals = [json.loads(line)["step"] for line in (run / "eval.jsonl").read_text().splitlines()]
    assert evals == [0, 2]


# ---------------------------------------------------------------------------- the objective over processes
# One step of 8 completions whose two halves have unequal token counts (16 and 26): on one process as one
# micro-batch, or on two gloo processes of 4 each, whose gradients DDP averages.
OBJECTIVE_CASES = {"dapo": ("grpo", 0.0), "grpo": ("sa", 1.5), "bnpo": ("sa", 1.5)}


def _half_batches(vocab):
    from tests.training.test_trainer import fake_batch

    halves = [fake_batch(vocab, seed=0), fake_batch(vocab, seed=1)]
    halves[1]["completion_mask"] = (torch.arange(7)[None] < torch.tensor([7, 7, 6, 6])[:, None]).long()
    total = sum(h["completion_mask"].sum() for h in halves)
    return [{**h, "num_items_in_batch": total} for h in halves]  # TRL gathers the count over processes


def _objective_gradients(model_dir, out_dir, world: int, rank: int) -> dict:
    """Each loss type's gradient of one step on this process's share (the whole step when ``world`` is 1)."""
    from saah_lib.training.trainer import SAAHGRPOConfig, SAAHGRPOTrainer
    from tests.training.test_trainer import build_trainer, loss_and_grads

    grads = {}
    for loss_type, (method, alpha) in OBJECTIVE_CASES.items():
        trainer = build_trainer(SAAHGRPOTrainer, SAAHGRPOConfig, model_dir, Path(out_dir) / f"{loss_type}{rank}",
                                method=method, alpha=alpha, loss_type=loss_type, use_bias_correction_kl=False,
                                per_device_train_batch_size=8 // world, gradient_accumulation_steps=1)
        assert trainer.accelerator.num_processes == world
        trainer.current_gradient_accumulation_steps = 1
        halves = _half_batches(len(trainer.processing_class))
        batch = halves[rank] if world > 1 else {k: (torch.cat([halves[0][k], halves[1][k]])
                                                    if k != "num_items_in_batch" else v)
                                                for k, v in halves[0].items()}
        grads[loss_type] = loss_and_grads(trainer, batch)[1]
    return grads


def objective_worker(model_dir, out_dir) -> None:
    """One of two gloo processes (RANK and WORLD_SIZE from the environment): saves its gradients."""
    rank = int(os.environ["RANK"])
    torch.save(_objective_gradients(model_dir, out_dir, 2, rank), Path(out_dir) / f"grads{rank}.pt")


@pytest.mark.slow  # two processes that each build trainers
def test_two_processes_optimise_one_process_objective_only_where_the_normaliser_spans_them(
        tiny_random_model_dir, tmp_path):
    """dapo (TRL's count over all processes) and the per-completion grpo give one process's gradient on two;
    bnpo, which each process normalises by its own (weighted) token count, does not (distributed.py)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code = "import sys; from tests.training.test_distributed import objective_worker; objective_worker(*sys.argv[1:])"
    workers = [subprocess.Popen(
        [sys.executable, "-c", code, str(tiny_random_model_dir), str(tmp_path)], cwd=REPO_ROOT,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1",
             "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
             "MASTER_PORT": str(port)}) for rank in range(2)]
    one = _objective_gradients(tiny_random_model_dir, tmp_path, 1, 0)
    for worker in workers:
        output = worker.communicate(timeout=300)[0]
        assert worker.returncode == 0, output[-3000:]
    per_rank = [torch.load(tmp_path / f"grads{rank}.pt") for rank in range(2)]
    for loss_type in OBJECTIVE_CASES:
        expected = one[loss_type]
        got = {name: (per_rank[0][loss_type][name] + per_rank[1][loss_type][name]) / 2 for name in expected}
        gap = max(float((got[n] - expected[n]).norm() / expected[n].norm()) for n in expected)
        if loss_type == "bnpo":
            assert gap > 0.01, gap
        else:
            assert gap < 1e-5, (loss_type, gap)
