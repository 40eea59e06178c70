"""Step-time, memory and evaluation-throughput benchmark: ours against stock TRL.

    python -m saah_lib.studies.bench --profile tiny                 # CPU, a minute
    python -m saah_lib.studies.bench --profile qwen2.5-1.5b --generation-backend hf compiled   # GPU, random weights

Variants timed on the same model, data and seed: stock ``GRPOTrainer``
(``loss_type="bnpo"``), and ours for ``grpo``, ``ah`` and ``sa`` with exact
entropy and with top-K = 500. The Qwen profiles use the exact Qwen2.5
architectures with random weights (a step's cost does not depend on the
values) and force every completion to full length, the worst case. Each of
our variants is timed once per ``--generation-backend`` (stock TRL always uses
its own ``generate``). Per step the generation time (TRL's generation method)
is recorded apart from the rest (scoring, reference log-probs, training); the
first step's excess over the steady median is the one-time compile/warm-up cost.
Each ``compiled`` variant also records its compile health (graphs per shape,
recompiles, graph breaks, CUDA-graph skips, host syncs per token, compile seconds;
:mod:`saah_lib.models.compile_health`). With compilation on, a variant trains at
least 12 steps, so that dynamo's recompile limit (8) would show. ``--rollout-profile``
counts host syncs and eager ops per token of one rollout with the profiler
(:mod:`saah_lib.models.profiling`), static engine against ``generate``.
Writes ``results/bench/<device>-<profile>.json`` after every variant, so a run
cut off by a time limit keeps what it measured, and prints a one-line summary.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from pathlib import Path

import torch
from datasets import Dataset
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM, TrainerCallback
from trl import GRPOConfig, GRPOTrainer

from saah_lib.jsonio import atomic_write_json
from saah_lib.method.methods import MAIN_ALPHA, method_alpha
from saah_lib.method.reward import TRL_REWARD_FUNCS
from saah_lib.models.backends import resolve_backend
from saah_lib.models.evaluate import greedy_completions
from saah_lib.models.loading import load_model_and_tokenizer, resolve_model
from saah_lib.models.names import TINY_WARMSTART
from saah_lib.models.profiling import count_ops, profile_rollout
from saah_lib.models.rollout import StaticRollout
from saah_lib.models.sampling import SamplingSettings
from saah_lib.paths import BENCH_RESULTS, in_repo
from saah_lib.rundir.provenance import package_versions
from saah_lib.studies.timing import PeakMemory
from saah_lib.tasks.synthetic import generate_problems
from saah_lib.training.config import make_config
from saah_lib.training.launch import parse_overrides
from saah_lib.training.run import lora_config, stock_grpo_kwargs
from saah_lib.training.trainer import SAAHGRPOConfig, SAAHGRPOTrainer

# The published Qwen2.5 Instruct architectures (config.json of each checkpoint).
QWEN25_ARCHITECTURES = {
    "qwen2.5-1.5b": dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
                         num_attention_heads=12, num_key_value_heads=2),
    "qwen2.5-3b": dict(hidden_size=2048, intermediate_size=11008, num_hidden_layers=36,
                       num_attention_heads=16, num_key_value_heads=2),
}
QWEN25_COMMON = dict(vocab_size=151936, max_position_embeddings=32768, rope_theta=1_000_000.0,
                     rms_norm_eps=1e-6, tie_word_embeddings=True, hidden_act="silu")

#: Fewest trained steps (warm-up included) of a variant that compiles: dynamo gives up after 8 recompiles,
#: so a per-step recompile shows only in a longer run.
MIN_COMPILED_STEPS = 12

VARIANTS = (  # name, trainer, method, entropy_top_k
    ("trl-bnpo", "trl", "grpo", None),
    ("grpo", "ours", "grpo", None),
    ("ah-exact", "ours", "ah", None),
    ("sa-exact", "ours", "sa", None),
    ("grpo-top500", "ours", "grpo", 500),
    ("ah-top500", "ours", "ah", 500),
    ("sa-top500", "ours", "sa", 500),
)


def qwen25_config(profile: str, num_layers: int | None = None):
    arch = dict(QWEN25_COMMON, **QWEN25_ARCHITECTURES[profile])
    if num_layers is not None:
        arch["num_hidden_layers"] = num_layers
    return Qwen2Config(**arch)


def filler_tokenizer(vocab_size: int):
    """A tokenizer with exactly ``vocab_size`` entries, so any generated id decodes.

    Real Qwen tokenizers can't be downloaded here; for timing only the vocabulary
    size (the LM head) matters.
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
    config = qwen25_config(profile, num_layers)
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config).to(dtype)
    model.generation_config.eos_token_id = None  # never stop early: full-length completions
    return model, filler_tokenizer(config.vocab_size)


