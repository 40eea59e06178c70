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
from dataclasses import dataclass, field
from pathlib import Path

from saah_lib.loss import ALPHA_RANGE, METHODS

REPO_ROOT = Path(__file__).resolve().parent.parent
# The tiny warm start is named by its place in the repository, never by an
# absolute path: run configs are committed and must mean the same in any clone.
TINY_MODEL = "results/mini/warmstart/model"
TINY_MODEL_DIR = REPO_ROOT / TINY_MODEL
GENERATION_BACKENDS = ("auto", "hf", "compiled", "vllm")  # saah_lib.rollout.BACKENDS, without importing torch
VLLM_MODES = ("colocate", "server")
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass
class SAAHConfig:
    # --- what to run
    profile: str = "tiny"
    method: str = "sa"
    alpha: float = 0.5
    steps: int | None = None  # None: the profile's default for the method
    seed: int = 123
    run_id: str | None = None  # None: derived from profile, method, alpha, seed
    results_dir: str = "results"
    # --- model
    model_name: str = TINY_MODEL  # hub id, model folder, or the repo-relative tiny warm start
    model_label: str = "tiny"
    dtype: str = "float32"  # "bfloat16" on GPU for the paper profiles
    use_lora: bool = False
    lora_r: int = 16
    lora_alpha: int = 32
    lora_dropout: float = 0.05
    lora_target_modules: tuple[str, ...] = LORA_TARGETS
    gradient_checkpointing: bool = False
    # --- data
    dataset: str = "synthetic"  # "gsm8k" or "synthetic"
    data_dir: str | None = None  # GSM8K jsonl folder; None: $SAAH_GSM8K_DIR, then the hub
    n_train: int = 800
    n_eval: int = 200
    data_seed: int = 123
    # --- optimisation (the paper's table, except where the tiny profile differs: see PROFILES)
    learning_rate: float = 2e-4
    lr_scheduler: str = "cosine"
    warmup_steps: int | None = None  # None: max(5, steps // 10)
    weight_decay: float = 0.01
    max_grad_norm: float = 1.0
    beta: float = 0.04
    epsilon: float = 0.2
    prompts_per_step: int = 4
    num_generations: int = 4
    gradient_accumulation_steps: int = 2
    max_completion_length: int = 96
    temperature: float = 1.0
    entropy_top_k: int | None = None  # None: exact entropy that TRL already computes
    reward_std_threshold: float = 0.15
    # --- schedule
    save_every: int = 10
    keep_checkpoints: int | None = 2  # None keeps every checkpoint
    eval_every: int = 20
    eval_batch_size: int = 100
    eval_max_new_tokens: int = 96
    log_token_entropies: int = 2  # rollouts per step whose per-token entropies are logged (for the schematic)
    # --- generation speed (saah_lib.rollout; README "Running on GPUs")
    generation_backend: str = "auto"  # hf | compiled | vllm; auto: compiled on CUDA, hf (TRL's generate) on CPU
    vllm_mode: str = "colocate"  # TRL's vllm_mode when generation_backend="vllm": colocate or server
    vllm_server_base_url: str | None = None  # server mode: e.g. http://localhost:8000 (trl vllm-serve)
    vllm_gpu_memory_utilization: float = 0.3  # colocate mode: vLLM's share of each GPU

    def __post_init__(self):
        # Only the fields needed to derive defaults are checked here; validate() checks everything.
        if not _is_real(self.alpha):
            _fail("alpha", f"must be a number, got {self.alpha!r}")
        self.alpha = float(self.alpha)
        if isinstance(self.lora_target_modules, str) or not isinstance(self.lora_target_modules, (list, tuple)):
            _fail("lora_target_modules", f"must be a list of module names, got {self.lora_target_modules!r}")
        self.lora_target_modules = tuple(self.lora_target_modules)
        if isinstance(self.model_name, str) and self.model_name:
            self.model_name = portable_model_name(self.model_name)
        if self.method == "grpo":
            self.alpha = 0.0  # plain GRPO is alpha = 0 by definition
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
    def per_device_batch_size(self) -> int:
        return self.completions_per_step // self.gradient_accumulation_steps

    @property
    def run_dir(self) -> Path:
        return Path(self.results_dir) / "runs" / self.run_id

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["lora_target_modules"] = list(self.lora_target_modules)
        return d

    def run_settings(self) -> dict:
        """What a run's ``config.json`` records: every field that gives the run its meaning.

        ``results_dir`` is left out: it says where the run folder lies, which
        changes when a results root is moved or promoted, not what was run.
        """
        d = self.to_dict()
        del d["results_dir"]
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "SAAHConfig":
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})


