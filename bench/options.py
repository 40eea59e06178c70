"""What one benchmark run measures: :class:`BenchOptions`, checked once, and its command line."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path

from bench.files import out_folder_problem
from saah_lab.training.launch import parse_overrides
from saah_lib.paths import LOCAL_RESULTS
from saah_lib.training.config import RunConfig, make_config

#: Where ``make bench`` writes unless told ``--out``: git-ignored, so the committed results/bench stays as is.
LOCAL_BENCH = LOCAL_RESULTS / "bench"
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
PROFILES = ("tiny", "qwen2.5-1.5b", "qwen2.5-3b")
_COMPILE = {"auto": None, "on": True, "off": False}


def profile_config(profile: str, completion_tokens: int | None, overrides: dict | None = None, **fields) -> RunConfig:
    """The profile's ``sa`` config with ``overrides``, rollouts and evaluations of ``completion_tokens`` (None: the
    profile's), and ``fields`` (e.g. ``max_steps``), made once."""
    lengths = {} if completion_tokens is None else {"max_completion_length": completion_tokens,
                                                   "eval_max_new_tokens": completion_tokens}
    return make_config(profile, method="sa", **{**(overrides or {}), **lengths, **fields})


def sa_variant(cfg: RunConfig) -> tuple:
    """The profile's own ``sa`` variant: top-500 where the profile uses it (the Qwen profiles), exact elsewhere."""
    return next(v for v in VARIANTS if v[0] == ("sa-exact" if cfg.trainer.entropy_top_k is None else "sa-top500"))


@dataclass(frozen=True)
class BenchOptions:
    profile: str = "tiny"
    steps: int = 12
    warmup: int = 1
    variants: tuple[str, ...] = ()  # empty: all
    model_dir: str | None = None
    num_layers: int | None = None
    max_completion_length: int | None = None
    prompt_tokens: int = 192
    eval_problems: int = 64
    full_length: bool = True
    threads: int = 1
    generation_backends: tuple[str, ...] = ("auto",)
    rollout_repeats: int = 0
    rollout_compile: bool | None = None  # None: on CUDA only
    compile_backend: str | None = None
    overrides: dict = field(default_factory=dict)
    rollout_profile: bool = False
    out: Path | None = None  # None: results/local/bench
    command: str = "python -m bench.step"

    def __post_init__(self):
        if self.profile not in PROFILES:
            raise ValueError(f"profile must be one of {', '.join(PROFILES)}, got {self.profile!r}")
        unknown = sorted(set(self.variants) - {v[0] for v in VARIANTS})
        if unknown:
            raise ValueError(f"variants: unknown {', '.join(unknown)}")
        for name in ("steps", "threads"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("warmup", "eval_problems", "rollout_repeats"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if "vllm" in self.generation_backends:
            raise ValueError("the benchmark times hf and compiled; vLLM runs are TRL's own (trl vllm-serve)")
        problem = out_folder_problem(Path(self.out)) if self.out is not None else None
        if problem:
            raise ValueError(problem)

    def compiles(self, on_cuda: bool) -> bool:
        return on_cuda if self.rollout_compile is None else self.rollout_compile

    def out_dir(self) -> Path:
        return LOCAL_BENCH if self.out is None else Path(self.out)


def parse_args(argv: list[str]) -> BenchOptions:
    p = argparse.ArgumentParser(prog="python -m bench.step",
                                description="SA-AH-GRPO step-time benchmark against stock TRL")
    p.add_argument("--profile", default="tiny", choices=PROFILES,
                   help="tiny: the tiny warm start; qwen2.5-*: that architecture with random weights (default: tiny)")
    p.add_argument("--steps", type=int, default=12, help="timed steps per variant, after warm-up (default: 12)")
    p.add_argument("--warmup", type=int, default=1, help="untimed steps first (default: 1)")
    p.add_argument("--variants", nargs="*", default=[], choices=[v[0] for v in VARIANTS],
                   help="subset to time (default: all)")
    p.add_argument("--model-dir", default=None, help="benchmark this model folder instead")
    p.add_argument("--num-layers", type=int, default=None, help="shrink the architecture (smoke tests only)")
    p.add_argument("--max-completion-length", type=int, default=None,
                   help="rollout and evaluation length (default: the profile's)")
    p.add_argument("--prompt-tokens", type=int, default=192, help="prompt length in tokens (default: 192)")
    p.add_argument("--eval-problems", type=int, default=64, help="0 skips the evaluation throughput (default: 64)")
    p.add_argument("--no-full-length", dest="full_length", action="store_false",
                   help="let completions stop at EOS; without it they are forced to the full length")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads, CPU runs only (default: 1)")
    p.add_argument("--generation-backend", dest="generation_backends", nargs="+", default=["auto"], choices=["auto", "hf", "compiled"],
                   help="rollout backends for our variants, each timed in this run (auto: compiled); stock TRL is "
                        "always timed with its own generate")
    p.add_argument("--rollout-repeats", type=int, default=0,
                   help="also time rollouts alone (hf generate vs the static engine), alternated this many times")
    p.add_argument("--rollout-compile", choices=list(_COMPILE), default="auto",
                   help="compile the static engine's decode step: auto (on CUDA only), on, off")
    p.add_argument("--compile-backend", default=None,
                   help="torch.compile backend of that step (default: inductor; eager, aot_eager: quick CPU "
                        "checks)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="NAME=VALUE",
                   help="a config field of the profile (JSON value), e.g. --set use_lora=true")
    p.add_argument("--rollout-profile", action="store_true",
                   help="count host syncs and eager ops per token of one rollout (profiler), static engine vs generate")
    p.add_argument("--out", "--out-dir", dest="out", default=None,
                   help=f"folder of the JSON (default: {LOCAL_BENCH.relative_to(LOCAL_BENCH.parents[2])}, "
                        "git-ignored; give results/bench to update a committed measurement)")
    a = vars(p.parse_args(argv))  # each option's dest is its BenchOptions field
    return BenchOptions(**{
        **a, "variants": tuple(a["variants"]), "generation_backends": tuple(a["generation_backends"]),
        "rollout_compile": _COMPILE[a["rollout_compile"]], "overrides": parse_overrides(a["overrides"]),
        "out": None if a["out"] is None else Path(a["out"]), "command": " ".join(["python -m bench.step", *argv])})

