"""``make gpu-bench`` on CPU: the script a GPU call runs, run whole on the tiny shapes, and its time budget."""

import json
import math
import time
from types import SimpleNamespace

import pytest
import torch

from bench import gpu as gpu_bench
from bench.decode import window_of
from bench.models import device_name
from bench.options import MIN_COMPILED_STEPS
from bench.profiling import kernel_summary
from bench.trainers import StopBeforeDeadline

CHEAP = ["--completion-tokens", "8", "--trl-steps", "1", "--prompt-tokens", "48"]


def _finite_positive(x) -> bool:
    return isinstance(x, float) and math.isfinite(x) and x > 0


@pytest.mark.slow
def test_on_cpu_the_whole_benchmark_runs_and_writes_one_file(tiny_random_model_dir, tmp_path, capsys):
    torch._dynamo.reset()
    gpu_bench.main([*CHEAP, "--model-dir", str(tiny_random_model_dir), "--out", str(tmp_path)])
    (path,) = tmp_path.iterdir()  # one JSON, no trainer folders left behind
    assert path.name == f"{device_name()}-gpu-bench-tiny.json"
    report = json.loads(path.read_text())
    assert report["complete"] and not report["cuda"] and report["compile_backend"] == "aot_eager"
    assert {p: s["status"] for p, s in report["parts"].items()} == dict.fromkeys(gpu_bench.PARTS, "done")
    ours, trl = report["ours"], report["trl"]
    assert ours["variant"] == "sa-exact@compiled" and trl["variant"] == "trl-bnpo"
    assert len(ours["step_times_s"]) == MIN_COMPILED_STEPS and len(trl["step_times_s"]) == 2  # warm-up + steady
    for part in (ours, trl):
        assert _finite_positive(part["median_step_s"]) and _finite_positive(part["generation_ms_per_token"])
        assert part["generation_ms_per_token"] == pytest.approx(1000 * part["median_generation_s"] / 8)
    health = ours["compile_health"]
    assert health["compiled_graphs"] >= 1 and health["recompiles"] == 0 and health["fallback"] is None
    assert set(report["ratios"]) == {"step", "generation", "rest"}
    assert all(_finite_positive(r) for r in report["ratios"].values())
    assert report["ratios"]["step"] == pytest.approx(trl["median_step_s"] / ours["median_step_s"])
    profile = report["decode_profile"]
    assert profile["model"] == "random 2-layer Qwen2" and profile["new_tokens"] == 8
    kernels = profile["kernels"]
    assert kernels["source"] == "cpu ops" and kernels["token_steps"] == profile["window"]["calls"] >= 1
    assert {"gemm", "attention", "sampling"} <= set(kernels["by_class"])
    assert _finite_positive(kernels["kernels_per_token"]) and 0 <= kernels["idle_fraction"] < 1
    assert _finite_positive(profile["window"]["wall_ms_per_token"]) and profile["host"]["host_syncs"] == 0
    assert profile["compile_health"]["recompiles"] == 0 and profile["compile_health"]["compiled_graphs"] == 1
    out = capsys.readouterr().out
    assert "stock/ours" in out and "decode step" in out and f"wrote {path}" in out


def _fake_part(build_s=1.0, compile_s=1.0, generation_s=1.0):
    return {"variant": "x", "median_step_s": 2.0, "median_generation_s": generation_s, "median_rest_s": 1.0,
            "step_times_s": [3.0, 2.0], "one_time_cost_s": compile_s, "model_build_s": build_s,
            "compile_health": {"compile_s": compile_s}, "generation_ms_per_token": 1.0, "steady_steps": 1}


def test_a_time_budget_skips_the_parts_that_no_longer_fit(tmp_path, monkeypatch):
    """Part 1 says the profile needs 30 s; with 1 s of budget stock TRL and the profile are skipped, and said so."""
    monkeypatch.setattr(gpu_bench, "run_trainer_part", lambda *a, **k: (_fake_part(10.0, 17.0, 1.0), False))
    options = gpu_bench.parse_args(["--rollout-compile", "off", "--time-budget-s", "1", "--out", str(tmp_path)])
    report = gpu_bench.run_gpu_bench(options)
    assert report["parts"]["ours"]["status"] == "done"
    for part in ("trl", "decode_profile"):
        assert report["parts"][part]["status"] == "skipped"
        assert "the profile needs 30.0 s" in report["parts"][part]["reason"]
    assert report["ratios"] == {} and report["complete"]
    assert json.loads(next(tmp_path.glob("*.json")).read_text())["parts"] == report["parts"]


