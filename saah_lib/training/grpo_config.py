"""The trainer's config: :class:`SAAHGRPOConfig`, TRL's ``GRPOConfig`` with the method's fields added.

It goes to TRL as it is, with TRL's defaults.  It checks the method's fields and the TRL fields the method
reads; TRL and transformers check their own.  Nothing here knows about run folders, profiles or the
repository: a run's settings are :mod:`saah_lib.training.config`'s.  An error of ours starts by naming the field.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch._dynamo  # already imported by TRL's config
from transformers.integrations import INTEGRATION_TO_CALLBACK
from trl import GRPOConfig

from saah_lib.method.methods import (
    IMPORTANCE_SAMPLING_LEVELS,
    LOSS_TYPES,
    MAIN_ALPHA,
    MAX_ENTROPY_TOP_K,
    METHODS,
    method_alpha,
    weights_problem,
)
from saah_lib.models.backends import BACKENDS
from saah_lib.training.distributed import batch_layout, world_size

COMPILE_BACKENDS = ("inductor", "aot_eager", "eager")  # the usual ones; any torch.compile knows is accepted


def _field(default, help: str):
    return field(default=default, metadata={"help": help})


def field_error(name: str, message: str) -> ValueError:
    """The error of a bad config field: its message starts by naming the field."""
    return ValueError(f"config field {name!r}: {message}")


def _fail(name: str, message: str):
    raise field_error(name, message)


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_real(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_count(name: str, value, lowest: int, optional: bool = False) -> None:
    if optional and value is None:
        return
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


def _check_bool(name: str, value) -> None:
    if not isinstance(value, bool):
        _fail(name, f"must be True or False, got {value!r}")


def compile_backends() -> tuple[str, ...]:
    """The torch.compile backends this process knows: the usual three first, then torch's and registered ones."""
    known = torch._dynamo.list_backends(exclude_tags=())
    return COMPILE_BACKENDS + tuple(b for b in known if b not in COMPILE_BACKENDS)


def report_integrations(report_to) -> list[str]:
    """``report_to`` as TRL's list: ``"none"`` -> [], ``"all"`` -> ["all"], ``"a,b"`` or ``["a", "b"]`` -> the names."""
    if isinstance(report_to, (list, tuple)):
        names = list(report_to)
    elif isinstance(report_to, str) and report_to.strip():
        names = [n.strip() for n in report_to.split(",")]
    else:
        names = None
    if names is None or not all(isinstance(n, str) for n in names):
        _fail("report_to", f"must be 'none', 'all' or integration names, got {report_to!r}")
    if names in (["none"], []):
        return []
    if names == ["all"]:
        return ["all"]
    # transformers refuses an unknown name only when the trainer is built, after the run folder is written
    for name in names:
        _check_choice("report_to", name, tuple(INTEGRATION_TO_CALLBACK))
    return names


