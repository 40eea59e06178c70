"""CPU measurements of the compiled rollout behind docs/gpu.md: log-prob gap, guard cost, memory per shape.

    python -m bench.measure_rollout [--out results/local/bench]

1. ``logp_gap_bf16``: mean |rollout log-prob - training log-prob| of sampled completions in bf16, for the
   engine's unmerged LoRA and for LoRA merged into the bf16 weights (:func:`logp_gap_bf16`).
2. ``guard_host_ms``: host time of dynamo's guards per decode call on a 28-layer LoRA model, as the engine
   compiles it (guards on nn modules skipped, the module state checked once per rollout instead, also timed)
   and with dynamo's module guards on (:func:`guard_host_ms`).
3. ``static_state_bytes``: what one state holds for Qwen2.5-1.5B/3B at a cache of a GSM8K bucket plus 512 new
   tokens (:func:`static_state_bytes`); what a whole run holds is in ``bench/measure_compiles.py``.
4. ``inductor_caches``: whether inductor's FX graph cache and AOT autograd cache are on (they make the
   2nd..Nth run of a grid load compiled graphs instead of compiling them).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch
import torch._functorch.config as functorch_config
import torch._inductor.config as inductor_config
from peft import LoraConfig, get_peft_model
from torch._C._dynamo.eval_frame import _debug_get_cache_entry_list
from transformers import Qwen2Config, Qwen2ForCausalLM, StaticCache

import saah_lib  # noqa: F401  (pins the CPU numerics before torch loads)
from bench.models import qwen25_config
from bench.options import LOCAL_BENCH
from saah_lab.rundir.provenance import package_versions
from saah_lib.jsonio import atomic_write_json
from saah_lib.models.rollout import DecodeBuffers, StaticRollout, _decode_step, decoding_state, module_state
from saah_lib.models.sampling import SamplingSettings


def lora_model(layers: int, hidden: int, heads: int, kv_heads: int, vocab: int, seed: int, dtype):
    torch.manual_seed(seed)
    config = Qwen2Config(vocab_size=vocab, hidden_size=hidden, intermediate_size=4 * hidden, num_hidden_layers=layers,
                         num_attention_heads=heads, num_key_value_heads=kv_heads, max_position_embeddings=4096,
                         tie_word_embeddings=True, attn_implementation="eager")  # bf16 SDPA needs AVX-512 kernels
    model = Qwen2ForCausalLM(config)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0, 0.02 if hidden > 64 else 0.3)
    model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, lora_dropout=0.05, task_type="CAUSAL_LM",
                                             target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                                             "up_proj", "down_proj"]))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.0025)  # an update of about 1% of the base weight's size, as after training
    return model.to(dtype).eval()


def training_logps(model, prompts, completions) -> list[float]:
    out = []
    with torch.no_grad():
        for prompt, completion in zip(prompts, completions):
            ids = torch.tensor([prompt + completion])
            logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float()
            out += logits.log_softmax(-1).gather(1, ids[0, len(prompt):, None]).squeeze(1).tolist()
    return out


def logp_gap_bf16() -> dict:
    """Mean |rollout log-prob - training log-prob| in bf16, unmerged LoRA (what the engine runs) against LoRA merged
    into the bf16 weights (the alternative), on a random Qwen2-shaped model with a LoRA update of realistic size
    (|B A| * scale about 1% of |W|)."""
    model = lora_model(layers=4, hidden=512, heads=8, kv_heads=2, vocab=4096, seed=0, dtype=torch.bfloat16)
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(0, 4096, (n,), generator=g).tolist() for n in (20, 31, 44, 57)]
    engine = StaticRollout(max_new_tokens=48, pad_token_id=0, eos_token_ids=[], buckets=(64,))
    torch.manual_seed(2)
    completions, rollout = engine.generate(model, prompts, SamplingSettings())
    rollout = [x for row in rollout for x in row]
    train = training_logps(model, prompts, completions)  # TRL's training forward: unmerged adapters
    model.merge_adapter()  # the alternative: LoRA merged into the bf16 weights
    merged = training_logps(model, prompts, completions)  # the merged model's log-probs of the same tokens
    model.unmerge_adapter()
    return {"model": "random Qwen2, 4 layers, hidden 512, 8/2 heads, LoRA r 16 on every projection, bf16",
            "tokens": len(train),
            "unmerged_mean_abs_gap": statistics.fmean(abs(a - b) for a, b in zip(rollout, train)),
            "merged_mean_abs_gap": statistics.fmean(abs(a - b) for a, b in zip(merged, train)),
            "unmerged_max_abs_gap": max(abs(a - b) for a, b in zip(rollout, train)),
            "merged_max_abs_gap": max(abs(a - b) for a, b in zip(merged, train))}


def guard_host_ms(module_guards: bool, calls: int = 2000) -> float:
    """Host time of the compiled step's guards per decode call, as the engine compiles it (module guards
    skipped, checked once per rollout instead) or with dynamo's module guards on.

    A 28-layer LoRA model of small hidden size: the guards do not depend on it."""
    torch._dynamo.reset()
    model = lora_model(layers=28, hidden=32, heads=4, kv_heads=2, vocab=128, seed=3, dtype=torch.float32)
    engine = StaticRollout(max_new_tokens=4, pad_token_id=0, eos_token_ids=[], compile=True, compile_backend="eager",
                           buckets=(16,))
    if module_guards:
        engine._compiled_step = torch.compile(_decode_step, backend="eager", fullgraph=True, dynamic=False)
    prompts = [[1, 2, 3, 4]] * 4
    engine.generate(model, prompts, SamplingSettings())  # compiles
    (entry,) = _debug_get_cache_entry_list(_decode_step.__code__)
    cache, buf = next(iter(engine._states.values()))
    frame = {"model": model, "cache": cache, "buf": buf, "sampling": SamplingSettings(), "pad_token_id": 0}
    with torch.no_grad(), decoding_state(model), engine.health.watching():
        verbose = entry.guard_manager.check_verbose(frame)
        assert verbose.result, verbose.verbose_code_parts  # the guards pass for the state a decode call sees
        start = time.perf_counter()
        for _ in range(calls):
            entry.guard_manager.check(frame)
        seconds = time.perf_counter() - start
        start = time.perf_counter()
        for _ in range(20):
            module_state(model)
        state_ms = 1000 * (time.perf_counter() - start) / 20
    torch._dynamo.reset()
    return {"per_decode_call_ms": 1000 * seconds / calls, "module_state_check_per_rollout_ms": state_ms}


def static_state_bytes(profile: str) -> dict:
    """Bytes of one engine state per GSM8K shape, from real allocations at 2 layers, scaled to the model's.

    The shapes: a GSM8K bucket (128/256) + 512 new tokens, for rollouts (16 rows) and evaluation (128 rows); the
    allocations a real ``StaticCache`` and decode buffers."""
    full = qwen25_config(profile)
    small = qwen25_config(profile, num_layers=2)
    out = {}
    for engine, batch in (("rollout", 16), ("evaluation", 128)):
        for bucket in (128, 256):
            with torch.device("meta"):
                cache = StaticCache(config=small, max_cache_len=bucket + 512)
                cache.early_initialization(batch, small.num_key_value_heads, small.hidden_size //
                                           small.num_attention_heads, torch.bfloat16, torch.device("meta"))
                per_layer = sum(t.numel() * t.element_size() for layer in cache.layers
                                for t in (layer.keys, layer.values)) / small.num_hidden_layers
                buffers = DecodeBuffers.allocate(batch, bucket + 512, 512, small.vocab_size, [], "meta")
            buffer_bytes = sum(t.numel() * t.element_size() for t in buffers.tensors())
            out[f"{engine} {batch}x{bucket}"] = per_layer * full.num_hidden_layers + buffer_bytes
    out["all four shapes"] = sum(out.values())
    return {k: round(v / 2**30, 3) for k, v in out.items()}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.measure_rollout", description=__doc__.split("\n")[0])
    p.add_argument("--out", default=str(LOCAL_BENCH), help="folder of cpu-rollout-measurements.json")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    report = {
        "logp_gap_bf16": logp_gap_bf16(),
        "guard_host_ms": {"model": "28-layer LoRA Qwen2 (hidden 32), decode step compiled with the eager backend",
                          "engine": guard_host_ms(module_guards=False),
                          "with_dynamo_module_guards": guard_host_ms(module_guards=True),
                          "target_per_decode_call_ms": 0.15},
        "static_state_gib_bf16": {p: static_state_bytes(p) for p in ("qwen2.5-1.5b", "qwen2.5-3b")},
        "inductor_caches": {"fx_graph_cache": inductor_config.fx_graph_cache,
                            "autograd_cache": functorch_config.enable_autograd_cache},
        "versions": package_versions(),
        "command": "python -m bench.measure_rollout",
    }
    path = Path(args.out) / "cpu-rollout-measurements.json"
    atomic_write_json(path, report)
    print(report["logp_gap_bf16"], report["guard_host_ms"], report["static_state_gib_bf16"], sep="\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
