import dataclasses

import pytest

from saah_lib.models.names import TINY_WARMSTART, model_location
from saah_lib.paths import RESULTS, TINY_WARMSTART_DIR
from saah_lib.training.config import PROFILES, SAAHConfig, make_config


def test_paper_profile_holds_the_papers_hyperparameters():
    cfg = make_config("qwen2.5-1.5b", method="ah", alpha=0.5)
    assert (cfg.learning_rate, cfg.lr_scheduler, cfg.weight_decay, cfg.max_grad_norm) == (5e-6, "cosine", 0.01, 1.0)
    assert (cfg.beta, cfg.epsilon) == (0.04, 0.2)
    assert (cfg.prompts_per_step, cfg.num_generations, cfg.gradient_accumulation_steps) == (4, 4, 2)
    assert cfg.completions_per_step == 16
    assert (cfg.max_completion_length, cfg.entropy_top_k, cfg.reward_std_threshold) == (512, 500, 0.15)
    assert (cfg.n_train, cfg.n_eval, cfg.seed, cfg.data_seed) == (800, 500, 123, 123)
    assert (cfg.lora_r, cfg.lora_alpha, cfg.lora_dropout) == (16, 32, 0.05)
    assert set(cfg.lora_target_modules) == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
    assert (cfg.save_every, cfg.eval_every, cfg.eval_max_new_tokens) == (15, 30, 512)
    assert cfg.model_name == "Qwen/Qwen2.5-1.5B-Instruct" and cfg.dtype == "bfloat16" and cfg.use_lora


@pytest.mark.parametrize("method,steps,warmup", [("grpo", 150, 15), ("ah", 150, 15), ("sa", 180, 18)])
def test_paper_steps_and_warmup(method, steps, warmup):
    cfg = make_config("qwen2.5-3b", method=method)
    assert cfg.steps == steps and cfg.warmup_steps == warmup


def test_warmup_has_a_floor_of_five():
    assert make_config("tiny", steps=20).warmup_steps == 5


def test_grpo_forces_alpha_zero():
    assert make_config("tiny", method="grpo", alpha=0.7).alpha == 0.0


def test_default_is_the_tiny_profile_and_needs_no_hub():
    cfg = make_config()
    assert cfg.profile == "tiny" and cfg.dataset == "synthetic"
    assert cfg.run_id == "tiny-sa-a0.5-s0"  # seed 0: the CPU studies' first seed, so a single run is one of theirs
    assert cfg.results_dir == "results/local"  # git-ignored (.gitignore), never beside the committed studies


@pytest.mark.parametrize(
    "overrides,field",
    [
        (dict(method="ppo"), "method"),
        (dict(alpha=10.5), "alpha"),
        (dict(alpha=float("nan")), "alpha"),
        (dict(steps=0), "steps"),
        (dict(num_generations=1), "num_generations"),
        (dict(prompts_per_step=3, num_generations=3, gradient_accumulation_steps=2), "gradient_accumulation_steps"),
        (dict(model_name="/no/such/model"), "model_name"),
        (dict(run_id="../escape"), "run_id"),
        (dict(dataset="mnist"), "dataset"),
    ],
)
def test_bad_values_name_the_field(overrides, field):
    with pytest.raises(ValueError, match=f"'{field}'"):
        make_config("tiny", **overrides)


def test_unknown_profile_and_field():
    with pytest.raises(ValueError, match="unknown profile 'qwen-7b'"):
        make_config("qwen-7b")
    with pytest.raises(ValueError, match="unknown config field.*lr"):
        make_config("tiny", lr=1e-3)


def test_round_trip_through_dict():
    cfg = make_config("tiny", method="ah", alpha=-0.25, seed=3)
    assert SAAHConfig.from_dict(cfg.to_dict()) == cfg


def test_every_profile_validates():
    for name in PROFILES:
        for method in ("grpo", "ah", "sa"):
            make_config(name, method=method)


def test_the_warm_start_is_a_cache_outside_every_results_root():
    assert TINY_WARMSTART_DIR.is_absolute()
    assert TINY_WARMSTART_DIR.parts[-2:] == ("cache", "tiny-warmstart")
    assert (TINY_WARMSTART_DIR.parents[1] / "saah_lib").is_dir()
    assert RESULTS not in TINY_WARMSTART_DIR.parents
    assert make_config("tiny").model_name == TINY_WARMSTART
    # runs recorded before the move named the warm start by its old folder
    assert make_config("tiny", model_name="results/mini/warmstart/model").model_name == TINY_WARMSTART
    assert model_location(TINY_WARMSTART) == str(TINY_WARMSTART_DIR)


def test_dataclass_defaults_are_exactly_the_tiny_profile():
    default, tiny = SAAHConfig(), make_config("tiny")
    for f in dataclasses.fields(SAAHConfig):
        assert getattr(default, f.name) == getattr(tiny, f.name), f.name
    declared = {f.name: f.default for f in dataclasses.fields(SAAHConfig)}
    assert {name: declared[name] for name in PROFILES["tiny"]} == PROFILES["tiny"]


