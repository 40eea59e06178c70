"""What SAAHGRPOTrainer and its opt-in layers rely on in TRL's GRPOTrainer (and transformers' Trainer) beyond their public API: the
methods it overrides or calls, with the parameters it passes, and the members it reads.  A TRL upgrade that
renames, reorders, adds or removes one fails here, naming it, instead of deep inside a training step."""

import inspect
from collections import defaultdict

import pytest
from transformers import Trainer
from trl import GRPOConfig, GRPOTrainer
from trl.models.utils import unwrap_model_for_generation
from trl.trainer.utils import RepeatSampler

from saah_lab.training.study_trainer import StudyTrainer
from saah_lib.models.rollout_trainer import CompiledRolloutMixin
from saah_lib.training.flat_groups import FlatGroupsMixin
from saah_lib.training.trainer import SAAHGRPOTrainer
from tests.training.test_trainer import build_trainer

#: The TRL methods each of our classes overrides: each takes TRL's parameters, by the same names, in the same order.
#: The core trainer overrides only what the weights need; the rest are opt-in layers and the lab's trainer.
OVERRIDDEN = {
    SAAHGRPOTrainer: ("__init__", "_compute_loss", "_get_per_token_logps_and_entropies"),
    CompiledRolloutMixin: ("__init__", "train", "_generate_single_turn", "_generate_and_score_completions"),
    FlatGroupsMixin: ("_calculate_rewards", "_generate_and_score_completions"),
    StudyTrainer: ("__init__", "_get_train_sampler", "_save_checkpoint"),
}
#: Parameters passed by name or read by position, beyond an override's own named ones (its *args/**kwargs).
PASSED = {
    "__init__": ("model", "reward_funcs", "args", "train_dataset", "processing_class", "peft_config"),
    "_get_per_token_logps_and_entropies": ("compute_entropy",),
    "_get_output_dir": ("trial",),
    "_tokenize_prompts": ("prompts",),
}
#: ``__init__`` reads the model as ``args[0]`` and the config as ``args[2]``: TRL's leading parameters.
LEADING = {"__init__": ("model", "reward_funcs", "args")}
#: TRL methods called but not overridden.
CALLED = ("_tokenize_prompts", "_get_output_dir")
#: Members read on a constructed GRPOTrainer.
MEMBERS = ("_metrics", "_tokenizer", "_dist", "accelerator", "state", "model_wrapped", "loss_type",
           "importance_sampling_level", "beta", "temperature", "use_vllm", "generation_kwargs", "num_generations",
           "reward_weights", "eos_token_ids", "max_completion_length", "environment_factories")
#: The attributes of TRL's prompt sampler that ``_get_train_sampler`` and ``ResumableRepeatSampler`` read.
SAMPLER_MEMBERS = ("data_source", "mini_repeat_count", "batch_size", "repeat_count", "shuffle", "seed", "generator",
                   "num_samples")

_STAR = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)


def _named(function) -> list[str]:
    return [p.name for p in inspect.signature(function).parameters.values() if p.name != "self" and p.kind not in _STAR]


def _takes_any_keyword(function) -> bool:
    return any(p.kind is inspect.Parameter.VAR_KEYWORD for p in inspect.signature(function).parameters.values())


def signature_problems(name: str, theirs, ours=None) -> list[str]:
    """Why ``ours`` (an override, or None for a method only called) no longer fits TRL's method ``theirs``."""
    if theirs is None:
        return [f"{name}: TRL no longer has it"]
    their_names = _named(theirs)
    problems = []
    if ours is not None:
        own = _named(ours)
        if their_names[:len(own)] != own:
            problems.append(f"{name}: TRL's parameters are {their_names}, the override takes {own}")
        elif their_names[len(own):] and not _takes_any_keyword(ours):
            problems.append(f"{name}: TRL added {their_names[len(own):]}, which the override does not take")
    leading = LEADING.get(name, ())
    if tuple(their_names[:len(leading)]) != leading:
        problems.append(f"{name}: TRL's leading parameters are {their_names[:len(leading)]}, not {list(leading)}")
    missing = [p for p in PASSED.get(name, ()) if p not in their_names]
    if missing:
        problems.append(f"{name}: TRL's takes no {missing}")
    return problems


def surface_problems(trl_class=GRPOTrainer) -> list[str]:
    problems = []
    for our_class, names in OVERRIDDEN.items():
        for name in names:
            problems += signature_problems(name, getattr(trl_class, name, None), our_class.__dict__[name])
    for name in CALLED:
        problems += signature_problems(name, getattr(trl_class, name, None))
    return list(dict.fromkeys(problems))  # a method two of our classes override is named once per problem


