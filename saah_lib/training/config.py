"""A run's settings: :class:`RunConfig`, with the trainer's :class:`SAAHGRPOConfig` in it, and named profiles.

``RunConfig`` holds what TRL does not own: the model and LoRA, the data, the greedy evaluation, the run id and the
results root, plus the trainer config (:mod:`saah_lib.training.grpo_config`).  A profile is a dict of field overrides,
the studies' settings included (:mod:`saah_lib.training.profiles`); ``make_config("qwen2.5-1.5b", method="sa")``
applies one.

Each field is checked once, by its owner, before anything is written to disk: TRL and transformers check theirs,
``SAAHGRPOConfig`` the method's, ``RunConfig`` the run's, and :func:`make_config` those of TRL's that TRL takes as
given and a run would trip over mid-run; an error of ours starts by naming the field.

A run folder's ``config.json`` records the settings under the names it has always used (``steps``, ``save_every``,
...); code names each setting by its field only: :data:`RECORDED_AS` is the one mapping, applied when config.json is
written (:meth:`RunConfig.run_settings`) and read (:func:`~saah_lib.training.profiles.settings_of_record`).
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import get_scheduler
from transformers.integrations import INTEGRATION_TO_CALLBACK

from saah_lib.models.backends import VLLM_MODES
from saah_lib.models.names import (
    TINY_WARMSTART,
    canonical_model_name,
    model_folder_problem,
    tiny_warm_start_label,
    tiny_warm_start_seed,
)
from saah_lib.paths import in_repo
from saah_lib.rundir.layout import CHECKPOINTS_DIR, RESERVED_NAMES, run_dir
from saah_lib.training.grpo_config import (  # noqa: F401  (field_error, report_integrations: importable from here too)
    SAAHGRPOConfig,
    _check_bool,
    _check_choice,
    _check_count,
    _check_real,
    _fail,
    _field,
    _is_int,
    field_error,
    report_integrations,
)
from saah_lib.training.profiles import (  # noqa: F401  (the light half of the config, importable from here too)
    ARTIFACT_SETTINGS,
    FIXED_TRAINER_SETTINGS,
    LOCAL_RESULTS_DIR,
    PROFILE_STEPS,
    PROFILES,
    RECORDED_AS,
    RECORDED_SETTINGS,
    STUDY_FIELD_HELP,
    TRAINER_FIELDS,
    check_overrides,
    default_run_id,
    derived_warmup_steps,
    field_of,
    recorded_settings,
    setting_differences,
)

LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
DTYPES = ("float32", "bfloat16", "float16")
DATASETS = ("gsm8k", "synthetic")
MAX_SEED = 2**32 - 1  # numpy's seed range; transformers.set_seed seeds numpy with it
# A run id is a folder name: no separators, no leading dot, nothing a shell or another system trips over.
_RUN_ID_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+=-]{0,199}")


def _check_seed(name: str, value) -> None:
    if not _is_int(value) or not 0 <= value <= MAX_SEED:
        _fail(name, f"must be an integer in [0, {MAX_SEED}], got {value!r}")


def _check_text(name: str, value, optional: bool = False) -> None:
    if not (optional and value is None) and not (isinstance(value, str) and value.strip()):
        _fail(name, f"must be a non-empty string{' or None' if optional else ''}, got {value!r}")


def _check_folder(name: str, value, optional: bool = False) -> None:
    if optional and value is None:
        return
    if not isinstance(value, (str, os.PathLike)) or not str(value).strip():
        _fail(name, f"must be a folder name{' or None' if optional else ''}, got {value!r}")


def _check_scheduler(settings) -> None:
    """transformers refuses an unknown ``lr_scheduler_type`` without naming the field, and one that needs
    ``lr_scheduler_kwargs`` (``cosine_with_min_lr``, ``warmup_stable_decay``, ...), which a run cannot set, only
    when training starts: a run's scheduler is built once here, from its (checked) learning rate."""
    optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=settings["learning_rate"])
    try:
        get_scheduler(settings["lr_scheduler_type"], optimizer, num_warmup_steps=1, num_training_steps=2)
    except (TypeError, ValueError) as err:
        _fail("lr_scheduler_type", f"transformers cannot build {settings['lr_scheduler_type']!r} from these "
                                   f"settings: {err}")


