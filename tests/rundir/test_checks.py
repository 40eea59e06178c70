"""The meaning checks of saah_lab.rundir.reader on hand-made lines (expected values worked out by hand)."""

from pathlib import Path

from saah_lab.rundir.reader import check_evals, check_train_log, eval_line_problems, eval_schedule

LOG = Path("train_log.jsonl")


def _lines(*steps, **values):
    return [(i, {"step": s, **values}) for i, s in enumerate(steps, 1)]


def test_the_schedule_is_step_0_every_eval_every_steps_and_the_last():
    assert eval_schedule(60, 20) == {0, 20, 40, 60}
    assert eval_schedule(50, 20) == {0, 20, 40, 50}
    assert eval_schedule(3, 5) == {0, 3}


def test_a_gap_keeps_the_sequence_going_a_repeat_or_an_earlier_step_is_left_out():
    kept, messages = check_train_log(LOG, _lines(1, 2, 4, 3, 5, 5), steps=5)
    assert [rec["step"] for _, rec in kept] == [1, 2, 4, 5]
    assert messages == [
        "train_log.jsonl: line 3: step 4 where step 3 was expected (steps run 1, 2, 3, ... once each, in order)",
        "train_log.jsonl: line 4: step 3 where step 5 was expected (steps run 1, 2, 3, ... once each, in order)",
        ("train_log.jsonl: line 6: step 5 where step 6 was expected (steps run 1, 2, 3, ... once each, in order; "
         "step 5 is also on line 5)"),
    ]


def test_values_at_their_bounds_pass_and_just_beyond_fail():
    at_bounds = dict(reward_mean=7.5, reward_std=0.0, kl=0.0, neg_frac=1.0, entropy_norm=0.0, weight_mean=1e-30,
                     completion_length=96.0)
    assert check_train_log(LOG, _lines(1, **at_bounds), steps=1, max_completion_length=96)[1] == []
    beyond = dict(reward_mean=7.5001, kl=-1e-5, neg_frac=1.01, weight_mean=0.0, completion_length=96.5)
    (message,) = check_train_log(LOG, _lines(1, **beyond), steps=1, max_completion_length=96)[1]
    assert message == ("train_log.jsonl: line 1: reward_mean is 7.5001, above 7.5; kl is -1e-05, below 0; "
                       "weight_mean is 0.0, not above 0; neg_frac is 1.01, above 1; completion_length is 96.5, "
                       "above 96")


def test_an_evaluation_line_agrees_with_itself():
    # 84 of 200: p = 0.42, ci95 = 1.96 * sqrt(0.42 * 0.58 / 200) = 0.0684037...
    good = {"step": 60, "pass_at_1": 0.42, "ci95": 0.06840371919713138, "n": 200, "n_correct": 84}
    assert eval_line_problems(good) == [] and eval_line_problems({**good, "ci95": None}) == []
    assert eval_line_problems({**good, "ci95": 0.0685}) == [
        "ci95 is 0.0685, but 1.96 * sqrt(p * (1 - p) / n) = 0.06840371919713138"]
    assert eval_line_problems({**good, "n_correct": 85}) == ["pass_at_1 is 0.42, but n_correct / n = 85/200 = 0.425"]
    assert eval_line_problems({**good, "n": 0}) == ["n is 0, not a positive integer"]
    assert eval_line_problems({**good, "n_correct": True}) == ["n_correct is True, not an integer from 0 to n = 200"]


def test_evaluations_once_each_in_order_on_schedule_and_none_missing():
    ok = dict(pass_at_1=0.5, ci95=None, n=2, n_correct=1)
    kept, messages = check_evals(Path("eval.jsonl"), _lines(0, 40, 20, 40, 50, **ok), {0, 20, 40, 60}, trained_to=60)
    assert [rec["step"] for _, rec in kept] == [0, 40]
    assert messages == [
        "eval.jsonl: line 3: step 20 after step 40 (evaluations are in step order)",
        "eval.jsonl: line 4: step 40 evaluated again (line 2 has it); each step is evaluated once",
        "eval.jsonl: line 5: step 50 is not on the evaluation schedule (0, 20, 40, 60)",
        "eval.jsonl: no evaluation at step 60 (scheduled: 0, 20, 40, 60; training reached step 60)",
    ]
    # an interrupted run: scheduled steps after the last trained one are not missing yet
    assert check_evals(Path("eval.jsonl"), _lines(0, 20, **ok), {0, 20, 40, 60}, trained_to=39)[1] == []
