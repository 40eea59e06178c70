"""``make gpu-check``: what to run on a new machine before spending GPU-hours on the grid.

    python -m bench.preflight                        # CUDA: qwen2.5-1.5b; CPU: tiny
    python -m bench.preflight --profile qwen2.5-3b

Four checks with pass rules, then one verdict line (exit status 0 when ready, 1 when not): ``smoke``
(:func:`smoke_check`: the compiled decode step compiles once and releases its memory), ``agreement``
(:func:`agreement_check`: ``hf`` and ``compiled`` decode alike), ``step`` (:func:`step_check`: step,
compile and evaluation times and peak memory, on CUDA held against :data:`STEP_TARGET_S` and the other
targets) and ``grid`` (:func:`grid_projection`: the paper grid's GPU-hours from the measured step).

Writes ``<device>-preflight.json``: on CUDA into ``results/bench/``, on CPU into ``results/local/bench/``
(git-ignored), or into ``--out``. While the checks run, what they measured goes to
``<device>-preflight.partial.json``; the complete file is replaced only when every check is done
(:mod:`bench.files`), so an interrupted check never replaces a complete measurement.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from huggingface_hub import try_to_load_from_cache
from transformers import Qwen2Config

from bench.files import out_folder_problem, scratch_folder, write_complete, write_partial
from bench.models import (
    QWEN25_ARCHITECTURES,
    SMALL_QWEN2,
    build_model,
    device,
    device_name,
    qwen25_config,
    random_qwen2,
    result_file,
)
from bench.options import LOCAL_BENCH, BenchOptions, profile_config, sa_variant
from bench.rollouts import eval_throughput
from bench.trainers import time_variant
from saah_lib.jsonio import atomic_write_json
from saah_lib.models.evaluate import greedy_completions
from saah_lib.models.loading import load_model_and_tokenizer
from saah_lib.models.names import model_location, offline_hub_problem
from saah_lib.models.rollout import build_engine
from saah_lib.models.sampling import SamplingSettings
from saah_lib.paths import BENCH_RESULTS, repo_relative
from saah_lib.tasks.prompts import make_prompt
from saah_lib.tasks.synthetic import generate_problems
from saah_lib.training.config import PROFILES

#: GPU targets of a paper run (per profile: the steady ``sa`` step in seconds).
STEP_TARGET_S = {"qwen2.5-1.5b": 4.0, "qwen2.5-3b": 7.0}
COMPILE_TARGET_S = 60.0
EVAL_TARGET_S = 60.0  # for 500 problems, without the compile
PEAK_TARGET_GIB = 38.0
#: Share of prompts whose greedy completions must be identical on both backends. Below 1 because in
#: bf16 two kernels may round a near-tie differently; in float32 they agree exactly.
AGREEMENT_NEEDED = {torch.float32: 1.0, torch.bfloat16: 0.95}
#: Largest mean |rollout - training| log-prob per dtype: rounding, not a different policy.
LOGP_GAP_LIMIT = {torch.float32: 1e-4, torch.bfloat16: 5e-2}


@dataclass(frozen=True)
class PreflightOptions:
    profile: str
    prompts: int
    eval_problems: int
    step_steps: int
    completion_tokens: int | None  # None: the profile's
    compile_backend: str | None  # None: inductor on CUDA, aot_eager on CPU (inductor there takes minutes)
    model_dir: str | None
    out: Path | None

    @property
    def on_cuda(self) -> bool:
        return torch.cuda.is_available()

    def out_dir(self) -> Path:
        if self.out is not None:
            return Path(self.out)
        return BENCH_RESULTS if self.on_cuda else LOCAL_BENCH

    def backend(self) -> str:
        return self.compile_backend or ("inductor" if self.on_cuda else "aot_eager")


def _dtype(options: PreflightOptions) -> torch.dtype:
    return torch.bfloat16 if options.on_cuda else torch.float32


# ---------------------------------------------------------------------- models


def small_random_qwen2(options: PreflightOptions, seed: int = 0):
    """A 2-layer Qwen2 with random weights: the profile's architecture on CUDA, a small one on CPU."""
    if options.on_cuda and options.profile in QWEN25_ARCHITECTURES:
        config = qwen25_config(options.profile, num_layers=2)
    else:
        config = Qwen2Config(**SMALL_QWEN2)
    model, tokenizer = random_qwen2(config, _dtype(options), seed)
    model = model.to(device()).eval()
    with torch.no_grad():  # wider than the initialisation, so that greedy decoding is not one token forever
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0, 0.3 if not options.on_cuda else 0.02)
    return model, tokenizer


