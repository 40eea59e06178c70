"""Shared test fixtures.  Tests never reach a model or dataset hub."""

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

# The test models are tiny: one thread is faster than two, and far faster when
# the two cores are shared with anything else (OpenMP threads spin-wait).
torch.set_num_threads(1)

# The offline GSM8K copy lives next to the repository: <repo>/../shared/data/gsm8k
GSM8K_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "gsm8k"


@pytest.fixture(scope="session")
def gsm8k_dir() -> Path:
    """Folder with the official GSM8K train.jsonl/test.jsonl; skips when absent."""
    if not ((GSM8K_DIR / "train.jsonl").is_file() and (GSM8K_DIR / "test.jsonl").is_file()):
        pytest.skip(f"GSM8K data not found at {GSM8K_DIR}")
    return GSM8K_DIR


@pytest.fixture(scope="session")
def tiny_random_model_dir(tmp_path_factory) -> Path:
    """A randomly initialised ~100k-parameter Qwen2 model with the tiny tokenizer, saved as a model folder."""
    import torch

    from saah_lib.tiny_model import WarmStartSettings, build_model, build_tokenizer, tokenizer_corpus

    torch.manual_seed(0)
    settings = WarmStartSettings(hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=1, intermediate_size=64,
                                 tokenizer_problems=300)
    tokenizer = build_tokenizer(tokenizer_corpus(settings, seed=0))
    model = build_model(tokenizer, settings)
    folder = tmp_path_factory.mktemp("tiny_random_model")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
