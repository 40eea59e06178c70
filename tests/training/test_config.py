import dataclasses
import hashlib
import json
import re

import pytest

from saah_lab.rundir.reader import read_run_folder
from saah_lib.models.names import TINY_WARMSTART, model_location
from saah_lib.paths import CONFIRM_ROOT, EXTENDED_ROOT, MINI_ROOT, RESULTS, SHIPPED_WARM_STARTS, TINY_WARMSTART_DIR
from saah_lib.training.config import PROFILES, RECORDED_SETTINGS, TRAINER_FIELDS, RunConfig, make_config
from saah_lib.training.grpo_config import SAAHGRPOConfig, report_integrations
from saah_lib.training.profiles import (
    ARTIFACT_SETTINGS,
    FIXED_TRAINER_SETTINGS,
    RECORDED_AS,
    RECORDED_FIELDS,
    settings_of_record,
)


def test_paper_profile_holds_the_papers_hyperparameters():
    cfg = make_config("qwen2.5-1.5b", method="ah", alpha=0.5)
    t = cfg.trainer
    assert (t.learning_rate, t.lr_scheduler_type.value, t.weight_decay, t.max_grad_norm) == (5e-6, "cosine", 0.01, 1.0)
    assert (t.beta, t.epsilon, t.loss_type) == (0.04, 0.2, "bnpo")
    assert (t.prompts_per_step, t.num_generations, t.gradient_accumulation_steps) == (4, 4, 2)
    assert t.per_device_train_batch_size * t.gradient_accumulation_steps == 16  # one process: 16 completions
    assert (t.max_completion_length, t.entropy_top_k, t.reward_std_threshold) == (512, 500, 0.15)
    assert (cfg.n_train, cfg.n_eval, t.seed, cfg.data_seed) == (800, 500, 123, 123)
    assert (cfg.lora_r, cfg.lora_alpha, cfg.lora_dropout) == (16, 32, 0.05)
    assert set(cfg.lora_target_modules) == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
    assert (t.save_steps, cfg.eval_every, cfg.eval_max_new_tokens) == (15, 30, 512)
    assert cfg.model_name == "Qwen/Qwen2.5-1.5B-Instruct" and cfg.dtype == "bfloat16" and cfg.use_lora
    assert t.activation_checkpointing is True


@pytest.mark.parametrize("method,steps,warmup", [("grpo", 150, 15), ("ah", 150, 15), ("sa", 180, 18)])
def test_paper_steps_and_warmup(method, steps, warmup):
    cfg = make_config("qwen2.5-3b", method=method)
    assert cfg.trainer.max_steps == steps and cfg.trainer.warmup_steps == warmup


def test_warmup_has_a_floor_of_five():
    assert make_config("tiny", max_steps=20).trainer.warmup_steps == 5


def test_grpo_forces_alpha_zero():
    assert make_config("tiny", method="grpo", alpha=0.7).trainer.alpha == 0.0


def test_default_is_the_tiny_profile_and_needs_no_hub():
    cfg = make_config()
    assert cfg.profile == "tiny" and cfg.dataset == "synthetic"
    assert cfg.run_id == "tiny-sa-a0.5-s0"  # seed 0: the CPU studies' first seed, so a single run is one of theirs
    assert cfg.results_dir == "results/local"  # git-ignored (.gitignore), never beside the committed studies
    assert cfg.trainer.output_dir == str(cfg.run_dir / "checkpoints") and cfg.trainer.run_name == cfg.run_id


