"""The run profile: clocks that add up to the wall time, restore what they wrap, and a file from a short run."""

import json
import time

import pytest
import torch

from bench import run_profile
from bench.run_profile import SectionClock


class Work:
    def outer(self, outer_s, inner_s):
        time.sleep(outer_s)
        return self.inner(inner_s)

    def inner(self, inner_s):
        time.sleep(inner_s)
        return "done"


class Child(Work):
    pass


def test_nested_clocks_count_exclusive_time_and_the_originals_come_back():
    clock = SectionClock()
    original_outer, original_inner = Work.__dict__["outer"], Work.__dict__["inner"]
    with clock.clocked([(Work, "outer", "outer"), (Work, "inner", lambda: "inner"), (Child, "inner", "child")]):
        start = time.perf_counter()
        assert Child().outer(0.05, 0.25) == "done"  # Child's inner (its own wrapper) runs inside Work's outer
        wall = time.perf_counter() - start
    assert Work.__dict__["outer"] is original_outer and Work.__dict__["inner"] is original_inner
    assert "inner" not in Child.__dict__  # an inherited method: the wrapper deleted, not left behind
    shares = clock.shares(wall)
    # bounds, not a tolerance, so that a loaded machine's late wake-ups cannot fail it: a sleep lasts at least
    # its time, and the outer clock holds its own 0.05 s but not the inner 0.25 s (exclusive time)
    assert 0.05 <= shares["outer"]["seconds"] < 0.25
    assert shares["child"]["seconds"] + shares.get("inner", {"seconds": 0})["seconds"] >= 0.25
    assert sum(entry["seconds"] for entry in shares.values()) == pytest.approx(wall, abs=0.005)


class Broken:
    def fail(self):
        raise ValueError("planted")


def test_a_clocked_method_that_raises_is_counted_and_restored_when_the_error_leaves_the_block():
    clock, original = SectionClock(), Broken.__dict__["fail"]
    with pytest.raises(ValueError, match="planted"), clock.clocked([(Broken, "fail", "failing")]):
        Broken().fail()
    assert Broken.__dict__["fail"] is original
    assert clock.calls["failing"] == 1 and clock._stack == []


@pytest.mark.slow
def test_a_short_run_and_build_write_one_file_whose_shares_add_up(tmp_path, capsys):
    assert run_profile.main(["--steps", "2", "--sft-steps", "4", "--out", str(tmp_path)]) == 0
    report = json.loads(next(tmp_path.glob("*-run-profile.json")).read_text())
    assert report["matmul_gflops_fp32_one_thread"] > 0
    run, build = report["run"], report["warm_start_build"]
    assert run["steps"] == 2 and build["sft_steps"] == 4
    assert (report["run_on_hf"]["generation_backend"], run["generation_backend"]) == ("hf", "auto")
    assert report["run_results_identical"] is True  # float32: the static engine samples what generate samples
    assert "run_dir" not in run and str(tmp_path) not in json.dumps(report["run_on_hf"])
    for part in (run, build):
        assert sum(e["share"] for e in part["categories"].values()) == pytest.approx(1.0, abs=0.01)
    for category in ("generation", "loss forward", "backward", "evaluations", "setup (data, model, trainer build)"):
        assert run["categories"][category]["calls"] >= 1
    assert run["categories"]["generation"]["floor_s"] > 0 and run["categories"]["backward"]["times_floor"] > 0
    assert build["categories"]["SFT forward"]["calls"] == 4
    assert "wrote" in capsys.readouterr().out


def test_an_sft_step_runs_the_shared_prefix_once_and_each_examples_rest():
    examples = [([1, 2, 3, 4, 5], 4), ([1, 2, 3, 9], 3)]  # the system turn 1 2 3 is shared
    assert run_profile.sft_step_tokens(examples, batch_size=2) == 3 + 2 * (2 + 1) / 2


# ---- a SmolLM2 step's profile (on the tiny random model: the same trainer, clocks and floor arithmetic)


