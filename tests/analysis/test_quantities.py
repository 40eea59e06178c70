"""Tests of saah_lab.analysis.quantities."""

import math

import numpy as np
import pytest

from saah_lab.analysis import quantities as Q


def test_number_or_nan():
    assert Q.number_or_nan("0.5") == 0.5 and Q.number_or_nan(np.int64(3)) == 3.0
    assert all(math.isnan(Q.number_or_nan(x)) for x in (None, "---", "", "abc", True))


def test_one_rounding_per_quantity_the_papers():
    # the paper prints Pass@1 with 3 decimals, the training variance with 4 and the KL with 5
    assert Q.decimals("final") == Q.decimals("peak") == Q.decimals("pass_at_1") == 3
    assert Q.decimals("train_var") == 4
    assert Q.decimals("mean_kl") == Q.decimals("kl") == 5
    assert set(Q.QUANTITIES) <= set(Q.DECIMALS)


def test_an_unknown_quantity_has_no_rounding_of_its_own():
    with pytest.raises(KeyError, match="'reward_var'"):
        Q.decimals("reward_var")