def _check_warmup(name: str, warmup) -> None:
    if not (_is_int(warmup) and warmup >= 0 or isinstance(warmup, float) and 0 <= warmup < 1):
        _fail(name, f"must be a step count (an integer >= 0) or, as transformers reads a float, a fraction of the "
                    f"steps in [0, 1); got {warmup!r}")


#: The TRL fields a run sets whose bad values TRL and transformers accept, so that they would fail mid-run if at
#: all (tests/training/test_config.py holds each to that), or refuse without naming the field: checked by
#: :func:`check_trl_fields`.  ``max_steps`` is the run's to check (:class:`RunConfig`), ``num_generations`` and
#: ``gradient_accumulation_steps`` are :class:`SAAHGRPOConfig`'s (its batch layout divides by them).
_TRL_FIELD_CHECKS = {
    "seed": _check_seed,  # numpy refuses it only when the trainer seeds itself
    "max_completion_length": lambda name, value: _check_count(name, value, 1),
    "save_steps": lambda name, value: _check_count(name, value, 1),
    "save_total_limit": lambda name, value: _check_count(name, value, 1, optional=True),
    "learning_rate": lambda name, value: _check_real(name, value, 0.0, math.inf, False, False),
    "weight_decay": lambda name, value: _check_real(name, value, 0.0, math.inf, True, False),
    "max_grad_norm": lambda name, value: _check_real(name, value, 0.0, math.inf, True, False),  # 0: no clipping
    "beta": lambda name, value: _check_real(name, value, 0.0, math.inf, True, False),
    "epsilon": lambda name, value: _check_real(name, value, 0.0, 1.0, False, False),
    "temperature": lambda name, value: _check_real(name, value, 0.0, math.inf, False, False),
    "vllm_gpu_memory_utilization": lambda name, value: _check_real(name, value, 0.0, 1.0, False, True),
    "activation_checkpointing": lambda name, value: value is None or _check_bool(name, value),  # "no" is True
    "run_name": lambda name, value: _check_text(name, value, optional=True),
    "vllm_server_base_url": lambda name, value: _check_text(name, value, optional=True),
    "vllm_mode": lambda name, value: _check_choice(name, value, VLLM_MODES),
    "warmup_steps": _check_warmup,
}


def check_trl_fields(settings) -> None:
    """The TRL fields among ``settings`` (a mapping) that TRL and transformers take as given: the run's path
    (:func:`make_config`) checks them before the trainer's config is built and anything is written."""
    for name, check in _TRL_FIELD_CHECKS.items():
        if name in settings:
            check(name, settings[name])