def agreement_model(options: PreflightOptions):
    """(model, tokenizer, description, random weights?): the profile's real model if present, else its random
    architecture."""
    if options.model_dir is not None:
        model, tok = load_model_and_tokenizer(options.model_dir, "bfloat16" if options.on_cuda else "float32")
        return model.to(device()).eval(), tok, f"model folder {options.model_dir}", False
    if not options.on_cuda or options.profile not in QWEN25_ARCHITECTURES:
        model, tok = small_random_qwen2(options, seed=1)
        return model, tok, "random 2-layer Qwen2", True
    name = PROFILES[options.profile]["model_name"]
    if offline_hub_problem(name) is None and _cached(name):
        model, tok = load_model_and_tokenizer(model_location(name), "bfloat16")
        return model.to(device()).eval(), tok, f"{name} (real weights)", False
    model, tok = build_model(options.profile, torch.bfloat16, None)
    return model.to(device()).eval(), tok, f"{options.profile} architecture, random weights", True


def _cached(name: str) -> bool:
    return isinstance(try_to_load_from_cache(name, "model.safetensors.index.json"), str) or isinstance(
        try_to_load_from_cache(name, "model.safetensors"), str)


# ---------------------------------------------------------------------- checks


def smoke_check(options: PreflightOptions) -> dict:
    """The compiled decode step on prompts of two alternating buckets in one reserved cache length, with a
    release in between: one graph, nothing recompiled, nothing held after the release.

    A random 2-layer Qwen2; the pass rule: one graph, no recompile, no graph break, no CUDA-graph skip, no
    fallback, nothing held after the release."""
    model, tok = small_random_qwen2(options)
    short = [[5 + i, 6, 7, 8 + i] for i in range(4)]
    long = [list(range(10 + i, 80 + i)) for i in range(4)]  # 70 tokens: the next bucket
    engine = build_engine(max_new_tokens=24, pad_token_id=tok.pad_token_id, eos_token_ids=[], device=device(),
                          compile=True, compile_backend=options.backend(), name="preflight",
                          longest_prompt=max(map(len, long)))
    start = time.perf_counter()
    memory = {}
    for i, prompts in enumerate((short, long, "release", short, long)):
        if prompts == "release":
            memory = {"held_bytes": engine.held_bytes(), "released_bytes": engine.release(),
                      "held_after_release": engine.held_bytes()}
            continue
        if engine.health.run_or_fall_back(lambda: engine.generate(model, prompts, SamplingSettings()),
                                          "preflight smoke test") is None:
            break
    record = engine.health.record()
    ok = (record["fallback"] is None and record["compiled_graphs"] == len(record["graphs"]) == 1
          and record["recompiles"] == 0 and record["graph_breaks"] == 0 and not record["cudagraph_skips"]
          and memory.get("released_bytes", 0) > 0 and memory.get("held_after_release") == 0)
    return {"ok": ok, "seconds": time.perf_counter() - start, "compile_backend": options.backend(),
            "compile_health": record, "static_state": memory}


def rollout_logp_gap(model, tok, prompts: list[list[int]], max_new_tokens: int) -> float:
    """Mean |log-prob of the sampled token in the rollout - the same in a training-style forward|."""
    engine = build_engine(max_new_tokens=max_new_tokens, pad_token_id=tok.pad_token_id, eos_token_ids=[],
                          device=model.device, compile=False, name="gap")
    torch.manual_seed(0)
    completions, rollout_logps = engine.generate(model, prompts, SamplingSettings())
    gaps = []
    with torch.no_grad():
        for prompt, completion, logps in zip(prompts, completions, rollout_logps):
            ids = torch.tensor([prompt + completion], device=model.device)
            logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float()
            train = logits.log_softmax(-1).gather(1, ids[0, len(prompt):, None]).squeeze(1)
            gaps += (train.cpu() - torch.tensor(logps)).abs().tolist()
    return statistics.fmean(gaps)