def hand_case_problems(step_floor) -> list[str]:
    """Where ``step_floor`` differs from a case worked by hand, at 1 FLOP/s: weights body 100, head 10,
    LoRA 5; 2 layers of attention width 4; two sequences of 2 and 4 prompt tokens, then 3 completion tokens."""
    floors = step_floor(body=100, head=10, lora=5, layers=2, attention_width=4, prompt_tokens=[2, 4],
                        completion_tokens=3, gflops=1e-9)
    # tokens 5 + 7 = 12; attention 2 * 2 * 4 * (25 + 49) = 1184; the head over 2 * 3 completion tokens
    frozen = 2 * 100 * 12 + 2 * 10 * 6 + 1184  # 3704
    adapter = 2 * 5 * 12  # 120
    expected = {"generation": 3824, "scoring forwards (reference log-probs)": 3704, "loss forward": 3824,
                "backward": 5128}  # backward: frozen + attention again + adapter twice (input and weight grads)
    assert frozen + adapter == expected["generation"] and frozen + 1184 + 2 * adapter == expected["backward"]
    return [f"{k}: {floors.get(k)} != {v}" for k, v in expected.items() if floors.get(k) != pytest.approx(v)]


def test_the_step_floor_is_the_hand_computed_one_and_a_planted_wrong_floor_is_caught():
    assert hand_case_problems(run_profile.step_floor) == []

    def head_over_every_token(**kw):  # planted: the LM head over the prompt tokens too
        floors = run_profile.step_floor(**kw)
        extra = 2 * kw["head"] * sum(kw["prompt_tokens"]) / (kw["gflops"] * 1e9)
        return {k: v + extra for k, v in floors.items()}

    def backward_at_four_per_frozen_weight(**kw):  # planted: a backward that trains the frozen weights
        floors = run_profile.step_floor(**kw)
        return {**floors, "backward": floors["backward"] + floors["scoring forwards (reference log-probs)"]}

    assert len(hand_case_problems(head_over_every_token)) == 4
    assert hand_case_problems(backward_at_four_per_frozen_weight) == ["backward: 8832.0 != 5128"]


def config_floor_problems(profile: dict, config, gflops: float) -> list[str]:
    """Where the profile's shape or floors differ from what the model's config gives, worked out here apart
    from :func:`run_profile.model_shape` and :func:`run_profile.step_floor` (a Llama-style block, LoRA r16 on
    its seven projections, the LM head tied or not)."""
    h, i, layers = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    head_dim = h // config.num_attention_heads
    kv = config.num_key_value_heads * head_dim
    projections = [(h, h), (h, kv), (h, kv), (h, h), (h, i), (h, i), (i, h)]  # q k v o gate up down
    shape = {"body": layers * sum(a * b for a, b in projections), "head": config.vocab_size * h,
             "lora": layers * sum(16 * (a + b) for a, b in projections), "layers": layers, "attention_width": h}
    problems = [f"shape {k}: {profile['shape'][k]} != {v}" for k, v in shape.items() if profile["shape"][k] != v]
    c, steps = profile["mean_completion_tokens"][0], profile["steps"]
    sequences = [p + c for p in profile["prompt_tokens"] for _ in range(4)]
    frozen = (2 * shape["body"] * sum(sequences) + 2 * shape["head"] * c * len(sequences)
              + 2 * layers * h * sum(s * s for s in sequences))
    adapter = 2 * shape["lora"] * sum(sequences)
    flops = {"generation": frozen + adapter, "scoring forwards (reference log-probs)": frozen,
             "loss forward": frozen + adapter,
             "backward": frozen + 2 * layers * h * sum(s * s for s in sequences) + 2 * adapter}
    for category, f in flops.items():
        entry = profile["categories"][category]
        if entry["floor_s"] != pytest.approx(steps * f / (gflops * 1e9), rel=1e-3, abs=1e-3):
            problems.append(f"{category}: floor {entry['floor_s']}")
        if entry["times_floor"] != pytest.approx(entry["cpu_seconds"] / entry["floor_s"], abs=0.06):
            problems.append(f"{category}: times_floor {entry['times_floor']}")
    return problems


