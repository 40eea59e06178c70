import json

import pytest

from saah_lab.rundir.checkpoints import ALWAYS_WRITTEN, checkpoint_problem, checkpoints, resume_point, set_aside
from saah_lib.rundir.folder import RunDir, RunFolderError


def make_checkpoint(folder, step, lora=False, world_size=1):
    """A small checkpoint with the files a trainer writes, each loadable (the real list is checked against a
    real run in tests/training/test_run.py)."""
    import random

    import numpy as np
    import torch
    from safetensors.torch import save_file

    folder.mkdir(parents=True)
    weights, config = ("adapter_model.safetensors", "adapter_config.json") if lora else \
        ("model.safetensors", "config.json")
    save_file({"w": torch.ones(4, 4)}, str(folder / weights))
    (folder / config).write_text('{"model_type": "qwen2"}')
    (folder / "tokenizer_config.json").write_text("{}")
    torch.save({"output_dir": "x"}, folder / "training_args.bin")
    torch.save({"state": {0: {"exp_avg": torch.zeros(4)}}, "param_groups": [{"lr": 1e-3, "params": [0]}]},
               folder / "optimizer.pt")
    torch.save({"last_epoch": step}, folder / "scheduler.pt")
    rng = {"python": random.getstate(), "numpy": np.random.get_state(), "cpu": torch.random.get_rng_state()}
    for name in ["rng_state.pth"] if world_size == 1 else [f"rng_state_{i}.pth" for i in range(world_size)]:
        torch.save(rng, folder / name)
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
    assert checkpoint_problem(make_checkpoint(tmp_path / "lora" / "checkpoint-3", 3, lora=True), 3) is None
    several = make_checkpoint(tmp_path / "ddp" / "checkpoint-3", 3, world_size=2)
    assert checkpoint_problem(several, 3, world_size=2) is None


@pytest.mark.parametrize("name", [n for n in ALWAYS_WRITTEN if n != "trainer_state.json"] + ["rng_state.pth"])
@pytest.mark.parametrize("lora", [False, True])
def test_a_checkpoint_without_a_file_the_trainer_writes_is_incomplete(tmp_path, name, lora):
    folder = make_checkpoint(tmp_path / "checkpoint-3", 3, lora=lora)
    (folder / name).unlink()
    assert checkpoint_problem(folder, 3) == f"incomplete: no {name}"


@pytest.mark.parametrize("lora", [False, True])
def test_weights_without_their_config_or_config_without_weights_are_incomplete(tmp_path, lora):
    folder = make_checkpoint(tmp_path / "checkpoint-3", 3, lora=lora)
    (folder / ("adapter_config.json" if lora else "config.json")).unlink()
    assert "incomplete: no model or adapter weights" in checkpoint_problem(folder, 3)


def test_the_rng_state_of_every_process_is_needed(tmp_path):
    folder = make_checkpoint(tmp_path / "checkpoint-3", 3, world_size=3)
    assert checkpoint_problem(folder, 3) == "incomplete: no rng_state.pth"  # resumed by one process
    (folder / "rng_state_2.pth").unlink()
    assert checkpoint_problem(folder, 3, world_size=3) == "incomplete: no rng_state_2.pth"


def test_a_sharded_model_needs_every_shard_its_index_names(tmp_path):
    folder = make_checkpoint(tmp_path / "checkpoint-3", 3)
    (folder / "model.safetensors").rename(folder / "model-00001-of-00002.safetensors")
    (folder / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}))
    assert checkpoint_problem(folder, 3) == "incomplete: no model-00002-of-00002.safetensors"


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
    (lambda d: tear(d / "training_args.bin", keep=0.9), "training_args.bin does not load"),
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


def _logged_run(tmp_path, last_step):
    run = RunDir(tmp_path / "run")
    for step in range(1, last_step + 1):
        run.log_step({"step": step})
    return run


@pytest.mark.parametrize("last_logged", [0, 2, 3])
def test_a_checkpoint_newer_than_the_training_log_is_an_error_naming_both_and_nothing_changes(tmp_path, last_logged):
    from saah_lab.rundir.checkpoints import resume_checkpoint

    run = _logged_run(tmp_path, last_logged)
    make_checkpoint(run.checkpoints_dir / "checkpoint-2", 2)
    make_checkpoint(run.checkpoints_dir / "checkpoint-4", 4)
    tear(run.checkpoints_dir / "checkpoint-4" / "optimizer.pt")
    make_checkpoint(run.checkpoints_dir / "checkpoint-3", 3)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    log_before = run.train_log_path.read_bytes() if last_logged else None
    if last_logged >= 3:
        assert resume_checkpoint(run).name == "checkpoint-3"  # the damaged checkpoint-4 is set aside
        return
    with pytest.raises(RunFolderError) as error:
        resume_checkpoint(run)
    message = str(error.value)
    assert f"its checkpoint {run.checkpoints_dir / 'checkpoint-3'} is at step 3" in message
    assert f"training log {run.train_log_path} " + (f"ends at step {last_logged}" if last_logged else "has no step") \
        in message
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before
    assert (run.train_log_path.read_bytes() if last_logged else None) == log_before


def test_a_training_log_that_reaches_the_checkpoint_lets_it_resume(tmp_path):
    from saah_lab.rundir.checkpoints import resume_checkpoint

    run = _logged_run(tmp_path, 5)  # logged beyond the checkpoint: the caller cuts the log back to it
    make_checkpoint(run.checkpoints_dir / "checkpoint-4", 4)
    assert resume_checkpoint(run).name == "checkpoint-4"


@pytest.mark.parametrize("case", ["checkpoint newer than its log", "no intact checkpoint"])
def test_launch_says_why_a_run_cannot_resume_and_exits_1(tmp_path, monkeypatch, capsys, case):
    """Where resuming stops, launch prints the message and exits 1, without a traceback; nothing is changed."""
    from saah_lab.rundir.checkpoints import resume_checkpoint
    from saah_lab.training import launch
    from saah_lab.training import run as run_module

    run = _logged_run(tmp_path, 1 if case == "checkpoint newer than its log" else 2)
    make_checkpoint(run.checkpoints_dir / "checkpoint-2", 2)
    if case == "no intact checkpoint":
        tear(run.checkpoints_dir / "checkpoint-2" / "model.safetensors")
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    # the training up to its resume, which is where a real launch meets the folder
    monkeypatch.setattr(run_module, "run_training", lambda cfg, progress=True: resume_checkpoint(run))
    with pytest.raises(SystemExit) as exited:
        launch.main(["--profile", "tiny", "--method", "grpo", "--results-dir", str(tmp_path / "results")])
    assert exited.value.code == 1
    err = capsys.readouterr().err
    assert err.startswith("error: run 'run' cannot resume") and "Traceback" not in err
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before
