"""Tests of saah_lab.analysis.groups."""

import math

import pandas as pd

from saah_lab.analysis import groups as G


def test_model_labels():
    assert G.model_short("Qwen2.5-1.5B-Instruct") == "1.5B"
    assert G.model_short("tiny") == "tiny"
    assert G.slug("Qwen2.5-1.5B-Instruct") == "1p5b"
    assert G.model_order(["tiny", "Qwen2.5-1.5B-Instruct", "Qwen2.5-3B-Instruct"]) == \
        ["Qwen2.5-3B-Instruct", "Qwen2.5-1.5B-Instruct", "tiny"]
    assert math.isnan(G.model_size("tiny")) and G.model_size("Qwen2.5-1.5B") == 1.5e9


def test_method_label_and_main_alpha():
    assert G.method_label("ah", 0.5) == "AH-GRPO (α=0.5)"
    assert G.method_label("grpo", 0.0, show_grpo_alpha=False) == "GRPO"
    assert G.method_label("base", 0.5) == "Base (zero-shot)"
    assert G.is_main_alpha("sa", 5.9, {"sa": (0.5, 5.9)}) and not G.is_main_alpha("sa", 1.0, {"sa": 0.5})
    assert not G.is_main_alpha("sa", float("nan"), {"sa": 0.5})


def test_sort_groups_orders_model_method_alpha():
    df = pd.DataFrame({"model_label": ["tiny", "Qwen2.5-3B", "Qwen2.5-3B", "Qwen2.5-3B"],
                       "method": ["sa", "sa", "grpo", "sa"], "alpha": [0.5, 1.0, 0.0, 0.5]})
    out = G.sort_groups(df)
    assert list(zip(out.model_label, out.method, out.alpha)) == [
        ("Qwen2.5-3B", "grpo", 0.0), ("Qwen2.5-3B", "sa", 0.5), ("Qwen2.5-3B", "sa", 1.0), ("tiny", "sa", 0.5)]