@dataclass
class RunConfig:
    """What TRL does not own (model and LoRA, data, evaluation, where the run goes), and the trainer's config."""

    trainer: SAAHGRPOConfig = _field(None, "the trainer's settings (TRL's and the method's)")
    profile: str = _field("tiny", "named profile the other defaults come from: tiny | qwen2.5-1.5b | qwen2.5-3b")
    run_id: str | None = _field(None, "run folder name; None: <profile>-<method>-a<alpha>-s<seed>, plus what the "
                                      "run changes from the profile's defaults (-steps1, or -v<hash> for 3+ settings)")
    results_dir: str = _field(LOCAL_RESULTS_DIR, "results root (relative paths: from the repository root; the "
                                                 "default is git-ignored)")
    # --- model
    model_name: str = _field(TINY_WARMSTART, "hub id, model folder, or a tiny warm start: tiny-warmstart (seed 0) "
                                             "or tiny-warmstart-s<N> (seed N), built on first use")
    model_label: str = _field("tiny", "the model's name in tables and figures")
    dtype: str = _field("float32", "float32 | bfloat16 | float16: the weights' dtype, with bf16/fp16 "
                                            "autocast (bfloat16 on a CPU too; float16 needs a GPU)")
    use_lora: bool = _field(False, "train LoRA adapters instead of every weight")
    lora_r: int = _field(16, "LoRA rank")
    lora_alpha: float = _field(32, "LoRA scaling alpha (not the method's alpha)")
    lora_dropout: float = _field(0.05, "LoRA dropout")
    lora_target_modules: tuple[str, ...] = _field(LORA_TARGETS, "module names that get LoRA adapters")
    # --- data
    dataset: str = _field("synthetic", "gsm8k | synthetic")
    data_dir: str | None = _field(None, "GSM8K jsonl folder; None: $SAAH_GSM8K_DIR, then the hub")
    n_train: int = _field(800, "training problems")
    n_eval: int = _field(200, "evaluation problems")
    data_seed: int = _field(123, "seed of the train/evaluation split (not of the prompt order: that is seed)")
    # --- evaluation
    eval_every: int = _field(20, "greedy Pass@1 every N steps (and at steps 0 and the last)")
    eval_batch_size: int = _field(100, "problems per greedy evaluation batch")
    eval_max_new_tokens: int = _field(96, "tokens per greedy evaluation completion")

    def __post_init__(self):
        if self.trainer is None:  # the tiny profile's trainer
            self.trainer = SAAHGRPOConfig(output_dir=None, **_tiny_trainer_defaults(), **FIXED_TRAINER_SETTINGS,
                                          warmup_steps=derived_warmup_steps(_tiny_trainer_defaults()["max_steps"]))
        if isinstance(self.lora_target_modules, str) or not isinstance(self.lora_target_modules, (list, tuple)):
            _fail("lora_target_modules", f"must be a list of module names, got {self.lora_target_modules!r}")
        self.lora_target_modules = tuple(self.lora_target_modules)
        if isinstance(self.model_name, str) and self.model_name:
            self.model_name = canonical_model_name(self.model_name)
        if self.run_id is None and isinstance(self.profile, str):
            self.run_id = default_run_id(self.profile, self.trainer.method, self.trainer.alpha, self.trainer.seed,
                                         self.model_name)
        self._check_fields()

    def _check_fields(self) -> None:
        """Every field for type and range; then combinations (``data_dir`` only with GSM8K), and the model.

        LoRA settings are checked even with ``use_lora=False``, so switching LoRA on cannot reveal a bad value late.
        """
        for name, choices in (("profile", tuple(PROFILES)), ("dataset", DATASETS), ("dtype", DTYPES)):
            _check_choice(name, getattr(self, name), choices)
        _check_seed("data_seed", self.data_seed)
        _check_count("max_steps", self.trainer.max_steps, 1)  # a run folder is complete at a step count
        for name, lowest in (("eval_every", 1), ("eval_batch_size", 1), ("eval_max_new_tokens", 1), ("n_train", 1),
                             ("n_eval", 1), ("lora_r", 1)):
            _check_count(name, getattr(self, name), lowest)
        _check_real("lora_alpha", self.lora_alpha, 0.0, math.inf, False, False)
        _check_real("lora_dropout", self.lora_dropout, 0.0, 1.0, True, False)
        _check_bool("use_lora", self.use_lora)
        for name in ("model_name", "model_label"):
            _check_text(name, getattr(self, name))
        _check_folder("results_dir", self.results_dir)
        if not self.lora_target_modules or not all(isinstance(m, str) and m for m in self.lora_target_modules):
            _fail("lora_target_modules", f"must be non-empty module names, got {self.lora_target_modules!r}")
        if not isinstance(self.run_id, str) or not _RUN_ID_RE.fullmatch(self.run_id):
            _fail("run_id", "must be a plain folder name (letters, digits and _ . + = -, not starting with '.' "
                            f"or '-', at most 200 characters), got {self.run_id!r}")
        if self.run_id in RESERVED_NAMES:
            _fail("run_id", f"{self.run_id!r} is reserved for other folders ({', '.join(RESERVED_NAMES)}); "
                            "choose another name")
        _check_folder("data_dir", self.data_dir, optional=True)
        if self.data_dir is not None and self.dataset != "gsm8k":
            _fail("data_dir", f"is only read for dataset='gsm8k'; dataset={self.dataset!r} would ignore "
                              f"{str(self.data_dir)!r} (remove data_dir or set dataset='gsm8k')")
        problem = model_folder_problem(self.model_name)
        if problem is not None:
            _fail("model_name", problem)

    @property
    def run_dir(self) -> Path:
        return run_dir(in_repo(self.results_dir), self.run_id)

    @classmethod
    def help(cls) -> dict[str, str]:
        """Every field a profile or an override may set, with its help text, by name."""
        own = {f.name: f.metadata.get("help", "") for f in dataclasses.fields(cls) if f.name != "trainer"}
        integrations = " | ".join(sorted(INTEGRATION_TO_CALLBACK))
        study_help = {**STUDY_FIELD_HELP, "report_to": f"none | all | integrations, comma-separated: {integrations}"}
        trainer = {f.name: study_help.get(f.name) or f.metadata.get("help", "")
                   for f in dataclasses.fields(SAAHGRPOConfig) if f.name in TRAINER_FIELDS}
        return {**own, **{name: trainer[name] for name in TRAINER_FIELDS}}

    @classmethod
    def defaults(cls) -> dict:
        """Every settable field's default: the studies' settings over TRL's (the tiny profile's value but for
        its batch layout; ``warmup_steps`` None: derived from the steps)."""
        fields = {f.name: f for f in dataclasses.fields(cls) if f.name != "trainer"}
        fields.update({f.name: f for f in dataclasses.fields(SAAHGRPOConfig) if f.name in TRAINER_FIELDS})
        return {name: f.default for name, f in fields.items()} | _tiny_trainer_defaults() | {"warmup_steps": None}

    def to_dict(self) -> dict:
        """Every settable field by its own name (``make_config(**d)`` and :meth:`from_dict` rebuild it)."""
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "trainer"}
        d["lora_target_modules"] = list(self.lora_target_modules)
        d.update({name: _plain(getattr(self.trainer, name)) for name in TRAINER_FIELDS})
        if isinstance(d["report_to"], list):  # TRL turns "none" / "a,b" into a list: give back the field's own form
            d["report_to"] = ",".join(d["report_to"]) or "none"
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "RunConfig":
        d = dict(d)
        return make_config(d.pop("profile", "tiny"), overrides=d)  # a None in d is None, not the profile's

    def run_settings(self) -> dict:
        """What a run's ``config.json`` records: every setting that gives the run its meaning, under its recorded name.

        Left out: ``results_dir`` (where the folder lies, which changes when a root is moved or promoted),
        ``report_to`` and ``run_name`` (where else the logs are mirrored).
        """
        return recorded_settings(self.to_dict())


