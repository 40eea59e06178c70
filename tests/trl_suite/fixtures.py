"""The models and data sets TRL's GRPOTrainer tests name on the Hub, built offline.

TRL's tests load ``trl-internal-testing/tiny-*`` models and the ``trl-internal-testing/zen*`` data sets. Neither
is reachable here, so this module builds stand-ins of the same shapes:

* models: each architecture from its transformers config with TRL's tiny sizes (2 layers, hidden size 8, 4
  attention heads, 2 key/value heads, intermediate size 32; reward models hidden size 16; MoE models 4 experts,
  2 per token; VLMs a 2-layer, hidden-16 text model and a 2-layer vision tower), saved in the dtype TRL saves them
  in, with one byte-level BPE tokenizer (:func:`saah_lib.models.tiny.build_tokenizer`) fitted to the zen texts
  and given the image tokens the VLM processors need. They are written into a Hugging Face Hub cache folder
  (``models--org--name/snapshots/<commit>/``), so that with ``HF_HUB_CACHE`` pointing there and
  ``HF_HUB_OFFLINE=1`` every ``from_pretrained`` (config, model, tokenizer, processor, remote code) resolves them
  as it resolves a downloaded model;
* data sets: the zen prompts (TRL's "Zen of Python" split into prompt and completion) in the configurations the
  tests read (``standard_prompt_only``, ``conversational_prompt_only``; ``zen-image``'s and
  ``zen-multi-image``'s conversational prompts with random images), 19 rows split 17/2 into train and test as
  TRL's script splits them, saved as Parquet files that :func:`local_dataset_files` names for ``load_dataset``.

Models the harness cannot build (their processors need files only the Hub has) are not built; the plugin
reports tests that need them as skipped, naming the model.

Run as a script (``python tests/trl_suite/fixtures.py FOLDER``) it builds everything into FOLDER.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from pathlib import Path

#: Bump when a builder changes, so a cache built by an older harness is rebuilt.
BUILD_VERSION = "3"
ORG = "trl-internal-testing"
#: The commit every snapshot is filed under (the Hub cache's refs/main points to it).
COMMIT = hashlib.sha1(f"saah-trl-suite-{BUILD_VERSION}".encode()).hexdigest()

ZEN_PROMPTS = (
    "Beautiful is better than", "Explicit is", "Simple is better", "Complex", "Flat is better than",
    "Sparse is better", "Readability", "Special cases aren't special", "Although practicality beats",
    "Errors should never", "Unless explicitly", "In the face of ambiguity, refuse",
    "There should be one-- and preferably", "Although that way may not be obvious at first unless you're",
    "Now is", "Although never is often", "If the implementation is hard to explain,",
    "If the implementation is easy", "Namespaces are one honking great",
)
ZEN_QUESTIONS = (
    "What is better than ugly?", "What is better than implicit?", "What is better than complex?",
    "What is better than complicated?", "What is better than nested?", "What is better than dense?",
    "What counts?", "Are special cases enough to break the rules?", "What beats purity?",
    "What should never pass silently?", "When can errors pass silently?", "What should you do in the face of ambiguity?",
    "How many ways should there be to do it?", "For whom may the way not be obvious at first?",
    "What is better than never?", "Is never better than right now?",
    "What does it mean if the implementation is hard to explain?",
    "What does it mean if the implementation is easy to explain?", "Any great ideas?",
)
TEST_ROWS = 2  # TRL's script: train_test_split(test_size=0.1, shuffle=False) of 19 rows

# Image tokens of Qwen2-VL's processor and chat template.
VISION_TOKENS = ("<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>")
# Qwen2.5's ids of the tokens the tests and processors use, its tokenizer's length and its models' vocabulary
QWEN_SPECIAL_IDS = {"<|endoftext|>": 151643, "<|im_start|>": 151644, "<|im_end|>": 151645,
                    "<|vision_start|>": 151652, "<|vision_end|>": 151653, "<|image_pad|>": 151655,
                    "<|video_pad|>": 151656}
QWEN_TOKENIZER_SIZE = 151665
QWEN_VOCAB_SIZE = 152064
# ChatML that also renders image parts (``{"type": "image"}``) as Qwen2-VL does.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' }}"
    "{%- if message['content'] is string %}{{- message['content'] }}"
    "{%- else %}{%- for part in message['content'] %}"
    "{%- if part['type'] == 'image' %}{{- '<|vision_start|><|image_pad|><|vision_end|>' }}"
    "{%- elif part['type'] == 'text' %}{{- part['text'] }}{%- endif %}"
    "{%- endfor %}{%- endif %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
TEXT_SIZES = {"hidden_size": 8, "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2,
                  "intermediate_size": 32}
REWARD_SIZES = dict(TEXT_SIZES, hidden_size=16)

# Remote code for ``tiny-RemoteForCausalLM`` (test_trust_remote_code): a Qwen2 under another model type, so that
# loading it needs trust_remote_code, as TRL's remote model does.
REMOTE_CONFIGURATION = '''\
from transformers import Qwen2Config


class RemoteConfig(Qwen2Config):
    model_type = "remote"
'''
REMOTE_MODELING = '''\
from transformers import Qwen2ForCausalLM

from .configuration_remote import RemoteConfig


class RemoteForCausalLM(Qwen2ForCausalLM):
    config_class = RemoteConfig
'''


def repo_folder(hub_cache: Path, repo_id: str, kind: str = "models") -> Path:
    """The snapshot folder of ``repo_id`` in a Hub cache laid out as ``huggingface_hub`` lays it out."""
    return hub_cache / f"{kind}--{repo_id.replace('/', '--')}" / "snapshots" / COMMIT


def _file_snapshot(hub_cache: Path, repo_id: str) -> Path:
    """An empty snapshot folder for ``repo_id`` with refs/main pointing to it."""
    root = hub_cache / f"models--{repo_id.replace('/', '--')}"
    shutil.rmtree(root, ignore_errors=True)
    (root / "refs").mkdir(parents=True)
    (root / "refs" / "main").write_text(COMMIT)
    folder = root / "snapshots" / COMMIT
    folder.mkdir(parents=True)
    return folder


def build_tokenizer():
    """The one tokenizer of every model: a byte-level BPE fitted to the zen texts, with ChatML, its special and
    image tokens at Qwen2.5's ids and a vocabulary as long as Qwen2.5's.

    Qwen's ids matter: TRL's tests hard-code them (a mocked ``generate`` returns ``<|im_end|>`` as 151645 and pads
    with 151643), and rely on a vocabulary so large that a random model hardly ever samples the end of sequence.
    The ids between the fitted tokens and the special ones are filler tokens (``<|filler_N|>``) no text maps to.
    """
    from tokenizers import AddedToken
    from transformers import Qwen2Tokenizer

    from saah_lib.models.tiny import train_bpe

    fitted, merges = train_bpe(list(ZEN_PROMPTS) + list(ZEN_QUESTIONS) * 2)
    ordinary = sorted((t for t in fitted if t not in QWEN_SPECIAL_IDS), key=fitted.get)
    vocab = {token: i for i, token in enumerate(ordinary)}
    vocab.update({f"<|filler_{i}|>": i for i in range(len(vocab), QWEN_TOKENIZER_SIZE) if i not in
                  QWEN_SPECIAL_IDS.values()})
    vocab.update(QWEN_SPECIAL_IDS)
    tokenizer = Qwen2Tokenizer(vocab=vocab, merges=merges, unk_token=None, bos_token=None, eos_token="<|im_end|>",
                               pad_token="<|endoftext|>", clean_up_tokenization_spaces=False)
    tokenizer.add_tokens([AddedToken(t, special=True, normalized=False) for t in ("<|im_start|>", *VISION_TOKENS)],
                         special_tokens=True)
    tokenizer.chat_template = CHAT_TEMPLATE
    wrong = {t: tokenizer.convert_tokens_to_ids(t) for t, i in QWEN_SPECIAL_IDS.items()
             if tokenizer.convert_tokens_to_ids(t) != i}
    if wrong or len(tokenizer) != QWEN_TOKENIZER_SIZE:
        raise RuntimeError(f"tokenizer ids differ from Qwen2.5's: {wrong}, {len(tokenizer)} tokens")
    return tokenizer


def _generation_config(tokenizer):
    from transformers import GenerationConfig

    return GenerationConfig(eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)


def _ids(tokenizer) -> dict:
    return {"vocab_size": QWEN_VOCAB_SIZE, "eos_token_id": tokenizer.eos_token_id,
                "pad_token_id": tokenizer.pad_token_id, "bos_token_id": None}


def _text_models(tokenizer) -> dict:
    """Hub name -> (config, model class, dtype) of the text models, TRL's tiny shapes."""
    import torch
    import transformers as tf

    ids = _ids(tokenizer)
    moe = dict(TEXT_SIZES, num_experts_per_tok=2, **ids)
    return {
        "tiny-Qwen2ForCausalLM-2.5": (tf.Qwen2Config(**TEXT_SIZES, **ids), tf.Qwen2ForCausalLM, torch.bfloat16),
        "tiny-Qwen3ForCausalLM": (tf.Qwen3Config(**TEXT_SIZES, **ids), tf.Qwen3ForCausalLM, torch.bfloat16),
        "tiny-LlamaForCausalLM-3.2": (tf.LlamaConfig(**TEXT_SIZES, **ids), tf.LlamaForCausalLM, torch.bfloat16),
        "tiny-MistralForCausalLM-0.2": (tf.MistralConfig(**TEXT_SIZES, **ids), tf.MistralForCausalLM,
                                        torch.bfloat16),
        "tiny-Gemma2ForCausalLM": (tf.Gemma2Config(**TEXT_SIZES, **ids), tf.Gemma2ForCausalLM, torch.bfloat16),
        "tiny-Cohere2ForCausalLM": (tf.Cohere2Config(**TEXT_SIZES, **ids), tf.Cohere2ForCausalLM, torch.bfloat16),
        "tiny-Qwen3MoeForCausalLM": (tf.Qwen3MoeConfig(**moe, num_experts=4), tf.Qwen3MoeForCausalLM,
                                     torch.bfloat16),
        "tiny-GptOssForCausalLM": (tf.GptOssConfig(**moe, num_local_experts=4), tf.GptOssForCausalLM,
                                   torch.bfloat16),
        "tiny-Glm4MoeForCausalLM": (tf.Glm4MoeConfig(**moe, n_routed_experts=4), tf.Glm4MoeForCausalLM,
                                    torch.bfloat16),
        "tiny-Qwen2ForSequenceClassification-2.5": (tf.Qwen2Config(**REWARD_SIZES, **ids, num_labels=1),
                                                    tf.Qwen2ForSequenceClassification, torch.bfloat16),
        "tiny-Qwen3ForSequenceClassification": (tf.Qwen3Config(**REWARD_SIZES, **ids, num_labels=1),
                                                tf.Qwen3ForSequenceClassification, torch.bfloat16),
        "tiny-LlamaForSequenceClassification-3.2": (tf.LlamaConfig(**REWARD_SIZES, **ids, num_labels=1),
                                                    tf.LlamaForSequenceClassification, torch.bfloat16),
    }


