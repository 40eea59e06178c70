"""The compile count of ``bench/measure_compiles.py`` on hand-made prompt lengths, against hand-counted shapes."""

import pytest

from bench import measure_compiles


@pytest.fixture(scope="module")
def measure():
    return measure_compiles


# batches whose longest prompts fall in buckets 128, 256, 128, 512, 256
BATCHES = [[100, 20], [200, 5], [64, 128], [300, 1], [129, 2]]


@pytest.mark.parametrize("rule,expected", [
    ("per_bucket", [[16, 128 + 8], [16, 256 + 8], [16, 512 + 8]]),  # one graph per bucket
    ("grown", [[16, 128 + 8], [16, 256 + 8], [16, 512 + 8]]),  # grows at each new longest bucket
    ("reserved", [[16, 320 + 8]]),  # the longest prompt (300) known up front: one graph, 300 rounded up to 64
])
def test_distinct_decode_shapes_per_rule(measure, rule, expected):
    assert measure.shapes(BATCHES, 16, 8, rule) == expected


def test_growing_only_compiles_again_when_a_longer_bucket_comes_first(measure):
    longest_first = [[300, 1], [100, 20], [200, 5]]
    assert measure.shapes(longest_first, 4, 8, "grown") == [[4, 520]]
    assert len(measure.shapes(longest_first, 4, 8, "per_bucket")) == 3


def test_a_run_draws_one_group_of_repeated_prompts_per_step_and_repeats_its_evaluations(measure):
    train = list(range(1, 801))  # prompt i has i tokens: the lengths name the prompts
    evaluation = list(range(1000, 1500))
    rollouts, evaluations = measure.run_batches(train, evaluation)
    run = measure.RUN
    assert len(rollouts) == run["steps"] and all(len(b) == 16 for b in rollouts)
    for batch in rollouts:  # 4 prompts, each 4 times in a row (TRL's RepeatSampler)
        assert [batch[i] for i in range(0, 16, 4)] == [batch[i + 1] for i in range(0, 16, 4)] == batch[3::4]
        assert len(set(batch)) == 4
    drawn = [length for batch in rollouts for length in batch[::4]]
    assert len(set(drawn)) == len(drawn)  # 180 x 4 < 800: no prompt drawn twice within the epoch
    per_evaluation = -(-500 // run["eval_batch_size"])
    assert len(evaluations) == per_evaluation * 7  # steps 0, 30, ..., 180
    assert evaluations[:per_evaluation] == evaluations[per_evaluation:2 * per_evaluation]
