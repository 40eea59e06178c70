"""The benchmark runs on CPU (a smoke test of its plumbing, not a measurement)."""

import json

import pytest
import torch

from bench.step import QWEN25_ARCHITECTURES, main, qwen25_config

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("profile,millions", [("qwen2.5-1.5b", 1544), ("qwen2.5-3b", 3086)])
def test_qwen25_architectures_have_the_papers_parameter_counts(profile, millions):
    from transformers import Qwen2ForCausalLM

    with torch.device("meta"):
        model = Qwen2ForCausalLM(qwen25_config(profile))
    assert round(sum(p.numel() for p in model.parameters()) / 1e6) == millions
    assert set(QWEN25_ARCHITECTURES) == {"qwen2.5-1.5b", "qwen2.5-3b"}


def test_benchmark_writes_its_report(tiny_random_model_dir, tmp_path, capsys):
    main(["--profile", "tiny", "--model-dir", str(tiny_random_model_dir), "--steps", "1", "--warmup", "1",
          "--variants", "trl-bnpo", "grpo", "sa-exact", "sa-top500", "--eval-problems", "4",
          "--max-completion-length", "8", "--out-dir", str(tmp_path)])
    (report_path,) = tmp_path.glob("*.json")
    report = json.loads(report_path.read_text())
    # ours on the default backend, auto: the static engine (uncompiled on a CPU)
    assert [v["variant"] for v in report["variants"]] == ["trl-bnpo", "grpo@compiled", "sa-exact@compiled",
                                                          "sa-top500@compiled"]
    assert all(len(v["step_times_s"]) == 2 and v["median_step_s"] > 0 for v in report["variants"])
    # no grpo-top500 variant was timed, so sa-top500 has no ratio against it
    assert set(report["ratios"]) == {"grpo@compiled/trl-bnpo", "sa-exact@compiled/trl-bnpo",
                                     "sa-top500@compiled/trl-bnpo", "sa-exact@compiled/grpo@compiled"}
    assert report["eval"]["problems"] == 4 and report["eval"]["problems_per_s"] > 0
    assert "grpo@compiled/trl-bnpo=" in capsys.readouterr().out


def test_benchmark_times_both_backends_with_generation_split_out(tiny_random_model_dir, tmp_path):
    main(["--profile", "tiny", "--model-dir", str(tiny_random_model_dir), "--steps", "1", "--warmup", "1",
          "--variants", "trl-bnpo", "grpo", "sa-exact", "--generation-backend", "hf", "compiled",
          "--eval-problems", "3", "--max-completion-length", "8", "--rollout-repeats", "1",
          "--out-dir", str(tmp_path)])
    report = json.loads(next(tmp_path.glob("*.json")).read_text())
    assert report["rollout"]["hf"]["median_s"] > 0 and report["rollout"]["compiled"]["median_s"] > 0
    assert set(report["eval_by_backend"]) == {"hf", "compiled"}
    names = [v["variant"] for v in report["variants"]]
    assert names == ["trl-bnpo", "grpo", "sa-exact", "grpo@compiled", "sa-exact@compiled"]
    assert report["complete"] and report["generation_backends"] == ["hf", "compiled"]
    for v in report["variants"]:
        assert len(v["generation_times_s"]) == 2 and 0 < v["median_generation_s"] < v["median_step_s"]
        assert v["one_time_cost_s"] == pytest.approx(v["first_step_s"] - v["median_step_s"])
    assert "sa-exact@compiled/grpo@compiled" in report["ratios"] and "grpo@compiled/trl-bnpo" in report["ratios"]
    assert report["eval"]["generation_backend"] == "compiled"


