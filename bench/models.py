"""The benchmarked model: a model folder, the tiny warm start, or a Qwen2.5 architecture with random weights."""

from __future__ import annotations

import platform
from pathlib import Path

import torch
from datasets import Dataset
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

from saah_lib.models.loading import load_model_and_tokenizer, resolve_model
from saah_lib.models.names import TINY_WARMSTART
from saah_lib.tasks.synthetic import generate_problems

# The published Qwen2.5 Instruct architectures (config.json of each checkpoint).
QWEN25_ARCHITECTURES = {
    "qwen2.5-1.5b": dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
                         num_attention_heads=12, num_key_value_heads=2),
    "qwen2.5-3b": dict(hidden_size=2048, intermediate_size=11008, num_hidden_layers=36,
                       num_attention_heads=16, num_key_value_heads=2),
}
QWEN25_COMMON = dict(vocab_size=151936, max_position_embeddings=32768, rope_theta=1_000_000.0,
                     rms_norm_eps=1e-6, tie_word_embeddings=True, hidden_act="silu")
#: The CPU checks' Qwen2 (preflight, gpu): 2 layers, grouped-query attention, seconds to compile on CPU.
SMALL_QWEN2 = dict(vocab_size=1024, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                   tie_word_embeddings=True)


def device() -> str:
    """Where the measured model runs: ``cuda`` when there is a GPU, else ``cpu``."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def device_name() -> str:
    """The device the measurement runs on: the GPU's name, else ``cpu-<machine>`` (the result file's prefix)."""
    if torch.cuda.is_available():
        return torch.cuda.get_device_name(0)
    return f"cpu-{platform.machine()}"


def file_stem(cpu_model: str) -> str:
    """``Intel(R) Xeon(R) Processor @ 2.50GHz`` -> ``Intel_Xeon_Processor_2.50GHz``: a file name per machine."""
    for mark in ("(R)", "(TM)", "(tm)", "@"):
        cpu_model = cpu_model.replace(mark, " ")
    return "_".join(cpu_model.split())


def result_file(out_dir: Path, what: str) -> Path:
    """``<device>-<what>.json`` in ``out_dir``: one measurement of each kind per device."""
    return Path(out_dir) / f"{device_name().replace(' ', '_')}-{what}.json"


def model_dtype(cfg) -> torch.dtype:
    """The profile's dtype on CUDA; float32 on CPU, where the benchmarks time float32."""
    return torch.bfloat16 if cfg.dtype == "bfloat16" and torch.cuda.is_available() else torch.float32


def qwen25_config(profile: str, num_layers: int | None = None, **changes) -> Qwen2Config:
    arch = dict(QWEN25_COMMON, **QWEN25_ARCHITECTURES[profile], **changes)
    if num_layers is not None:
        arch["num_hidden_layers"] = num_layers
    return Qwen2Config(**arch)


def filler_tokenizer(vocab_size: int):
    """A tokenizer with exactly ``vocab_size`` entries, so any generated id decodes.

    Real Qwen tokenizers cannot be downloaded here; for timing only the vocabulary size (the LM head) matters.
    """
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    vocab = specials + alphabet
    vocab += [f"w{i}" for i in range(vocab_size - len(vocab))]
    tok = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(vocab)}, merges=[], ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True) for t in specials])
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>")


def model_description(profile: str, model_dir: str | None) -> str:
    if model_dir is not None:
        return f"model folder {model_dir}"
    return "tiny warm start" if profile == "tiny" else f"{profile} architecture, random weights"


def build_model(profile: str, dtype: torch.dtype, num_layers: int | None, seed: int = 0,
                model_dir: str | None = None):
    """(model, tokenizer): a model folder, the tiny warm start, or a random-weight Qwen2.5."""
    if model_dir is not None:
        return load_model_and_tokenizer(model_dir)
    if profile == "tiny":
        return load_model_and_tokenizer(resolve_model(TINY_WARMSTART, progress=False))
    model, tokenizer = random_qwen2(qwen25_config(profile, num_layers), dtype, seed)
    model.generation_config.eos_token_id = None  # never stop early: full-length completions
    return model, tokenizer


def random_qwen2(config: Qwen2Config, dtype: torch.dtype, seed: int = 0):
    """(model, tokenizer): a Qwen2 of ``config`` with seeded random weights, and a tokenizer that decodes any id."""
    torch.manual_seed(seed)
    return Qwen2ForCausalLM(config).to(dtype), filler_tokenizer(config.vocab_size)


def prompts_dataset(n: int, tokenizer, prompt_tokens: int) -> Dataset:
    """Prompts of a fixed token length (GSM8K prompts are ~150-250 Qwen tokens)."""
    problems = generate_problems(n, seed=0)
    prompts = []
    for p in problems:
        ids = tokenizer(p.question * 50, add_special_tokens=False)["input_ids"][:prompt_tokens]
        prompts.append(tokenizer.decode(ids))
    return Dataset.from_dict({"prompt": prompts, "answer": [p.answer for p in problems]})