def _tiny_trainer_defaults() -> dict:
    """The trainer settings every study starts from, with the tiny profile's steps."""
    return dict(ARTIFACT_SETTINGS, max_steps=PROFILE_STEPS["tiny"]["sa"])


def _plain(value):
    """A TRL field as set (transformers turns some strings into enums)."""
    return getattr(value, "value", value)


_RUN_FIELDS = tuple(f.name for f in dataclasses.fields(RunConfig) if f.name != "trainer")


def _check_known(names) -> None:
    unknown = sorted(set(names) - set(_RUN_FIELDS) - set(TRAINER_FIELDS))
    if unknown:
        # a field given by its recorded name: the error names the field to use
        hints = [f"{n} (config.json's name of {field_of(n)})" if field_of(n) else n for n in unknown]
        raise ValueError(f"unknown config field(s): {', '.join(hints)}")


def make_config(profile: str = "tiny", overrides: dict | None = None, **fields) -> RunConfig:
    """A run's config from a named profile with explicit settings.

    ``overrides`` (a notebook's parameter of that name, the command line's fields) is a mapping of further
    fields, where None is None as typed (``entropy_top_k: null``: the exact entropy); ``fields`` given by name
    win over it, and there None means 'keep the profile's' (a notebook parameter left at None).
    ``max_steps`` defaults to the profile's for the method.  A tiny-profile
    run that names another tiny warm start (``model_name="tiny-warmstart-s1"``) gets that warm start's
    model label (``tiny-w1``) unless one is given, so runs from different starting points stay apart.
    """
    if not isinstance(profile, str) or profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}: expected one of {', '.join(PROFILES)}")
    overrides = check_overrides(overrides)
    _check_known({**overrides, **fields})
    if "profile" in overrides:  # the profile is make_config's first argument, the base of every other value
        _fail("profile", "give it as the profile (a notebook's -p profile, launch's --profile), not in overrides")
    settings = {**overrides, **{k: v for k, v in fields.items() if v is not None}}
    values = {**PROFILES[profile], **settings}
    method = values.get("method", "sa")
    if "max_steps" not in values and isinstance(method, str):
        values["max_steps"] = PROFILE_STEPS[profile].get(method, 60)
    if values.get("warmup_steps") is None and derived_warmup_steps(values.get("max_steps")) is not None:
        values["warmup_steps"] = derived_warmup_steps(values["max_steps"])
    model_name = values.get("model_name", TINY_WARMSTART)
    warm_start = tiny_warm_start_seed(model_name) if isinstance(model_name, str) else None
    if profile == "tiny" and warm_start and settings.get("model_label") is None:
        values["model_label"] = tiny_warm_start_label(warm_start)
    run_values = {k: v for k, v in values.items() if k in _RUN_FIELDS}
    trainer_values = {k: v for k, v in values.items() if k in TRAINER_FIELDS}
    check_trl_fields(trainer_values)
    _check_scheduler(trainer_values)  # every profile sets both its scheduler and its learning rate
    trainer = SAAHGRPOConfig(**trainer_values, **FIXED_TRAINER_SETTINGS,
                             **_machine_fields(run_values.get("dtype", "float32")))
    run = RunConfig(trainer=trainer, profile=profile, **run_values)
    if run_values.get("run_id") is None:  # a variant of the profile's defaults gets an id that says how
        run.run_id = default_run_id(profile, trainer.method, trainer.alpha, trainer.seed, run.model_name,
                                    _differences_from_profile(profile, values))
    # TRL writes checkpoints into the run folder, and names the run after its id unless told otherwise
    trainer.output_dir = str(run.run_dir / CHECKPOINTS_DIR)
    trainer.run_name = values.get("run_name") or run.run_id
    return run


