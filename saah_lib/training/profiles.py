"""The run settings that need no torch: named profiles, the names config.json records, default run ids.

A profile is a dict of field overrides over the defaults of :class:`saah_lib.training.grpo_config.SAAHGRPOConfig`
(TRL's) and :class:`~saah_lib.training.config.RunConfig`. Every profile starts from :data:`ARTIFACT_SETTINGS`, the
studies' trainer settings (the CPU-sized ``tiny`` profile is those alone), and takes :data:`FIXED_TRAINER_SETTINGS`,
which no override changes.  The report and analysis read these without loading torch or TRL.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

from saah_lib.method.methods import PAPER_ENTROPY_TOP_K
from saah_lib.models.names import tiny_warm_start_seed
from saah_lib.paths import LOCAL_RESULTS, SMOLLM2_WARMSTART_DIR, repo_relative

#: single runs write here unless told otherwise (git-ignored); the studies pass their own roots
LOCAL_RESULTS_DIR = repo_relative(LOCAL_RESULTS)

#: What TRL's fields mean in a profile (``launch --help``), where TRL's own help says less.
STUDY_FIELD_HELP = {
    "max_steps": "optimiser steps (make_config: the profile's for the method); -1: TRL's num_train_epochs instead",
    "seed": "seeds LoRA initialisation, sampling and TRL's prompt order (CPU studies: 0, 1, 2, ...; the paper "
            "profiles: the paper's 123)",
    "learning_rate": "peak learning rate",
    "lr_scheduler_type": "a transformers SchedulerType that needs no lr_scheduler_kwargs (linear, cosine, "
                         "constant, ...)",
    "warmup_steps": "warm-up steps; None: max(5, max_steps // 10)",
    "weight_decay": "AdamW weight decay",
    "max_grad_norm": "gradient clipping norm (0: off)",
    "beta": "KL penalty to the reference model",
    "epsilon": "PPO clip range",
    "num_generations": "completions per prompt (the group size G)",
    "max_completion_length": "tokens per sampled completion",
    "temperature": "sampling temperature of rollouts",
    "save_steps": "checkpoint every N steps",
    "save_total_limit": "checkpoints kept; None keeps every one",
    "run_name": "the run's name in the report_to integrations (make_config: the run id)",
    "activation_checkpointing": "recompute activations in the backward pass (less memory)",
}
#: What the artifact does with a setting (the roles of :data:`SETTINGS`).
ROLES = {
    "names_run": "the run id says it already: never a variant's difference",
    "checkpoint": "shapes what a run computes: a checkpoint saved under another value is another run's",
    "ablation": "an ablation sets it from its own arguments",
}


@dataclass(frozen=True)
class Setting:
    """A config field that a profile, an override or a notebook may set, and what the artifact does with it."""

    name: str
    owner: str  # "run": RunConfig's; "trainer": SAAHGRPOConfig's (TRL's or the method's)
    recorded_as: str | None  # its name in a run folder's config.json; None: not recorded
    roles: frozenset[str]


def _settings(*rows: str) -> tuple[Setting, ...]:
    """Rows of ``name owner recorded_as roles...`` (``=``: recorded under its own name; ``-``: not recorded)."""
    settings = []
    for row in rows:
        name, owner, recorded, *roles = row.split()
        if owner not in ("run", "trainer") or not set(roles) <= set(ROLES):
            raise ValueError(f"setting {row!r}: owner run or trainer, roles among {', '.join(ROLES)}")
        settings.append(Setting(name, owner, {"=": name, "-": None}.get(recorded, recorded), frozenset(roles)))
    return tuple(settings)


#: Every setting, in the order of a run folder's config.json: the one place that says which fields a profile may
#: set, under which name a run records them, and which of them name a run, shape its checkpoints, or are
#: parameters of an ablation.
SETTINGS = _settings(
    "profile run = names_run ablation",
    "method trainer = names_run checkpoint ablation",
    "alpha trainer = names_run checkpoint ablation",
    "max_steps trainer steps checkpoint ablation",
    "seed trainer = names_run checkpoint ablation",
    "run_id run = names_run ablation",
    "model_name run = names_run",
    "model_label run = names_run",
    "dtype run =", "use_lora run =", "lora_r run =", "lora_alpha run =", "lora_dropout run =",
    "lora_target_modules run =",
    "activation_checkpointing trainer gradient_checkpointing",
    "dataset run =", "data_dir run =", "n_train run =", "n_eval run =", "data_seed run =",
    "learning_rate trainer = checkpoint",
    "lr_scheduler_type trainer lr_scheduler checkpoint",
    "warmup_steps trainer = checkpoint",
    "weight_decay trainer = checkpoint",
    "max_grad_norm trainer = checkpoint",
    "beta trainer = checkpoint",
    "epsilon trainer = checkpoint",
    "prompts_per_step trainer = checkpoint",
    "num_generations trainer = checkpoint",
    "gradient_accumulation_steps trainer =",
    "max_completion_length trainer = checkpoint",
    "temperature trainer = checkpoint",
    "entropy_top_k trainer = checkpoint",
    "reward_std_threshold trainer = checkpoint",
    "save_steps trainer save_every",
    "save_total_limit trainer keep_checkpoints",
    "eval_every run =", "eval_batch_size run =", "eval_max_new_tokens run =",
    "log_token_entropies trainer =",
    "generation_backend trainer =",
    "vllm_mode trainer =",
    "vllm_server_base_url trainer =",
    "vllm_gpu_memory_utilization trainer =",
    "results_dir run - ablation",
    "report_to trainer -",
    "run_name trainer -",
)


def fields_with(role: str) -> tuple[str, ...]:
    """The fields of the settings that have ``role`` (one of :data:`ROLES`), in :data:`SETTINGS` order."""
    return tuple(s.name for s in SETTINGS if role in s.roles)


#: The trainer fields a profile, a notebook or a command line may set.
TRAINER_FIELDS = tuple(s.name for s in SETTINGS if s.owner == "trainer")
#: A field's name in a run folder's config.json, where it differs (the one mapping at the run-folder boundary:
#: :func:`recorded_settings` writes with it, :func:`settings_of_record` reads with it).
RECORDED_AS = {s.name: s.recorded_as for s in SETTINGS if s.recorded_as not in (None, s.name)}
_FIELD_OF = {recorded: name for name, recorded in RECORDED_AS.items()}
#: The fields config.json records, in their order on disk.
RECORDED_FIELDS = tuple(s.name for s in SETTINGS if s.recorded_as is not None)
#: config.json's settings, under their names on disk, in their order.
RECORDED_SETTINGS = tuple(s.recorded_as for s in SETTINGS if s.recorded_as is not None)
#: Recorded fields that never make a variant: the run's identity (its id names them already, or the warm start's
#: ``-w<N>`` does) and ``model_label`` (a display name).
IDENTITY_SETTINGS = fields_with("names_run")


def recorded_settings(fields: Mapping) -> dict:
    """What config.json records of a run's fields: each of :data:`RECORDED_FIELDS`, under its name on disk."""
    return {RECORDED_AS.get(name, name): fields[name] for name in RECORDED_FIELDS}


