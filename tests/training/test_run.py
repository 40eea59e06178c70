"""Whole runs on CPU: layout of results/, interruption and resume, completed runs skipped."""

import json

import pytest
from transformers import TrainerCallback

from saah_lab.rundir.checkpoints import ALWAYS_WRITTEN, WEIGHTS, checkpoint_problem, checkpoints, resume_point
from saah_lab.rundir.provenance import with_segment
from saah_lab.studies.verify.bits import compare_run
from saah_lab.training import run as train
from saah_lab.training.run import run_training
from saah_lib.rundir.folder import RunDir, RunFolderError
from saah_lib.rundir.layout import TRAIN_LOG_KEYS
from saah_lib.training.config import make_config

pytestmark = pytest.mark.slow


def tiny_run_config(model_dir, results_dir, method, **overrides):
    settings = dict(
        model_name=str(model_dir), method=method, alpha=0.5, max_steps=4, save_steps=2, eval_every=2,
        n_train=32, n_eval=6, max_completion_length=12, eval_max_new_tokens=12, eval_batch_size=4,
        results_dir=str(results_dir), seed=0, learning_rate=1e-3,
    )
    return make_config("tiny", **{**settings, **overrides})


class InterruptAfterLogging(TrainerCallback):
    """Simulates a crash right after a step was logged (and after a checkpoint before it)."""

    def __init__(self, step):
        self.step = step

    def on_log(self, args, state, control, logs=None, **kwargs):
        if state.global_step == self.step and logs and "reward" in logs:
            raise KeyboardInterrupt(f"simulated interruption at step {self.step}")


@pytest.mark.parametrize("method", ["grpo", "ah", "sa"])
def test_a_run_writes_the_documented_layout(method, tiny_random_model_dir, tmp_path):
    cfg = tiny_run_config(tiny_random_model_dir, tmp_path, method)
    run_dir = run_training(cfg, progress=False)
    # settings beside the profile's defaults: the id names the variant by a hash of them
    assert run_dir == tmp_path / "runs" / cfg.run_id
    assert cfg.run_id.startswith(f"tiny-{method}-a{0 if method == 'grpo' else 0.5}-s0-v")
    config = json.loads((run_dir / "config.json").read_text())
    assert config["method"] == method and config["steps"] == 4
    assert config["versions"]["trl"] and config["versions"]["torch"] and "git_commit" in config
    assert len(config["data"]["train_ids"]) == 32 and len(config["data"]["eval_sha256"]) == 64

    log = RunDir(run_dir)
    steps = log.train_log()
    assert [r["step"] for r in steps] == [1, 2, 3, 4]
    for record in steps:
        assert set(TRAIN_LOG_KEYS) <= set(record)
        assert record["step_time"] > 0 and record["kl"] is not None and 0 <= record["entropy_norm"] <= 1
        assert -1.0 <= record["reward_mean"] <= 7.5
    if method == "grpo":
        assert all(r["weight_mean"] == 1.0 for r in steps)

    evals = log.evals()
    assert [r["step"] for r in evals] == [0, 2, 4]
    assert all(r["n"] == 6 and 0 <= r["pass_at_1"] <= 1 for r in evals)
    samples = (run_dir / "eval_samples" / "step_0004.jsonl").read_text().splitlines()
    assert len(samples) == 6 and {"id", "completion", "extracted", "gold", "correct"} <= set(json.loads(samples[0]))
    assert resume_point(log.checkpoints_dir)[0].name == "checkpoint-4"
    if method != "grpo":
        entropies = [json.loads(line) for line in log.token_entropy_path.read_text().splitlines()]
        assert entropies and all(len(e["entropy_norm"]) >= 1 for e in entropies)