def test_a_step_on_the_tiny_model_is_clocked_by_kind_of_work_against_its_floor(tiny_random_model_dir,
                                                                                  gsm8k_dir, tmp_path):
    from saah_lib.models.loading import load_model_and_tokenizer

    def load(dtype):
        model, tokenizer = load_model_and_tokenizer(str(tiny_random_model_dir), dtype)
        return model.eval(), tokenizer

    partials, gflops = [], 2e-3  # a slow rate: floors of whole milliseconds, compared to the rounded figures
    profile = run_profile.profile_smollm2_step("float32", 1, gflops, str(gsm8k_dir), tmp_path,
                                               on_step=partials.append, load=load)
    assert profile["steps"] == 1 and len(partials) == 1 and profile["mean_completion_tokens"] == [256.0]
    kinds = ["generation", "scoring forwards (reference log-probs)", "loss forward", "backward", "optimizer step",
             "reward scoring", "TRL bookkeeping (batching, advantages, callbacks)"]
    assert all(profile["categories"][kind]["calls"] >= 1 for kind in kinds)
    assert sum(e["seconds"] for e in profile["categories"].values()) == pytest.approx(profile["wall_s"], abs=0.05)
    assert profile["unclocked_s"] == pytest.approx(0, abs=0.05)
    config = load("float32")[0].config
    assert config_floor_problems(profile, config, gflops) == []
    planted = json.loads(json.dumps(profile))
    planted["categories"]["backward"]["floor_s"] *= 2
    assert config_floor_problems(planted, config, gflops) == [
        f"backward: floor {planted['categories']['backward']['floor_s']}"]


def test_the_training_ops_of_a_step_leave_out_its_rollout(tiny_random_model_dir, gsm8k_dir, tmp_path):
    """The training phase's ops: LoRA dropout's draws and the backward's matmuls are in it, the static engine's
    decode is not (planted: a profiler started before the rollout lists it)."""
    from saah_lib.models.loading import load_model_and_tokenizer

    def load(dtype):
        model, tokenizer = load_model_and_tokenizer(str(tiny_random_model_dir), dtype)
        return model.eval(), tokenizer

    report = run_profile.smollm2_training_ops("bfloat16-static", str(gsm8k_dir), tmp_path, load=load, top=10_000)
    names = {entry["op"] for entry in report["ops"]}
    assert {"aten::log1p_", "aten::mm", "autograd::engine::evaluate_function: MmBackward0"} <= names  # log1p_: dropout
    assert "rollout.decode" not in names and "rollout.prefill" not in names
    assert sum(entry["share"] for entry in report["ops"]) == pytest.approx(1, abs=0.01)
    assert sum(entry["self_cpu_s"] for entry in report["ops"]) == pytest.approx(report["self_cpu_s"], abs=0.05)

    # planted: the same step with the profiler started before its rollout lists the decode
    trainer = run_profile.smollm2_step.build_trainer(
        {**run_profile.smollm2_configuration("bfloat16-static"), "scratch": str(tmp_path)}, steps=1, threads=1,
        data_dir=str(gsm8k_dir), load=load)
    with torch.profiler.profile() as whole:
        trainer.train()
    assert "rollout.decode" in {e.key for e in whole.key_averages()}


def test_smollm2_profiles_are_asked_for_by_configuration_or_dtype_and_steps(capsys):
    assert run_profile.parse_args(["--no-mini", "--smollm2", "bfloat16:2", "--smollm2", "float32:1",
                                   "--smollm2", "bfloat16-static:1"]).smollm2 == [
        ("bfloat16", 2), ("float32", 1), ("bfloat16-static", 1)]
    assert run_profile.smollm2_configuration("bfloat16")["name"] == "bfloat16-bounded"
    assert run_profile.smollm2_configuration("bfloat16-static")["generation_backend"] == "auto"
    static, fast = (run_profile.smollm2_configuration(n) for n in ("bfloat16-static", "bfloat16-fast"))
    assert {k for k in static if static[k] != fast[k]} == {"name", "activation_checkpointing"}
    assert static["activation_checkpointing"] and not fast["activation_checkpointing"]
    assert run_profile.parse_args(["--no-mini", "--smollm2", "bfloat16-fast:1", "--before", "HEAD"]).before == "HEAD"
    for wrong in (["--smollm2", "bfloat16"], ["--smollm2", "float16:1"], ["--smollm2", "float32:0"], ["--no-mini"],
                  ["--smollm2", "bfloat16-before:1"]):
        with pytest.raises(SystemExit):
            run_profile.parse_args(wrong)
    assert run_profile.file_stem("Intel(R) Xeon(R) Processor @ 2.50GHz") == "Intel_Xeon_Processor_2.50GHz"
    assert run_profile.file_stem("AMD EPYC") == "AMD_EPYC"