def _keep_mamba_state_float32(model) -> None:
    """Mamba mixers' ``A_log`` and ``D`` back in float32 after a cast, as NVIDIA's Nemotron-H checkpoints (and
    TRL's tiny copy) store them."""
    for module in model.modules():
        if hasattr(module, "A_log") and hasattr(module, "D"):
            module.A_log.data = module.A_log.data.float()
            module.D.data = module.D.data.float()


def _nemotron_h(tokenizer):
    """Nemotron-H nano with one Mamba, one attention and one MoE block (TRL's tiny shapes), without the Mamba
    kernels (CPU)."""
    import torch
    from transformers import NemotronHConfig, NemotronHForCausalLM

    config = NemotronHConfig(
        hidden_size=16, num_attention_heads=4, num_key_value_heads=2, intermediate_size=32,
        layers_block_type=["mamba", "attention", "moe"], mamba_num_heads=8, mamba_head_dim=4, mamba_n_groups=1,
        ssm_state_size=16, mamba_d_conv=4, mamba_expand=2, n_routed_experts=4, num_experts_per_tok=2,
        moe_intermediate_size=32, moe_shared_expert_intermediate_size=32, use_mamba_kernels=False,
        **_ids(tokenizer))
    return config, NemotronHForCausalLM, torch.bfloat16


