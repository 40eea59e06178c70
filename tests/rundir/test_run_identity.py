"""A run resumes only its own state: the checkpoint's saved arguments and the folder's config.json are checked
against the run being launched before anything in the folder is moved or written (issue 39, items 1, 2, 14)."""

import io
import pickle
import shutil
import zipfile

import pytest
from transformers import TrainerCallback

from saah_lab.rundir.checkpoints import checkpoints, saved_training_args
from saah_lab.training import launch
from saah_lab.training.run import run_training
from saah_lib.rundir.folder import RunDir, RunFolderError
from saah_lib.training.config import make_config

pytestmark = pytest.mark.slow

SETTINGS = dict(max_steps=4, save_steps=1, eval_every=2, n_train=32, n_eval=6, max_completion_length=12,
                eval_max_new_tokens=12, eval_batch_size=4, seed=0, learning_rate=1e-3)


class StopAfterTwo(TrainerCallback):
    def on_step_end(self, args, state, control, **kwargs):
        control.should_training_stop = state.global_step == 2


def config(model_dir, results, method, run_id, **overrides):
    return make_config("tiny", model_name=str(model_dir), method=method, alpha=0.5, results_dir=str(results),
                       run_id=run_id, **{**SETTINGS, **overrides})


def launch_argv(model_dir, results, method, run_id, alpha=0.5, learning_rate=1e-3):
    fields = {**SETTINGS, "learning_rate": learning_rate}
    return ["--profile", "tiny", "--method", method, "--alpha", str(alpha), "--run-id", run_id,
            "--results-dir", str(results), "--model-name", str(model_dir), "--no-progress",
            *[f"--{name.replace('_', '-')}={value}" for name, value in fields.items()]]


@pytest.fixture(scope="module")
def stopped_runs(tiny_random_model_dir, tmp_path_factory):
    """A grpo and an sa run with the same settings, each stopped after step 2 (checkpoints 1 and 2)."""
    root = tmp_path_factory.mktemp("stopped_runs")
    for method in ("grpo", "sa"):
        run_training(config(tiny_random_model_dir, root, method, method), callbacks=[StopAfterTwo()], progress=False)
        assert list(checkpoints(RunDir(root / "runs" / method).checkpoints_dir)) == [1, 2]
    return root


@pytest.fixture
def results(stopped_runs, tmp_path):
    shutil.copytree(stopped_runs, tmp_path / "results")
    return tmp_path / "results"


def files(folder):
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def refused(argv, capsys) -> str:
    """launch's exit status 1 and its message (no traceback)."""
    with pytest.raises(SystemExit) as stop:
        launch.main(argv)
    assert stop.value.code == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


def test_a_checkpoint_of_another_run_is_refused_and_nothing_changes(results, tiny_random_model_dir, capsys):
    grpo = results / "runs" / "grpo"
    shutil.rmtree(grpo / "checkpoints" / "checkpoint-2")
    shutil.copytree(results / "runs" / "sa" / "checkpoints" / "checkpoint-2", grpo / "checkpoints" / "checkpoint-2")
    before = files(grpo)

    err = refused(launch_argv(tiny_random_model_dir, results, "grpo", "grpo"), capsys)

    assert f"{grpo / 'checkpoints' / 'checkpoint-2'}" in err and "another run's" in err
    assert "method: checkpoint 'sa', run 'grpo'" in err and "alpha: checkpoint 0.5, run 0.0" in err
    assert files(grpo) == before


def test_a_checkpoint_saved_with_another_learning_rate_is_refused(results, tiny_random_model_dir):
    cfg = config(tiny_random_model_dir, results, "sa", "sa")
    run = RunDir(cfg.run_dir)
    # config.json agrees with the new settings, the checkpoints do not (a config.json restored from another run)
    other = config(tiny_random_model_dir, results, "sa", "sa", learning_rate=5e-4)
    run.config_path.write_text(run.config_path.read_text().replace('"learning_rate": 0.001', '"learning_rate": 0.0005'))
    before = files(run.dir)
    with pytest.raises(RunFolderError, match=r"learning_rate: checkpoint 0.001, run 0.0005"):
        run_training(other, progress=False)
    assert files(run.dir) == before


