"""run_training and baseline_for find bad input before loading a model or writing a file."""

import importlib.util

import pytest

import saah_lab.training.run as train
from saah_lib.tasks.gsm8k import check_gsm8k_dir
from saah_lib.training.config import make_config


@pytest.fixture
def no_model_loading(monkeypatch):
    """Any attempt to build or load a model fails the test: the checks must come first."""
    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded before the inputs were checked")

    monkeypatch.setattr(train, "load_model_and_tokenizer", refuse)
    monkeypatch.setattr(train, "resolve_model", refuse)


def _gsm8k_folder(tmp_path, files=("train.jsonl", "test.jsonl")):
    folder = tmp_path / "gsm8k"
    folder.mkdir()
    for name in files:
        (folder / name).write_text('{"question": "q", "answer": "#### 1"}\n')
    return folder


def _model_folder(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    return folder


@pytest.mark.parametrize("files, message", [
    ((), "gsm8k' \\(from data_dir\\) has no train.jsonl or test.jsonl"),
    (("train.jsonl",), "has no test.jsonl"),
])
def test_missing_gsm8k_files_are_found_before_the_model_loads(tmp_path, no_model_loading, files, message):
    data = _gsm8k_folder(tmp_path, files)
    cfg = make_config("tiny", dataset="gsm8k", data_dir=str(data), results_dir=str(tmp_path / "results"),
                      model_name=str(_model_folder(tmp_path)))
    with pytest.raises(FileNotFoundError, match=message):
        train.run_training(cfg, progress=False)
    with pytest.raises(FileNotFoundError, match=message):
        train.baseline_for(cfg, progress=False)
    assert not (tmp_path / "results").exists()


def test_missing_gsm8k_folder_and_bad_environment_variable_are_named(tmp_path, monkeypatch, no_model_loading):
    cfg = make_config("tiny", dataset="gsm8k", data_dir=str(tmp_path / "nowhere"), results_dir=str(tmp_path / "r"),
                      model_name=str(_model_folder(tmp_path)))
    with pytest.raises(FileNotFoundError, match="nowhere' \\(from data_dir\\) does not exist"):
        train.run_training(cfg, progress=False)
    monkeypatch.setenv("SAAH_GSM8K_DIR", str(tmp_path / "elsewhere"))
    cfg.data_dir = None
    with pytest.raises(FileNotFoundError, match="elsewhere' \\(from \\$SAAH_GSM8K_DIR\\) does not exist"):
        train.run_training(cfg, progress=False)
    assert not (tmp_path / "r").exists()


def test_a_model_folder_without_a_model_is_found_before_loading(tmp_path, no_model_loading):
    empty = tmp_path / "empty_model"
    empty.mkdir()
    with pytest.raises(ValueError, match="'model_name': folder .* holds no model"):
        make_config("tiny", model_name=str(empty), results_dir=str(tmp_path / "r"))
    assert not (tmp_path / "r").exists()


def test_check_gsm8k_dir_accepts_a_complete_folder_and_the_hub(tmp_path, monkeypatch):
    monkeypatch.delenv("SAAH_GSM8K_DIR", raising=False)
    folder = _gsm8k_folder(tmp_path)
    assert check_gsm8k_dir(folder) == folder
    assert check_gsm8k_dir(None) is None  # the hub: checked when loaded (still before the model)


# --------------------------------------------------------------------------
# every check before the first write
# --------------------------------------------------------------------------

def _nothing_written(results):
    assert not results.exists() or not any(results.rglob("config.json")), sorted(results.rglob("*"))


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vllm is installed")
def test_the_vllm_backend_without_vllm_fails_before_anything_is_written(tmp_path, no_model_loading):
    cfg = make_config("tiny", generation_backend="vllm", results_dir=str(tmp_path / "results"),
                      model_name=str(_model_folder(tmp_path)))
    with pytest.raises(ImportError, match="generation_backend='vllm'.*needs the 'vllm' package"):
        train.run_training(cfg, progress=False)
    assert not (tmp_path / "results").exists()


def test_a_results_dir_that_is_a_file_is_named(tmp_path, no_model_loading):
    (tmp_path / "results").write_text("not a folder")
    model = str(_model_folder(tmp_path))
    cfg = make_config("tiny", results_dir=str(tmp_path / "results"), model_name=model)
    with pytest.raises(ValueError, match=r"config field 'results_dir': .*results is a file, not a folder"):
        train.run_training(cfg, progress=False)
    with pytest.raises(ValueError, match=r"config field 'results_dir': .*results is a file"):
        train.baseline_for(cfg, progress=False)
    cfg = make_config("tiny", results_dir=str(tmp_path / "r2"), model_name=model)
    cfg.run_dir.parent.mkdir(parents=True)
    cfg.run_dir.write_text("a file where the run folder goes")
    with pytest.raises(ValueError, match=r"config field 'run_id': .* is a file, not a folder"):
        train.run_training(cfg, progress=False)


@pytest.mark.parametrize("name", ["./no-such-model", "no-such-org/no-such-model"])
def test_a_missing_model_folder_is_named_before_anything_is_written(tmp_path, monkeypatch, no_model_loading, name):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)  # as in every test: nothing reaches the hub
    with pytest.raises(ValueError, match=r"config field 'model_name': .*no-such-model"):
        cfg = make_config("tiny", results_dir=str(tmp_path / "results"), model_name=name)
        train.run_training(cfg, progress=False)
    _nothing_written(tmp_path / "results")


def test_overrides_must_be_a_mapping(tmp_path):
    from saah_lab.studies.plans import ablation_plan

    with pytest.raises(ValueError, match=r"overrides must be a mapping of config field names.*got list"):
        make_config("tiny", overrides=["learning_rate", 1e-5])
    with pytest.raises(ValueError, match=r"overrides must be a mapping"):
        ablation_plan([0.1], overrides=[("learning_rate", 1e-5)], results_dir=str(tmp_path))
    assert make_config("tiny", overrides={"learning_rate": 1e-5}).trainer.learning_rate == 1e-5
    assert make_config("tiny", overrides={"seed": 3}, seed=4).trainer.seed == 4  # a named field wins
    assert not any(tmp_path.iterdir())


def test_entropy_top_k_above_the_vocabulary_is_named_before_anything_is_written(tmp_path, tiny_random_model_dir):
    from transformers import AutoConfig

    vocab = AutoConfig.from_pretrained(tiny_random_model_dir).vocab_size
    cfg = make_config("tiny", entropy_top_k=vocab + 1, results_dir=str(tmp_path / "results"),
                      model_name=str(tiny_random_model_dir))
    with pytest.raises(ValueError, match=rf"config field 'entropy_top_k': {vocab + 1} is larger than the model's "
                                         rf"vocabulary of {vocab} tokens"):
        train.run_training(cfg, progress=False)
    assert not (tmp_path / "results").exists()
