"""run_training and baseline_for find bad input before loading a model or writing a file."""

import pytest

import saah_lib.training.run as train
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


def test_a_config_changed_after_creation_is_checked_before_any_folder(tmp_path, no_model_loading):
    cfg = make_config("tiny", results_dir=str(tmp_path / "results"), model_name=str(_model_folder(tmp_path)))
    cfg.seed = "abc"
    with pytest.raises(ValueError, match="config field 'seed'"):
        train.run_training(cfg, progress=False)
    assert not (tmp_path / "results").exists()


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
