"""The mean weight on negative rollouts and the alpha that gives a chosen one: hand-worked cases."""

import math

import pytest
import torch

from saah_lab.studies.discount import group_advantages, mean_negative_weight, solve_alpha
from saah_lib.method.methods import ALPHA_RANGE


def test_group_advantages_as_trl_computes_them():
    # one group [1, 2, 3, 6]: mean 3, unbiased std sqrt(14/3)
    adv = group_advantages([1.0, 2.0, 3.0, 6.0, 5.0, 5.0, 5.0, 5.1], 4, std_threshold=0.15)
    std = math.sqrt(14 / 3)
    assert adv[:4].tolist() == pytest.approx([(r - 3) / (std + 1e-4) for r in (1, 2, 3, 6)])
    assert adv[4:].tolist() == [0.0] * 4  # std 0.05 < 0.15: zeroed like the trainer's flat groups
    assert group_advantages([5.0, 5.0, 5.0, 5.1], 4)[3] > 0  # without a threshold the group keeps its signs
    with pytest.raises(ValueError, match="groups of 4"):
        group_advantages([1.0, 2.0, 3.0], 4)


def test_mean_negative_weight_pools_tokens_of_negative_rollouts_only():
    # rollout 0 (negative): H = 1, 1 -> weights e^-a, e^-2a; rollout 1 (negative): H = 0.5 -> e^-a/2;
    # rollout 2 (positive) ignored
    a = 0.7
    h = [[1.0, 1.0], [0.5], [1.0, 1.0, 1.0]]
    got = mean_negative_weight(h, [-1.0, -0.5, 2.0], a)
    assert got == pytest.approx((math.exp(-a) + math.exp(-2 * a) + math.exp(-a / 2)) / 3, rel=1e-6)
    assert mean_negative_weight(h, [-1.0, -0.5, 2.0], 0.0) == 1.0
    assert math.isnan(mean_negative_weight(h, [1.0, 0.0, 2.0], a))
    with pytest.raises(ValueError, match="advantages for"):
        mean_negative_weight(h, [1.0], a)


def test_solve_alpha_inverts_the_mean_weight():
    # one negative rollout of two tokens at H = 1: mean (e^-a + e^-2a) / 2; at a = ln 2 that is (1/2 + 1/4)/2
    h, adv = [[1.0, 1.0], [1.0]], [-1.0, 1.0]
    solved = solve_alpha(h, adv, 0.375)
    assert solved["alpha"] == pytest.approx(math.log(2), abs=1e-5)
    assert solved["weight"] == pytest.approx(0.375, abs=1e-6)


def test_solve_alpha_says_why_it_cannot():
    with pytest.raises(ValueError, match="no rollout has a negative advantage"):
        solve_alpha([[1.0]], [1.0], 0.5)
    with pytest.raises(ValueError, match="widen ALPHA_RANGE"):
        solve_alpha([[0.001]], [-1.0], 0.5)  # tiny entropy: even the largest alpha barely discounts
    with pytest.raises(ValueError, match="in \\(0, 1\\)"):
        solve_alpha([[1.0]], [-1.0], 1.2)


def test_mean_weight_falls_with_alpha():
    torch.manual_seed(0)
    h = [torch.rand(int(n)).tolist() for n in torch.randint(1, 40, (30,))]
    adv = torch.randn(30).tolist()
    values = [mean_negative_weight(h, adv, a) for a in (0.0, 0.5, 1.0, 3.0, ALPHA_RANGE[1])]
    assert all(x > y for x, y in zip(values, values[1:]))
