"""``make gpu-check`` on CPU: the tiny checks run, the JSON is written, and the verdict can say "not ready"."""

import json

import pytest
import torch

from bench import preflight

pytestmark = pytest.mark.slow

CHEAP = ["--prompts", "4", "--eval-problems", "2", "--step-steps", "1", "--completion-tokens", "8"]


def test_on_cpu_the_checks_run_and_the_verdict_is_ready(tiny_random_model_dir, tmp_path, capsys):
    torch._dynamo.reset()
    status = preflight.main([*CHEAP, "--model-dir", str(tiny_random_model_dir), "--out", str(tmp_path)])
    (path,) = tmp_path.glob("*-preflight.json")
    report = json.loads(path.read_text())
    assert status == 0 and report["verdict"] == "ready"
    smoke, agreement, step = (report["checks"][k] for k in ("smoke", "agreement", "step"))
    assert smoke["compile_health"]["compiled_graphs"] == 1 and smoke["compile_health"]["recompiles"] == 0
    assert smoke["static_state"]["released_bytes"] > 0 and smoke["static_state"]["held_after_release"] == 0
    assert agreement["identical_share"] == 1.0 and agreement["mean_abs_logp_gap"] < 1e-4
    assert step["steady_step_s"] > 0 and report["steady_step_seconds"] == step["steady_step_s"]
    assert step["targets"] is None  # the GPU targets are not applied on CPU
    assert "grid plan paper --bench-dir" in report["checks"]["grid"]["command"]
    # the tiny step time is no estimate of the paper's models: the grid says their step times are unmeasured
    assert "seconds per step unmeasured" in report["checks"]["grid"]["output"]
    assert "VERDICT: ready" in capsys.readouterr().out


@torch._dynamo.register_backend(name="saah_test_preflight_no_capture")
def failing_backend(gm, example_inputs):
    raise RuntimeError("CUDA graph capture is not supported by this driver (simulated)")


def test_a_compiled_path_that_falls_back_makes_the_verdict_not_ready(tiny_random_model_dir, tmp_path, monkeypatch,
                                                                     capsys):
    torch._dynamo.reset()
    monkeypatch.setattr(preflight, "step_check", lambda options: {"ok": True, "steady_step_s": None})
    with pytest.warns(RuntimeWarning, match="compiled decoding failed in (preflight smoke test|eval)") as warned:
        status = preflight.main([*CHEAP, "--model-dir", str(tiny_random_model_dir), "--out", str(tmp_path),
                                 "--compile-backend", "saah_test_preflight_no_capture"])
    assert {w.message.args[0].split(" (")[0] for w in warned} == {
        "compiled decoding failed in preflight smoke test", "compiled decoding failed in eval"}
    report = json.loads(next(tmp_path.glob("*-preflight.json")).read_text())
    assert status == 1 and report["verdict"] == "not ready: smoke, agreement failed"
    assert "not supported by this driver" in report["checks"]["smoke"]["compile_health"]["fallback"]["reason"]
    assert "VERDICT: not ready" in capsys.readouterr().out


@pytest.mark.parametrize("random_weights", [True, False])
def test_greedy_agreement_in_bf16_is_held_on_real_weights_only(tiny_random_model_dir, tmp_path, monkeypatch,
                                                               random_weights):
    """Random weights have near-flat logits whose greedy ties bf16 rounding splits either way: the identical share
    is recorded; the log-prob gap is held either way."""
    torch._dynamo.reset()
    options = preflight.parse_args([*CHEAP, "--out", str(tmp_path)])

    def bf16_model(options):
        model, tok = preflight.small_random_qwen2(options, seed=1)
        return model.to(torch.bfloat16), tok, "2-layer Qwen2 in bf16", random_weights

    monkeypatch.setattr(preflight, "agreement_model", bf16_model)
    check = preflight.agreement_check(options)
    assert check["dtype"] == "torch.bfloat16" and 0 <= check["identical_share"] <= 1
    assert check["identical_needed"] == (None if random_weights else preflight.AGREEMENT_NEEDED[torch.bfloat16])
    held = check["identical_needed"] is None or check["identical_share"] >= check["identical_needed"]
    assert check["ok"] == (held and check["mean_abs_logp_gap"] <= check["logp_gap_limit"])


# a complete measurement is replaced only by a complete one; scratch folders go (issue 39, items 3 and 12)


def test_an_interrupted_check_keeps_the_complete_report_and_its_own_apart(tiny_random_model_dir, tmp_path,
                                                                          monkeypatch):
    complete = tmp_path / f"{preflight.device_name().replace(' ', '_')}-preflight.json"
    complete.write_text(json.dumps({"verdict": "ready", "steady_step_seconds": 3.5}))
    before = complete.read_bytes()

    def interrupted(options):
        raise KeyboardInterrupt

    monkeypatch.setattr(preflight, "smoke_check", lambda options: {"ok": True})
    monkeypatch.setattr(preflight, "agreement_check", interrupted)
    with pytest.raises(KeyboardInterrupt):
        preflight.main([*CHEAP, "--model-dir", str(tiny_random_model_dir), "--out", str(tmp_path)])
    assert complete.read_bytes() == before
    partial = complete.with_name(complete.stem + ".partial.json")
    report = json.loads(partial.read_text())
    assert report["checks"] == {"smoke": {"ok": True}} and report["verdict"] is None
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([complete.name, partial.name])


def test_the_step_checks_scratch_folder_goes_when_it_completes(tiny_random_model_dir, tmp_path, monkeypatch):
    monkeypatch.setattr(preflight, "smoke_check", lambda options: {"ok": True})
    monkeypatch.setattr(preflight, "agreement_check", lambda options: {"ok": True})
    monkeypatch.setattr(preflight, "grid_projection", lambda *a, **k: {"ok": True, "command": "grid"})
    assert preflight.main([*CHEAP, "--model-dir", str(tiny_random_model_dir), "--out", str(tmp_path)]) == 0
    (path,) = tmp_path.iterdir()  # the complete report only: no partial file, no scratch folder
    assert path.name.endswith("-preflight.json") and json.loads(path.read_text())["verdict"] == "ready"


def test_an_out_that_is_a_file_is_refused_before_any_check(tmp_path, monkeypatch, capsys):
    def never(options):
        raise AssertionError("a check ran")

    monkeypatch.setattr(preflight, "smoke_check", never)
    out = tmp_path / "a-file"
    out.write_text("mine")
    with pytest.raises(SystemExit) as stop:
        preflight.main([*CHEAP, "--out", str(out)])
    assert stop.value.code == 2 and f"--out {out}: {out} is a file, not a folder" in capsys.readouterr().err
    assert out.read_text() == "mine"