def agreement_check(options: PreflightOptions) -> dict:
    """The profile's model evaluated greedily by ``hf`` and ``compiled`` on the same prompts, and the rollouts'
    log-probabilities against the training forward's.

    The model: its real weights when they are on this machine, else its architecture with random weights; on CPU
    the small random Qwen2. Measured: the share of identical completions, and the mean |rollout log-prob -
    training log-prob| of sampled rollouts, in the model's dtype. The identical share is held on real weights or
    in float32 only: random weights in bf16 meet greedy near-ties at every token.
    """
    model, tok, description, random_weights = agreement_model(options)
    dtype = next(model.parameters()).dtype
    texts = [make_prompt(p.question, tok) if tok.chat_template else p.question
             for p in generate_problems(options.prompts, seed=11)]
    engine = build_engine(max_new_tokens=32, pad_token_id=tok.pad_token_id, eos_token_ids=tok.eos_token_id,
                          device=device(), compile=True, compile_backend=options.backend(), name="evaluation")
    kw = dict(max_new_tokens=32, batch_size=min(options.prompts, 64), progress=False)
    hf = greedy_completions(model, tok, texts, generation_backend="hf", **kw)
    compiled = greedy_completions(model, tok, texts, generation_backend="compiled", engine=engine, **kw)
    same = sum(a == b for a, b in zip(hf, compiled)) / len(texts)
    ids = [tok(t, add_special_tokens=False)["input_ids"] for t in texts[:8]]
    gap = rollout_logp_gap(model, tok, ids, 32)
    needed, limit = AGREEMENT_NEEDED.get(dtype, 1.0), LOGP_GAP_LIMIT.get(dtype, 1e-4)
    if random_weights and dtype != torch.float32:
        # Random weights give near-flat logits: greedy ties everywhere, which low-precision rounding splits
        # either way (the 1.5B architecture on an H200: 19% identical). The share is recorded, not held.
        needed = None
    ok = (needed is None or same >= needed) and gap <= limit and not engine.health.fell_back
    return {"ok": ok, "model": description, "dtype": str(dtype), "prompts": len(texts),
            "identical_share": same, "identical_needed": needed, "mean_abs_logp_gap": gap,
            "logp_gap_limit": limit, "fallback": engine.health.fallback}


def step_check(options: PreflightOptions) -> dict:
    """The profile's ``sa`` step, its compile and evaluation, as the benchmark measures them.

    The steady median step (generation and training apart), the compile seconds, greedy evaluation of
    ``--eval-problems`` problems timed without its compile, peak memory; on CUDA held against the targets (a
    500-problem evaluation projected from the problems evaluated); on CPU recorded only. Its steady step is the
    report's ``steady_step_seconds``, for the grid planner (:func:`grid_projection`).
    """
    backend = "compiled" if options.on_cuda else "hf"
    cfg = profile_config(options.profile, options.completion_tokens, max_steps=options.step_steps + 1)
    bench = BenchOptions(profile=options.profile, steps=options.step_steps, warmup=1,
                         eval_problems=options.eval_problems, model_dir=options.model_dir,
                         compile_backend=options.compile_backend, out=options.out_dir())
    dtype = _dtype(options)

    def model_factory():
        return build_model(options.profile, dtype, None, model_dir=options.model_dir)

    variant = sa_variant(cfg)
    with scratch_folder(options.out_dir(), "preflight_tmp") as scratch:
        step = time_variant(variant, model_factory, cfg, bench, scratch, backend)
    evaluation = eval_throughput(model_factory, cfg, bench, "compiled" if options.on_cuda else "hf")
    health = step.get("compile_health") or {}
    out = {"profile": options.profile, "generation_backend": backend, "steady_step_s": step["median_step_s"],
           "generation_s": step["median_generation_s"], "training_s": step["median_rest_s"],
           "first_step_s": step["first_step_s"], "compile_s": health.get("compile_s"),
           "eval_problems": options.eval_problems, "eval_s": evaluation["seconds"],
           "eval_projected_s_for_500": evaluation["projected_s_for_500"],
           "peak_gpu_mem_gib": step["peak_gpu_mem_gib"], "peak_rss_gib": step["peak_rss_gib"],
           "fallback": health.get("fallback"), "targets": None}
    out["ok"] = out["fallback"] is None and all(math.isfinite(out[k]) for k in ("steady_step_s", "eval_s"))
    if options.on_cuda and options.profile in STEP_TARGET_S:
        targets = {"steady_step_s": out["steady_step_s"] <= STEP_TARGET_S[options.profile],
                   "compile_s": (out["compile_s"] or 0) <= COMPILE_TARGET_S,
                   "eval_500_s": out["eval_projected_s_for_500"] <= EVAL_TARGET_S,
                   "peak_gib": (out["peak_gpu_mem_gib"] or 0) < PEAK_TARGET_GIB}
        out["targets"] = targets
        out["ok"] = out["ok"] and all(targets.values())
    return out


