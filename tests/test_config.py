import dataclasses

import pytest

from saah_lib.config import PROFILES, TINY_MODEL_DIR, SAAHConfig, make_config


def test_paper_profile_holds_the_papers_hyperparameters():
    cfg = make_config("qwen2.5-1.5b", method="ah", alpha=0.5)
    assert (cfg.learning_rate, cfg.lr_scheduler, cfg.weight_decay, cfg.max_grad_norm) == (5e-6, "cosine", 0.01, 1.0)
    assert (cfg.beta, cfg.epsilon) == (0.04, 0.2)
    assert (cfg.prompts_per_step, cfg.num_generations, cfg.gradient_accumulation_steps) == (4, 4, 2)
    assert cfg.completions_per_step == 16 and cfg.per_device_batch_size == 8
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
    assert cfg.run_id == "tiny-sa-a0.5-s123"


@pytest.mark.parametrize(
    "overrides,field",
    [
        (dict(method="ppo"), "method"),
        (dict(alpha=2.5), "alpha"),
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


def test_default_warm_start_folder_is_inside_the_repository():
    assert TINY_MODEL_DIR.is_absolute()
    assert TINY_MODEL_DIR.parts[-4:] == ("results", "mini", "warmstart", "model")
    assert (TINY_MODEL_DIR.parents[3] / "saah_lib").is_dir()


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