def test_the_committed_smollm2_profile_adds_up_and_sets_each_kind_against_its_floor():
    from saah_lib.paths import REPO_ROOT

    report = json.loads((REPO_ROOT / "results" / "bench" / "Intel_Xeon_Processor_2.50GHz-run-profile.json").read_text())
    smollm2 = report["smollm2"]
    assert smollm2["omp_num_threads"] == "1" and smollm2["cpu_bf16_instructions"] == {"avx512_bf16": False,
                                                                                      "amx_bf16": False}
    assert [p["configuration"] for p in smollm2["profiles"]][0] == "bfloat16-bounded"
    for profile in smollm2["profiles"]:
        categories = profile["categories"]
        assert profile["steps"] == len(profile["per_step"]) >= 1 and profile["unclocked_s"] < 1
        assert profile["mean_completion_tokens"] == [256.0] * profile["steps"]
        assert sum(e["seconds"] for e in categories.values()) == pytest.approx(profile["wall_s"], abs=0.5)
        assert sum(e["cpu_seconds"] for e in categories.values()) == pytest.approx(profile["cpu_s"], abs=0.5)
        floors = [e["floor_s"] for e in categories.values() if "floor_s" in e]
        assert len(floors) == 4 and sum(floors) == pytest.approx(profile["floor_s_per_step"] * profile["steps"],
                                                                 abs=0.05)
        for entry in categories.values():
            if "floor_s" in entry:
                assert entry["times_floor"] == pytest.approx(entry["cpu_seconds"] / entry["floor_s"], abs=0.06)


def test_the_committed_amd_profile_has_the_mini_run_on_both_backends_with_the_same_results():
    from saah_lib.paths import REPO_ROOT

    report = json.loads((REPO_ROOT / "results" / "bench" / "AMD_EPYC-run-profile.json").read_text())
    before, after = report["run_on_hf"], report["run"]
    assert (before["generation_backend"], after["generation_backend"]) == ("hf", "auto")
    assert report["run_results_identical"] is True  # what docs/reproducing.md says of the two runs
    for run in (before, after):
        assert run["steps"] == 60 and sum(e["share"] for e in run["categories"].values()) == pytest.approx(1, abs=0.01)
    assert [p["configuration"] for p in report["smollm2"]["profiles"]] == ["bfloat16-bounded", "bfloat16-static"]
    ops = report["smollm2"]["training_ops"]  # the op table of docs/reproducing.md
    seconds = [entry["self_cpu_s"] for entry in ops["ops"]]
    assert ops["configuration"] == "bfloat16-static" and seconds == sorted(seconds, reverse=True)
    assert sum(seconds) <= ops["self_cpu_s"] and ops["ops"][0]["op"] == "aten::mm"
    assert all(e["share"] == pytest.approx(e["self_cpu_s"] / ops["self_cpu_s"], abs=1e-3) for e in ops["ops"])


def test_main_profiles_each_smollm2_configuration_at_its_dtypes_rate_after_its_before_revision(tmp_path, monkeypatch,
                                                                                             capsys):
    rates = {torch.float32: 10.0, torch.bfloat16: 20.0}
    monkeypatch.setattr(run_profile, "matmul_gflops", lambda dtype=torch.float32, **_: rates[dtype])
    monkeypatch.setattr(run_profile, "profile_at_revision", lambda rev, name, steps, data: {"at": rev, "name": name})
    part = {"wall_s": 1.0, "categories": {"backward": {"seconds": 0.5, "cpu_seconds": 0.5, "share": 0.5}}}

    def profiled(name, steps, rate, data_dir, scratch, on_step):
        on_step({"configuration": name, "partial": True})
        return {**part, "configuration": name, "steps": steps, "rate": rate}

    monkeypatch.setattr(run_profile, "profile_smollm2_step", profiled)
    assert run_profile.main(["--no-mini", "--smollm2", "float32:2", "--smollm2", "bfloat16-static:1",
                             "--before", "abc1234", "--out", str(tmp_path)]) == 0
    [written] = tmp_path.glob("*-run-profile.json")
    smollm2 = json.loads(written.read_text())["smollm2"]
    assert [(p["configuration"], p["steps"], p["rate"]) for p in smollm2["profiles"]] == [
        ("float32", 2, 10.0), ("bfloat16-static", 1, 20.0)]
    assert smollm2["before"] == {"revision": "abc1234", "profiles": [{"at": "abc1234", "name": "float32"},
                                                                     {"at": "abc1234", "name": "bfloat16-static"}]}
    out = capsys.readouterr().out
    assert "SmolLM2 float32, 2 steps: 1.0 s" in out and "backward: 0.50 s" in out