def test_interrupted_run_resumes_without_losing_or_repeating_a_step(tiny_random_model_dir, tmp_path):
    reference = run_training(tiny_run_config(tiny_random_model_dir, tmp_path / "a", "sa"), progress=False)

    cfg = tiny_run_config(tiny_random_model_dir, tmp_path / "b", "sa")
    with pytest.raises(KeyboardInterrupt):
        run_training(cfg, callbacks=[InterruptAfterLogging(3)], progress=False)
    log = RunDir(cfg.run_dir)
    assert [r["step"] for r in log.train_log()] == [1, 2, 3]  # step 3 logged, but its checkpoint never written
    assert resume_point(log.checkpoints_dir)[0].name == "checkpoint-2"

    run_training(cfg, progress=False)
    resumed = log.train_log()
    assert [r["step"] for r in resumed] == [1, 2, 3, 4]
    assert [r["step"] for r in log.evals()] == [0, 2, 4]
    # the resumed run retraces the uninterrupted one (RNG, data order and optimiser state restored)
    expected = RunDir(reference).train_log()
    for got, want in zip(resumed, expected):
        assert got["reward_mean"] == pytest.approx(want["reward_mean"], abs=1e-6)
        assert got["loss"] == pytest.approx(want["loss"], abs=1e-5)


def _files(folder):
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_complete_run_relaunched_changes_nothing_on_disk(tiny_random_model_dir, tmp_path, capsys, monkeypatch):
    cfg = tiny_run_config(tiny_random_model_dir, tmp_path, "grpo", max_steps=2)
    run_training(cfg, progress=False)
    before = _files(tmp_path)
    # relaunched from another commit under other numerics: still nothing to write
    monkeypatch.setattr(train, "provenance", lambda: {"git_commit": "other", "versions": {}, "cpu_numerics": {}})
    run_training(cfg, progress=False)
    assert "already complete" in capsys.readouterr().out
    assert _files(tmp_path) == before  # every file, byte for byte, and no new one