@dataclass
class SAAHGRPOConfig(GRPOConfig):
    """TRL's ``GRPOConfig``, its defaults unchanged, plus the method's fields.

    With ``method="grpo"`` and nothing else set the trainer is TRL's ``GRPOTrainer``. Two departures, both
    about what was asked: ``use_cpu=True`` (or a machine without a GPU) trains in float32 unless ``bf16=True``
    is given, where TRL would pick bf16; and ``gradient_checkpointing`` is read as TRL's name of
    ``activation_checkpointing``.  The paper's and the CPU studies' settings are profiles
    (:mod:`saah_lib.training.profiles`, :func:`saah_lib.training.config.make_config`).

    ``prompts_per_step`` (when set) fixes the completions per optimiser step whatever the number of
    processes: ``per_device_train_batch_size`` and ``gradient_accumulation_steps`` are derived from it
    (:func:`saah_lib.training.distributed.batch_layout`).
    """

    # --- the method
    method: str = _field("sa", "grpo | ah | sa (grpo: every weight 1; ah: every rollout discounted; sa: only "
                               "negative-advantage rollouts)")
    alpha: float = _field(MAIN_ALPHA, "discount strength; 0 for grpo whatever is given")
    entropy_top_k: int | None = _field(None, "top-K entropy estimate (the paper: 500), at most the model's "
                                             "vocabulary; None: the exact entropy TRL already computes")
    reward_std_threshold: float = _field(0.0, "groups whose reward std is below this get zero advantage (the "
                                              "paper: 0.15); 0: TRL's advantages as they are")
    log_token_entropies: int = _field(2, "rollouts per step whose per-token entropies are logged (for plots)")
    prompts_per_step: int | None = _field(None, "prompts per optimiser step over all processes; sets "
                                                "per_device_train_batch_size and gradient_accumulation_steps; "
                                                "None: TRL's own batch fields as given")
    forward_batch_size: int | None = _field(None, "completions per forward pass where the trainer scores "
                                                  "completions (the loss, old and reference log-probs): TRL's "
                                                  "batch_size of those passes; smaller bounds the memory of the "
                                                  "LM head's tiles over the vocabulary, and with activation "
                                                  "checkpointing that of the whole step, at some speed; the loss "
                                                  "is the same (bits may differ); None: the whole micro-batch")
    generation_backend: str = _field("auto", "auto | hf | compiled | vllm; auto: compiled (the static engine, "
                                             "eager on CPU); hf: TRL's own generate; vllm sets TRL's use_vllm")
    rollout_compile: bool | None = _field(None, "torch.compile the compiled backend's decode step; None: only on CUDA")
    rollout_compile_backend: str | None = _field(None, "that step's torch.compile backend: "
                                                       + " | ".join(COMPILE_BACKENDS) + "; None: inductor")

    def __post_init__(self):
        if self.gradient_checkpointing is not None and self.activation_checkpointing is None:
            self.activation_checkpointing = self.gradient_checkpointing  # TRL's name, and TRL's default (True)
        self._check_fields()
        if self.prompts_per_step is not None:
            layout = batch_layout(self.prompts_per_step * self.num_generations, self.num_generations,
                                  self.gradient_accumulation_steps, world_size())
            self.per_device_train_batch_size = layout.per_device_batch_size
            self.gradient_accumulation_steps = layout.gradient_accumulation_steps
        self.report_to = report_integrations(self.report_to)
        if self.bf16 is None and (self.use_cpu or not torch.cuda.is_available()):
            self.bf16 = False  # float32 on a CPU unless bf16 is asked for (TRL would pick bf16)
        if self.generation_backend == "vllm":
            self.use_vllm = True
        elif self.use_vllm and self.generation_backend == "compiled":
            _fail("generation_backend", "'compiled' conflicts with use_vllm=True")
        super().__post_init__()

    @property
    def completions_per_step(self) -> int:
        """Completions per optimiser step, over all processes."""
        return self.per_device_train_batch_size * self.gradient_accumulation_steps * world_size()

    def _check_fields(self) -> None:
        """The method's fields (booleans not numbers, reals finite), and the TRL fields the weights and the batch
        layout depend on; ``alpha`` becomes the one the method trains with (0 for grpo).  The other TRL fields
        are TRL's to check; a run's path checks those TRL leaves unchecked
        (:func:`saah_lib.training.config.check_trl_fields`)."""
        _check_choice("method", self.method, METHODS)
        if not _is_real(self.alpha):  # grpo trains with 0 whatever number is given, but not with a non-number
            _fail("alpha", f"must be a number, got {self.alpha!r}")
        try:
            self.alpha = method_alpha(self.method, float(self.alpha))
        except ValueError as err:
            _fail("alpha", str(err).removeprefix("alpha "))
        _check_count("log_token_entropies", self.log_token_entropies, 0)
        for name in ("prompts_per_step", "entropy_top_k", "forward_batch_size"):
            _check_count(name, getattr(self, name), 1, optional=True)
        if self.entropy_top_k is not None and self.entropy_top_k > MAX_ENTROPY_TOP_K:
            _fail("entropy_top_k", f"must be at most {MAX_ENTROPY_TOP_K} (more than any model's vocabulary; None "
                                   f"gives the exact entropy), got {self.entropy_top_k!r}")
        _check_real("reward_std_threshold", self.reward_std_threshold, 0.0, math.inf, True, False)
        if self.rollout_compile is not None:
            _check_bool("rollout_compile", self.rollout_compile)
        if self.rollout_compile_backend is not None:
            _check_choice("rollout_compile_backend", self.rollout_compile_backend, compile_backends())
        _check_choice("generation_backend", self.generation_backend, BACKENDS)

        # the batch layout divides by these; TRL accepts 4.0 generations and 0 accumulation steps, to fail mid-run
        _check_count("num_generations", self.num_generations, 2)
        _check_count("gradient_accumulation_steps", self.gradient_accumulation_steps, 1)

        # TRL refuses an unknown loss only in the loss itself, mid-run; the method's weights must know it first
        _check_choice("loss_type", self.loss_type, LOSS_TYPES)
        _check_choice("importance_sampling_level", self.importance_sampling_level, IMPORTANCE_SAMPLING_LEVELS)
        problem = weights_problem(self.method, self.alpha, self.loss_type, self.importance_sampling_level)
        if problem:
            _fail("loss_type", f"{self.loss_type!r} with method={self.method!r}, alpha={self.alpha}: {problem}")
        if self.prompts_per_step is not None and (self.prompts_per_step * self.num_generations
                                                  % self.gradient_accumulation_steps):
            _fail("gradient_accumulation_steps",
                  f"{self.prompts_per_step} prompts x {self.num_generations} completions = "
                  f"{self.prompts_per_step * self.num_generations} completions per step cannot be split into "
                  f"{self.gradient_accumulation_steps} equal micro-batches")

    def check_vocabulary(self, vocab_size: int) -> None:
        """The check that needs the model's vocabulary: a top-K estimate has K <= V (the trainer's, and a run's
        once its model is loaded, before anything is written)."""
        if self.entropy_top_k is not None and self.entropy_top_k > vocab_size:
            _fail("entropy_top_k", f"{self.entropy_top_k} is larger than the model's vocabulary of {vocab_size} "
                                   "tokens (the top-K estimate needs K <= V; None gives the exact entropy)")