@pytest.mark.parametrize(
    "overrides,field",
    [
        (dict(method="ppo"), "method"),
        (dict(alpha=10.5), "alpha"),
        (dict(alpha=float("nan")), "alpha"),
        (dict(max_steps=0), "max_steps"),
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
    # the names config.json records are not fields; the error names the field to use
    with pytest.raises(ValueError, match=r"save_every \(config.json's name of save_steps\), steps \(config.json's name of max_steps\)"):
        make_config("tiny", steps=3, save_every=1)


def test_round_trip_through_dict():
    cfg = make_config("tiny", method="ah", alpha=-0.25, seed=3)
    again = RunConfig.from_dict(json.loads(json.dumps(cfg.to_dict())))  # as a subprocess gets it
    assert again.to_dict() == cfg.to_dict() and again.run_settings() == cfg.run_settings()


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
    # a run loads the committed copy the studies trained from, which ships in results/warm_starts, not in a
    # study's root; the build above is a check of its own
    assert model_location(TINY_WARMSTART) == str(SHIPPED_WARM_STARTS / "tiny-warmstart")
    assert not any((root / "tiny-warmstart").exists() for root in (MINI_ROOT, EXTENDED_ROOT, CONFIRM_ROOT))


def test_the_studies_settings_list_only_what_differs_from_trls_defaults():
    trl = {f.name: f.default for f in dataclasses.fields(SAAHGRPOConfig)}
    assert all(trl[name] != value for name, value in {**ARTIFACT_SETTINGS, **FIXED_TRAINER_SETTINGS}.items())
    assert set(ARTIFACT_SETTINGS) <= set(TRAINER_FIELDS) and not set(FIXED_TRAINER_SETTINGS) & set(TRAINER_FIELDS)


def test_the_tiny_profile_lists_only_what_differs_from_the_defaults():
    defaults = RunConfig.defaults()
    own = {name: value for name, value in PROFILES["tiny"].items() if name not in ARTIFACT_SETTINGS}
    assert own and all(defaults[name] != value for name, value in own.items())
    tiny = make_config("tiny", max_steps=60)
    for name, default in defaults.items():
        value = getattr(tiny, name) if hasattr(RunConfig, name) or name in RunConfig.__dataclass_fields__ \
            else getattr(tiny.trainer, name)
        expected = PROFILES["tiny"].get(name, default)
        if name == "report_to":
            expected = []  # TRL's list form of "none"
        elif name in ("run_id", "run_name", "warmup_steps"):
            continue  # derived from the other fields
        assert getattr(value, "value", value) == (tuple(expected) if isinstance(expected, list) and name.startswith("lora")
                                                  else expected), name


def test_every_field_has_help_text():
    helps = RunConfig.help()
    assert set(helps) == set(RunConfig.defaults()) and all(text.strip() for text in helps.values())
    assert set(TRAINER_FIELDS) <= {f.name for f in dataclasses.fields(SAAHGRPOConfig)}  # TRL's names, or ours


def test_the_settings_table_names_every_run_field_once():
    from saah_lib.training.profiles import SETTINGS

    names = [s.name for s in SETTINGS]
    assert len(names) == len(set(names))
    assert {s.name for s in SETTINGS if s.owner == "run"} == {f.name for f in dataclasses.fields(RunConfig)} - {"trainer"}


def test_bnpo_is_stated_once_and_reaches_trl():
    assert FIXED_TRAINER_SETTINGS["loss_type"] == "bnpo"
    assert "loss_type" not in TRAINER_FIELDS and all("loss_type" not in p for p in PROFILES.values())
    assert make_config().trainer.loss_type == "bnpo"
    assert make_config("qwen2.5-3b").trainer.loss_type == "bnpo"


def test_config_json_keeps_its_keys_through_one_mapping():
    committed = json.loads((RESULTS / "mini" / "runs" / "tiny-sa-a0.5-s0" / "config.json").read_text())
    settings = make_config("tiny", method="sa", alpha=0.5, seed=0, max_steps=60, results_dir="results/mini").run_settings()
    assert list(settings) == list(RECORDED_SETTINGS) == [k for k in committed if k in settings]
    assert {k: committed[k] for k in settings} == settings  # the committed run, in meaning and in key order
    assert set(RECORDED_AS.values()) <= set(RECORDED_SETTINGS)


def test_code_reads_config_json_by_field_names_only(tmp_path):
    """config.json keeps its names (steps, save_every, ...); reading it gives the fields' names, the same table
    both ways, and run ids keep the recorded names (committed ids like -steps1)."""
    cfg = make_config("tiny", method="sa", alpha=0.5, seed=0, max_steps=3, results_dir=str(tmp_path))
    record = cfg.run_settings()
    assert record["steps"] == 3 and "max_steps" not in record
    assert settings_of_record(record) == {name: cfg.to_dict()[name] for name in RECORDED_FIELDS}
    assert cfg.run_id == "tiny-sa-a0.5-s0-steps3"
    folder = read_run_folder(RESULTS / "mini" / "runs" / "tiny-sa-a0.5-s0")
    assert folder.config["max_steps"] == 60 and "steps" not in folder.config and "save_every" not in folder.config


def test_the_trl_arguments_are_the_ones_the_studies_were_run_with():
    t = make_config("tiny", method="sa", seed=1, results_dir="results/mini").trainer
    assert (t.max_steps, t.save_steps, t.save_total_limit, t.save_strategy.value, t.logging_steps) == (60, 10, 2, "steps", 1)
    assert (t.per_device_train_batch_size, t.gradient_accumulation_steps, t.num_generations) == (8, 2, 4)
    assert (t.learning_rate, t.lr_scheduler_type.value, t.warmup_steps, t.weight_decay) == (2e-4, "cosine", 6, 0.01)
    assert (t.beta, t.epsilon, t.temperature, t.max_completion_length, t.seed) == (0.04, 0.2, 1.0, 96, 1)
    assert (t.loss_type, t.use_bias_correction_kl, t.activation_checkpointing, t.use_vllm) == ("bnpo", False, False,
                                                                                                False)
    assert t.report_to == [] and t.data_seed is None  # TRL's prompt order follows seed, as in the studies


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
        (dict(max_steps=2.5), "max_steps"),
        (dict(max_steps=True), "max_steps"),
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
        (dict(activation_checkpointing=0), "activation_checkpointing"),
        (dict(lora_r=0), "lora_r"),
        (dict(lora_alpha=0), "lora_alpha"),
        (dict(lora_dropout=1.0), "lora_dropout"),
        (dict(lora_dropout=-0.1), "lora_dropout"),
        (dict(lora_target_modules="q_proj"), "lora_target_modules"),
        (dict(lora_target_modules=[]), "lora_target_modules"),
        (dict(lora_target_modules=["q_proj", ""]), "lora_target_modules"),
        (dict(dtype="float64"), "dtype"),
        (dict(lr_scheduler_type="cosine_with_min_lr"), "lr_scheduler_type"),
        (dict(entropy_top_k=0), "entropy_top_k"),
        (dict(entropy_top_k=2.0), "entropy_top_k"),
        (dict(save_total_limit=0), "save_total_limit"),
        (dict(save_steps=True), "save_steps"),
        (dict(num_generations=4.0), "num_generations"),
        (dict(gradient_accumulation_steps=0), "gradient_accumulation_steps"),
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
    cfg = make_config("tiny", max_steps=3, seed=0, data_seed=2**32 - 1, max_grad_norm=0.0, beta=0.0, weight_decay=0.0,
                      use_lora=False, lora_r=4, lora_dropout=0.0, save_total_limit=1, log_token_entropies=0)
    assert cfg.trainer.warmup_steps == 5  # a warm-up longer than a smoke-test run is allowed
    assert make_config("tiny", alpha=1).trainer.alpha == 1.0  # an integer alpha is a number


@pytest.mark.parametrize("scheduler,error", [
    ("cosine_wth_restarts", "config field 'lr_scheduler_type': transformers cannot build 'cosine_wth_restarts' from "
                            "these settings: cosine_wth_restarts is not a valid SchedulerType, please select "
                            "one of \\['linear', 'cosine'"),  # transformers' own check names no field
    (None, "config field 'lr_scheduler_type': .*None is not a valid"),  # null typed (launch --lr-scheduler-type null)
    ("reduce_lr_on_plateau", "lr_scheduler_type reduce_lr_on_plateau requires an eval strategy"),  # likewise
    ("warmup_stable_decay", "config field 'lr_scheduler_type': .*num_decay_steps"),  # transformers: only in train()
    ("cosine_warmup_with_min_lr", "config field 'lr_scheduler_type': .*min_lr"),
])
def test_a_scheduler_transformers_cannot_build_is_refused_before_anything_is_written(scheduler, error, tmp_path):
    with pytest.raises(ValueError, match=error):
        make_config("tiny", {"lr_scheduler_type": scheduler}, results_dir=str(tmp_path))
    assert list(tmp_path.iterdir()) == []


def test_a_scheduler_is_checked_with_its_arguments(tmp_path):
    """What transformers would refuse in train() is refused when the config is made."""
    assert make_config("tiny", lr_scheduler_type="polynomial").trainer.lr_scheduler_type.value == "polynomial"
    with pytest.raises(ValueError, match="config field 'lr_scheduler_type': .*lr_end"):  # polynomial decays to 1e-7
        make_config("tiny", lr_scheduler_type="polynomial", learning_rate=1e-8, results_dir=str(tmp_path))


def test_report_to_names_transformers_integrations():
    assert report_integrations("none") == [] and report_integrations("all") == ["all"]
    assert report_integrations("tensorboard, wandb") == ["tensorboard", "wandb"]
    with pytest.raises(ValueError, match="'report_to'.*'tensorbord'.*tensorboard"):
        make_config("tiny", report_to="tensorbord")


def test_validation_happens_before_anything_is_written(tmp_path):
    with pytest.raises(ValueError, match="'seed'"):
        make_config("tiny", seed="abc", results_dir=str(tmp_path))
    assert list(tmp_path.iterdir()) == []


# --- a run's default id is unique to its settings --------------------------------------------------------------

def _recorded_fields(cfg: dict) -> dict:
    """A committed config.json's settings as make_config's fields (run id and profile left out)."""
    fields = settings_of_record(cfg)
    return {k: fields[k] for k in RECORDED_FIELDS if k not in ("run_id", "profile")}


def test_committed_runs_keep_their_ids():
    """Every committed run made with a default id (all but the top-K runs, which name their own) rebuilds to it."""
    configs = sorted((RESULTS / "mini" / "runs").glob("*/config.json")) + \
        sorted((RESULTS / "extended" / "runs").glob("*/config.json"))
    assert len(configs) >= 90
    for path in configs:
        cfg = json.loads(path.read_text())
        if cfg.get("entropy_top_k") is not None:
            continue
        assert make_config(cfg["profile"], **_recorded_fields(cfg)).run_id == cfg["run_id"], path


@pytest.mark.parametrize("fields, run_id", [
    (dict(), "tiny-sa-a0.5-s0"),
    (dict(max_steps=60, learning_rate=2e-4), "tiny-sa-a0.5-s0"),  # the profile's own values are no variant
    (dict(report_to="tensorboard", run_name="x"), "tiny-sa-a0.5-s0"),  # where logs go changes no result
    (dict(max_steps=1), "tiny-sa-a0.5-s0-steps1"),  # the README's second command ...
    (dict(max_steps=1, generation_backend="hf"), "tiny-sa-a0.5-s0-steps1-generation_backend=hf"),
    (dict(max_steps=2, report_to="tensorboard"), "tiny-sa-a0.5-s0-steps2"),  # ... and the TensorBoard example
    (dict(model_name="tiny-warmstart-s1", max_steps=1), "tiny-sa-a0.5-s0-w1-steps1"),
    (dict(max_steps=30, warmup_steps=3), "tiny-sa-a0.5-s0-steps30-warmup_steps3"),  # a warm-up given, not derived
])
def test_a_variant_gets_an_id_that_says_how_it_differs(fields, run_id):
    assert make_config("tiny", method="sa", alpha=0.5, **fields).run_id == run_id


def test_many_differences_give_a_stable_short_hash():
    fields = dict(max_steps=1, generation_backend="hf", learning_rate=1e-5)
    run_id = make_config("tiny", method="sa", alpha=0.5, **fields).run_id
    assert re.fullmatch(r"tiny-sa-a0\.5-s0-v[0-9a-f]{6}", run_id)
    assert make_config("tiny", method="sa", alpha=0.5, **dict(reversed(fields.items()))).run_id == run_id
    assert make_config("tiny", method="sa", alpha=0.5, **{**fields, "learning_rate": 2e-5}).run_id != run_id
    # the hash of these settings, computed by hand: sha256 of their sorted JSON
    text = json.dumps({"generation_backend": "hf", "learning_rate": 1e-05, "steps": 1}, sort_keys=True)
    assert run_id.endswith(hashlib.sha256(text.encode()).hexdigest()[:6])


def test_the_paper_profiles_steps_per_method_are_no_variant():
    assert make_config("qwen2.5-1.5b", method="grpo").run_id == "qwen2.5-1.5b-grpo-a0-s123"
    assert make_config("qwen2.5-1.5b", method="sa", max_steps=150).run_id == "qwen2.5-1.5b-sa-a0.5-s123-steps150"


def test_an_explicit_run_id_is_kept():
    assert make_config("tiny", method="sa", max_steps=1, run_id="mine").run_id == "mine"


# ------------------------------------------------------------------ SAAHGRPOConfig on its own
def test_grpo_method_with_nothing_else_set_is_trls_config(tmp_path):
    from trl import GRPOConfig
    trl = GRPOConfig(output_dir=str(tmp_path), use_cpu=True)  # TRL's defaults (bf16 on a CPU: given below)
    ours = SAAHGRPOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=True, method="grpo")
    differ = {f.name for f in dataclasses.fields(GRPOConfig) if getattr(trl, f.name) != getattr(ours, f.name)}
    assert not differ
    assert ours.reward_std_threshold == 0 and ours.loss_type == "dapo" and ours.activation_checkpointing is True


@pytest.mark.parametrize("asked,expected", [(dict(), False), (dict(bf16=True), True), (dict(bf16=False), False)])
def test_a_cpu_run_is_float32_unless_bf16_is_asked(asked, expected, tmp_path):
    assert SAAHGRPOConfig(output_dir=str(tmp_path), use_cpu=True, **asked).bf16 is expected


@pytest.mark.parametrize("bad,field", [
    (dict(rollout_compile="no"), "rollout_compile"),
    (dict(rollout_compile=1), "rollout_compile"),
    (dict(rollout_compile_backend="nope"), "rollout_compile_backend"),
    (dict(entropy_top_k=10**9), "entropy_top_k"),
    (dict(entropy_top_k=0), "entropy_top_k"),
    (dict(entropy_top_k=True), "entropy_top_k"),
    *((dict(alpha=alpha), "alpha") for alpha in (float("nan"), float("inf"), 10.01, -2.01, "0.5", True)),
    (dict(loss_type="ppo"), "loss_type"),
    (dict(importance_sampling_level="batch"), "importance_sampling_level"),
])
def test_own_fields_are_type_checked_at_construction(bad, field, tmp_path):
    with pytest.raises(ValueError, match=f"config field '{field}'"):
        SAAHGRPOConfig(output_dir=str(tmp_path), use_cpu=True, **bad)


@pytest.mark.parametrize("field,bad", [
    ("seed", -1), ("max_steps", 1.5), ("max_completion_length", 0),
    ("save_total_limit", 0), ("learning_rate", float("nan")), ("weight_decay", -1.0), ("max_grad_norm", -1.0),
    ("beta", -1.0), ("epsilon", 1.0), ("temperature", 0), ("vllm_gpu_memory_utilization", 1.5),
    ("activation_checkpointing", "no"), ("run_name", ""), ("vllm_mode", "server "), ("vllm_server_base_url", 3),
    ("save_steps", 0), ("warmup_steps", 2.5),
])
def test_a_trl_field_that_trl_takes_bad_is_left_to_trl_by_the_library_and_checked_on_a_runs_path(field, bad,
                                                                                                  tmp_path):
    """Once TRL or transformers refuses one of these values itself, our check of that field is to go."""
    from trl import GRPOConfig

    GRPOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, **{field: bad})
    SAAHGRPOConfig(output_dir=str(tmp_path), use_cpu=True, **{field: bad})  # the library: TRL's behaviour
    with pytest.raises(ValueError, match=f"config field '{field}'"):
        make_config("tiny", results_dir=str(tmp_path / "results"), **{field: bad})
    assert not (tmp_path / "results").exists()


