"""Every hyperparameter of a run, in one dataclass, with named profiles.

``make_config("qwen2.5-1.5b", method="sa", alpha=0.5)`` gives the paper's
setting; ``make_config()`` and ``SAAHConfig()`` give the CPU-sized ``tiny``
profile (the dataclass defaults are exactly that profile). Validation
happens at construction, before anything is written to disk.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from saah_lib.method.methods import MAIN_ALPHA, METHODS, PAPER_ENTROPY_TOP_K, method_alpha
from saah_lib.models.backends import BACKENDS, VLLM_MODES
from saah_lib.models.names import (
    TINY_WARMSTART,
    canonical_model_name,
    model_folder_problem,
    tiny_warm_start_label,
    tiny_warm_start_seed,
)
from saah_lib.paths import LOCAL_RESULTS, in_repo, repo_relative
from saah_lib.rundir.layout import RESERVED_NAMES, run_dir

#: single runs write here unless told otherwise (git-ignored); the studies pass their own roots
LOCAL_RESULTS_DIR = repo_relative(LOCAL_RESULTS)
#: transformers' reporting integrations (its INTEGRATION_TO_CALLBACK; tests/training/test_config.py compares)
REPORT_INTEGRATIONS = ("azure_ml", "clearml", "codecarbon", "comet_ml", "dagshub", "dvclive", "flyte", "kubeflow",
                       "mlflow", "neptune", "swanlab", "tensorboard", "trackio", "wandb")
#: fields left out of a run's config.json: where its outputs go, not what was run
NOT_RECORDED = ("results_dir", "report_to", "run_name")

LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def _field(default, help: str):
    return field(default=default, metadata={"help": help})


@dataclass
class SAAHConfig:
    """One run's settings. Every field has help text (``SAAHConfig.help()``); defaults are the ``tiny`` profile."""

    # --- what to run
    profile: str = _field("tiny", "named profile the other defaults come from: tiny | qwen2.5-1.5b | qwen2.5-3b")
    method: str = _field("sa", "grpo | ah | sa")
    alpha: float = _field(MAIN_ALPHA, "discount strength; 0 for grpo whatever is given")
    steps: int | None = _field(None, "optimiser steps; None: the profile's default for the method")
    seed: int = _field(0, "seeds LoRA initialisation, sampling and TRL's prompt order (CPU studies: 0, 1, 2, ...; "
                          "the paper profiles: the paper's 123)")
    run_id: str | None = _field(None, "run folder name; None: <profile>-<method>-a<alpha>-s<seed>")
    results_dir: str = _field(LOCAL_RESULTS_DIR, "results root (relative paths: from the repository root; the "
                                                 "default is git-ignored)")
    # --- model
    model_name: str = _field(TINY_WARMSTART, "hub id, model folder, or a tiny warm start: tiny-warmstart (seed 0) "
                                             "or tiny-warmstart-s<N> (seed N), built on first use")
    model_label: str = _field("tiny", "the model's name in tables and figures")
    dtype: str = _field("float32", "float32 | bfloat16 | float16 (bf16/fp16 autocast on a GPU)")
    use_lora: bool = _field(False, "train LoRA adapters instead of every weight")
    lora_r: int = _field(16, "LoRA rank")
    lora_alpha: int = _field(32, "LoRA scaling alpha (not the method's alpha)")
    lora_dropout: float = _field(0.05, "LoRA dropout")
    lora_target_modules: tuple[str, ...] = _field(LORA_TARGETS, "module names that get LoRA adapters")
    gradient_checkpointing: bool = _field(False, "recompute activations in the backward pass (less memory)")
    # --- data
    dataset: str = _field("synthetic", "gsm8k | synthetic")
    data_dir: str | None = _field(None, "GSM8K jsonl folder; None: $SAAH_GSM8K_DIR, then the hub")
    n_train: int = _field(800, "training problems")
    n_eval: int = _field(200, "evaluation problems")
    data_seed: int = _field(123, "seed of the train/evaluation split (not of the prompt order: that is seed)")
    # --- optimisation (the paper's table, except where the tiny profile differs: see PROFILES)
    learning_rate: float = _field(2e-4, "peak learning rate")
    lr_scheduler: str = _field("cosine", "transformers scheduler name")
    warmup_steps: int | None = _field(None, "warm-up steps; None: max(5, steps // 10)")
    weight_decay: float = _field(0.01, "AdamW weight decay")
    max_grad_norm: float = _field(1.0, "gradient clipping norm (0: off)")
    beta: float = _field(0.04, "KL penalty to the reference model")
    epsilon: float = _field(0.2, "PPO clip range")
    prompts_per_step: int = _field(4, "prompts per optimiser step")
    num_generations: int = _field(4, "completions per prompt (the group size G)")
    gradient_accumulation_steps: int = _field(2, "micro-batches per optimiser step (one process)")
    max_completion_length: int = _field(96, "tokens per sampled completion")
    temperature: float = _field(1.0, "sampling temperature of rollouts")
    entropy_top_k: int | None = _field(None, "top-K entropy estimate; None: the exact entropy TRL already computes")
    reward_std_threshold: float = _field(0.15, "groups whose reward std is below this get zero advantage")
    # --- schedule
    save_every: int = _field(10, "checkpoint every N steps")
    keep_checkpoints: int | None = _field(2, "checkpoints kept; None keeps every one")
    eval_every: int = _field(20, "greedy Pass@1 every N steps (and at steps 0 and the last)")
    eval_batch_size: int = _field(100, "problems per greedy evaluation batch")
    eval_max_new_tokens: int = _field(96, "tokens per greedy evaluation completion")
    log_token_entropies: int = _field(2, "rollouts per step whose per-token entropies are logged (for the schematic)")
    # --- generation speed (saah_lib.models.backends; README "Running on GPUs")
    generation_backend: str = _field("auto", "auto | hf | compiled | vllm; auto: compiled on CUDA, hf elsewhere")
    vllm_mode: str = _field("colocate", "TRL's vllm_mode with generation_backend='vllm': colocate | server")
    vllm_server_base_url: str | None = _field(None, "server mode: e.g. http://localhost:8000 (trl vllm-serve)")
    vllm_gpu_memory_utilization: float = _field(0.3, "colocate mode: vLLM's share of each GPU")
    # --- experiment tracking (TRL's report_to; the run folder's logs are written whatever this is)
    report_to: str = _field("none", "none | all | integrations, comma-separated: " + " | ".join(REPORT_INTEGRATIONS))
    run_name: str | None = _field(None, "the run's name in those integrations; None: the run_id")

    def __post_init__(self):
        # Only the fields needed to derive defaults are checked here; validate() checks everything.
        if not _is_real(self.alpha):
            _fail("alpha", f"must be a number, got {self.alpha!r}")
        self.alpha = float(self.alpha)
        if isinstance(self.lora_target_modules, str) or not isinstance(self.lora_target_modules, (list, tuple)):
            _fail("lora_target_modules", f"must be a list of module names, got {self.lora_target_modules!r}")
        self.lora_target_modules = tuple(self.lora_target_modules)
        if isinstance(self.model_name, str) and self.model_name:
            self.model_name = canonical_model_name(self.model_name)
        if self.method == "grpo":
            self.alpha = 0.0  # plain GRPO is alpha = 0 by definition (saah_lib.method.methods.method_alpha)
        if self.steps is None and isinstance(self.profile, str) and isinstance(self.method, str):
            self.steps = PROFILE_STEPS.get(self.profile, {}).get(self.method)
        if self.warmup_steps is None and _is_int(self.steps):
            self.warmup_steps = max(5, self.steps // 10)
        if self.run_id is None:
            self.run_id = default_run_id(self)
        validate(self)

    # ------------------------------------------------------------------ derived
    @property
    def completions_per_step(self) -> int:
        return self.prompts_per_step * self.num_generations

    @property
    def run_dir(self) -> Path:
        return run_dir(in_repo(self.results_dir), self.run_id)

    @classmethod
    def help(cls) -> dict[str, str]:
        """Every field's help text, by name."""
        return {f.name: f.metadata.get("help", "") for f in dataclasses.fields(cls)}

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["lora_target_modules"] = list(self.lora_target_modules)
        return d

    def run_settings(self) -> dict:
        """What a run's ``config.json`` records: every field that gives the run its meaning.

        ``results_dir`` is left out: it says where the run folder lies, which
        changes when a results root is moved or promoted, not what was run; so are
        ``report_to`` and ``run_name``, which say where else the logs are mirrored.
        """
        d = self.to_dict()
        for name in NOT_RECORDED:
            del d[name]
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "SAAHConfig":
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})