def settings_of_record(record: Mapping) -> dict:
    """A config.json as read: its settings under their fields' names (``steps`` is ``max_steps``), every other
    entry as it is.  Committed run folders keep the names they were written with; code reads them only so."""
    return {_FIELD_OF.get(key, key): value for key, value in record.items()}


def field_of(recorded: str) -> str | None:
    """The field that config.json records as ``recorded`` under another name (None: no such name)."""
    return _FIELD_OF.get(recorded)
#: At most this many differing settings are spelled out in a run id; more give a short hash instead.
SPELLED_OUT = 2
_UNSAFE_IN_ID = re.compile(r"[^A-Za-z0-9_.+=-]+")


def derived_warmup_steps(steps) -> int | None:
    """The warm-up that :class:`~saah_lib.training.config.RunConfig` derives from ``steps`` when none is given."""
    return max(5, steps // 10) if isinstance(steps, int) and not isinstance(steps, bool) else None


def setting_differences(settings: Mapping, reference: Mapping) -> dict:
    """The recorded settings (by field name) in which ``settings`` differs from ``reference``, in
    :data:`RECORDED_FIELDS` order; identity settings never count, and a warm-up each derives from its own
    steps is no difference of its own (the steps already are)."""
    differences = {}
    for name in RECORDED_FIELDS:
        if name in IDENTITY_SETTINGS:
            continue
        mine, theirs = _comparable(settings.get(name)), _comparable(reference.get(name))
        if name == "warmup_steps" and mine == derived_warmup_steps(settings.get("max_steps")) \
                and theirs == derived_warmup_steps(reference.get("max_steps")):
            continue
        if mine != theirs:
            differences[name] = settings.get(name)
    return differences


def _comparable(value):
    """A setting as compared: lists and tuples alike, ``1`` and ``1.0`` alike."""
    if isinstance(value, (list, tuple)):
        return tuple(_comparable(v) for v in value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def setting_text(value) -> str:
    """A setting's value as a run id or a label writes it: ``1``, ``0.0001``, ``hf``, ``None``."""
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (list, tuple)):
        return "+".join(setting_text(v) for v in value)
    return str(value)


def _as_recorded(differences: Mapping) -> dict:
    """Settings by the names config.json gives them: run ids and labels are written with those, so that the
    committed ones stay what they are (``-steps1``, ``steps=1``)."""
    return {RECORDED_AS.get(name, name): value for name, value in differences.items()}


def variant_suffix(differences: Mapping) -> str:
    """How a run id says that a run differs from its profile's defaults: ``""`` for none, ``-steps1`` or
    ``-steps1-generation_backend=hf`` for up to :data:`SPELLED_OUT` settings (a number follows the name as in
    ``a0.5``), else ``-v`` and six hex digits of a hash of the differing settings (stable across machines)."""
    if not differences:
        return ""
    differences = _as_recorded(differences)
    if len(differences) <= SPELLED_OUT:
        parts = []
        for name, value in differences.items():
            text = _UNSAFE_IN_ID.sub("_", setting_text(value))
            parts.append(f"{name}{text}" if re.match(r"[-0-9.]", text) else f"{name}={text}")
        return "-" + "-".join(parts)
    canonical = json.dumps({k: _comparable(v) for k, v in differences.items()}, sort_keys=True, default=str)
    return "-v" + hashlib.sha256(canonical.encode()).hexdigest()[:6]


def variant_label(differences: Mapping, most: int = 3) -> str:
    """What differs, for tables and figures: ``steps=1, generation_backend=hf``; beyond ``most`` settings the
    first ones and ``+N more``."""
    items = [f"{name}={setting_text(value)}" for name, value in _as_recorded(differences).items()]
    if len(items) > most:
        items = items[:most - 1] + [f"+{len(items) - most + 1} more"]
    return ", ".join(items)


def default_run_id(profile: str, method: str, alpha: float, seed: int, model_name: str,
                   differences: Mapping | None = None) -> str:
    """``<profile>-<method>-a<alpha>-s<seed>``, plus ``-w<N>`` for a tiny warm start built with seed N > 0
    (so runs of two warm starts at the same seed never share a folder), plus :func:`variant_suffix` of the
    settings in which the run differs from its profile's defaults (so a variant never reuses a folder)."""
    run_id = f"{profile}-{method}-a{alpha:g}-s{seed}"
    warm_start = tiny_warm_start_seed(model_name) if isinstance(model_name, str) else None
    return run_id + (f"-w{warm_start}" if warm_start else "") + variant_suffix(differences or {})


# The paper trains SA-AH-GRPO longer (180 vs 150 steps). The tiny profile
# keeps all methods equal so that its multi-seed comparison is like for like.
PROFILE_STEPS = {
    "qwen2.5-1.5b": {"grpo": 150, "ah": 150, "sa": 180},
    "qwen2.5-3b": {"grpo": 150, "ah": 150, "sa": 180},
    "tiny": {"grpo": 60, "ah": 60, "sa": 60},
    "smollm2-135m": {"grpo": 24, "ah": 24, "sa": 24},
}

#: The studies' trainer settings where they differ from TRL's defaults: the paper's table, CPU-sized (the
#: ``tiny`` profile).  Every field a profile or an override may set (:data:`TRAINER_FIELDS`).
ARTIFACT_SETTINGS = dict(
    seed=0,  # the CPU studies' first seed
    learning_rate=2e-4,
    lr_scheduler_type="cosine",
    weight_decay=0.01,
    beta=0.04,
    num_generations=4,
    max_completion_length=96,
    save_steps=10,
    save_total_limit=2,
    activation_checkpointing=False,
    reward_std_threshold=0.15,
)
#: What every profile's trainer has and no override changes: the paper's loss (bnpo and the plain k3 KL
#: estimator) and a log line per step (the run folder's train log reads TRL's every-step logs).
FIXED_TRAINER_SETTINGS = dict(loss_type="bnpo", use_bias_correction_kl=False, logging_steps=1)

# The paper's table, where it differs from the tiny profile.
_PAPER = dict(
    seed=123,  # the paper's fixed seed; the tiny profile's 0 is the CPU studies' first seed
    dtype="bfloat16",
    use_lora=True,
    activation_checkpointing=True,
    dataset="gsm8k",
    n_eval=500,
    learning_rate=5e-6,
    max_completion_length=512,
    entropy_top_k=PAPER_ENTROPY_TOP_K,
    save_steps=15,
    save_total_limit=None,
    eval_every=30,
    eval_batch_size=128,
    eval_max_new_tokens=512,
)
# Both: 4 prompts x 4 completions per step in 2 micro-batches, whatever the number of processes.
_STEP = dict(prompts_per_step=4, gradient_accumulation_steps=2)

PROFILES: dict[str, dict] = {
    "qwen2.5-1.5b": dict(ARTIFACT_SETTINGS, **_PAPER, **_STEP, model_name="Qwen/Qwen2.5-1.5B-Instruct",
                         model_label="Qwen2.5-1.5B-Instruct"),
    "qwen2.5-3b": dict(ARTIFACT_SETTINGS, **_PAPER, **_STEP, model_name="Qwen/Qwen2.5-3B-Instruct",
                       model_label="Qwen2.5-3B-Instruct"),
    # CPU-sized: a warm-started Qwen2-architecture model of ~0.6M parameters on synthetic word problems
    # (saah_lib.models.warmstart); every other value is RunConfig's default.
    "tiny": dict(ARTIFACT_SETTINGS, **_STEP),
    # CPU-sized, a real model: SmolLM2-135M-Instruct after a short supervised warm-up on the answer format
    # (saah_lab.studies.real_study builds it), LoRA as the paper, 2 prompts x 4 completions of up to 128 tokens a
    # step, sampled at temperature 0.7: at 1.0 a model this small gets few of its sampled answers right.
    # Rollouts on TRL's generate, as results/real_study was recorded: in bfloat16 the static engine samples other
    # tokens (same policy, other rounding), so `make real-study CHECK=1` would no longer match bit for bit.
    "smollm2-135m": dict(ARTIFACT_SETTINGS, dtype="bfloat16", use_lora=True, entropy_top_k=PAPER_ENTROPY_TOP_K,
                         max_completion_length=128, prompts_per_step=2, temperature=0.7, eval_every=12,
                         eval_batch_size=50, generation_backend="hf",
                         eval_max_new_tokens=128, model_name=repo_relative(SMOLLM2_WARMSTART_DIR),
                         model_label="SmolLM2-135M-Instruct"),
}


def check_overrides(overrides) -> dict:
    """``overrides`` as a dict of config fields: None is none; anything but a mapping with string keys is an error."""
    if overrides is None:
        return {}
    if not isinstance(overrides, Mapping) or not all(isinstance(k, str) for k in overrides):
        raise ValueError(f"overrides must be a mapping of config field names to values, e.g. "
                         f"{{\"learning_rate\": 1e-5}}; got {type(overrides).__name__} {overrides!r}")
    return dict(overrides)