def grid_projection(bench_dir: Path, shown_dir: Path | None = None) -> dict:
    """The grid planner's GPU-hours for the paper grid from the step times in ``bench_dir`` (this check's file
    among them: each profile takes its own, and one not measured there is named), when this checkout has it.
    ``shown_dir``: the folder the command and output name instead of ``bench_dir`` (a staging copy of it)."""
    shown_dir = shown_dir or bench_dir
    command = [sys.executable, "-m", "saah_lab.studies.execution.grid", "plan", "paper", "--bench-dir", str(bench_dir)]
    shown = f"python -m saah_lab.studies.execution.grid plan paper --bench-dir {repo_relative(shown_dir)}"
    if importlib.util.find_spec("saah_lab.studies.execution.grid") is None:
        return {"ok": True, "command": shown, "output": None, "note": "no grid planner in this checkout"}
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    output = (done.stdout + done.stderr).replace(repo_relative(bench_dir), repo_relative(shown_dir))
    return {"ok": done.returncode == 0, "command": shown, "output": output.strip()[-4000:]}


def staged_grid_projection(path: Path, report: dict) -> dict:
    """:func:`grid_projection` of ``path``'s folder as it will be once ``report`` is written to ``path``: the
    folder's other complete measurements and this one, copied into a scratch folder, so that the complete
    file at ``path`` is not replaced before the report is complete."""
    with scratch_folder(path.parent, "preflight_grid") as staging:
        for other in path.parent.glob("*.json"):
            if other.name != path.name and not other.name.endswith(".partial.json"):
                shutil.copy2(other, staging / other.name)
        atomic_write_json(staging / path.name, report)
        return grid_projection(staging, shown_dir=path.parent)


# ---------------------------------------------------------------------- the run


def run_preflight(options: PreflightOptions) -> dict:
    report = {"device": device_name(), "profile": options.profile, "cuda": options.on_cuda,
              "torch": torch.__version__, "checks": {}, "steady_step_seconds": None, "verdict": None}
    path = result_file(options.out_dir(), "preflight")
    for name, check in (("smoke", smoke_check), ("agreement", agreement_check), ("step", step_check)):
        print(f"preflight: {name} ...", flush=True)
        report["checks"][name] = _guarded(check, options)
        print(f"preflight: {name} {'ok' if report['checks'][name]['ok'] else 'FAILED'}", flush=True)
        write_partial(path, report)  # what was measured survives a later failure, apart from the complete file
    step = report["checks"]["step"]
    if step.get("steady_step_s") is not None:
        report["steady_step_seconds"] = step["steady_step_s"]
        report["checks"]["grid"] = _guarded(lambda o: staged_grid_projection(path, report), options)
    failed = [name for name, c in report["checks"].items() if not c["ok"]]
    report["verdict"] = "ready" if not failed else f"not ready: {', '.join(failed)} failed"
    write_complete(path, report)
    print(verdict_lines(report) + f"\nwrote {path}", flush=True)
    return report


def _guarded(check, options) -> dict:
    """A check that raises fails with the error as its detail; the other checks still run."""
    try:
        return check(options)
    except Exception as error:  # the verdict names it; the traceback would bury the other checks
        return {"ok": False, "error": f"{type(error).__name__}: {error}"[:2000]}


