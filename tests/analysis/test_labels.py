"""Tests of saah_lib.analysis.labels."""

import math

import numpy as np

from saah_lib.analysis import labels as L


def test_model_labels():
    assert L.model_short("Qwen2.5-1.5B-Instruct") == "1.5B"
    assert L.model_short("tiny") == "tiny"
    assert L.slug("Qwen2.5-1.5B-Instruct") == "1p5b"
    assert L.model_order(["tiny", "Qwen2.5-1.5B-Instruct", "Qwen2.5-3B-Instruct"]) == \
        ["Qwen2.5-3B-Instruct", "Qwen2.5-1.5B-Instruct", "tiny"]


def test_number_or_nan():
    assert L.number_or_nan("0.5") == 0.5 and L.number_or_nan(np.int64(3)) == 3.0
    assert all(math.isnan(L.number_or_nan(x)) for x in (None, "---", "", "abc", True))
