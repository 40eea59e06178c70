"""The training command line: a flag per config field over a bounded YAML file, help with choices and defaults."""

import json

import pytest

from saah_lab.training.launch import build_parser, main, parse_command_line, parse_overrides
from saah_lib.training.config import RunConfig


def config_from_argv(argv: list[str]) -> RunConfig:
    return parse_command_line(build_parser(), argv)[1]


def _yaml(tmp_path, text: str):
    (tmp_path / "run.yaml").write_text(text)
    return str(tmp_path / "run.yaml")


def test_every_config_field_has_a_flag_of_its_name():
    flags = {flag for action in build_parser()._actions for flag in action.option_strings}
    assert {flag for name in RunConfig.help() for flag in (f"--{name}", f"--{name.replace('_', '-')}")} <= flags
    typed = ["--profile", "qwen2.5-3b", "--method", "ah", "--alpha", "0.25", "--max-steps", "3", "--seed", "7",
             "--run-id", "r", "--results-dir", "elsewhere", "--model-name", "tiny-warmstart", "--generation-backend",
             "hf", "--report-to", "tensorboard", "--beta", "0.1", "--use_lora", "false", "--eval-every", "5"]
    cfg = config_from_argv(typed).to_dict()
    assert {name: cfg[name] for name in ("profile", "method", "alpha", "max_steps", "seed", "run_id", "results_dir",
                                         "model_name", "generation_backend", "report_to", "beta", "use_lora",
                                         "eval_every")} == dict(
        profile="qwen2.5-3b", method="ah", alpha=0.25, max_steps=3, seed=7, run_id="r", results_dir="elsewhere",
        model_name="tiny-warmstart", generation_backend="hf", report_to="tensorboard", beta=0.1, use_lora=False,
        eval_every=5)
    assert cfg["learning_rate"] == 5e-6  # a field not given keeps the profile's value


def test_values_are_json_else_text_and_text_fields_stay_text():
    cfg = config_from_argv(["--run-id", "2024", "--model-label", "7", "--lora-target-modules", '["q_proj"]',
                            "--save-steps", "5", "--lr-scheduler-type", "linear"])
    assert (cfg.run_id, cfg.model_label, cfg.lora_target_modules) == ("2024", "7", ("q_proj",))
    assert cfg.trainer.save_steps == 5 and cfg.trainer.lr_scheduler_type == "linear"


@pytest.mark.parametrize("argv,field", [(["--seed", "x"], "seed"), (["--seed", "1.5"], "seed"),
                                        (["--use-lora", "yes"], "use_lora"), (["--report-to", "tensorbord"],
                                                                               "report_to")])
def test_a_value_of_the_wrong_type_names_its_field(argv, field, capsys):
    with pytest.raises(SystemExit) as exited:
        main([*argv, "--print-config"])
    assert exited.value.code == 2 and f"config field {field!r}" in capsys.readouterr().err


def test_an_abbreviated_flag_is_refused_not_guessed(capsys):
    with pytest.raises(SystemExit):
        config_from_argv(["--learning", "0.1"])
    assert "unrecognized arguments: --learning" in capsys.readouterr().err


def test_a_yaml_file_sets_fields_and_flags_override_it(tmp_path, capsys):
    path = _yaml(tmp_path, "profile: qwen2.5-1.5b\nmethod: ah\nalpha: 0.25\nseed: 2\nn_eval: 50\n")
    cfg = config_from_argv(["--config", path, "--seed", "5"])
    assert (cfg.profile, cfg.trainer.method, cfg.trainer.alpha, cfg.trainer.seed, cfg.n_eval) == \
        ("qwen2.5-1.5b", "ah", 0.25, 5, 50)
    assert cfg.trainer.learning_rate == 5e-6  # the file's profile gives the rest
    main(["--config", path, "--print-config"])
    assert json.loads(capsys.readouterr().out)["seed"] == 2


@pytest.mark.parametrize("text,message", [
    ("steps: 3\n", "unknown config field(s): steps (config.json's name of max_steps)"),
    ("seed: [1\n", "not YAML within bounds"),
    ("a: &a [xxxxxxxxxx, xxxxxxxxxx, xxxxxxxxxx, xxxxxxxxxx, xxxxxxxxxx, xxxxxxxxxx, xxxxxxxxxx, xxxxxxxxxx]\n"
     "b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\nc: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\n"
     "d: [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n",
     "not YAML within bounds (its aliases expand to more than 100,000 characters)"),
    ("model_label: " + "x" * 100_001 + "\n", "more than 100,000 characters"),
    ("- seed\n", "must hold a YAML mapping of config fields (name: value), got list"),
    ("env:\n  HF_TOKEN: x\n", "'env' is not read"),
    ("seed: x\n", "config field 'seed': must be an integer"),
    ("seed: 1\nn_eval: 5\nseed: 2\n", "run.yaml: not YAML within bounds (the key 'seed' is given twice "
                                       "(lines 1 and 3)"),
])
def test_a_bad_yaml_file_is_an_error_naming_the_problem_and_writes_nothing(tmp_path, text, message, capsys):
    path = _yaml(tmp_path, text)
    with pytest.raises(SystemExit) as exited:
        main(["--config", path, "--results-dir", str(tmp_path / "results"), "--no-progress"])
    assert exited.value.code == 2 and message in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.yaml"]