def test_a_failed_part_is_named_and_the_later_parts_still_run(tmp_path, monkeypatch):
    def trainer_part(variant, *args, **kwargs):
        if variant[1] == "trl":
            raise RuntimeError("CUDA out of memory (simulated)")
        return _fake_part(), True

    monkeypatch.setattr(gpu_bench, "run_trainer_part", trainer_part)
    monkeypatch.setattr(gpu_bench, "profile_model", lambda *a: (None, None, "a model"))
    no_kernels = {"window": {"calls": 1, "wall_ms_per_token": 1.0}, "kernels": kernel_summary([], 1)}
    monkeypatch.setattr(gpu_bench, "decode_profile", lambda *a, **k: no_kernels)
    report = gpu_bench.run_gpu_bench(gpu_bench.parse_args(["--rollout-compile", "off", "--out", str(tmp_path)]))
    parts = report["parts"]
    assert parts["ours"]["status"] == "shortened" and parts["ours"]["reason"] == "time budget"
    assert parts["trl"]["status"] == "failed" and "CUDA out of memory (simulated)" in parts["trl"]["reason"]
    assert parts["decode_profile"]["status"] == "done" and report["decode_profile"]["model"] == "a model"


def test_a_run_cut_off_says_which_part_was_running(tmp_path, monkeypatch):
    def killed(*args, **kwargs):
        raise KeyboardInterrupt  # what a time limit looks like from inside

    monkeypatch.setattr(gpu_bench, "run_trainer_part", killed)
    with pytest.raises(KeyboardInterrupt):
        gpu_bench.run_gpu_bench(gpu_bench.parse_args(["--rollout-compile", "off", "--out", str(tmp_path)]))
    report = json.loads(next(tmp_path.glob("*.json")).read_text())
    assert report["parts"] == {"ours": {"status": "running"}} and not report["complete"]


def _step(stop, step, max_steps, seconds):
    args, state, control = SimpleNamespace(max_steps=max_steps), SimpleNamespace(global_step=step), \
        SimpleNamespace(should_training_stop=False)
    stop.on_step_begin(args, state, control)
    stop._start -= seconds  # as if the step had taken this long
    stop.on_step_end(args, state, control)
    return control.should_training_stop


def test_training_stops_before_a_step_that_would_pass_the_deadline_but_not_before_its_minimum():
    stop = StopBeforeDeadline(deadline=time.monotonic() + 10, min_steps=2)
    assert not _step(stop, 1, 5, seconds=60)  # past the deadline, but under the minimum
    assert _step(stop, 2, 5, seconds=11) and stop.stopped_early  # the next one would end past it
    relaxed = StopBeforeDeadline(deadline=time.monotonic() + 100, min_steps=1)
    assert not _step(relaxed, 2, 5, seconds=1) and not relaxed.stopped_early
    assert not _step(StopBeforeDeadline(time.monotonic(), 1), 5, 5, seconds=1)  # the last step: nothing to stop


def test_options_are_checked_with_clear_errors():
    with pytest.raises(ValueError, match=f"at least {MIN_COMPILED_STEPS}"):
        gpu_bench.parse_args(["--ours-steps", "3"])
    with pytest.raises(ValueError, match="time_budget_s must be a positive"):
        gpu_bench.parse_args(["--time-budget-s", "0"])
    with pytest.raises(ValueError, match="completion_tokens must be >= 3"):
        gpu_bench.parse_args(["--completion-tokens", "2"])
    assert gpu_bench.parse_args([]).steps_of_ours() == MIN_COMPILED_STEPS - 1
    assert gpu_bench.parse_args(["--rollout-compile", "off", "--trl-steps", "2"]).steps_of_ours() == 2


def test_the_profiled_window_sits_in_the_middle_of_a_rollout():
    assert window_of(511, 32) == (239, 32)  # the 1.5B's 512 tokens: calls 239..270
    assert window_of(7, 32) == (2, 3)
    with pytest.raises(ValueError, match="at least 2 decode calls"):
        window_of(1, 32)


def test_the_gpu_session_script_runs_these_commands_with_options_they_take():
    """tools/gpu_session.sh goes to a machine in one call: its default options must parse, its shell must too."""
    import re
    import subprocess

    from bench import preflight
    from saah_lib.paths import REPO_ROOT

    script = REPO_ROOT / "tools" / "gpu_session.sh"
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    text = script.read_text()
    bench_args = re.search(r"^GPU_BENCH_ARGS=\$\{GPU_BENCH_ARGS:-(.+)\}$", text, flags=re.MULTILINE).group(1).split()
    preflight_args = re.search(r"^PREFLIGHT_ARGS=\$\{PREFLIGHT_ARGS:-(.+)\}$", text, flags=re.MULTILINE).group(1).split()
    assert gpu_bench.parse_args([*bench_args, "--time-budget-s", "300", "--out", "x"]).profile == "qwen2.5-1.5b"
    assert preflight.parse_args([*preflight_args, "--out", "x"]).profile == "qwen2.5-3b"
    assert "-m bench.gpu $GPU_BENCH_ARGS" in text
    assert "-m bench.preflight $PREFLIGHT_ARGS" in text