def test_each_training_segment_keeps_its_provenance(tiny_random_model_dir, tmp_path, monkeypatch):
    class StopAfterTwo(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            control.should_training_stop = state.global_step == 2

    cfg = tiny_run_config(tiny_random_model_dir, tmp_path, "sa", max_steps=4, save_steps=2)
    run_training(cfg, callbacks=[StopAfterTwo()], progress=False)
    first = RunDir(cfg.run_dir).read_config()
    native = {**first["cpu_numerics"], "mode": "native", "pin_holds": None}
    monkeypatch.setattr(train, "provenance", lambda: {"git_commit": "abc", "versions": first["versions"],
                                                      "cpu_numerics": native})
    run_training(cfg, progress=False)  # resumed from checkpoint-2 under other numerics and another commit
    config = RunDir(cfg.run_dir).read_config()
    assert (config["git_commit"], config["cpu_numerics"]) == (first["git_commit"], first["cpu_numerics"])
    segments = config["segments"]
    assert [(s["from_step"], s["to_step"], s["git_commit"]) for s in segments] == [
        (0, 4, first["git_commit"]), (2, 4, "abc")]
    assert segments[0]["cpu_numerics"] == first["cpu_numerics"] and segments[1]["cpu_numerics"]["mode"] == "native"


def test_a_resume_under_another_backend_keeps_the_record_and_says_which_steps_it_sampled(tiny_random_model_dir,
                                                                                         tmp_path, monkeypatch, capsys):
    from pathlib import Path

    monkeypatch.setattr(train, "_train", lambda *args: None)  # the record is written before training starts
    cfg = tiny_run_config(tiny_random_model_dir, tmp_path, "sa", run_id="r", generation_backend="compiled")
    run_training(cfg, progress=False)
    first = RunDir(cfg.run_dir).config_path.read_bytes()
    monkeypatch.setattr(train, "resume_checkpoint", lambda *args, **kwargs: Path("checkpoint-2"))
    run_training(tiny_run_config(tiny_random_model_dir, tmp_path, "sa", run_id="r", generation_backend="hf"),
                 progress=False)
    assert "the steps from 2 on run with generation_backend: 'compiled' -> 'hf'" in capsys.readouterr().out
    config = RunDir(cfg.run_dir).read_config()
    assert config["generation_backend"] == "compiled"  # what sampled the steps before 2, as recorded
    assert [(s["from_step"], s.get("settings")) for s in config["segments"]] == [
        (0, None), (2, {"generation_backend": "hf"})]
    assert "settings" not in json.loads(first)["segments"][0]  # a run resumed as it was recorded writes as before
    run_training(cfg, progress=False)  # resumed under the recorded backend again: nothing differs
    assert RunDir(cfg.run_dir).read_config()["segments"][-1].get("settings") is None


def test_a_config_written_before_segments_counts_as_one_segment():
    old = {"git_commit": "a", "versions": {"torch": "1"}, "cpu_numerics": {"mode": "pinned"}, "steps": 60}
    now = {"git_commit": "b", "versions": {"torch": "2"}, "cpu_numerics": {"mode": "native"}}
    merged = with_segment(old, now, 30, 60)
    assert {k: merged[k] for k in ("git_commit", "versions", "cpu_numerics")} == \
        {k: old[k] for k in ("git_commit", "versions", "cpu_numerics")}
    assert merged["segments"] == [{"from_step": 0, "to_step": 30, **{k: old[k] for k in now}},
                                  {"from_step": 30, "to_step": 60, **now}]
    assert with_segment(None, now, 0, 60) == {**now, "segments": [{"from_step": 0, "to_step": 60, **now}]}


def test_reusing_a_run_id_with_other_settings_is_refused(tiny_random_model_dir, tmp_path):
    # a default id is unique to its settings; a named one can be reused by mistake
    run_training(tiny_run_config(tiny_random_model_dir, tmp_path, "ah", max_steps=2, run_id="mine"), progress=False)
    other = tiny_run_config(tiny_random_model_dir, tmp_path, "ah", max_steps=2, learning_rate=5e-4, run_id="mine")
    with pytest.raises(ValueError, match="learning_rate"):
        run_training(other, progress=False)


# --------------------------------------------------------------------------
# a damaged newest checkpoint: fall back to the previous intact one
# --------------------------------------------------------------------------


def _tear(path, keep=0.5):
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


@pytest.fixture(scope="module")
def interrupted_run(tiny_random_model_dir, tmp_path_factory):
    """An uninterrupted reference run and a copy stopped after logging step 3.

    Checkpoints every step, keeping two (the tiny profile's rotation): the
    stopped run holds checkpoint-1 and checkpoint-2 and logged steps 1-3.
    """
    root = tmp_path_factory.mktemp("damaged_checkpoints")
    settings = dict(save_steps=1)
    reference = RunDir(run_training(tiny_run_config(tiny_random_model_dir, root / "reference", "sa", **settings),
                                    progress=False))
    cfg = tiny_run_config(tiny_random_model_dir, root / "stopped", "sa", **settings)
    with pytest.raises(KeyboardInterrupt):
        run_training(cfg, callbacks=[InterruptAfterLogging(3)], progress=False)
    assert list(checkpoints(RunDir(cfg.run_dir).checkpoints_dir)) == [1, 2]
    return reference, cfg


def _copy_of(interrupted_run, tmp_path, **overrides):
    import shutil

    reference, cfg = interrupted_run
    shutil.copytree(cfg.results_dir, tmp_path / "results")
    copy = tiny_run_config(cfg.model_name, tmp_path / "results", "sa", save_steps=1, **overrides)
    return reference, copy, RunDir(copy.run_dir)


def _assert_retraces(log, reference):
    """No step lost or repeated, and the same trajectory as the uninterrupted run: identical logs and samples."""
    assert [r["step"] for r in log.train_log()] == [1, 2, 3, 4]
    assert [r["step"] for r in log.evals()] == [0, 2, 4]
    result = compare_run(reference.dir, log.dir)
    assert result["identical"], json.dumps(result, default=str)[:3000]
    assert log.is_complete(4)


@pytest.mark.parametrize("damage, problem", [
    (lambda d: _tear(d / "model.safetensors"), "model.safetensors does not load"),
    (lambda d: _tear(d / "trainer_state.json"), "trainer_state.json does not parse"),
    (lambda d: _tear(d / "optimizer.pt", keep=0.9), "optimizer.pt does not load"),
    # transformers would resume without these (fresh optimizer or scheduler state, unrestored RNG) and diverge
    (lambda d: (d / "optimizer.pt").unlink(), "incomplete: no optimizer.pt"),
    (lambda d: (d / "scheduler.pt").unlink(), "incomplete: no scheduler.pt"),
    (lambda d: (d / "rng_state.pth").unlink(), "incomplete: no rng_state.pth"),
])
def test_a_damaged_newest_checkpoint_falls_back_to_the_previous_one(interrupted_run, tmp_path, capsys, damage,
                                                                     problem):
    reference, cfg, log = _copy_of(interrupted_run, tmp_path)
    damaged = log.checkpoints_dir / "checkpoint-2"
    damage(damaged)
    before = sorted(p.name for p in damaged.iterdir())

    run_training(cfg, progress=False)

    out = capsys.readouterr().out
    assert f"checkpoint {damaged} is damaged: {problem}" in out
    assert "resumes from checkpoint-1" in out and f"resuming {cfg.run_id} from step 1" in out
    _assert_retraces(log, reference)
    # the damaged folder is kept, out of the way of the trainer's rotation (which kept the two newest)
    kept = log.checkpoints_dir / "damaged" / "checkpoint-2"
    assert sorted(p.name for p in kept.iterdir()) == before
    assert list(checkpoints(log.checkpoints_dir)) == [3, 4] and resume_point(log.checkpoints_dir)[0].name == "checkpoint-4"


def test_only_interrupted_saves_start_the_run_over(interrupted_run, tmp_path, capsys):
    reference, cfg, log = _copy_of(interrupted_run, tmp_path)
    for step in (1, 2):
        (log.checkpoints_dir / f"checkpoint-{step}" / "trainer_state.json").unlink()
    run_training(cfg, progress=False)
    assert "resumes from the start (no intact checkpoint is left)" in capsys.readouterr().out
    _assert_retraces(log, reference)
    assert sorted(p.name for p in (log.checkpoints_dir / "damaged").iterdir()) == ["checkpoint-1", "checkpoint-2"]


def test_no_intact_finished_checkpoint_is_an_error_that_changes_nothing(interrupted_run, tmp_path):
    _, cfg, log = _copy_of(interrupted_run, tmp_path)
    _tear(log.checkpoints_dir / "checkpoint-2" / "model.safetensors")
    _tear(log.checkpoints_dir / "checkpoint-1" / "rng_state.pth")
    logged = log.train_log_path.read_text()
    with pytest.raises(RunFolderError, match="cannot resume: no intact checkpoint .*checkpoint-2: model.safetensors "
                                           "does not load.*checkpoint-1: rng_state.pth does not load"):
        run_training(cfg, progress=False)
    assert list(checkpoints(log.checkpoints_dir)) == [1, 2] and not (log.checkpoints_dir / "damaged").exists()
    assert log.train_log_path.read_text() == logged


# Files a real checkpoint holds besides the ones a complete save needs (checkpoints.ALWAYS_WRITTEN, rng_state.pth,
# the weights): what the tokenizer and model add beyond their configs, which depends on their kind.
NOT_NEEDED_TO_RESUME = {"tokenizer.json", "chat_template.jinja", "special_tokens_map.json", "generation_config.json",
                        "README.md"}


@pytest.mark.parametrize("use_lora", [False, True])
def test_the_files_a_complete_checkpoint_needs_are_the_files_the_trainer_writes(tiny_random_model_dir, tmp_path,
                                                                                  use_lora):
    cfg = tiny_run_config(tiny_random_model_dir, tmp_path, "sa", max_steps=2, save_steps=2, eval_every=2,
                          use_lora=use_lora, lora_target_modules=["q_proj", "v_proj"])
    folder = RunDir(run_training(cfg, progress=False)).checkpoints_dir / "checkpoint-2"
    written = {p.name for p in folder.iterdir()}
    config, weights = WEIGHTS["LoRA adapter" if use_lora else "full model"]
    needed = {*ALWAYS_WRITTEN, "rng_state.pth", config, weights[0]}
    assert needed <= written  # never more than the trainer writes
    assert written - needed <= NOT_NEEDED_TO_RESUME, written - needed  # a new file is a decision to make
    assert checkpoint_problem(folder, 2) is None


def test_the_next_writer_removes_the_temporary_files_of_an_interrupted_write(tiny_random_model_dir, tmp_path,
                                                                               capsys):
    cfg = tiny_run_config(tiny_random_model_dir, tmp_path, "grpo", max_steps=2)
    log = RunDir(run_training(cfg, progress=False))
    # what a kill between writing and renaming leaves (the final evaluation's samples, and config.json)
    stale = [log.samples_dir / ".step_0002.jsonl.0a1b2c3d4e5f.tmp", log.dir / ".config.json.9f8e7d6c5b4a.tmp"]
    for path in stale:
        path.write_text('{"id": "half a line')
    run_training(cfg, progress=False)
    out = capsys.readouterr().out
    assert not any(p.exists() for p in stale) and all(f"removed {p}" in out for p in stale)
    assert "already complete" in out and log.is_complete(2)
def test_report_to_tensorboard_writes_the_logged_steps_and_progress_is_lines_not_dicts(tiny_random_model_dir,
                                                                                       tmp_path, capsys):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    cfg = tiny_run_config(tiny_random_model_dir, tmp_path, "sa", max_steps=2, report_to="tensorboard", run_name="tb")
    run_dir = run_training(cfg, progress=True)
    # transformers' TensorBoardCallback writes under the trainer's output folder (the run's checkpoints/runs/)
    events = sorted((run_dir / "checkpoints" / "runs").glob("*/events.out.tfevents.*"))
    assert len(events) == 1
    accumulator = EventAccumulator(str(events[0].parent))
    accumulator.Reload()
    logged = RunDir(run_dir).train_log()
    scalars = accumulator.Scalars("train/reward")
    assert [s.step for s in scalars] == [1, 2]
    assert [s.value for s in scalars] == pytest.approx([r["reward_mean"] for r in logged], rel=1e-6)  # float32
    assert "report_to" not in json.loads((run_dir / "config.json").read_text())  # where logs go, not what ran

    out = capsys.readouterr().out
    assert f"training {cfg.run_id}: 0/2 steps" in out and "step 2: Pass@1" in out
    last = [line for line in out.splitlines() if line.startswith(f"training {cfg.run_id}: 2/2 steps")]
    assert last and last[-1].endswith(f"reward {logged[-1]['reward_mean']:.2f}")  # the last step's own reward
    assert "'reward'" not in out and "'loss'" not in out  # transformers' per-step dicts are gone


def test_report_to_an_integration_that_is_not_installed_fails_before_anything_is_written(tiny_random_model_dir,
                                                                                           tmp_path, monkeypatch):
    import saah_lab.training.run as run_module

    monkeypatch.setattr(run_module, "get_available_reporting_integrations", lambda: [])
    cfg = tiny_run_config(tiny_random_model_dir, tmp_path, "sa", max_steps=2, report_to="tensorboard")
    with pytest.raises(ValueError, match="'report_to': tensorboard is not installed"):
        run_training(cfg, progress=False)
    assert not cfg.run_dir.exists()