def _sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


class GenerationTimer:
    """Mixin: accumulates the wall time of TRL's generation method (``generation_seconds``)."""

    generation_seconds = 0.0

    def _generate_single_turn(self, *args, **kwargs):
        _sync()
        start = time.perf_counter()
        try:
            return super()._generate_single_turn(*args, **kwargs)
        finally:
            _sync()
            self.generation_seconds += time.perf_counter() - start


def timed_trainer_classes():
    class TimedGRPOTrainer(GenerationTimer, GRPOTrainer):
        pass

    class TimedSAAHGRPOTrainer(GenerationTimer, SAAHGRPOTrainer):
        pass

    return TimedGRPOTrainer, TimedSAAHGRPOTrainer


class StepClock(TrainerCallback):
    def __init__(self):
        self.durations: list[float] = []
        self.generation: list[float] = []
        self.trainer = None  # set after the trainer exists: its generation_seconds is read per step

    def _sync(self):
        if torch.cuda.is_available():
            torch.cuda.synchronize()

    def on_step_begin(self, args, state, control, **kwargs):
        self._sync()
        self._start = time.perf_counter()
        self.trainer.generation_seconds = 0.0

    def on_step_end(self, args, state, control, **kwargs):
        self._sync()
        self.durations.append(time.perf_counter() - self._start)
        self.generation.append(self.trainer.generation_seconds)


def prompts_dataset(n: int, tokenizer, prompt_tokens: int):
    """Prompts of a fixed token length (GSM8K prompts are ~150-250 Qwen tokens)."""
    problems = generate_problems(n, seed=0)
    prompts = []
    for p in problems:
        ids = tokenizer(p.question * 50, add_special_tokens=False)["input_ids"][:prompt_tokens]
        prompts.append(tokenizer.decode(ids))
    return Dataset.from_dict({"prompt": prompts, "answer": [p.answer for p in problems]})


def time_variant(variant, model_factory, cfg, args, out_dir: Path, backend: str = "hf") -> dict:
    TimedGRPOTrainer, TimedSAAHGRPOTrainer = timed_trainer_classes()
    name, which, method, top_k = variant
    name = variant_name(name, backend)
    model, tokenizer = model_factory()
    common = stock_grpo_kwargs(cfg, out_dir / name, progress=False)
    common.update(max_steps=args.warmup + args.steps, save_strategy="no",
                  generation_kwargs={"min_new_tokens": cfg.trainer.max_completion_length} if args.full_length else None)
    if which == "trl":
        trainer_cls, config = TimedGRPOTrainer, GRPOConfig(**common)
    else:
        alpha = method_alpha(method, MAIN_ALPHA)
        config = SAAHGRPOConfig(method=method, alpha=alpha, entropy_top_k=top_k,
                                reward_std_threshold=cfg.trainer.reward_std_threshold, generation_backend=backend,
                                rollout_compile=compile_setting(args), rollout_compile_backend=args.compile_backend,
                                **common)
        trainer_cls = TimedSAAHGRPOTrainer
    clock = StepClock()
    trainer = trainer_cls(model=model, reward_funcs=list(TRL_REWARD_FUNCS), args=config,
                          train_dataset=prompts_dataset(64, tokenizer, args.prompt_tokens),
                          processing_class=tokenizer, peft_config=lora_config(cfg), callbacks=[clock])
    clock.trainer = trainer
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    with PeakMemory() as rss:
        trainer.train()
    timed = clock.durations[args.warmup:]
    median = statistics.median(timed)
    median_generation = statistics.median(clock.generation[args.warmup:])
    completion_tokens = cfg.trainer.completions_per_step * cfg.trainer.max_completion_length
    result = {
        "variant": name, "trainer": which, "method": method, "entropy_top_k": top_k,
        "generation_backend": "hf" if which == "trl" else backend,
        "median_step_s": median, "step_times_s": [round(t, 4) for t in clock.durations],
        "median_generation_s": median_generation, "median_rest_s": median - median_generation,
        "generation_times_s": [round(t, 4) for t in clock.generation],
        # the first step's excess over the steady step: compilation, CUDA graph capture, allocator warm-up
        "first_step_s": clock.durations[0], "one_time_cost_s": clock.durations[0] - median,
        # exact when completions are forced to full length, an upper bound otherwise
        "completion_tokens_per_s": completion_tokens / median,
        "peak_gpu_mem_gib": torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else None,
        "peak_rss_gib": rss.peak / 2**30,
    }
    if which == "ours" and backend == "compiled":
        result["compile_health"] = trainer.compile_health.record()
    del trainer, model
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return result


