"""The SmolLM2 step benchmark's plan and its committed measurement's shape (the measurement itself takes minutes
per configuration: `python -m bench.smollm2_step`)."""

import json

from bench import smollm2_step
from saah_lib.paths import REPO_ROOT


def test_the_bounded_steps_come_first_and_each_differs_from_its_pair_in_its_own_settings_only():
    names = [c["name"] for c in smollm2_step.configurations(baseline=True)]
    assert names == ["float32-bounded", "bfloat16-bounded", "bfloat16-static", "float32-before", "bfloat16-before"]
    assert [c["name"] for c in smollm2_step.configurations(baseline=False)] == names[:3]
    by_name = {c["name"]: c for c in smollm2_step.configurations(baseline=True)}
    bounded, before = by_name["float32-bounded"], by_name["float32-before"]
    assert {k for k in bounded if bounded[k] != before[k]} == {"name", "forward_batch_size", "malloc_mmap_threshold"}
    assert bounded["activation_checkpointing"] and before["forward_batch_size"] is None
    hf, static = by_name["bfloat16-bounded"], by_name["bfloat16-static"]
    assert {k for k in hf if hf[k] != static[k]} == {"name", "generation_backend"}
    assert (hf["generation_backend"], static["generation_backend"]) == ("hf", "auto")


def test_the_committed_measurement_has_every_configuration_with_its_figures():
    report = json.loads((REPO_ROOT / "results" / "bench" / "cpu-x86_64-smollm2-step.json").read_text())
    assert [c["name"] for c in report["configurations"]] == [
        c["name"] for c in smollm2_step.configurations(baseline=True)]
    for c in report["configurations"]:
        assert c["cpu_s_per_step"] > 0 and c["peak_rss_gib"] >= c["peak_rss_after_loading_gib"] > 0
        assert c["mean_completion_tokens"] == [256.0]  # every completion at full length, the worst case
