"""The decode step's grouped-query attention: equal to transformers' attention, and no copy of the cache."""

import contextlib
import os
import subprocess
import sys

import pytest
import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.models.qwen2.modeling_qwen2 import eager_attention_forward

import saah_lib.models.rollout as rollout
from saah_lib.models import sdpa_attention
from saah_lib.models.attention import grouped_decode_attention
from saah_lib.models.rollout import StaticRollout
from saah_lib.models.sampling import SamplingSettings
from saah_lib.numerics import pin_environment
from tests.models.test_rollout import PROMPTS, small_qwen2


class Heads(torch.nn.Module):
    def __init__(self, groups):
        super().__init__()
        self.num_key_value_groups, self.is_causal, self.training = groups, True, False


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-6), (torch.float16, 2e-3)])
def test_grouped_decode_attention_equals_transformers_attention(dtype, tol):
    g = torch.Generator().manual_seed(0)
    batch, kv_heads, groups, length, dim = 3, 2, 6, 40, 16
    query = torch.randn(batch, kv_heads * groups, 1, dim, generator=g).to(dtype)
    key, value = (torch.randn(batch, kv_heads, length, dim, generator=g).to(dtype) for _ in range(2))
    mask = torch.ones(batch, 1, 1, length, dtype=torch.bool)
    mask[0, ..., :7] = False  # a left-padded row
    mask[2, ..., 30:] = False  # cache slots not written yet
    module = Heads(groups)
    ours, _ = grouped_decode_attention(module, query, key, value, mask, scaling=dim**-0.5)
    additive = torch.zeros(mask.shape, dtype=dtype).masked_fill(~mask, torch.finfo(dtype).min)
    reference, _ = eager_attention_forward(module, query, key, value, additive, scaling=dim**-0.5)
    assert ours.shape == reference.shape == (batch, 1, kv_heads * groups, dim)
    assert torch.allclose(ours.float(), reference.float(), atol=tol, rtol=tol)
    if dtype == torch.float32:  # transformers' own SDPA path (repeat_kv) in float32
        theirs, _ = sdpa_attention_forward(module, query, key, value, mask, scaling=dim**-0.5)
        assert torch.allclose(ours, theirs, atol=1e-6)


def test_prefill_goes_to_transformers_sdpa_unchanged():
    g = torch.Generator().manual_seed(1)
    query = torch.randn(2, 4, 5, 8, generator=g)
    key, value = (torch.randn(2, 2, 5, 8, generator=g) for _ in range(2))
    ours, _ = grouped_decode_attention(Heads(2), query, key, value, None, scaling=0.3)
    theirs, _ = sdpa_attention_forward(Heads(2), query, key, value, None, scaling=0.3)
    assert torch.equal(ours, theirs)


