"""The training command line: flags and --set merged with one rule, help with choices and defaults."""

import json
import subprocess
import sys

import pytest

from saah_lab.training.launch import build_parser, config_from_argv, main, merge_fields, parse_overrides
from saah_lib.paths import REPO_ROOT
from saah_lib.training.config import RunConfig


def test_set_of_a_field_that_also_has_a_flag_works():
    # the README's example crashed with "make_config() got multiple values for keyword argument"
    cfg = config_from_argv(["--profile", "tiny", "--method", "sa", "--seed", "0", "--steps", "1",
                            "--set", "generation_backend=hf"])
    t = cfg.trainer
    assert (t.generation_backend, t.seed, t.max_steps, t.method) == ("hf", 0, 1, "sa")


def test_every_flag_field_can_be_given_through_set_instead():
    cfg = config_from_argv(["--set", "profile=qwen2.5-1.5b", "--set", "method=grpo", "--set", "seed=4",
                            "--set", "report_to=tensorboard", "--set", "results_dir=/tmp/x"])
    t = cfg.trainer
    assert (cfg.profile, t.method, t.alpha, t.seed, t.report_to) == ("qwen2.5-1.5b", "grpo", 0.0, 4, ["tensorboard"])
    assert t.learning_rate == 5e-6  # the profile's, not the tiny default


@pytest.mark.parametrize("argv,field", [
    (["--seed", "1", "--set", "seed=2"], "seed"),
    (["--generation-backend", "hf", "--set", "generation_backend=compiled"], "generation_backend"),
    (["--profile", "tiny", "--set", "profile=tiny"], "profile"),  # the same value twice is still twice
    (["--set", "beta=0.1", "--set", "beta=0.2"], "beta"),
])
def test_a_field_given_twice_is_an_error_naming_it(argv, field):
    with pytest.raises(ValueError, match=f"{field}.*(twice|given twice)"):
        config_from_argv(argv)


def test_a_flags_default_is_not_a_choice():
    # --method has a default, yet --set method=... is no conflict: only typed flags count
    assert merge_fields({}, {"method": "ah"}) == {"method": "ah"}
    assert config_from_argv(["--set", "method=ah"]).trainer.method == "ah"


def test_set_values_are_json_else_strings():
    assert parse_overrides(["a=1", "b=0.5", "c=true", "d=null", "e=[1, 2]", "f=hf", "g=x=y"]) == \
        {"a": 1, "b": 0.5, "c": True, "d": None, "e": [1, 2], "f": "hf", "g": "x=y"}
    with pytest.raises(ValueError, match="name=value"):
        parse_overrides(["seed"])


def test_bad_input_exits_2_with_the_field_named(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["--seed", "1", "--set", "seed=2", "--print-config"])
    assert exited.value.code == 2 and "'seed' is given twice" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--set", "report_to=tensorbord", "--print-config"])
    assert "report_to" in capsys.readouterr().err


def test_print_config_resolves_without_training(capsys):
    main(["--method", "ah", "--alpha", "0.25", "--print-config"])
    printed = json.loads(capsys.readouterr().out)
    assert (printed["method"], printed["alpha"], printed["run_id"]) == ("ah", 0.25, "tiny-ah-a0.25-s0")
    assert printed["results_dir"] == "results/local"


def test_help_lists_choices_defaults_and_every_config_field():
    text = build_parser().format_help()
    for expected in ("{qwen2.5-1.5b,qwen2.5-3b,tiny}", "{grpo,ah,sa}", "{auto,hf,compiled,vllm}", "(default: tiny)",
                     "(default: sa)", "learning_rate = 0.0002", "report_to = 'none'"):
        assert expected in text, expected


def test_each_config_flag_sets_the_field_of_its_name():
    fields = build_parser().parse_args([]).config_fields
    assert set(fields) == {"profile", "method", "alpha", "max_steps", "seed", "run_id", "results_dir", "model_name",
                           "generation_backend", "report_to"}
    assert set(fields) - {"profile"} <= set(RunConfig.defaults())
    typed = ["--profile", "qwen2.5-3b", "--method", "ah", "--alpha", "0.25", "--max-steps", "3", "--seed", "7",
             "--run-id", "r", "--results-dir", "elsewhere", "--model-name", "tiny-warmstart", "--generation-backend",
             "hf", "--report-to", "tensorboard"]
    cfg = config_from_argv(typed).to_dict()
    assert {name: cfg[name] for name in fields} == dict(
        profile="qwen2.5-3b", method="ah", alpha=0.25, max_steps=3, seed=7, run_id="r", results_dir="elsewhere",
        model_name="tiny-warmstart", generation_backend="hf", report_to="tensorboard")


def test_the_seed_and_model_default_to_the_profiles():
    assert config_from_argv([]).trainer.seed == 0
    assert config_from_argv(["--profile", "qwen2.5-3b"]).trainer.seed == 123  # the paper's seed
    text = build_parser().format_help()
    assert "the profile's (qwen2.5-1.5b 123, qwen2.5-3b 123, tiny 0)" in " ".join(text.split())
    cfg = config_from_argv(["--model-name", "tiny-warmstart-s1", "--steps", "2"])  # --steps: --max-steps
    assert (cfg.model_name, cfg.trainer.max_steps, cfg.run_id) == ("tiny-warmstart-s1", 2, "tiny-sa-a0.5-s0-w1-steps2")


def test_the_command_line_is_parsed_once(monkeypatch):
    import argparse

    calls = []
    parse = argparse.ArgumentParser.parse_args
    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", lambda self, *a, **k: calls.append(1) or
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