def test_paper_profiles_override_every_tiny_default_they_need():
    cfg = make_config("qwen2.5-3b", method="sa")
    assert (cfg.learning_rate, cfg.max_completion_length, cfg.entropy_top_k) == (5e-6, 512, 500)
    assert (cfg.save_every, cfg.keep_checkpoints, cfg.eval_every, cfg.eval_max_new_tokens) == (15, None, 30, 512)
    assert (cfg.n_eval, cfg.eval_batch_size, cfg.steps) == (500, 128, 180)


# Every field is checked for type and range, with the field named in the message.
@pytest.mark.parametrize(
    "overrides,field",
    [
        (dict(seed="abc"), "seed"),
        (dict(seed=True), "seed"),
        (dict(seed=-1), "seed"),
        (dict(seed=2**32), "seed"),
        (dict(seed=1.5), "seed"),
        (dict(data_seed="7"), "data_seed"),
        (dict(alpha="0.5"), "alpha"),
        (dict(alpha=True), "alpha"),
        (dict(alpha=float("inf")), "alpha"),
        (dict(steps=2.5), "steps"),
        (dict(steps=True), "steps"),
        (dict(warmup_steps=-1), "warmup_steps"),
        (dict(warmup_steps=1.0), "warmup_steps"),
        (dict(learning_rate=0), "learning_rate"),
        (dict(learning_rate=float("nan")), "learning_rate"),
        (dict(learning_rate="1e-5"), "learning_rate"),
        (dict(weight_decay=-0.1), "weight_decay"),
        (dict(max_grad_norm=float("inf")), "max_grad_norm"),
        (dict(beta=float("nan")), "beta"),
        (dict(epsilon=1.0), "epsilon"),
        (dict(temperature=0), "temperature"),
        (dict(temperature=-1.0), "temperature"),
        (dict(temperature=float("inf")), "temperature"),
        (dict(reward_std_threshold=float("nan")), "reward_std_threshold"),
        (dict(use_lora=1), "use_lora"),
        (dict(use_lora="False"), "use_lora"),
        (dict(gradient_checkpointing=0), "gradient_checkpointing"),
        (dict(lora_r=0), "lora_r"),
        (dict(lora_alpha=0), "lora_alpha"),
        (dict(lora_dropout=1.0), "lora_dropout"),
        (dict(lora_dropout=-0.1), "lora_dropout"),
        (dict(lora_target_modules="q_proj"), "lora_target_modules"),
        (dict(lora_target_modules=[]), "lora_target_modules"),
        (dict(lora_target_modules=["q_proj", ""]), "lora_target_modules"),
        (dict(dtype="float64"), "dtype"),
        (dict(lr_scheduler="cosine_with_min_lr"), "lr_scheduler"),
        (dict(entropy_top_k=0), "entropy_top_k"),
        (dict(entropy_top_k=2.0), "entropy_top_k"),
        (dict(keep_checkpoints=0), "keep_checkpoints"),
        (dict(save_every=True), "save_every"),
        (dict(eval_every=0), "eval_every"),
        (dict(n_train=10.0), "n_train"),
        (dict(log_token_entropies=-1), "log_token_entropies"),
        (dict(model_name=""), "model_name"),
        (dict(model_label=3), "model_label"),
        (dict(results_dir=""), "results_dir"),
        (dict(run_id="a b"), "run_id"),
        (dict(run_id="-rf"), "run_id"),
        (dict(run_id="x" * 201), "run_id"),
        (dict(run_id="checkpoints"), "run_id"),  # git-ignored: such a run would never be committed
        (dict(run_id="__pycache__"), "run_id"),  # no reader reads it
        (dict(data_dir=""), "data_dir"),
    ],
)
def test_every_field_is_type_and_range_checked(overrides, field):
    with pytest.raises(ValueError, match=f"config field '{field}'"):
        make_config("tiny", **overrides)


def test_data_dir_with_the_synthetic_dataset_is_an_error():
    with pytest.raises(ValueError, match="config field 'data_dir': is only read for dataset='gsm8k'"):
        make_config("tiny", data_dir="some/folder")
    # with GSM8K it is the point of the field (existence is checked before a run starts, not here)
    assert make_config("tiny", dataset="gsm8k", data_dir="some/folder").data_dir == "some/folder"


def test_sensible_edge_values_are_accepted():
    cfg = make_config("tiny", steps=3, seed=0, data_seed=2**32 - 1, max_grad_norm=0.0, beta=0.0, weight_decay=0.0,
                      use_lora=False, lora_r=4, lora_dropout=0.0, keep_checkpoints=1, log_token_entropies=0)
    assert cfg.warmup_steps == 5  # a warm-up longer than a smoke-test run is allowed (documented in validate)
    assert make_config("tiny", alpha=1).alpha == 1.0  # an integer alpha is a number


def test_validation_happens_before_anything_is_written(tmp_path):
    with pytest.raises(ValueError, match="'seed'"):
        make_config("tiny", seed="abc", results_dir=str(tmp_path))
    assert list(tmp_path.iterdir()) == []
