"""A CPU-sized stand-in for Qwen2.5: its tokenizer and its (untrained) model.

* a ``Qwen2Tokenizer`` (the class Qwen2.5 itself loads as): byte-level BPE with Qwen's pre-tokenisation, so every
  digit is its own token, and merges fitted to a corpus (:func:`saah_lib.models.warmstart.tokenizer_corpus`: the
  synthetic problems and the system prompt), so their words are single tokens and prompts stay short; any other text
  still round-trips through the 256 byte tokens. The four reward tags and the ChatML markers are atomic tokens and the
  chat template is ChatML, so :func:`saah_lib.tasks.prompts.make_prompt` renders prompts as it does for Qwen;
* a ``Qwen2ForCausalLM`` sized by :class:`saah_lib.models.warmstart.WarmStartSettings` (two layers, about 0.6M
  parameters by default).

The same code paths load it by folder as they load Qwen (``AutoModelForCausalLM.from_pretrained``,
``AutoTokenizer.from_pretrained``).
"""

from __future__ import annotations

import json

from tokenizers import AddedToken, Regex, Tokenizer, pre_tokenizers, trainers
from tokenizers import models as tokenizer_models
from transformers import Qwen2Config, Qwen2ForCausalLM, Qwen2Tokenizer

from saah_lib.method.reward import TAGS

PAD_TOKEN = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SPECIAL_TOKENS = (PAD_TOKEN, IM_START, IM_END)
# Qwen2's pre-tokenisation pattern: single digits, words with their leading space, punctuation runs, newlines.
PRETOKENIZE_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# ChatML, as Qwen2.5 writes it (without Qwen's default system message).
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
CHAT_ROLES = ("system", "user", "assistant")


def _pre_tokenizer():
    """Qwen2's pre-tokenisation: the split pattern, then the byte-to-unicode map."""
    return pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PRETOKENIZE_PATTERN), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])


def train_bpe(texts: list[str], min_word_count: int = 2
              ) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """Vocabulary and merges of a byte-level BPE trained on ``texts``.

    Training runs until no pair occurs ``min_word_count`` times, so every frequent word of the corpus ends up a
    single token while the 256 byte tokens keep any other text representable.
    """
    tokenizer = Tokenizer(tokenizer_models.BPE())
    tokenizer.pre_tokenizer = _pre_tokenizer()
    trainer = trainers.BpeTrainer(
        vocab_size=100_000,  # never reached: min_frequency stops training first
        min_frequency=min_word_count,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer)
    state = json.loads(tokenizer.to_str())["model"]
    return state["vocab"], [tuple(pair) for pair in state["merges"]]


def build_tokenizer(texts: list[str], min_word_count: int = 2):
    """A ``Qwen2Tokenizer`` (the class Qwen2.5 loads as) with a vocabulary fitted to ``texts``.

    Building the real Qwen2 class matters: ``AutoTokenizer`` loads any ``qwen2`` model folder as
    ``Qwen2Tokenizer`` and rebuilds the pipeline from vocabulary and merges, so a custom pipeline would not
    survive a save/load round trip.
    """
    vocab, merges = train_bpe(texts, min_word_count)
    tokenizer = Qwen2Tokenizer(
        vocab=vocab,
        merges=merges,
        unk_token=None,
        bos_token=None,
        eos_token=IM_END,
        pad_token=PAD_TOKEN,
        additional_special_tokens=[IM_START],
        clean_up_tokenization_spaces=False,
    )
    # Not "special": decoding with skip_special_tokens=True must keep the tags,
    # since the reward reads them from the decoded text.
    tokenizer.add_tokens([AddedToken(tag, special=False, normalized=False) for tag in TAGS])
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def init_tiny_model(tokenizer, settings):
    """A freshly initialised ``Qwen2ForCausalLM`` sized by ``settings`` (a :class:`~saah_lib.models.warmstart.WarmStartSettings`)."""
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=settings.hidden_size,
        intermediate_size=settings.intermediate_size,
        num_hidden_layers=settings.num_layers,
        num_attention_heads=settings.num_heads,
        num_key_value_heads=settings.num_kv_heads,
        max_position_embeddings=settings.max_positions,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = Qwen2ForCausalLM(config)
    # Plain greedy decoding unless a caller asks otherwise (Qwen ships
    # sampling defaults; a tiny model should not surprise anyone with them).
    generation = model.generation_config
    generation.eos_token_id = tokenizer.eos_token_id
    generation.pad_token_id = tokenizer.pad_token_id
    generation.bos_token_id = None
    generation.do_sample = False
    return model


def parameter_count(model) -> int:
    return sum(p.numel() for p in model.parameters())
