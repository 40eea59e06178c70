import json

import pytest

from saah_lib.rundir.checkpoints import checkpoint_problem, checkpoints, resume_point, set_aside
from saah_lib.rundir.folder import RunDir


def make_checkpoint(folder, step):
    """A small checkpoint with the files a trainer writes, each loadable."""
    import random

    import numpy as np
    import torch
    from safetensors.torch import save_file

    folder.mkdir(parents=True)
    save_file({"w": torch.ones(4, 4)}, str(folder / "model.safetensors"))
    (folder / "config.json").write_text('{"model_type": "qwen2"}')
    torch.save({"state": {0: {"exp_avg": torch.zeros(4)}}, "param_groups": [{"lr": 1e-3, "params": [0]}]},
               folder / "optimizer.pt")
    torch.save({"last_epoch": step}, folder / "scheduler.pt")
    torch.save({"python": random.getstate(), "numpy": np.random.get_state(), "cpu": torch.random.get_rng_state()},
               folder / "rng_state.pth")
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    return folder


def tear(path, keep=0.5):
    """Cut a file short, as a crash during writing or a failed copy leaves it."""
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


def test_resume_point_needs_a_trainer_state(tmp_path):
    log = RunDir(tmp_path / "run")
    assert resume_point(log.checkpoints_dir) == (None, {})
    make_checkpoint(log.checkpoints_dir / "checkpoint-10", 10)
    make_checkpoint(log.checkpoints_dir / "checkpoint-20", 20)
    (make_checkpoint(log.checkpoints_dir / "checkpoint-30", 30) / "trainer_state.json").unlink()
    assert resume_point(log.checkpoints_dir) == (
        log.checkpoints_dir / "checkpoint-20",
        {log.checkpoints_dir / "checkpoint-30": "no trainer_state.json (the save was interrupted)"})


def test_an_intact_checkpoint_has_no_problem(tmp_path):
    assert checkpoint_problem(make_checkpoint(tmp_path / "checkpoint-3", 3), 3) is None


@pytest.mark.parametrize("damage, problem", [
    (lambda d: tear(d / "model.safetensors"), "model.safetensors does not load"),
    (lambda d: tear(d / "model.safetensors", keep=0.01), "model.safetensors does not load"),
    (lambda d: (d / "model.safetensors").unlink(), "no model or adapter weights"),
    (lambda d: tear(d / "trainer_state.json"), "trainer_state.json does not parse"),
    (lambda d: (d / "trainer_state.json").write_text('{"global_step": 2}'), "records step 2, not 3"),
    (lambda d: tear(d / "config.json"), "config.json does not parse"),
    (lambda d: tear(d / "optimizer.pt"), "optimizer.pt does not load"),
    (lambda d: tear(d / "optimizer.pt", keep=0.999), "optimizer.pt does not load"),
    (lambda d: tear(d / "scheduler.pt"), "scheduler.pt does not load"),
    (lambda d: tear(d / "rng_state.pth"), "rng_state.pth does not load"),
    (lambda d: (d / "optimizer.pt").write_bytes(b"not a torch file"), "optimizer.pt does not load"),
])
def test_damaged_checkpoint_files_are_named(tmp_path, damage, problem):
    folder = make_checkpoint(tmp_path / "checkpoint-3", 3)
    damage(folder)
    assert problem in checkpoint_problem(folder, 3)


def test_resume_point_falls_back_past_every_damaged_checkpoint(tmp_path):
    log = RunDir(tmp_path / "run")
    folders = {step: make_checkpoint(log.checkpoints_dir / f"checkpoint-{step}", step) for step in (2, 4, 6, 8)}
    tear(folders[8] / "model.safetensors")
    tear(folders[6] / "trainer_state.json")
    tear(folders[2] / "optimizer.pt")  # older than the intact one: not opened, not reported
    checkpoint, damaged = resume_point(log.checkpoints_dir)
    assert checkpoint == folders[4]
    assert list(damaged) == [folders[8], folders[6]]
    tear(folders[4] / "scheduler.pt")
    assert resume_point(log.checkpoints_dir)[0] is None and len(resume_point(log.checkpoints_dir)[1]) == 4


def test_set_aside_moves_a_damaged_checkpoint_out_of_reach_of_rotation(tmp_path):
    from transformers.trainer_utils import sort_checkpoints

    log = RunDir(tmp_path / "run")
    make_checkpoint(log.checkpoints_dir / "checkpoint-2", 2)
    first = make_checkpoint(log.checkpoints_dir / "checkpoint-4", 4)
    tear(first / "model.safetensors")
    moved = set_aside(first)
    assert moved == log.checkpoints_dir / "damaged" / "checkpoint-4" and (moved / "model.safetensors").is_file()
    # the same step damaged again later: both copies are kept
    second = make_checkpoint(log.checkpoints_dir / "checkpoint-4", 4)
    assert set_aside(second) == log.checkpoints_dir / "damaged" / "checkpoint-4.2"
    # transformers' rotation (save_total_limit) and our own listing see only checkpoint-2
    assert sort_checkpoints(str(log.checkpoints_dir)) == [str(log.checkpoints_dir / "checkpoint-2")]
    assert list(checkpoints(log.checkpoints_dir)) == [2]