def variant_name(name: str, backend: str) -> str:
    """Variant names stay as before for TRL's own generate; other backends get a suffix."""
    return name if backend == "hf" or name == "trl-bnpo" else f"{name}@{backend}"


def compile_setting(args) -> bool | None:
    """``--rollout-compile``: None (compile on CUDA only), True or False."""
    return {"auto": None, "on": True, "off": False}[args.rollout_compile]


def compiles(args) -> bool:
    setting = compile_setting(args)
    return torch.cuda.is_available() if setting is None else setting


def static_engine(tokenizer, max_new_tokens: int, eos_token_ids, args, name: str) -> StaticRollout:
    return StaticRollout(max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id,
                         eos_token_ids=eos_token_ids, compile=compiles(args), compile_backend=args.compile_backend,
                         name=name)


def eval_throughput(model_factory, cfg, n_problems: int, args, backend: str = "hf") -> dict:
    model, tokenizer = model_factory()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = model.to(device)
    prompts = [p.question for p in generate_problems(n_problems, seed=1)]
    engine = None
    if backend == "compiled":
        engine = static_engine(tokenizer, cfg.eval_max_new_tokens, tokenizer.eos_token_id, args, "evaluation")
    start = time.perf_counter()
    greedy_completions(model, tokenizer, prompts, max_new_tokens=cfg.eval_max_new_tokens,
                       batch_size=cfg.eval_batch_size, progress=False, generation_backend=backend, engine=engine)
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    out = {"problems": n_problems, "generation_backend": backend, "max_new_tokens": cfg.eval_max_new_tokens,
           "seconds": seconds,
           "problems_per_s": n_problems / seconds, "projected_s_for_500": 500 * seconds / n_problems}
    if engine is not None:
        out["compile_health"] = engine.health.record()  # the one-time compile is inside ``seconds``
    return out


def _rollout_inputs(model_factory, cfg, args):
    """The model in eval mode on its device, and one step's prompts as text and as token ids."""
    model, tokenizer = model_factory()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = model.to(device).eval()
    prompts = list(prompts_dataset(cfg.trainer.completions_per_step, tokenizer, args.prompt_tokens)["prompt"])
    ids = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
    return model, tokenizer, device, prompts, ids


def rollout_comparison(model_factory, cfg, args) -> dict:
    """Rollouts only, outside the trainer: ``model.generate`` against the static engine on the same
    prompts, alternated ``--rollout-repeats`` times so that background load hits both alike."""
    model, tokenizer, device, prompts, ids = _rollout_inputs(model_factory, cfg, args)
    n_new = cfg.trainer.max_completion_length
    engine = static_engine(tokenizer, n_new, [], args, "rollout")
    sampling = SamplingSettings(do_sample=True, temperature=cfg.trainer.temperature)
    enc = tokenizer(prompts, return_tensors="pt", padding=True, padding_side="left",
                    add_special_tokens=False).to(device)

    def hf():
        model.generate(**enc, max_new_tokens=n_new, min_new_tokens=n_new, do_sample=True,
                       temperature=cfg.trainer.temperature, top_k=0, pad_token_id=tokenizer.pad_token_id)

    def static():
        engine.generate(model, ids, sampling)

    times = {"hf": [], "compiled": []}
    for _ in range(args.rollout_repeats + 1):  # the first round is warm-up (and compilation on CUDA)
        for name, fn in (("hf", hf), ("compiled", static)):
            _sync()
            start = time.perf_counter()
            with torch.no_grad():
                fn()
            _sync()
            times[name].append(time.perf_counter() - start)
    out = {"completions": len(ids), "new_tokens": n_new, "repeats": args.rollout_repeats}
    for name, ts in times.items():
        out[name] = {"first_s": ts[0], "median_s": statistics.median(ts[1:]), "times_s": [round(t, 4) for t in ts]}
    out["compiled/hf"] = out["compiled"]["median_s"] / out["hf"]["median_s"]
    out["compile_health"] = engine.health.record()
    return out


