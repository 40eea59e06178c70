"""Every hyperparameter of a run, in one dataclass, with named profiles.

``make_config("qwen2.5-1.5b", method="sa", alpha=0.5)`` gives the paper's
setting; ``make_config()`` gives the CPU-sized ``tiny`` default. Validation
happens at construction, before anything is written to disk.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path

from saah_lib.loss import ALPHA_RANGE, METHODS

REPO_ROOT = Path(__file__).resolve().parent.parent
TINY_MODEL_DIR = REPO_ROOT / "results" / "mini" / "warmstart" / "model"
GENERATION_BACKENDS = ("auto", "hf", "compiled", "vllm")  # saah_lib.rollout.BACKENDS, without importing torch
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
    model_name: str = str(TINY_MODEL_DIR)
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
    n_eval: int = 500
    data_seed: int = 123
    # --- optimisation (the paper's table)
    learning_rate: float = 5e-6
    lr_scheduler: str = "cosine"
    warmup_steps: int | None = None  # None: max(5, steps // 10)
    weight_decay: float = 0.01
    max_grad_norm: float = 1.0
    beta: float = 0.04
    epsilon: float = 0.2
    prompts_per_step: int = 4
    num_generations: int = 4
    gradient_accumulation_steps: int = 2
    max_completion_length: int = 512
    temperature: float = 1.0
    entropy_top_k: int | None = 500  # None: exact entropy that TRL already computes
    reward_std_threshold: float = 0.15
    # --- schedule
    save_every: int = 15
    keep_checkpoints: int | None = None  # None keeps every checkpoint
    eval_every: int = 30
    eval_batch_size: int = 64
    eval_max_new_tokens: int = 512
    log_token_entropies: int = 2  # rollouts per step whose per-token entropies are logged (for the schematic)
    # --- generation speed (saah_lib.rollout; README "Running on GPUs")
    generation_backend: str = "auto"  # hf | compiled | vllm; auto: compiled on CUDA, hf (TRL's generate) on CPU
    vllm_mode: str = "colocate"  # TRL's vllm_mode when generation_backend="vllm": colocate or server
    vllm_server_base_url: str | None = None  # server mode: e.g. http://localhost:8000 (trl vllm-serve)
    vllm_gpu_memory_utilization: float = 0.3  # colocate mode: vLLM's share of each GPU

    def __post_init__(self):
        try:
            self.alpha = float(self.alpha)
        except (TypeError, ValueError):
            _fail("alpha", f"must be a number, got {self.alpha!r}")
        self.lora_target_modules = tuple(self.lora_target_modules)
        if self.method == "grpo":
            self.alpha = 0.0  # plain GRPO is alpha = 0 by definition
        if self.steps is None:
            self.steps = PROFILE_STEPS.get(self.profile, {}).get(self.method)
        if self.warmup_steps is None and isinstance(self.steps, int):
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

    @classmethod
    def from_dict(cls, d: dict) -> "SAAHConfig":
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})


def default_run_id(cfg: SAAHConfig) -> str:
    return f"{cfg.profile}-{cfg.method}-a{cfg.alpha:g}-s{cfg.seed}"


# The paper trains SA-AH-GRPO longer (180 vs 150 steps). The tiny profile
# keeps all methods equal so that its multi-seed comparison is like for like.
PROFILE_STEPS = {
    "qwen2.5-1.5b": {"grpo": 150, "ah": 150, "sa": 180},
    "qwen2.5-3b": {"grpo": 150, "ah": 150, "sa": 180},
    "tiny": {"grpo": 60, "ah": 60, "sa": 60},
}

_PAPER = dict(
    dtype="bfloat16",
    use_lora=True,
    gradient_checkpointing=True,
    dataset="gsm8k",
    n_train=800,
    n_eval=500,
    eval_batch_size=128,
)

PROFILES: dict[str, dict] = {
    "qwen2.5-1.5b": dict(_PAPER, model_name="Qwen/Qwen2.5-1.5B-Instruct", model_label="Qwen2.5-1.5B-Instruct"),
    "qwen2.5-3b": dict(_PAPER, model_name="Qwen/Qwen2.5-3B-Instruct", model_label="Qwen2.5-3B-Instruct"),
    # CPU-sized: a warm-started Qwen2-architecture model of ~1M parameters on
    # synthetic word problems (see saah_lib.tiny_model). Full fine-tuning and a
    # larger learning rate make the signal visible within 60 steps.
    "tiny": dict(
        model_name=str(TINY_MODEL_DIR),
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
    if profile not in PROFILES:
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


def validate(cfg: SAAHConfig) -> None:
    """Raise a ValueError naming the first bad field."""
    if cfg.profile not in PROFILES:
        _fail("profile", f"unknown profile {cfg.profile!r}; expected one of {', '.join(PROFILES)}")
    if cfg.method not in METHODS:
        _fail("method", f"unknown method {cfg.method!r}; expected one of {', '.join(METHODS)}")
    lo, hi = ALPHA_RANGE
    if not math.isfinite(cfg.alpha) or not lo <= cfg.alpha <= hi:
        _fail("alpha", f"must be a finite number in [{lo}, {hi}], got {cfg.alpha}")
    if not isinstance(cfg.steps, int) or isinstance(cfg.steps, bool) or cfg.steps < 1:
        _fail("steps", f"must be an integer >= 1, got {cfg.steps!r}")
    if cfg.dataset not in ("gsm8k", "synthetic"):
        _fail("dataset", f"expected 'gsm8k' or 'synthetic', got {cfg.dataset!r}")
    if cfg.dtype not in ("float32", "bfloat16", "float16"):
        _fail("dtype", f"expected float32, bfloat16 or float16, got {cfg.dtype!r}")
    if cfg.num_generations < 2:
        _fail("num_generations", "GRPO needs at least 2 completions per prompt")
    for name in ("prompts_per_step", "gradient_accumulation_steps", "save_every", "eval_every",
                 "eval_batch_size", "max_completion_length", "eval_max_new_tokens", "n_train", "n_eval"):
        value = getattr(cfg, name)
        if not isinstance(value, int) or value < 1:
            _fail(name, f"must be an integer >= 1, got {value!r}")
    if cfg.completions_per_step % cfg.gradient_accumulation_steps:
        _fail(
            "gradient_accumulation_steps",
            f"{cfg.prompts_per_step} prompts x {cfg.num_generations} completions = {cfg.completions_per_step} "
            f"completions per step cannot be split into {cfg.gradient_accumulation_steps} equal micro-batches",
        )
    if cfg.entropy_top_k is not None and cfg.entropy_top_k < 1:
        _fail("entropy_top_k", f"must be a positive integer or None, got {cfg.entropy_top_k}")
    if cfg.reward_std_threshold < 0:
        _fail("reward_std_threshold", f"must be >= 0, got {cfg.reward_std_threshold}")
    if not 0 < cfg.epsilon < 1:
        _fail("epsilon", f"must be in (0, 1), got {cfg.epsilon}")
    if cfg.beta < 0:
        _fail("beta", f"must be >= 0, got {cfg.beta}")
    if cfg.learning_rate <= 0:
        _fail("learning_rate", f"must be > 0, got {cfg.learning_rate}")
    if not cfg.run_id or "/" in cfg.run_id or cfg.run_id.startswith("."):
        _fail("run_id", f"must be a plain folder name, got {cfg.run_id!r}")
    if cfg.generation_backend not in GENERATION_BACKENDS:
        _fail("generation_backend", f"expected one of {', '.join(GENERATION_BACKENDS)}, got {cfg.generation_backend!r}")
    if cfg.vllm_mode not in ("colocate", "server"):
        _fail("vllm_mode", f"expected 'colocate' or 'server', got {cfg.vllm_mode!r}")
    _check_model(cfg)


def _check_model(cfg: SAAHConfig) -> None:
    name = cfg.model_name
    if Path(name).expanduser() == TINY_MODEL_DIR:
        return  # the tiny warm start is built on first use
    is_path = name.startswith(("/", "./", "../", "~")) or Path(name).expanduser().exists()
    if is_path and not Path(name).expanduser().is_dir():
        _fail("model_name", f"model folder {name!r} does not exist")