def test_a_run_cut_off_keeps_the_variants_it_finished(tiny_random_model_dir, tmp_path, monkeypatch):
    from bench import step

    real, calls = step.time_variant, []

    def second_one_dies(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt  # what a time limit looks like from inside
        return real(*args, **kwargs)

    monkeypatch.setattr(step, "time_variant", second_one_dies)
    complete = tmp_path / f"{step.device_name().replace(' ', '_')}-tiny.json"
    complete.write_text('{"complete": true}')  # an earlier complete measurement: it stands
    with pytest.raises(KeyboardInterrupt):
        main(["--profile", "tiny", "--model-dir", str(tiny_random_model_dir), "--steps", "1", "--warmup", "1",
              "--variants", "trl-bnpo", "grpo", "--eval-problems", "0", "--max-completion-length", "8",
              "--out-dir", str(tmp_path)])
    assert complete.read_text() == '{"complete": true}'
    partial = complete.with_name(complete.stem + ".partial.json")
    report = json.loads(partial.read_text())  # kept apart
    assert [v["variant"] for v in report["variants"]] == ["trl-bnpo"] and not report["complete"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([complete.name, partial.name])  # no scratch folder


def test_compiled_variants_train_12_steps_and_record_their_compile_health(tiny_random_model_dir, tmp_path):
    import torch._dynamo

    torch._dynamo.reset()
    common = ["--profile", "tiny", "--model-dir", str(tiny_random_model_dir), "--variants", "sa-exact",
              "--generation-backend", "compiled", "--rollout-compile", "on", "--compile-backend", "eager",
              "--max-completion-length", "20", "--set", "use_lora=true", "--set", "activation_checkpointing=true",
              "--out-dir", str(tmp_path)]
    with pytest.raises(ValueError, match="at least 12"):
        main([*common, "--steps", "5", "--warmup", "1", "--eval-problems", "0"])
    main([*common, "--steps", "11", "--warmup", "1", "--eval-problems", "3", "--rollout-profile"])
    report = json.loads(next(tmp_path.glob("*.json")).read_text())
    (variant,) = report["variants"]
    assert variant["variant"] == "sa-exact@compiled" and len(variant["step_times_s"]) == 12
    health = variant["compile_health"]
    assert health["compiled_graphs"] == len(health["graphs"]) >= 1 and health["rollouts"] == 12
    assert health["recompiles"] == 0 and health["graph_breaks"] == 0 and health["fallback"] is None
    assert 0 < health["host_syncs_per_token"] <= 1 / 16 and health["compile_s"] > 0
    assert report["rollout_compile"] and report["compile_backend"] == "eager"
    assert report["lora"] and report["gradient_checkpointing"]  # what made TRL's step loop recompile
    profile = report["rollout_profile"]
    assert profile["static"]["token_steps"] == 20 and profile["static"]["host_syncs_per_token"] <= 1 / 16
    assert profile["static"]["eager_ops_per_token"] <= 6
    assert profile["hf_generate_whole_call"]["host_syncs_per_token"] >= 2  # multinomial's checks, every token
    assert report["eval"]["compile_health"]["compiled_graphs"] == 1


def test_make_bench_writes_to_a_git_ignored_folder_and_never_to_the_committed_one():
    import subprocess

    from bench.options import LOCAL_BENCH, parse_args
    from saah_lib.paths import BENCH_RESULTS, REPO_ROOT

    default = parse_args(["--profile", "tiny"]).out_dir()  # what `make bench` runs
    assert default == LOCAL_BENCH and BENCH_RESULTS not in [default, *default.parents]
    ignored = subprocess.run(["git", "check-ignore", "-q", str(default / "cpu-x86_64-tiny.json")], cwd=REPO_ROOT)
    assert ignored.returncode == 0  # git-ignored
    assert parse_args(["--out", "results/bench"]).out_dir().as_posix() == "results/bench"


def test_options_are_checked_once_and_the_config_is_made_not_mutated():
    from bench.options import BenchOptions, parse_args
    from bench.step import bench_config

    with pytest.raises(ValueError, match="variants: unknown sa-fast"):
        BenchOptions(variants=("sa-fast",))
    with pytest.raises(ValueError, match="vLLM"):
        BenchOptions(generation_backends=("vllm",))
    options = parse_args(["--max-completion-length", "8", "--steps", "3", "--set", "use_lora=true"])
    cfg = bench_config(options)
    assert (cfg.trainer.max_completion_length, cfg.eval_max_new_tokens, cfg.trainer.max_steps, cfg.use_lora) == (8, 8, 4, True)
    with pytest.raises(Exception):
        options.steps = 5  # frozen: nothing downstream changes what was checked


def test_an_out_that_is_a_file_is_refused_before_anything_is_measured(tmp_path):
    from bench.options import parse_args

    (tmp_path / "a-file").write_text("mine")
    with pytest.raises(ValueError, match=f"--out {tmp_path / 'a-file'}: {tmp_path / 'a-file'} is a file"):
        parse_args(["--profile", "tiny", "--out-dir", str(tmp_path / "a-file")])
    assert (tmp_path / "a-file").read_text() == "mine"
