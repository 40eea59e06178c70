"""Grouped-query attention for one decoded token without expanding the KV cache.

Why: under ``torch.compile`` transformers' SDPA attention (``integrations/sdpa_attention.py``) takes neither of
its GQA shortcuts: ``pack_gqa`` only runs when not compiling, and ``enable_gqa`` only without a mask, which the
static cache always needs. It then calls ``repeat_kv``, which expands and copies every layer's whole cache
(prompt capacity + new tokens) for every token. Here, for a one-token query, the query heads that share a KV
head become that head's query rows: ``(batch, kv_heads * groups, 1, dim) -> (batch, kv_heads, groups, dim)``;
SDPA then reads the cache as it is. The mask of a decoded token is the same for all its heads (``(batch, 1, 1,
length)``), so it broadcasts over the groups. Prefill (several query tokens) and any case this does not cover go
to transformers' own SDPA function unchanged.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
from transformers import AttentionInterface
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

from saah_lib.models import sdpa_attention

#: The name the attention function is registered under (a model's ``config._attn_implementation``).
GQA_ATTENTION = "saah_gqa_sdpa"


def grouped_decode_attention(module, query, key, value, attention_mask, dropout: float = 0.0,
                             scaling: float | None = None, is_causal: bool | None = None, **kwargs):
    """``sdpa_attention_forward``'s contract; one query token attends per KV head, no ``repeat_kv``."""
    groups = getattr(module, "num_key_value_groups", 1)
    batch, heads, q_len, dim = query.shape
    plain = (q_len != 1 or groups == 1 or dropout != 0.0 or kwargs.get("position_bias") is not None
             or kwargs.get("softcap") is not None or kwargs.get("cache") is not None
             or (attention_mask is not None and attention_mask.size(1) != 1))
    if plain:
        return sdpa_attention(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, **kwargs)
    grouped = query.reshape(batch, heads // groups, groups, dim)
    out = torch.nn.functional.scaled_dot_product_attention(grouped, key, value, attn_mask=attention_mask,
                                                           scale=scaling)
    return out.reshape(batch, heads, 1, value.size(-1)).transpose(1, 2).contiguous(), None


AttentionInterface.register(GQA_ATTENTION, grouped_decode_attention)
ALL_MASK_ATTENTION_FUNCTIONS.register(GQA_ATTENTION, sdpa_mask)


def _configs(model):
    seen = {}
    for module in model.modules():
        config = getattr(module, "config", None)
        if config is not None and hasattr(config, "_attn_implementation"):
            seen[id(config)] = config
    return list(seen.values())


@contextmanager
def gqa_attention(model):
    """Inside, every config of ``model`` that uses ``sdpa`` uses :func:`grouped_decode_attention`."""
    switched = [c for c in _configs(model) if c._attn_implementation == "sdpa"]
    try:
        for config in switched:
            config._attn_implementation_internal = GQA_ATTENTION
        yield model
    finally:
        for config in switched:
            config._attn_implementation_internal = "sdpa"
