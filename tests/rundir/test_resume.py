"""Resuming a real run only from a checkpoint its logs agree with (the run folder's side of resume)."""

import json

import pytest

from saah_lab.training.run import run_training
from saah_lib.rundir.folder import RunDir, RunFolderError
from saah_lib.training.config import make_config

pytestmark = pytest.mark.slow


def test_logs_restored_to_an_earlier_step_than_the_checkpoints_are_an_error_not_a_gap(tiny_random_model_dir, tmp_path):
    cfg = make_config("tiny", model_name=str(tiny_random_model_dir), method="sa", alpha=0.5, max_steps=4, save_steps=2,
                      eval_every=2, n_train=32, n_eval=6, max_completion_length=12, eval_max_new_tokens=12,
                      eval_batch_size=4, results_dir=str(tmp_path / "results"), seed=0, learning_rate=1e-3)
    run_training(cfg, progress=False)  # the whole run: checkpoints at steps 2 and 4
    run = RunDir(cfg.run_dir)
    # the logs restored to their state at step 2 (e.g. from a backup or git); the checkpoints kept
    for path in (run.train_log_path, run.eval_path):
        kept = [line for line in path.read_text().splitlines(keepends=True) if json.loads(line)["step"] <= 2]
        path.write_text("".join(kept))
    (run.samples_dir / "step_0004.jsonl").unlink()
    restored = {p.name: p.read_bytes() for p in run.dir.iterdir() if p.is_file()}
    with pytest.raises(RunFolderError, match=r"checkpoint-4 is at step 4, but its training log .* ends at step 2"):
        run_training(cfg, progress=False)
    assert [r["step"] for r in run.train_log()] == [1, 2]  # never 1 2 5
    assert {p.name: p.read_bytes() for p in run.dir.iterdir() if p.is_file()} == restored


def test_a_full_disk_during_a_checkpoint_names_the_run_and_folder_and_the_run_recovers(tiny_random_model_dir,
                                                                                        tmp_path, monkeypatch):
    import torch

    import saah_lib.jsonio as jsonio
    from saah_lib.jsonio import DiskFullError

    def config(results):
        return make_config("tiny", model_name=str(tiny_random_model_dir), method="sa", alpha=0.5, max_steps=4,
                           save_steps=2, eval_every=2, n_train=32, n_eval=6, max_completion_length=12,
                           eval_max_new_tokens=12, eval_batch_size=4, results_dir=str(results), seed=0,
                           learning_rate=1e-3)

    reference = RunDir(run_training(config(tmp_path / "a"), progress=False))
    cfg = config(tmp_path / "b")
    real_save = torch.save

    def save(obj, f, *args, **kwargs):  # torch's zip writer on a full disk: a short write, no reason given
        if str(f).endswith("checkpoint-4/optimizer.pt"):
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 4160 vs 4096")
        return real_save(obj, f, *args, **kwargs)

    monkeypatch.setattr(torch, "save", save)
    monkeypatch.setattr(jsonio, "_free_bytes", lambda path: 0)
    with pytest.raises(DiskFullError) as error:
        run_training(cfg, progress=False)
    assert (f"No space left on device while saving the checkpoint of run {cfg.run_id!r} into "
            f"{cfg.run_dir / 'checkpoints' / 'checkpoint-4'}") in str(error.value)
    monkeypatch.undo()
    run_training(cfg, progress=False)  # resumes from checkpoint-2; the torn checkpoint-4 is redone
    run = RunDir(cfg.run_dir)
    assert [r["step"] for r in run.train_log()] == [1, 2, 3, 4] and [r["step"] for r in run.evals()] == [0, 2, 4]
    for got, want in zip(run.train_log(), reference.train_log()):
        assert got["reward_mean"] == pytest.approx(want["reward_mean"], abs=1e-6)
        assert got["loss"] == pytest.approx(want["loss"], abs=1e-5)