def test_logs_and_checkpoints_without_config_json_are_refused(results, tiny_random_model_dir, capsys):
    grpo = results / "runs" / "grpo"
    (grpo / "config.json").unlink()
    before = files(grpo)

    err = refused(launch_argv(tiny_random_model_dir, results, "sa", "grpo", alpha=2.0), capsys)

    assert f"run folder {grpo} holds" in err and "train_log.jsonl" in err and "checkpoint-2" in err
    assert "no config.json" in err
    assert files(grpo) == before  # no config.json written over the grpo logs


def test_other_settings_are_refused_before_a_damaged_checkpoint_is_moved(results, tiny_random_model_dir, capsys):
    sa = results / "runs" / "sa"
    weights = sa / "checkpoints" / "checkpoint-2" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    before = files(sa)

    err = refused(launch_argv(tiny_random_model_dir, results, "sa", "sa", learning_rate=5e-4), capsys)

    assert "already exists with different settings (learning_rate: 0.001 -> 0.0005)" in err and str(sa) in err
    assert files(sa) == before and not (sa / "checkpoints" / "damaged").exists()


def test_the_run_resumes_its_own_checkpoint(results, tiny_random_model_dir, capsys):
    run_dir = launch.main(launch_argv(tiny_random_model_dir, results, "sa", "sa"))
    assert "resuming sa from step 2" in capsys.readouterr().out
    assert [r["step"] for r in RunDir(run_dir).train_log()] == [1, 2, 3, 4]


def test_the_saved_arguments_are_read_without_running_the_pickle(stopped_runs, tmp_path):
    saved = saved_training_args(stopped_runs / "runs" / "sa" / "checkpoints" / "checkpoint-2")
    assert (saved["method"], saved["alpha"], saved["seed"], saved["lr_scheduler_type"]) == ("sa", 0.5, 0, "cosine")

    class Boom:  # a pickle that would run a command when loaded
        def __reduce__(self):
            return (exec, ("open(%r, 'w').write('ran')" % str(tmp_path / "ran"),))

    hostile = tmp_path / "hostile"
    hostile.mkdir()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("training_args/data.pkl", pickle.dumps(Boom(), protocol=2))
    (hostile / "training_args.bin").write_bytes(buffer.getvalue())
    with pytest.raises(ValueError, match="holds no training arguments"):
        saved_training_args(hostile)
    assert not (tmp_path / "ran").exists()


def test_a_checkpoint_of_another_model_is_refused(results, tiny_random_model_dir):
    cfg = config(tiny_random_model_dir, results, "sa", "sa")
    run = RunDir(cfg.run_dir)
    model_config = run.checkpoints_dir / "checkpoint-2" / "config.json"
    model_config.write_text(model_config.read_text().replace('"hidden_size": 32', '"hidden_size": 64'))
    before = files(run.dir)
    with pytest.raises(RunFolderError, match=r"config.json: hidden_size: checkpoint 64, run 32"):
        run_training(cfg, progress=False)
    assert files(run.dir) == before


def test_a_lora_run_resumes_its_own_checkpoint(tiny_random_model_dir, tmp_path, capsys):
    lora = dict(use_lora=True, lora_target_modules=["v_proj", "q_proj"], lora_r=4)
    run_training(config(tiny_random_model_dir, tmp_path, "sa", "lora", **lora), callbacks=[StopAfterTwo()],
                 progress=False)
    run_dir = run_training(config(tiny_random_model_dir, tmp_path, "sa", "lora", **lora), progress=False)
    assert "resuming lora from step 2" in capsys.readouterr().out
    assert RunDir(run_dir).is_complete(4)
    # back to checkpoint 3 (logs cut to it), and config.json edited to another rank: the adapter says otherwise
    shutil.rmtree(run_dir / "checkpoints" / "checkpoint-4")
    log = run_dir / "train_log.jsonl"
    log.write_text("".join(log.read_text().splitlines(keepends=True)[:3]))
    config_json = run_dir / "config.json"
    config_json.write_text(config_json.read_text().replace('"lora_r": 4', '"lora_r": 8'))
    with pytest.raises(RunFolderError, match=r"adapter_config.json: r: checkpoint 4, run 8"):
        run_training(config(tiny_random_model_dir, tmp_path, "sa", "lora", **{**lora, "lora_r": 8}), progress=False)