def expanded_cache_nodes(monkeypatch, grouped: bool) -> int:
    """Nodes of the compiled decode graph that hold a KV cache expanded to every query head."""
    graphs = []

    def keep(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    if not grouped:
        monkeypatch.setattr(rollout, "gqa_attention", lambda model: contextlib.nullcontext(model))
    model = small_qwen2()  # 4 query heads over 2 KV heads
    max_new, bucket = 8, 16
    engine = StaticRollout(max_new_tokens=max_new, pad_token_id=0, eos_token_ids=[], compile=True,
                           compile_backend=keep, buckets=(bucket,))
    engine.generate(model, PROMPTS, SamplingSettings(do_sample=False))
    (graph,) = graphs
    cfg = model.config
    full = (len(PROMPTS), cfg.num_attention_heads, bucket + max_new, cfg.hidden_size // cfg.num_attention_heads)
    values = [n.meta.get("example_value") for n in graph.graph.nodes]
    return sum(1 for v in values if isinstance(v, torch.Tensor) and tuple(v.shape) == full)


def test_the_compiled_decode_step_never_expands_the_cache(monkeypatch):
    # the count sees transformers' repeat_kv: per layer one copy of the keys and one of the values, each the
    # whole cache (bucket + new tokens) for every query head, at every token ...
    assert expanded_cache_nodes(monkeypatch, grouped=False) == 2 * 2
    monkeypatch.undo()
    # ... and there is none with the grouped attention
    assert expanded_cache_nodes(monkeypatch, grouped=True) == 0
    torch._dynamo.reset()


def test_the_attention_switch_is_undone_after_decoding():
    model = small_qwen2()
    engine = StaticRollout(max_new_tokens=3, pad_token_id=0, eos_token_ids=[], buckets=(16,))
    engine.generate(model, PROMPTS, SamplingSettings())
    assert model.config._attn_implementation == "sdpa"


_LONG_BF16 = """
import torch
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
import saah_lib.models as models
class Heads(torch.nn.Module):
    num_key_value_groups = 1
    is_causal = True
q = torch.randn(2, 4, 145, 16, dtype=torch.bfloat16)
mask = torch.ones(2, 1, 145, 145, dtype=torch.bool).tril()
ALL_ATTENTION_FUNCTIONS["sdpa"](Heads(), q, q, q, mask, scaling=0.25)
with torch.autocast("cpu", dtype=torch.bfloat16):
    ALL_ATTENTION_FUNCTIONS["sdpa"](Heads(), q.float(), q.float(), q.float(), mask, scaling=0.25)
print(models.AMX_UNDER_PIN, ALL_ATTENTION_FUNCTIONS["sdpa"] is models.sdpa_attention)
"""


def test_long_bf16_attention_runs_under_the_pin_on_any_cpu():
    # Under the AVX2 pin on a CPU with AMX, torch's flash kernel refused bf16 ("pack_vnni2 is only supported when
    # avx512 is supported"); bf16 attention runs in float32 there, and the override is registered only there.
    env = {**os.environ, **pin_environment({})}
    done = subprocess.run([sys.executable, "-c", _LONG_BF16], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr[-1500:]
    amx_under_pin, registered = done.stdout.split()
    assert registered == amx_under_pin


def test_the_override_leaves_float32_attention_bit_for_bit():
    g = torch.Generator().manual_seed(2)
    query, key, value = (torch.randn(2, 4, 130, 8, generator=g) for _ in range(3))
    mask = torch.ones(2, 1, 130, 130, dtype=torch.bool).tril()
    ours, _ = sdpa_attention(Heads(1), query, key, value, mask, scaling=0.3)
    theirs, _ = sdpa_attention_forward(Heads(1), query, key, value, mask, scaling=0.3)
    assert torch.equal(ours, theirs)


def test_where_torch_refuses_bf16_under_the_override_attention_is_float32_rounded_once(monkeypatch):
    import saah_lib.models as models

    def refusing(module, query, *args, **kwargs):  # torch's flash kernel on an AMX CPU under the AVX2 pin
        if query.dtype == torch.bfloat16 or torch.is_autocast_enabled("cpu"):
            raise RuntimeError("pack_vnni2 is only supported when avx512 is supported")
        return sdpa_attention_forward(module, query, *args, **kwargs)

    monkeypatch.setattr(models, "AMX_UNDER_PIN", True)
    monkeypatch.setattr(models, "_sdpa", refusing)
    g = torch.Generator().manual_seed(3)
    query, key, value = (torch.randn(2, 4, 130, 8, generator=g).to(torch.bfloat16) for _ in range(3))
    mask = torch.ones(2, 1, 130, 130, dtype=torch.bool).tril()
    ours, _ = sdpa_attention(Heads(1), query, key, value, mask, scaling=0.3)
    reference, _ = sdpa_attention_forward(Heads(1), query.float(), key.float(), value.float(), mask, scaling=0.3)
    assert ours.dtype == torch.bfloat16 and torch.equal(ours, reference.to(torch.bfloat16))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        autocast, _ = sdpa_attention(Heads(1), query.float(), key.float(), value.float(), mask, scaling=0.3)
    assert torch.equal(autocast, ours)
    monkeypatch.setattr(models, "_sdpa", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("another failure")))
    with pytest.raises(RuntimeError, match="another failure"):  # only torch's refusal is taken over
        sdpa_attention(Heads(1), query, key, value, mask, scaling=0.3)
