"""Loading a model and its tokenizer by name (hub id, folder, or the tiny warm start built on demand)."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

from saah_lib.models.names import model_location, tiny_warm_start_seed, warm_start_location
from saah_lib.models.warmstart import BUILD_INFO_FILE, build_warm_start, cache_problem
from saah_lib.paths import repo_relative, tiny_warmstart_dir


def resolve_model(model_name: str, progress: bool = True) -> str:
    """The folder (absolute) or hub id to load ``model_name`` from.

    A tiny warm start loads from its committed copy where one ships (checked against its ``files.json``),
    else from the cache, built on first use.
    """
    seed = tiny_warm_start_seed(model_name)
    if seed is None:
        return model_location(model_name)
    folder = warm_start_location(seed)
    if folder != tiny_warmstart_dir(seed):
        if problem := cache_problem(folder):
            raise RuntimeError(f"the committed warm start {repo_relative(folder)} is damaged ({problem}); restore "
                               f"it with `git checkout -- {repo_relative(folder)}`")
        return str(folder)
    return str(build_warm_start(folder, seed=seed, progress=progress))


def check_warm_start_folder(model_name: str) -> None:
    """A tiny warm-start folder named by path (it holds ``build.json``) must hold the files it was built with.

    By name (``tiny-warmstart``) a damaged build is rebuilt (:func:`resolve_model`); by path the folder
    may be a copy the user keeps, so it is refused with what is wrong and how to rebuild it.
    """
    folder = Path(model_name)
    if not (folder / BUILD_INFO_FILE).is_file():
        return
    problem = cache_problem(folder)
    if problem:
        raise RuntimeError(f"the warm-start folder {model_name} is damaged ({problem}). Rebuild it: delete the "
                           "folder and name the model tiny-warmstart (or tiny-warmstart-s<seed>), which builds it "
                           "on first use, or call saah_lib.models.warmstart.build_warm_start(folder, seed, "
                           "force=True).")


def load_model_and_tokenizer(model_name: str, dtype: str = "float32"):
    """Load a causal LM and its tokenizer by hub id or folder, with a clear error when unavailable."""
    torch_dtype = getattr(torch, dtype)
    check_warm_start_folder(model_name)
    try:
        tokenizer = AutoTokenizer.from_pretrained(model_name)
        model = AutoModelForCausalLM.from_pretrained(model_name, dtype=torch_dtype)
    except (OSError, ValueError) as err:
        where = "folder" if Path(model_name).exists() else "hub id"
        raise RuntimeError(
            f"could not load model {model_name!r} ({where}): {err}\n"
            "Pass a local model folder as model_name, or make the model hub reachable "
            "(unset HF_HUB_OFFLINE / log in). The 'tiny' profile needs no hub."
        ) from err
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer


def load_gguf_model_and_tokenizer(folder: str | Path, gguf_file: str, dtype: str = "float32"):
    """A causal LM and its tokenizer from a GGUF file, dequantised to ``dtype``: a plain model that trains.

    transformers dequantises every weight of the file at load time, yet keeps the model marked as
    GGUF-quantised (``hf_quantizer``, ``quantization_method``, ``is_quantized`` and the config's
    ``quantization_config``).  Those stale marks make transformers' ``Trainer`` refuse to train it ("quantized
    with GGUF ... do not support training"), PEFT treat it as a quantised base, and ``save_pretrained`` refuse
    to save it, although its weights are ordinary dense tensors.  Dequantisation is asked for explicitly (on a
    device with GGUF matmul kernels transformers would otherwise keep the blocks packed), checked on every
    parameter, and only then are the marks removed, with transformers' own ``remove_quantization_config``.
    """
    torch_dtype = getattr(torch, dtype)
    path = Path(folder) / gguf_file
    if not path.is_file():
        raise FileNotFoundError(f"no GGUF file {gguf_file!r} in {folder}")
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=gguf_file)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=gguf_file, dtype=torch_dtype,
                                                 quantization_config=GgufConfig(dequantize=True))
    packed = [name for name, p in model.named_parameters() if p.dtype != torch_dtype]
    if packed:
        raise RuntimeError(f"{path.name}: {len(packed)} parameters are not dequantised to {dtype} "
                           f"(first: {packed[0]}), so the model cannot be trained as a dense model")
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is not None:
        quantizer.remove_quantization_config(model)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer


def load_for_eval(model_path: str | Path, dtype: str = "float32", device: str | None = None):
    """A model folder or a LoRA adapter folder (``adapter_config.json``), with its tokenizer."""
    path = Path(model_path)
    adapter_config = path / "adapter_config.json"
    if adapter_config.exists():
        base = json.loads(adapter_config.read_text())["base_model_name_or_path"]
        model, tokenizer = load_model_and_tokenizer(base, dtype)
        model = PeftModel.from_pretrained(model, path)
    else:
        model, tokenizer = load_model_and_tokenizer(str(model_path), dtype)
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    return model.to(device), tokenizer