def rollout_profile(model_factory, cfg, args) -> dict:
    """Host syncs and eager ops per token of one rollout, counted by the profiler: the static engine
    (with ``--rollout-compile``/``--compile-backend``; compiled and warmed up first) and ``generate``."""
    model, tokenizer, device, prompts, ids = _rollout_inputs(model_factory, cfg, args)
    n_new = cfg.trainer.max_completion_length
    # the end-of-sequence token is live (the finished-batch check runs) but never sampled: full length
    engine = static_engine(tokenizer, n_new, [tokenizer.eos_token_id], args, "rollout")
    sampling = SamplingSettings(do_sample=True, temperature=cfg.trainer.temperature, min_new_tokens=n_new)
    with torch.no_grad():
        engine.generate(model, ids, sampling)  # compiles
        static = profile_rollout(engine, model, ids, sampling)
        enc = tokenizer(prompts, return_tensors="pt", padding=True, padding_side="left",
                        add_special_tokens=False).to(device)
        generate = dict(**enc, max_new_tokens=n_new, min_new_tokens=n_new, do_sample=True,
                        temperature=cfg.trainer.temperature, top_k=0, pad_token_id=tokenizer.pad_token_id)
        model.generate(**generate)  # warm-up
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            model.generate(**generate)
    return {"completions": len(ids), "new_tokens": n_new, "compiled": engine.compile,
            "compile_backend": args.compile_backend or "inductor", "static": static,
            "hf_generate_whole_call": count_ops(prof.events(), n_new, region=None),
            "compile_health": engine.health.record()}


def device_name() -> str:
    if torch.cuda.is_available():
        return torch.cuda.get_device_name(0)
    return f"cpu-{platform.machine()}"


def run_benchmark(args) -> dict:
    if not torch.cuda.is_available():
        # two OpenMP threads on two shared cores can stall a step by 20x; one thread is steady
        torch.set_num_threads(args.threads)
    cfg = make_config(args.profile, method="sa", max_steps=args.warmup + args.steps, **parse_overrides(args.overrides))
    if args.max_completion_length:
        cfg.trainer.max_completion_length = cfg.eval_max_new_tokens = args.max_completion_length
    dtype = torch.bfloat16 if (cfg.dtype == "bfloat16" and torch.cuda.is_available()) else torch.float32

    def model_factory():
        return build_model(args.profile, dtype, args.num_layers, model_dir=args.model_dir)

    label = model_description(args.profile, args.model_dir)
    out_dir = in_repo(args.out_dir)
    backends = list(dict.fromkeys(resolve_backend(b) for b in args.generation_backend))
    if "vllm" in backends:
        raise ValueError("the benchmark times hf and compiled; vLLM runs are TRL's own (trl vllm-serve)")
    variants = [v for v in VARIANTS if not args.variants or v[0] in args.variants]
    runs = [(v, "hf") for v in variants if v[1] == "trl"]
    runs += [(v, b) for b in backends for v in variants if v[1] != "trl"]
    compiled_training = any(b == "compiled" for _, b in runs) and compiles(args)
    if compiled_training and args.warmup + args.steps < MIN_COMPILED_STEPS:
        raise ValueError(f"--warmup + --steps is {args.warmup + args.steps}; with compilation on it must be at least "
                         f"{MIN_COMPILED_STEPS}, so that recompiles (dynamo gives up after 8) show")
    path = out_dir / f"{device_name().replace(' ', '_')}-{args.profile}.json"
    report = {
        "device": device_name(), "profile": args.profile, "model": label, "dtype": str(dtype),
        "num_layers_override": args.num_layers, "completions_per_step": cfg.trainer.completions_per_step,
        "max_completion_length": cfg.trainer.max_completion_length, "full_length": args.full_length,
        "prompt_tokens": args.prompt_tokens, "warmup_steps": args.warmup, "timed_steps": args.steps,
        "cpu_threads": None if torch.cuda.is_available() else args.threads,
        "lora": cfg.use_lora, "gradient_checkpointing": cfg.trainer.activation_checkpointing,
        "generation_backends": backends, "rollout_compile": compiles(args),
        "compile_backend": (args.compile_backend or "inductor") if compiles(args) else None, "complete": False,
        "variants": [], "ratios": {}, "rollout": None, "rollout_profile": None, "eval": None,
        "versions": package_versions(),
        "command": "python -m saah_lib.studies.bench " + " ".join(args.argv),
    }
    for variant, backend in runs:
        report["variants"].append(time_variant(variant, model_factory, cfg, args, out_dir / "trainer_tmp", backend))
        report["ratios"] = step_ratios(report["variants"])
        atomic_write_json(path, report)  # after every variant: a cut-off run keeps what it measured
    if args.rollout_repeats:
        report["rollout"] = rollout_comparison(model_factory, cfg, args)
        atomic_write_json(path, report)
    if args.rollout_profile:
        report["rollout_profile"] = rollout_profile(model_factory, cfg, args)
        atomic_write_json(path, report)
    if args.eval_problems:
        report["eval_by_backend"] = {b: eval_throughput(model_factory, cfg, args.eval_problems, args, b)
                                     for b in backends}
        report["eval"] = report["eval_by_backend"][backends[-1]]
    report["complete"] = True
    atomic_write_json(path, report)
    print(summary_line(report) + f"\nwrote {path}")
    return report