def default_run_id(cfg: SAAHConfig) -> str:
    """``<profile>-<method>-a<alpha>-s<seed>``, plus ``-w<N>`` for a tiny warm start built with seed N > 0
    (so runs of two warm starts at the same seed never share a folder)."""
    run_id = f"{cfg.profile}-{cfg.method}-a{cfg.alpha:g}-s{cfg.seed}"
    warm_start = tiny_warm_start_seed(cfg.model_name) if isinstance(cfg.model_name, str) else None
    return run_id + (f"-w{warm_start}" if warm_start else "")


# The paper trains SA-AH-GRPO longer (180 vs 150 steps). The tiny profile
# keeps all methods equal so that its multi-seed comparison is like for like.
PROFILE_STEPS = {
    "qwen2.5-1.5b": {"grpo": 150, "ah": 150, "sa": 180},
    "qwen2.5-3b": {"grpo": 150, "ah": 150, "sa": 180},
    "tiny": {"grpo": 60, "ah": 60, "sa": 60},
}

# The paper's table; every field where it differs from the defaults (the tiny profile).
_PAPER = dict(
    seed=123,  # "All runs use a fixed random seed (123)"; the tiny profile's 0 is the CPU studies' first seed
    dtype="bfloat16",
    use_lora=True,
    gradient_checkpointing=True,
    dataset="gsm8k",
    n_train=800,
    n_eval=500,
    learning_rate=5e-6,
    max_completion_length=512,
    entropy_top_k=PAPER_ENTROPY_TOP_K,
    save_every=15,
    keep_checkpoints=None,
    eval_every=30,
    eval_batch_size=128,
    eval_max_new_tokens=512,
)