def _qwen_vl_models(tokenizer) -> dict:
    """Qwen2-VL and Qwen2.5-VL with TRL's tiny shapes (mrope sections [1, 1] for head size 4)."""
    import torch
    import transformers as tf

    vocab = tokenizer.convert_tokens_to_ids
    token_ids = {"image_token_id": vocab("<|image_pad|>"), "video_token_id": vocab("<|video_pad|>"),
                     "vision_start_token_id": vocab("<|vision_start|>"), "vision_end_token_id": vocab("<|vision_end|>")}
    rope = {"rope_type": "default", "mrope_section": [1, 1], "rope_theta": 1000000.0}
    text = dict(hidden_size=16, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=2,
                intermediate_size=32, rope_parameters=rope, **_ids(tokenizer))
    vision = {"depth": 2, "hidden_size": 16, "num_heads": 4, "embed_dim": 64}
    models = {}
    models["tiny-Qwen2VLForConditionalGeneration"] = (
        tf.Qwen2VLConfig(text_config=text, vision_config=dict(vision), **token_ids),
        tf.Qwen2VLForConditionalGeneration, torch.bfloat16)
    models["tiny-Qwen2_5_VLForConditionalGeneration"] = (
        tf.Qwen2_5_VLConfig(text_config=text, vision_config=dict(vision, out_hidden_size=16, intermediate_size=32,
                                                                 fullatt_block_indexes=[1]), **token_ids),
        tf.Qwen2_5_VLForConditionalGeneration, torch.bfloat16)
    return models