def member_problems(trainer) -> list[str]:
    return [f"GRPOTrainer has no member {name!r}" for name in MEMBERS if not hasattr(trainer, name)]


@pytest.fixture(scope="module")
def trl_trainer(tiny_random_model_dir, tmp_path_factory):
    return build_trainer(GRPOTrainer, GRPOConfig, tiny_random_model_dir, tmp_path_factory.mktemp("surface"))


def test_every_override_and_call_fits_trls_signatures():
    assert surface_problems() == []


def test_every_override_is_in_the_list():
    ours = [c for c in StudyTrainer.__mro__ if c.__module__.startswith(("saah_lib.", "saah_lab."))]
    assert set(ours) == set(OVERRIDDEN)
    for our_class in ours:
        overrides = {name for name, value in vars(our_class).items() if callable(value) and hasattr(GRPOTrainer, name)}
        assert overrides == set(OVERRIDDEN[our_class]), our_class.__name__


def test_the_members_read_exist(trl_trainer):
    assert member_problems(trl_trainer) == []
    assert set(trl_trainer._metrics) == {"train", "eval"}
    assert all(isinstance(m, defaultdict) and m.default_factory is list for m in trl_trainer._metrics.values())
    # set by transformers' training loop, so not yet on a constructed trainer: its assignment, in the source
    assert "self.current_gradient_accumulation_steps =" in inspect.getsource(Trainer)
    inspect.signature(trl_trainer._dist.summon_full_params).bind(trl_trainer.model_wrapped, recurse=False)
    ids = trl_trainer._tokenize_prompts(["a b", "c"])[0]  # the token ids of each prompt come first
    assert len(ids) == 2 and all(isinstance(token, int) for row in ids for token in row)


def test_the_sampler_and_unwrap_helper_take_what_we_pass(trl_trainer):
    """``_get_train_sampler`` rebuilds TRL's sampler from its attributes; ``_static_rollout`` calls TRL's
    ``unwrap_model_for_generation`` by these names (``inspect.Signature.bind`` raises where one is gone)."""
    sampler = trl_trainer._get_train_sampler()
    assert type(sampler) is RepeatSampler
    assert [n for n in SAMPLER_MEMBERS if not hasattr(sampler, n)] == []
    inspect.signature(RepeatSampler).bind(**{n: getattr(sampler, n) for n in SAMPLER_MEMBERS[:6]})
    inspect.signature(unwrap_model_for_generation).bind(trl_trainer.model_wrapped, trl_trainer.accelerator,
                                                        gather_deepspeed3_params=True,
                                                        gradient_checkpointing_kwargs=None)


# ------------------------------------------------------------------------------------------- the checker itself
def test_a_renamed_parameter_is_named(monkeypatch):
    monkeypatch.setattr(GRPOTrainer, "_compute_loss", lambda self, model, batch: None)
    assert surface_problems() == [
        "_compute_loss: TRL's parameters are ['model', 'batch'], the override takes ['model', 'inputs']"]


def test_an_added_parameter_and_a_removed_method_are_named(monkeypatch):
    monkeypatch.setattr(GRPOTrainer, "_calculate_rewards",
                        lambda self, inputs, prompts, completions, completion_ids_list, tools: None)
    monkeypatch.setattr(GRPOTrainer, "_get_per_token_logps_and_entropies",
                        lambda self, model, input_ids, attention_mask, logits_to_keep, batch_size=None, images=None,
                        compute_entropy=False: None)  # a parameter added where the override passes **kwargs: fine
    monkeypatch.delattr(GRPOTrainer, "_tokenize_prompts")
    assert surface_problems() == [
        "_calculate_rewards: TRL added ['tools'], which the override does not take",
        "_tokenize_prompts: TRL no longer has it"]


def test_a_parameter_passed_by_name_and_the_leading_order_are_checked(monkeypatch):
    monkeypatch.setattr(GRPOTrainer, "_get_per_token_logps_and_entropies",
                        lambda self, model, input_ids, attention_mask, logits_to_keep, batch_size=None,
                        with_entropy=False: None)
    monkeypatch.setattr(GRPOTrainer, "__init__", lambda self, model, args=None, reward_funcs=None,
                        train_dataset=None, processing_class=None, peft_config=None: None)
    assert surface_problems() == [
        "__init__: TRL's leading parameters are ['model', 'args', 'reward_funcs'], not "
        "['model', 'reward_funcs', 'args']",
        "_get_per_token_logps_and_entropies: TRL's takes no ['compute_entropy']"]


def test_a_missing_member_is_named(trl_trainer, monkeypatch):
    monkeypatch.delattr(trl_trainer, "_tokenizer")
    assert member_problems(trl_trainer) == ["GRPOTrainer has no member '_tokenizer'"]
