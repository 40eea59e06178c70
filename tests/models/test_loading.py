"""A model loaded from a GGUF file is a plain dense model: transformers' Trainer (and so SAAHGRPOTrainer) takes it."""

import pytest
import torch
from transformers import AutoModelForCausalLM
from transformers.quantizers.base import HfQuantizer
from transformers.trainer_utils import validate_quantization_for_training

from saah_lab.studies.real_model import GGUF_FILE
from saah_lib.models import loading


@pytest.mark.slow  # dequantising the file takes about 20 s of CPU
def test_a_gguf_model_loads_without_its_stale_quantisation_marks(smollm2_folder):
    model, tokenizer = loading.load_gguf_model_and_tokenizer(smollm2_folder, GGUF_FILE)
    assert getattr(model, "hf_quantizer", None) is None and not model.is_quantized
    assert getattr(model.config, "quantization_config", None) is None
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    assert tokenizer.pad_token is not None and model.config.vocab_size == 49152
    validate_quantization_for_training(model)  # transformers' Trainer's check: passes


@pytest.mark.slow
def test_with_the_marks_kept_transformers_refuses_to_train_it(smollm2_folder, monkeypatch):
    """The check above can fail: the same load without removing the marks is refused as transformers refuses it."""
    monkeypatch.setattr(HfQuantizer, "remove_quantization_config", lambda self, model: None)
    model, _ = loading.load_gguf_model_and_tokenizer(smollm2_folder, GGUF_FILE)
    # without adapters transformers says "purely quantized", with them "GGUF ... do not support training"
    with pytest.raises(ValueError, match="fine-tuning on purely quantized models|GGUF but that quantization method"):
        validate_quantization_for_training(model)


def test_weights_left_packed_are_refused(tiny_random_model_dir, tmp_path, monkeypatch):
    """A parameter that is not the asked dtype (GGUF blocks kept packed) is an error, not a model marked plain."""
    model = AutoModelForCausalLM.from_pretrained(tiny_random_model_dir)
    model.lm_head.weight = torch.nn.Parameter(model.lm_head.weight.detach().to(torch.float16), requires_grad=False)
    monkeypatch.setattr(loading.AutoModelForCausalLM, "from_pretrained", lambda *a, **k: model)
    monkeypatch.setattr(loading.AutoTokenizer, "from_pretrained", lambda *a, **k: None)
    (tmp_path / "model.gguf").write_bytes(b"")
    with pytest.raises(RuntimeError, match="1 parameters are not dequantised to float32"):
        loading.load_gguf_model_and_tokenizer(tmp_path, "model.gguf")


def test_a_missing_gguf_file_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="no GGUF file 'absent.gguf'"):
        loading.load_gguf_model_and_tokenizer(tmp_path, "absent.gguf")