def _qwen_vl_processor(tokenizer, model_class_name: str):
    import transformers as tf

    image_processor = tf.Qwen2VLImageProcessor(min_pixels=28 * 28, max_pixels=64 * 28 * 28)
    processor_class = tf.Qwen2_5_VLProcessor if "2_5" in model_class_name else tf.Qwen2VLProcessor
    return processor_class(image_processor=image_processor, tokenizer=tokenizer,
                           video_processor=tf.Qwen2VLVideoProcessor(), chat_template=CHAT_TEMPLATE)


def vlm_problem() -> str | None:
    """Why the VLMs cannot be built or loaded here, or None: transformers builds (and loads) a Qwen2-VL processor
    only with its video processor, which needs torchvision."""
    import importlib.util

    if importlib.util.find_spec("torchvision") is None:
        return "torchvision is not installed (transformers' Qwen2-VL processors need it)"
    return None


def build_models(hub_cache: Path) -> list[str]:
    """Build every model into the Hub cache (the VLMs only where :func:`vlm_problem` is None); returns the Hub
    ids built."""
    import torch

    tokenizer = build_tokenizer()
    generation = _generation_config(tokenizer)
    built = []

    def save(name, config, model_class, dtype, processor=None):
        torch.manual_seed(0)  # the same weights on every build
        model = model_class(config).to(dtype=dtype)
        _keep_mamba_state_float32(model)
        folder = _file_snapshot(hub_cache, f"{ORG}/{name}")
        model.save_pretrained(folder)
        (processor or tokenizer).save_pretrained(folder)
        if processor is not None:
            tokenizer.save_pretrained(folder)
        generation.save_pretrained(folder)
        built.append(f"{ORG}/{name}")

    for name, (config, model_class, dtype) in _text_models(tokenizer).items():
        save(name, config, model_class, dtype)
    save("tiny-NemotronHForCausalLM-nano", *_nemotron_h(tokenizer))
    if vlm_problem() is None:
        for name, (config, model_class, dtype) in _qwen_vl_models(tokenizer).items():
            save(name, config, model_class, dtype, processor=_qwen_vl_processor(tokenizer, name))
    built.append(_build_remote_model(hub_cache, tokenizer, generation))
    return built


def _build_remote_model(hub_cache: Path, tokenizer, generation) -> str:
    """``tiny-RemoteForCausalLM``: a Qwen2 whose config and model classes live in the model folder."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    repo_id = f"{ORG}/tiny-RemoteForCausalLM"
    folder = _file_snapshot(hub_cache, repo_id)
    torch.manual_seed(0)
    Qwen2ForCausalLM(Qwen2Config(**TEXT_SIZES, **_ids(tokenizer))).to(torch.bfloat16).save_pretrained(folder)
    config = json.loads((folder / "config.json").read_text())
    config.update(model_type="remote", architectures=["RemoteForCausalLM"],
                  auto_map={"AutoConfig": "configuration_remote.RemoteConfig",
                            "AutoModelForCausalLM": "modeling_remote.RemoteForCausalLM"})
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    (folder / "configuration_remote.py").write_text(REMOTE_CONFIGURATION)
    (folder / "modeling_remote.py").write_text(REMOTE_MODELING)
    tokenizer.save_pretrained(folder)
    generation.save_pretrained(folder)
    return repo_id


# ---------------------------------------------------------------------------- data sets


def _random_images(n: int, seed: int, per_row: int = 1):
    """Lists of ``per_row`` random RGB images of 32-63 pixels a side, as TRL's image data sets hold."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(n):
        row = []
        for _ in range(per_row):
            h, w = rng.integers(32, 64, size=2)
            row.append(Image.fromarray(rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8)))
        rows.append(row)
    return rows


