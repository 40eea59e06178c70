"""Whole runs on CPU: layout of results/, interruption and resume, completed runs skipped."""

import json

import pytest
from transformers import TrainerCallback

from saah_lib.config import make_config
from saah_lib.runlog import TRAIN_LOG_KEYS, RunLog
from saah_lib.train import run_training

pytestmark = pytest.mark.slow


def tiny_run_config(model_dir, results_dir, method, **overrides):
    settings = dict(
        model_name=str(model_dir), method=method, alpha=0.5, steps=4, save_every=2, eval_every=2,
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
    run_dir = run_training(tiny_run_config(tiny_random_model_dir, tmp_path, method), progress=False)
    assert run_dir == tmp_path / "runs" / f"tiny-{method}-a{0 if method == 'grpo' else 0.5}-s0"
    config = json.loads((run_dir / "config.json").read_text())
    assert config["method"] == method and config["steps"] == 4
    assert config["versions"]["trl"] and config["versions"]["torch"] and "git_commit" in config
    assert len(config["data"]["train_ids"]) == 32 and len(config["data"]["eval_sha256"]) == 64

    log = RunLog(run_dir)
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
    assert log.last_checkpoint().name == "checkpoint-4"
    if method != "grpo":
        entropies = [json.loads(line) for line in log.token_entropy_path.read_text().splitlines()]
        assert entropies and all(len(e["entropy_norm"]) >= 1 for e in entropies)


def test_interrupted_run_resumes_without_losing_or_repeating_a_step(tiny_random_model_dir, tmp_path):
    reference = run_training(tiny_run_config(tiny_random_model_dir, tmp_path / "a", "sa"), progress=False)

    cfg = tiny_run_config(tiny_random_model_dir, tmp_path / "b", "sa")
    with pytest.raises(KeyboardInterrupt):
        run_training(cfg, callbacks=[InterruptAfterLogging(3)], progress=False)
    log = RunLog(cfg.run_dir)
    assert [r["step"] for r in log.train_log()] == [1, 2, 3]  # step 3 logged, but its checkpoint never written
    assert log.last_checkpoint().name == "checkpoint-2"

    run_training(cfg, progress=False)
    resumed = log.train_log()
    assert [r["step"] for r in resumed] == [1, 2, 3, 4]
    assert [r["step"] for r in log.evals()] == [0, 2, 4]
    # the resumed run retraces the uninterrupted one (RNG, data order and optimiser state restored)
    expected = RunLog(reference).train_log()
    for got, want in zip(resumed, expected):
        assert got["reward_mean"] == pytest.approx(want["reward_mean"], abs=1e-6)
        assert got["loss"] == pytest.approx(want["loss"], abs=1e-5)


def test_a_complete_run_is_not_trained_again(tiny_random_model_dir, tmp_path, capsys):
    cfg = tiny_run_config(tiny_random_model_dir, tmp_path, "grpo", steps=2)
    run_training(cfg, progress=False)
    before = (cfg.run_dir / "train_log.jsonl").read_text()
    run_training(cfg, progress=False)
    assert "already complete" in capsys.readouterr().out
    assert (cfg.run_dir / "train_log.jsonl").read_text() == before


def test_reusing_a_run_id_with_other_settings_is_refused(tiny_random_model_dir, tmp_path):
    run_training(tiny_run_config(tiny_random_model_dir, tmp_path, "ah", steps=2), progress=False)
    other = tiny_run_config(tiny_random_model_dir, tmp_path, "ah", steps=2, learning_rate=5e-4)
    with pytest.raises(ValueError, match="learning_rate"):
        run_training(other, progress=False)