def test_alpha_is_checked_once_by_the_config(monkeypatch, tmp_path):
    import saah_lib.training.grpo_config as grpo_config
    from saah_lib.method.methods import method_alpha

    calls = []
    monkeypatch.setattr(grpo_config, "method_alpha", lambda *a: calls.append(a) or method_alpha(*a))
    assert SAAHGRPOConfig(output_dir=str(tmp_path), use_cpu=True, method="ah", alpha=1).alpha == 1.0
    assert calls == [("ah", 1.0)]


@pytest.mark.parametrize("field,bad", [("loss_type", "ppo"), ("importance_sampling_level", "batch"),
                                       ("report_to", "tensorbord"), ("num_generations", 4.0),
                                       ("gradient_accumulation_steps", 0)])
def test_the_trl_fields_the_library_reads_are_checked_by_it(field, bad, tmp_path):
    from trl import GRPOConfig

    GRPOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, **{field: bad})
    with pytest.raises(ValueError, match=f"config field '{field}'"):
        SAAHGRPOConfig(output_dir=str(tmp_path), use_cpu=True, **{field: bad})


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "luspo", "vespo"])
def test_every_trl_loss_type_is_accepted(loss_type, tmp_path):
    assert SAAHGRPOConfig(output_dir=str(tmp_path), use_cpu=True, loss_type=loss_type).loss_type == loss_type


@pytest.mark.parametrize("good", [dict(rollout_compile=False, rollout_compile_backend="aot_eager"),
                                  dict(warmup_steps=0.1), dict(warmup_steps=3), dict(entropy_top_k=500)])
def test_valid_values_pass(good, tmp_path):
    SAAHGRPOConfig(output_dir=str(tmp_path), use_cpu=True, **good)


@pytest.mark.parametrize("dtype,bf16", [("bfloat16", True), ("float32", False)])
def test_a_run_dtype_is_honoured_on_a_cpu(dtype, bf16, monkeypatch):
    """bfloat16 on a CPU is bf16 autocast, as on a GPU (it was float32 without a word)."""
    import torch
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    trainer = make_config("tiny", method="sa", dtype=dtype).trainer
    assert trainer.bf16 is bf16 and trainer.fp16 is False and trainer.use_cpu is True


def test_float16_on_a_cpu_is_refused_naming_the_field(monkeypatch):
    import torch
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match="config field 'dtype': 'float16' trains only on a GPU"):
        make_config("tiny", method="sa", dtype="float16")