def _zen_tables():
    """(data set name, configuration) -> Dataset of the 19 rows."""
    from datasets import Dataset, Features, Image, List, Value

    message = {"role": Value("string"), "content": Value("string")}
    image_message = {"role": Value("string"),
                     "content": List({"type": Value("string"), "text": Value("string")})}
    conversational = [[{"role": "user", "content": q}] for q in ZEN_QUESTIONS]

    def image_prompts(images_per_row: int):
        return [[{"role": "user", "content": [{"type": "image", "text": None}] * images_per_row
                  + [{"type": "text", "text": q}]}] for q in ZEN_QUESTIONS]

    return {
        ("zen", "standard_prompt_only"): Dataset.from_dict(
            {"prompt": list(ZEN_PROMPTS)}, features=Features(prompt=Value("string"))),
        ("zen", "conversational_prompt_only"): Dataset.from_dict(
            {"prompt": conversational}, features=Features(prompt=List(message))),
        ("zen-image", "conversational_prompt_only"): Dataset.from_dict(
            {"prompt": image_prompts(1), "images": _random_images(len(ZEN_QUESTIONS), seed=1)},
            features=Features(prompt=List(image_message), images=List(Image()))),
        ("zen-multi-image", "conversational_prompt_only"): Dataset.from_dict(
            {"prompt": image_prompts(2), "images": _random_images(len(ZEN_QUESTIONS), seed=2, per_row=2)},
            features=Features(prompt=List(image_message), images=List(Image()))),
    }


def build_datasets(data_root: Path) -> list[str]:
    """Write each zen configuration's train and test split as Parquet; returns ``name/config`` of each."""
    built = []
    for (name, config), table in _zen_tables().items():
        folder = data_root / name / config
        folder.mkdir(parents=True, exist_ok=True)
        split = len(table) - TEST_ROWS
        table.select(range(split)).to_parquet(str(folder / "train.parquet"))
        table.select(range(split, len(table))).to_parquet(str(folder / "test.parquet"))
        built.append(f"{name}/{config}")
    return built


def local_dataset_files(data_root: Path, path: str, name: str | None) -> dict[str, str] | None:
    """``{split: parquet file}`` of a zen data set built here, or None when ``path``/``name`` is not one."""
    if not path.startswith(f"{ORG}/") or name is None:
        return None
    folder = data_root / path.removeprefix(f"{ORG}/") / name
    files = {split: folder / f"{split}.parquet" for split in ("train", "test")}
    return {split: str(f) for split, f in files.items() if f.is_file()} or None


# ---------------------------------------------------------------------------- the whole cache


def manifest_path(cache: Path) -> Path:
    return cache / "manifest.json"


def build_all(cache: Path) -> dict:
    """Build models and data sets into ``cache`` (``hub/`` and ``datasets/``) and write its manifest last."""
    cache.mkdir(parents=True, exist_ok=True)
    manifest = {"version": BUILD_VERSION, "models": build_models(cache / "hub"),
                "datasets": build_datasets(cache / "datasets"), "vlm_problem": vlm_problem()}
    manifest_path(cache).write_text(json.dumps(manifest, indent=1))
    return manifest


def read_manifest(cache: Path) -> dict | None:
    """The manifest of a complete build of this harness version, or None."""
    path = manifest_path(cache)
    if not path.is_file():
        return None
    manifest = json.loads(path.read_text())
    return manifest if manifest.get("version") == BUILD_VERSION else None


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python tests/trl_suite/fixtures.py CACHE_FOLDER")
    print(json.dumps(build_all(Path(sys.argv[1])), indent=1))