def step_ratios(results: list[dict]) -> dict:
    """Each variant against stock TRL, and ah/sa against our grpo with the same entropy and backend."""
    by_name = {r["variant"]: r["median_step_s"] for r in results}
    ratios = {}
    for name, t in by_name.items():
        if name != "trl-bnpo" and "trl-bnpo" in by_name:
            ratios[f"{name}/trl-bnpo"] = t / by_name["trl-bnpo"]
    for name, t in by_name.items():
        base_name, _, backend = name.partition("@")
        method, _, kind = base_name.partition("-")
        if method not in ("ah", "sa"):
            continue
        grpo = "grpo" if kind == "exact" else f"grpo-{kind}"
        grpo = f"{grpo}@{backend}" if backend else grpo
        if grpo in by_name:
            ratios[f"{name}/{grpo}"] = t / by_name[grpo]
    return ratios


def summary_line(report: dict) -> str:
    parts = [f"{report['device']} {report['profile']}:"]
    for v in report["variants"]:
        parts.append(f"{v['variant']} {v['median_step_s']:.3f}s (gen {v['median_generation_s']:.3f}s)")
        if v.get("compile_health"):
            h = v["compile_health"]
            parts.append(f"{v['variant']} graphs {h['compiled_graphs']} recompiles {h['recompiles']} "
                         f"breaks {h['graph_breaks']} fallback {'yes' if h['fallback'] else 'no'}")
    parts += [f"{k}={v:.3f}" for k, v in report["ratios"].items()]
    if report.get("rollout_profile"):
        r = report["rollout_profile"]["static"]
        parts.append(f"static rollout {r['host_syncs_per_token']:.3f} syncs/token, "
                     f"{r['eager_ops_per_token']:.2f} eager ops/token")
    if report.get("rollout"):
        r = report["rollout"]
        parts.append(f"rollout hf {r['hf']['median_s']:.3f}s compiled {r['compiled']['median_s']:.3f}s")
    if report["eval"]:
        parts.append(f"eval {report['eval']['problems_per_s']:.2f} problems/s")
    return " | ".join(parts)


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(prog="python -m saah_lib.studies.bench",
                                description="SA-AH-GRPO step-time benchmark against stock TRL", formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--profile", default="tiny", choices=["tiny", *QWEN25_ARCHITECTURES])
    p.add_argument("--steps", type=int, default=12, help="timed steps per variant (after warm-up)")
    p.add_argument("--warmup", type=int, default=1, help="untimed steps first")
    p.add_argument("--variants", nargs="*", choices=[v[0] for v in VARIANTS], help="subset to time; None: all")
    p.add_argument("--model-dir", default=None, help="benchmark this model folder instead")
    p.add_argument("--num-layers", type=int, default=None, help="shrink the architecture (smoke tests only)")
    p.add_argument("--max-completion-length", type=int, default=None, help="None: the profile's")
    p.add_argument("--prompt-tokens", type=int, default=192, help="prompt length in tokens")
    p.add_argument("--eval-problems", type=int, default=64, help="0 skips the evaluation throughput")
    p.add_argument("--no-full-length", dest="full_length", action="store_false",
                   help="let completions stop at EOS (default: forced to the full length)")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (CPU runs only)")
    p.add_argument("--generation-backend", nargs="+", default=["auto"], choices=["auto", "hf", "compiled"],
                   help="rollout backends for our variants, each timed in this run: hf compiled (auto: compiled "
                        "on CUDA, hf on CPU); stock TRL is always timed with its own generate")
    p.add_argument("--rollout-repeats", type=int, default=0,
                   help="also time rollouts alone (hf generate vs the static engine), alternated this many times")
    p.add_argument("--rollout-compile", choices=["auto", "on", "off"], default="auto",
                   help="compile the static engine's decode step: auto (on CUDA only), on, off")
    p.add_argument("--compile-backend", default=None,
                   help="torch.compile backend of that step (default inductor; eager, aot_eager: quick CPU checks)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="NAME=VALUE",
                   help="a config field of the profile (JSON value), e.g. --set use_lora=true")
    p.add_argument("--rollout-profile", action="store_true",
                   help="count host syncs and eager ops per token of one rollout (profiler), static engine vs generate")
    p.add_argument("--out-dir", default=str(BENCH_RESULTS.relative_to(BENCH_RESULTS.parents[1])),
                   help="where the JSON goes")
    args = p.parse_args(argv)
    args.argv = argv
    run_benchmark(args)


if __name__ == "__main__":
    main()