PROFILES: dict[str, dict] = {
    "qwen2.5-1.5b": dict(_PAPER, model_name="Qwen/Qwen2.5-1.5B-Instruct", model_label="Qwen2.5-1.5B-Instruct"),
    "qwen2.5-3b": dict(_PAPER, model_name="Qwen/Qwen2.5-3B-Instruct", model_label="Qwen2.5-3B-Instruct"),
    # CPU-sized: a warm-started Qwen2-architecture model of ~1M parameters on
    # synthetic word problems (see saah_lib.models.warmstart). Full fine-tuning and a
    # larger learning rate make the signal visible within 60 steps. These are
    # also SAAHConfig's own defaults (spelled out so the profile reads alone).
    "tiny": dict(
        model_name=TINY_WARMSTART,
        model_label="tiny",
        dtype="float32",
        use_lora=False,
        dataset="synthetic",
        n_train=800,
        n_eval=200,
        learning_rate=2e-4,
        max_completion_length=96,
        entropy_top_k=None,
        save_every=10,
        keep_checkpoints=2,
        eval_every=20,
        eval_batch_size=100,
        eval_max_new_tokens=96,
    ),
}


def make_config(profile: str = "tiny", overrides: dict | None = None, **fields) -> SAAHConfig:
    """A config from a named profile with explicit settings (None means 'keep the profile's').

    ``overrides`` (a notebook's parameter of that name) is a mapping of further fields; ``fields``
    given by name win over it.  A tiny-profile run that names another tiny warm start
    (``model_name="tiny-warmstart-s1"``) gets that warm start's model label (``tiny-w1``) unless one
    is given: runs from different starting points are kept apart in every table.
    """
    if not isinstance(profile, str) or profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}: expected one of {', '.join(PROFILES)}")
    settings = {**check_overrides(overrides), **fields}
    known = {f.name for f in dataclasses.fields(SAAHConfig)}
    unknown = sorted(set(settings) - known)
    if unknown:
        raise ValueError(f"unknown config field(s): {', '.join(unknown)}")
    values = dict(PROFILES[profile], profile=profile)
    values.update({k: v for k, v in settings.items() if v is not None})
    warm_start = tiny_warm_start_seed(values["model_name"]) if isinstance(values["model_name"], str) else None
    if profile == "tiny" and warm_start and settings.get("model_label") is None:
        values["model_label"] = tiny_warm_start_label(warm_start)
    return SAAHConfig(**values)


def check_overrides(overrides) -> dict:
    """``overrides`` as a dict of config fields: None is none; anything but a mapping with string keys is an error."""
    if overrides is None:
        return {}
    if not isinstance(overrides, Mapping) or not all(isinstance(k, str) for k in overrides):
        raise ValueError(f"overrides must be a mapping of SAAHConfig field names to values, e.g. "
                         f"{{\"learning_rate\": 1e-5}}; got {type(overrides).__name__} {overrides!r}")
    return dict(overrides)


