"""The settings table: each study's cells from its runs' configs, the paper's from its transcribed files."""

import pandas as pd

from saah_lab.report.settings import ROWS, _merged, paper_column, study_column
from saah_lib.paths import PAPER_REPORTED


def _runs(**changed) -> pd.DataFrame:
    run = {"profile": "p", "model_label": "M", "model_name": "m", "method": "sa", "alpha": 0.5, "seed": 0,
           "max_steps": 60, "use_lora": False, "lora_r": 16, "lora_alpha": 32, "lora_dropout": 0.05,
           "learning_rate": 2e-4, "prompts_per_step": 4, "num_generations": 4, "gradient_accumulation_steps": 2,
           "max_completion_length": 96, "eval_max_new_tokens": 96, "temperature": 1.0, "entropy_top_k": None,
           "dataset": "synthetic", "n_train": 800, "n_eval": 200}
    rows = [run, {**run, "seed": 1}, {**run, "method": "grpo", "alpha": 0.0}, {**run, **changed, "seed": 2}]
    return pd.DataFrame(rows)


def test_a_study_column_says_what_its_runs_ran(tmp_path):
    cells = dict(zip(ROWS, study_column(_runs(learning_rate=3e-5, entropy_top_k=500, temperature=0.7), tmp_path)))
    assert cells["Learning rate"] == "$2 \\times 10^{-4}$, $3 \\times 10^{-5}$"  # a setting that differs lists both
    assert cells["Entropy estimate"] == "exact; top-500"
    assert cells["Sampling temperature"] == "0.7, 1"
    assert cells["Parameters trained"] == "all (full fine-tuning)"
    assert cells["Steps per method"] == "grpo 60; sa 60"
    assert cells["Seeds per arm"] == "1 to 2"  # sa at the exact entropy: seeds 0, 1; its top-500 run and grpo: one
    assert cells["Warm-up before RL"] == "---" and cells["Paper-matched $\\alpha$"] == "---"
    lora = dict(zip(ROWS, study_column(_runs(use_lora=True).assign(use_lora=True), tmp_path)))
    assert lora["Parameters trained"] == "LoRA r16, $\\alpha$ 32, dropout 0.05"


def test_the_papers_column_comes_from_its_transcribed_settings():
    cells = dict(zip(ROWS, paper_column(PAPER_REPORTED)))
    assert cells["Learning rate"] == "$5 \\times 10^{-6}$"
    assert cells["Steps per method"] == "grpo 150; ah 150; sa 180"
    assert cells["Problems (train, eval)"] == "GSM8K 800, 500" and cells["Entropy estimate"] == "top-500"


def test_equal_neighbours_are_printed_once_across_their_columns():
    assert _merged(["a", "b"], 0.1) == "a & b"
    assert _merged(["a", "a", "b"], 0.1) == \
        "\\multicolumn{2}{>{\\raggedright\\arraybackslash}p{\\dimexpr0.200\\linewidth+2\\tabcolsep\\relax}}{a} & b"