def _differences_from_profile(profile: str, values: dict) -> dict:
    """The recorded settings in which a run's resolved ``values`` differ from its profile's defaults for the same
    method, alpha, seed and model (:func:`saah_lib.training.profiles.setting_differences`)."""
    method = values.get("method", "sa")
    reference = {**RunConfig.defaults(), **PROFILES[profile], "max_steps": PROFILE_STEPS[profile].get(method, 60)}
    reference["warmup_steps"] = derived_warmup_steps(reference["max_steps"])
    return setting_differences({**reference, **values}, reference)


def _machine_fields(dtype: str) -> dict:
    """TRL's precision and device switches for this machine: the run's ``dtype``, as asked, or an error.

    ``bfloat16`` is bf16 autocast (accelerate's, as TRL uses it) on a GPU and on a CPU alike, beside the model
    loaded in bfloat16; ``float16`` needs a GPU (torch's CPU autocast and accelerate do not train in fp16), so
    on a CPU it is refused rather than trained in float32 without a word.
    """
    on_gpu = torch.cuda.is_available()
    if dtype == "float16" and not on_gpu:
        _fail("dtype", "'float16' trains only on a GPU (fp16 mixed precision); on a CPU use 'bfloat16' (bf16 "
                       "autocast) or 'float32'")
    return dict(bf16=dtype == "bfloat16", fp16=dtype == "float16", use_cpu=not on_gpu,
                save_strategy="steps", log_completions=False, output_dir=None)