def field_error(name: str, message: str) -> ValueError:
    """The error of a bad config field: its message starts by naming the field."""
    return ValueError(f"config field {name!r}: {message}")


def _fail(name: str, message: str):
    raise field_error(name, message)


# Schedulers transformers builds from the run's settings alone (the others
# need extra arguments, such as min_lr, or an evaluation loss).
LR_SCHEDULERS = ("linear", "cosine", "cosine_with_restarts", "polynomial", "constant",
                 "constant_with_warmup", "inverse_sqrt")
DTYPES = ("float32", "bfloat16", "float16")
DATASETS = ("gsm8k", "synthetic")
MAX_SEED = 2**32 - 1  # numpy's seed range; transformers.set_seed seeds numpy with it
# A run id is a folder name: no separators, no leading dot, nothing a shell or
# another operating system would trip over.
_RUN_ID_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+=-]{0,199}")

# (field, lowest allowed value) of every integer count; None marks "or None".
_COUNTS = {
    "steps": 1, "prompts_per_step": 1, "num_generations": 2, "gradient_accumulation_steps": 1,
    "max_completion_length": 1, "save_every": 1, "eval_every": 1, "eval_batch_size": 1,
    "eval_max_new_tokens": 1, "n_train": 1, "n_eval": 1, "warmup_steps": 0, "lora_r": 1,
    "log_token_entropies": 0,
}
_OPTIONAL_COUNTS = {"entropy_top_k": 1, "keep_checkpoints": 1}
# (field, lowest, highest, lowest allowed?, highest allowed?) of every real number
_REALS = {
    "learning_rate": (0.0, math.inf, False, False),
    "weight_decay": (0.0, math.inf, True, False),
    "max_grad_norm": (0.0, math.inf, True, False),  # 0 turns clipping off (transformers)
    "beta": (0.0, math.inf, True, False),
    "epsilon": (0.0, 1.0, False, False),
    "temperature": (0.0, math.inf, False, False),
    "reward_std_threshold": (0.0, math.inf, True, False),
    "lora_alpha": (0.0, math.inf, False, False),
    "lora_dropout": (0.0, 1.0, True, False),
    "vllm_gpu_memory_utilization": (0.0, 1.0, False, True),
}
_BOOLS = ("use_lora", "gradient_checkpointing")
_NAMES = ("model_name", "model_label")  # non-empty strings


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_real(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_count(name: str, value, lowest: int) -> None:
    if not _is_int(value) or value < lowest:
        _fail(name, f"must be an integer >= {lowest}, got {value!r}")


def _check_real(name: str, value, lo: float, hi: float, lo_ok: bool, hi_ok: bool) -> None:
    if not _is_real(value) or not math.isfinite(value):
        _fail(name, f"must be a finite number, got {value!r}")
    if value < lo or (value == lo and not lo_ok) or value > hi or (value == hi and not hi_ok):
        interval = f"{'[' if lo_ok else '('}{lo:g}, {hi:g}{']' if hi_ok else ')'}"
        _fail(name, f"must lie in {interval}, got {value!r}")


def _check_choice(name: str, value, choices) -> None:
    if value not in choices:
        _fail(name, f"unknown value {value!r}; expected one of {', '.join(choices)}")


def validate(cfg: SAAHConfig) -> None:
    """Raise a ValueError naming the first bad field; touches nothing on disk but the model check.

    Every field is checked for type and range (booleans are not numbers, reals
    are finite), then combinations: ``data_dir`` only with the GSM8K dataset,
    whole micro-batches.  A warm-up longer than the run is allowed: a smoke
    test of a few steps keeps the profile's warm-up and simply never reaches
    the peak learning rate.  LoRA settings are checked even with
    ``use_lora=False`` (so switching LoRA on cannot reveal a bad value late).
    """
    for name, choices in (("profile", tuple(PROFILES)), ("method", METHODS), ("dataset", DATASETS),
                          ("dtype", DTYPES), ("lr_scheduler", LR_SCHEDULERS)):
        _check_choice(name, getattr(cfg, name), choices)
    try:
        method_alpha(cfg.method, cfg.alpha)
    except ValueError as err:
        _fail("alpha", str(err).removeprefix("alpha "))
    for name in ("seed", "data_seed"):
        value = getattr(cfg, name)
        if not _is_int(value) or not 0 <= value <= MAX_SEED:
            _fail(name, f"must be an integer in [0, {MAX_SEED}], got {value!r}")
    for name, lowest in _COUNTS.items():
        _check_count(name, getattr(cfg, name), lowest)
    for name, lowest in _OPTIONAL_COUNTS.items():
        if getattr(cfg, name) is not None:
            _check_count(name, getattr(cfg, name), lowest)
    for name, bounds in _REALS.items():
        _check_real(name, getattr(cfg, name), *bounds)
    for name in _BOOLS:
        if not isinstance(getattr(cfg, name), bool):
            _fail(name, f"must be True or False, got {getattr(cfg, name)!r}")
    for name in _NAMES:
        value = getattr(cfg, name)
        if not isinstance(value, str) or not value.strip():
            _fail(name, f"must be a non-empty string, got {value!r}")
    if not isinstance(cfg.results_dir, (str, os.PathLike)) or not str(cfg.results_dir).strip():
        _fail("results_dir", f"must be a folder name, got {cfg.results_dir!r}")
    if not cfg.lora_target_modules or not all(isinstance(m, str) and m for m in cfg.lora_target_modules):
        _fail("lora_target_modules", f"must be non-empty module names, got {cfg.lora_target_modules!r}")
    if not isinstance(cfg.run_id, str) or not _RUN_ID_RE.fullmatch(cfg.run_id):
        _fail("run_id", "must be a plain folder name (letters, digits and _ . + = -, not starting with '.' "
                        f"or '-', at most 200 characters), got {cfg.run_id!r}")
    if cfg.run_id in RESERVED_NAMES:
        _fail("run_id", f"{cfg.run_id!r} is reserved for other folders ({', '.join(RESERVED_NAMES)}); "
                        "choose another name")
    if cfg.data_dir is not None:
        if not isinstance(cfg.data_dir, (str, os.PathLike)) or not str(cfg.data_dir).strip():
            _fail("data_dir", f"must be a folder name or None, got {cfg.data_dir!r}")
        if cfg.dataset != "gsm8k":
            _fail("data_dir", f"is only read for dataset='gsm8k'; dataset={cfg.dataset!r} would ignore "
                              f"{str(cfg.data_dir)!r} (remove data_dir or set dataset='gsm8k')")
    if cfg.completions_per_step % cfg.gradient_accumulation_steps:
        _fail(
            "gradient_accumulation_steps",
            f"{cfg.prompts_per_step} prompts x {cfg.num_generations} completions = {cfg.completions_per_step} "
            f"completions per step cannot be split into {cfg.gradient_accumulation_steps} equal micro-batches",
        )
    report_integrations(cfg.report_to)  # raises naming the field
    if cfg.run_name is not None and not (isinstance(cfg.run_name, str) and cfg.run_name.strip()):
        _fail("run_name", f"must be a non-empty string or None, got {cfg.run_name!r}")
    _check_choice("generation_backend", cfg.generation_backend, BACKENDS)
    _check_choice("vllm_mode", cfg.vllm_mode, VLLM_MODES)
    if cfg.vllm_server_base_url is not None and not (isinstance(cfg.vllm_server_base_url, str) and cfg.vllm_server_base_url):
        _fail("vllm_server_base_url", f"must be a URL string or None, got {cfg.vllm_server_base_url!r}")
    _check_model(cfg)


def report_integrations(report_to) -> list[str]:
    """``report_to`` as TRL's list: ``"none"`` -> [], ``"all"`` -> ["all"], ``"a,b"`` -> ["a", "b"]."""
    if not isinstance(report_to, str) or not report_to.strip():
        _fail("report_to", f"must be 'none', 'all' or integration names, got {report_to!r}")
    names = [n.strip() for n in report_to.split(",")]
    if names == ["none"]:
        return []
    if names == ["all"]:
        return ["all"]
    for name in names:
        _check_choice("report_to", name, REPORT_INTEGRATIONS)
    return names


def _check_model(cfg: SAAHConfig) -> None:
    problem = model_folder_problem(cfg.model_name)
    if problem is not None:
        _fail("model_name", problem)


def check_vocabulary(cfg: SAAHConfig, vocab_size: int) -> None:
    """Checks that need the model's vocabulary (known once it is loaded, still before anything is written)."""
    if cfg.entropy_top_k is not None and cfg.entropy_top_k > vocab_size:
        _fail("entropy_top_k", f"{cfg.entropy_top_k} is larger than the model's vocabulary of {vocab_size} "
                               "tokens (the top-K estimate needs K <= V; None gives the exact entropy)")