def repo_relative(path: str | Path) -> str:
    """``path`` relative to the repository when it lies inside it (POSIX form), else absolute.

    What a run records must not depend on where the repository was cloned.
    """
    path = Path(path).expanduser().resolve()
    try:
        return path.relative_to(REPO_ROOT.resolve()).as_posix()
    except ValueError:
        return str(path)


def looks_like_path(name: str) -> bool:
    """A model name that names a folder rather than a hub id."""
    return name.startswith(("/", "./", "../", "~")) or Path(name).expanduser().exists()


def portable_model_name(name: str) -> str:
    """Hub ids unchanged; folders inside the repository repo-relative; other folders absolute."""
    if name == TINY_MODEL or not looks_like_path(name):
        return name
    return repo_relative(name)


def model_location(name: str) -> str:
    """Where to load ``name`` from: a repo-relative folder becomes absolute, a hub id stays as is."""
    in_repo = REPO_ROOT / name
    if name == TINY_MODEL or (not Path(name).is_absolute() and in_repo.exists()):
        return str(in_repo)
    return str(Path(name).expanduser()) if looks_like_path(name) else name


def default_run_id(cfg: SAAHConfig) -> str:
    return f"{cfg.profile}-{cfg.method}-a{cfg.alpha:g}-s{cfg.seed}"


# The paper trains SA-AH-GRPO longer (180 vs 150 steps). The tiny profile
# keeps all methods equal so that its multi-seed comparison is like for like.
PROFILE_STEPS = {
    "qwen2.5-1.5b": {"grpo": 150, "ah": 150, "sa": 180},
    "qwen2.5-3b": {"grpo": 150, "ah": 150, "sa": 180},
    "tiny": {"grpo": 60, "ah": 60, "sa": 60},
}

# The paper's table; every field where it differs from the defaults (the tiny profile).
_PAPER = dict(
    dtype="bfloat16",
    use_lora=True,
    gradient_checkpointing=True,
    dataset="gsm8k",
    n_train=800,
    n_eval=500,
    learning_rate=5e-6,
    max_completion_length=512,
    entropy_top_k=500,
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
    # synthetic word problems (see saah_lib.tiny_model). Full fine-tuning and a
    # larger learning rate make the signal visible within 60 steps. These are
    # also SAAHConfig's own defaults (spelled out so the profile reads alone).
    "tiny": dict(
        model_name=TINY_MODEL,
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


def make_config(profile: str = "tiny", **overrides) -> SAAHConfig:
    """A config from a named profile with explicit overrides (None means 'keep the profile's')."""
    if not isinstance(profile, str) or profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}: expected one of {', '.join(PROFILES)}")
    known = {f.name for f in dataclasses.fields(SAAHConfig)}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ValueError(f"unknown config field(s): {', '.join(unknown)}")
    values = dict(PROFILES[profile], profile=profile)
    values.update({k: v for k, v in overrides.items() if v is not None})
    return SAAHConfig(**values)


def _fail(name: str, message: str):
    raise ValueError(f"config field {name!r}: {message}")


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
    lo, hi = ALPHA_RANGE
    if not _is_real(cfg.alpha) or not math.isfinite(cfg.alpha) or not lo <= cfg.alpha <= hi:
        _fail("alpha", f"must be a finite number in [{lo}, {hi}], got {cfg.alpha!r}")
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
    _check_choice("generation_backend", cfg.generation_backend, GENERATION_BACKENDS)
    _check_choice("vllm_mode", cfg.vllm_mode, VLLM_MODES)
    if cfg.vllm_server_base_url is not None and not (isinstance(cfg.vllm_server_base_url, str) and cfg.vllm_server_base_url):
        _fail("vllm_server_base_url", f"must be a URL string or None, got {cfg.vllm_server_base_url!r}")
    _check_model(cfg)


def _check_model(cfg: SAAHConfig) -> None:
    name = cfg.model_name
    if name == TINY_MODEL:
        return  # the tiny warm start is built on first use
    location = model_location(name)
    if looks_like_path(location) and not Path(location).is_dir():
        _fail("model_name", f"model folder {name!r} does not exist")
