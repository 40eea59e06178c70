"""The paper-matched alpha, measured on a model folder: the rule's steps and the record it writes."""

import json

import pytest

from saah_lib.method.discount import group_advantages, mean_negative_weight
from saah_lib.rundir.layout import MATCHED_ALPHA_FILE
from saah_lib.studies.matched_alpha import (
    ALPHA_STEP,
    ensure_matched_alpha,
    measure_matched_alpha,
    read_matched_alpha,
    rounded_alpha,
    scored_rollouts,
)
from saah_lib.training.config import make_config


def test_rollouts_are_grouped_scored_and_reproducible(tiny_random_model_dir):
    a = scored_rollouts(str(tiny_random_model_dir), n_prompts=3, per_prompt=4, seed=5)
    b = scored_rollouts(str(tiny_random_model_dir), n_prompts=3, per_prompt=4, seed=5)
    assert a == b and len(a["rewards"]) == 12 == len(a["entropies"]) and a["group_size"] == 4
    assert all(len(h) == n and all(0 <= x <= 1 for x in h) for h, n in zip(a["entropies"], a["lengths"]))
    cfg = make_config("tiny")
    assert all(1 <= n <= cfg.trainer.max_completion_length for n in a["lengths"])
    assert a["reward_std_threshold"] == cfg.trainer.reward_std_threshold


def test_measurement_records_the_rule_and_lands_on_the_target(tiny_random_model_dir):
    target = {"target": 0.5, "file": "t.csv", "column": "weight_neg_mean", "steps": [1], "values": [0.5]}
    record = measure_matched_alpha(str(tiny_random_model_dir), n_prompts=6, target=target,
                                   other_warm_starts=[str(tiny_random_model_dir)])
    assert record["alpha"] == rounded_alpha(record["solved_alpha"])
    assert abs(record["alpha"] - record["solved_alpha"]) <= ALPHA_STEP / 2 + 1e-9
    # the solved alpha gives the target on the very rollouts it was solved on (recomputed here independently)
    roll = scored_rollouts(str(tiny_random_model_dir), n_prompts=6)
    adv = group_advantages(roll["rewards"], 4, roll["reward_std_threshold"])
    assert mean_negative_weight(roll["entropies"], adv, record["solved_alpha"]) == pytest.approx(0.5, abs=1e-4)
    assert record["weight_neg_mean"]["at_solved_alpha"] == pytest.approx(0.5, abs=1e-4)
    assert record["n_rollouts"] == 24 and 0 < record["n_negative"] < 24
    other = record["other_warm_starts"][next(iter(record["other_warm_starts"]))]
    assert other["weight_neg_mean"]["at_alpha"] == pytest.approx(record["weight_neg_mean"]["at_alpha"])
    json.dumps(record)  # JSON-ready


def test_rounding_and_reading_a_root(tmp_path, monkeypatch):
    assert rounded_alpha(5.8658) == 5.9 and rounded_alpha(5.84) == 5.8
    assert read_matched_alpha(tmp_path) is None
    (tmp_path / MATCHED_ALPHA_FILE).write_text(json.dumps({"alpha": "six"}))
    with pytest.raises(ValueError, match="numeric 'alpha'"):
        read_matched_alpha(tmp_path)
    (tmp_path / MATCHED_ALPHA_FILE).write_text(json.dumps({"alpha": 5.9}))
    calls = []
    monkeypatch.setattr("saah_lib.studies.matched_alpha.measure_matched_alpha", lambda **kw: calls.append(kw))
    assert ensure_matched_alpha(tmp_path) == 5.9 and calls == []  # recorded: not measured again