def _released(memory: dict) -> str:
    if "released_bytes" not in memory:
        return ""
    released = memory["released_bytes"] / 2**20
    return f", {released:.2f} MiB of static state released, {memory['held_after_release']} B left"


def verdict_lines(report: dict) -> str:
    lines = []
    c = report["checks"]
    s = c["smoke"]
    if "compile_health" in s:
        h = s["compile_health"]
        lines.append(f"smoke      {'ok' if s['ok'] else 'FAILED'}: {h['compiled_graphs']} graphs, {h['recompiles']} "
                     f"recompiles, {h['graph_breaks']} breaks, fallback {'yes' if h['fallback'] else 'no'}"
                     f"{_released(s.get('static_state') or {})}")
    a = c["agreement"]
    if "identical_share" in a:
        lines.append(f"agreement  {'ok' if a['ok'] else 'FAILED'}: {a['model']} ({a['dtype']}), identical greedy "
                     f"completions {a['identical_share']:.0%} of {a['prompts']}"
                     f"{' (not held: random weights)' if a.get('identical_needed', 1) is None else ''}, "
                     f"mean |rollout - training| "
                     f"log-prob {a['mean_abs_logp_gap']:.2e}")
    st = c["step"]
    if st.get("steady_step_s") is not None:
        lines.append(f"step       {'ok' if st['ok'] else 'FAILED'}: {st['profile']} sa step "
                     f"{st['steady_step_s']:.2f} s "
                     f"(generation {st['generation_s']:.2f} s), evaluation of {st['eval_problems']} problems "
                     f"{st['eval_s']:.1f} s" + (f", targets {st['targets']}" if st["targets"] else ""))
    if "grid" in c:
        g = c["grid"]
        lines.append(f"grid       {g.get('note') or g.get('output') or ''} ({g['command']})".strip())
    for name, check in c.items():
        if "error" in check:
            lines.append(f"{name:10s} FAILED: {check['error'][:300]}")
    lines.append(f"VERDICT: {report['verdict']}")
    return "\n".join(lines)


def parse_args(argv: list[str]) -> PreflightOptions:
    on_cuda = torch.cuda.is_available()
    p = argparse.ArgumentParser(prog="python -m bench.preflight",
                                description="checks to run on a new GPU before the grid, ending in a verdict")
    p.add_argument("--profile", default=None, choices=list(PROFILES),
                   help="(default: qwen2.5-1.5b on CUDA, tiny on CPU)")
    p.add_argument("--prompts", type=int, default=64 if on_cuda else 16,
                   help="prompts of the backend agreement check (default: 64 on CUDA, 16 on CPU)")
    p.add_argument("--eval-problems", type=int, default=500 if on_cuda else 8,
                   help="problems of the timed evaluation (default: 500 on CUDA, 8 on CPU)")
    p.add_argument("--step-steps", type=int, default=8 if on_cuda else 2,
                   help="timed training steps after one warm-up step (default: 8 on CUDA, 2 on CPU)")
    p.add_argument("--completion-tokens", type=int, default=None if on_cuda else 24,
                   help="rollout and evaluation length (default: the profile's on CUDA, 24 on CPU)")
    p.add_argument("--compile-backend", default=None,
                   help="torch.compile backend of the decode step (default: inductor on CUDA, aot_eager on CPU)")
    p.add_argument("--model-dir", default=None, help="check this model folder instead of the profile's model")
    p.add_argument("--out", default=None, help="folder of the JSON (default: results/bench on CUDA, "
                                               "results/local/bench on CPU)")
    a = vars(p.parse_args(argv))  # each option's dest is its PreflightOptions field
    out = None if a["out"] is None else Path(a["out"])
    if out is not None and (problem := out_folder_problem(out)):
        p.error(problem)  # before any check runs: one that took minutes would fail only when writing its report
    return PreflightOptions(**{**a, "profile": a["profile"] or ("qwen2.5-1.5b" if on_cuda else "tiny"), "out": out})


def main(argv=None) -> int:
    report = run_preflight(parse_args(list(sys.argv[1:] if argv is None else argv)))
    return 0 if report["verdict"] == "ready" else 1


if __name__ == "__main__":
    raise SystemExit(main())