def test_null_typed_or_in_the_file_is_none_not_the_profiles_value(tmp_path):
    paper = ["--profile", "qwen2.5-1.5b"]
    assert config_from_argv([*paper, "--entropy-top-k", "null"]).trainer.entropy_top_k is None  # not the paper's 500
    assert config_from_argv(["--save-total-limit", "null"]).trainer.save_total_limit is None  # not the tiny's 2
    assert config_from_argv(["--data-dir", "null", "--dataset", "gsm8k"]).data_dir is None  # TEXT too
    path = _yaml(tmp_path, "profile: qwen2.5-1.5b\nentropy_top_k: null\nwarmup_steps: 3\nsave_total_limit: 4\n")
    assert config_from_argv(["--config", path]).trainer.entropy_top_k is None
    cfg = config_from_argv(["--config", path, "--warmup-steps", "null", "--save-total-limit", "null"])
    assert (cfg.trainer.warmup_steps, cfg.trainer.save_total_limit) == (18, None)  # None: max(5, 180 // 10)
    cfg = config_from_argv(["--config", path])
    assert (cfg.trainer.warmup_steps, cfg.trainer.save_total_limit) == (3, 4)


@pytest.mark.parametrize("argv", [["--learning-rate", "null"], ["--model-label", "null"], ["--seed", "null"]])
def test_null_for_a_field_that_cannot_be_none_names_the_field(argv, capsys):
    with pytest.raises(SystemExit) as exited:
        main([*argv, "--print-config"])
    assert exited.value.code == 2 and f"config field {argv[0][2:].replace('-', '_')!r}" in capsys.readouterr().err


def test_every_field_null_is_none_or_an_error_naming_it():
    from saah_lib.training.config import make_config

    for name in RunConfig.help():
        try:
            value = make_config("qwen2.5-1.5b", overrides={name: None}).to_dict()[name]
        except ValueError as err:
            assert str(err).startswith((f"config field {name!r}", "unknown profile None")), err
        else:
            assert value is None or name in ("run_id", "warmup_steps", "run_name", "activation_checkpointing"), name


def test_yaml_numbers_are_read_as_trl_reads_them_and_a_non_number_names_its_field(tmp_path, capsys):
    path = _yaml(tmp_path, "learning_rate: 1e-5\nweight_decay: 1E-2\n")  # strings to YAML 1.1, as TRL's recipes write
    cfg = config_from_argv(["--config", path])
    assert (cfg.trainer.learning_rate, cfg.trainer.weight_decay) == (1e-5, 0.01)
    with pytest.raises(SystemExit):
        main(["--config", _yaml(tmp_path, "learning_rate: 1e-5x\n"), "--print-config"])
    assert "config field 'learning_rate': must be a finite number, got '1e-5x'" in capsys.readouterr().err


def test_the_benches_set_values_are_json_else_strings():
    assert parse_overrides(["a=1", "b=0.5", "c=true", "d=null", "e=[1, 2]", "f=hf", "g=x=y"]) == \
        {"a": 1, "b": 0.5, "c": True, "d": None, "e": [1, 2], "f": "hf", "g": "x=y"}
    with pytest.raises(ValueError, match="name=value"):
        parse_overrides(["seed"])


def test_print_config_resolves_without_training(capsys):
    main(["--method", "ah", "--alpha", "0.25", "--print-config"])
    printed = json.loads(capsys.readouterr().out)
    assert (printed["method"], printed["alpha"], printed["run_id"]) == ("ah", 0.25, "tiny-ah-a0.25-s0")
    assert printed["results_dir"] == "results/local"


def test_help_lists_choices_and_each_fields_default():
    text = " ".join(build_parser().format_help().split())
    for expected in ("{qwen2.5-1.5b,qwen2.5-3b,tiny,smollm2-135m}", "{grpo,ah,sa}", "{auto,hf,compiled,vllm}", "(default: tiny)",
                     "(default: sa)", "--learning_rate VALUE, --learning-rate VALUE", "--max_steps VALUE, "
                     "--max-steps VALUE, --steps VALUE", "(default: the profile's: qwen2.5-1.5b 123, qwen2.5-3b 123, "
                     "tiny 0, smollm2-135m 0)", "--report-to VALUE", "(default: none)", "--config FILE.yaml"):
        assert expected in text, expected


def test_the_seed_and_model_default_to_the_profiles():
    assert config_from_argv([]).trainer.seed == 0
    assert config_from_argv(["--profile", "qwen2.5-3b"]).trainer.seed == 123  # the paper's seed
    cfg = config_from_argv(["--model-name", "tiny-warmstart-s1", "--steps", "2"])  # --steps: --max-steps
    assert (cfg.model_name, cfg.trainer.max_steps, cfg.run_id) == ("tiny-warmstart-s1", 2, "tiny-sa-a0.5-s0-w1-steps2")


def test_the_command_line_is_parsed_once(monkeypatch):
    import argparse

    calls = []
    parse = argparse.ArgumentParser.parse_known_args
    monkeypatch.setattr(argparse.ArgumentParser, "parse_known_args", lambda self, *a, **k: calls.append(1) or
                        parse(self, *a, **k))
    main(["--seed", "3", "--print-config"])
    assert calls == [1]


def test_a_run_ends_with_a_summary(tmp_path, capsys):
    from saah_lab.training.run import run_summary
    from saah_lib.rundir.folder import RunDir

    run = RunDir(tmp_path / "runs" / "r")
    for step, p in ((0, 0.25), (20, 0.5), (40, 0.375)):
        run.log_eval({"step": step, "pass_at_1": p, "n": 8, "n_correct": int(p * 8)}, [])
    text = run_summary(run.dir, 90.0)
    assert "final 0.375 (step 40), peak 0.500 (step 20)" in text and "baseline (step 0) 0.250" in text
    assert "wall time 1.5 min" in text and "logs in" in text and "FALLBACK" not in text
    (run.dir / "compile_health.json").write_text(
        '{"processes": [{"fallback": {"where": "evaluation", "step": null, "reason": "Unsupported: x"}}]}')
    assert "  FALLBACK: compiled decoding fell back to hf in evaluation: Unsupported: x" in run_summary(run.dir)
