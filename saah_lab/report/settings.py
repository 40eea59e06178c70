"""The settings each committed study ran, beside the paper's: one table (``studies_settings``), so a reader sees at
a glance where the CPU studies differ from the paper.

Every cell of a study comes from its runs' ``config.json`` files (as read into its result set) and its warm-start
build records; the paper's column from the transcribed ``results/paper_reported`` files. A setting that differs
between a study's runs lists each value.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pandas as pd

from saah_lab.report.texts import say, tex_text
from saah_lib.jsonio import read_json
from saah_lib.paths import REAL_MODEL_RECORD
from saah_lib.rundir.layout import MATCHED_ALPHA_FILE, STUDY_PLAN_FILE, WARMSTART_RECORD_FILE

#: the studies' columns, in the report's order, with their headings
STUDY_HEADINGS = {"mini": "Mini", "extended": "Extended", "confirm": "Confirmatory", "real": "SmolLM2"}
ROWS = ("Model", "Warm starts", "Warm-up before RL", "Parameters trained", "Learning rate", "Steps per method",
        "Prompts $\\times$ completions", "New tokens (train, eval)", "Sampling temperature", "Entropy estimate",
        "Problems (train, eval)", "Seeds per arm", "Paper-matched $\\alpha$")
METHOD_ORDER = ("grpo", "ah", "sa")
RAGGED = r">{\raggedright\arraybackslash}"  # narrow paragraph columns read better unjustified


def _values(series: pd.Series, fmt=str) -> str:
    return ", ".join(fmt(v) for v in sorted(series.dropna().unique(), key=str)) or "---"


def _lr(x: float) -> str:
    mantissa, exponent = f"{x:.0e}".split("e")
    return f"${mantissa} \\times 10^{{{int(exponent)}}}$"


def _warm_records(root: Path) -> list[dict]:
    one = read_json(Path(root) / WARMSTART_RECORD_FILE, default=None)
    many = read_json(Path(root) / "warmstart_builds.json", default=None) or {}
    return list(many.values()) or ([one] if one else [])


def _warm_up(records: list[dict]) -> str:
    if not records:
        return "---"
    s = records[0]["settings"]
    return (f"{s['sft_steps']:,} SFT steps $\\times$ {s['batch_size']}, lr {_lr(s['learning_rate'])}; habits planted "
            f"in {s['shortcut_fraction']:.0%} / {s['loose_format_fraction']:.0%} of targets").replace("%", "\\%")


def _model(runs: pd.DataFrame, records: list[dict]) -> str:
    sizes = {r["parameters"] for r in records if "parameters" in r}
    vocab = {r.get("vocab_size") or r.get("discount", {}).get("top_k_error", {}).get("vocab_size") for r in records}
    size = ", ".join(f"{n / 1e6:.1f}M" for n in sorted(sizes))
    vocab = ", ".join(f"{v:,}" for v in sorted(v for v in vocab if v))
    name = "tiny" if (runs["profile"] == "tiny").all() else _values(runs["model_label"])
    if any("smollm2" in p for p in runs["profile"]):
        name = tex_text((read_json(REAL_MODEL_RECORD, default=None) or {}).get("model", name))
    return name + (f" ({size} parameters)" if size else "") + (f"; vocabulary {vocab}" if vocab else "")


def _ints(series: pd.Series) -> str:
    return _values(series, lambda v: f"{int(v):,}")


def study_column(runs: pd.DataFrame, root: Path) -> list[str]:
    """The cells of one study, in :data:`ROWS` order."""
    records = _warm_records(root)
    lora = runs[runs["use_lora"].astype(bool)]
    trained = ("all (full fine-tuning)" if lora.empty else
               f"LoRA r{int(lora['lora_r'].iloc[0])}, $\\alpha$ {int(lora['lora_alpha'].iloc[0])}, "
               f"dropout {lora['lora_dropout'].iloc[0]:g}")
    steps = runs.groupby("method")["max_steps"].agg(_ints).reindex(METHOD_ORDER).dropna()
    top_k = runs["entropy_top_k"]
    estimates = (["exact"] if top_k.isna().any() else []) + ([f"top-{_ints(top_k)}"] if top_k.notna().any() else [])
    seeds = runs.groupby(["model_label", "method", "alpha", top_k.fillna(0)])["seed"].nunique()
    return [
        _model(runs, records),
        str(runs["model_name"].nunique()),
        _warm_up(records),
        trained,
        _values(runs["learning_rate"], _lr),
        "; ".join(f"{m} {v}" for m, v in steps.items()),
        f"{_ints(runs['prompts_per_step'])} $\\times$ {_ints(runs['num_generations'])}, "
        f"{_ints(runs['gradient_accumulation_steps'])} accumulated",
        f"{_ints(runs['max_completion_length'])}, {_ints(runs['eval_max_new_tokens'])}",
        _values(runs["temperature"], lambda v: f"{v:g}"),
        "; ".join(estimates),
        f"{_values(runs['dataset'])} {_ints(runs['n_train'])}, {_ints(runs['n_eval'])}",
        str(seeds.min()) if seeds.min() == seeds.max() else f"{seeds.min()} to {seeds.max()}",
        _matched(root, records),
    ]


def _matched(root: Path, records: list[dict]) -> str:
    """The study's paper-matched alpha and what it was measured on, as its records say."""
    measured = read_json(Path(root) / MATCHED_ALPHA_FILE, default=None)
    if measured:
        return (f"{measured['alpha']:g}, from {measured['n_prompts']} prompts $\\times$ {measured['per_prompt']} "
                "rollouts")
    build = next((r for r in records if "paper_matched_alpha" in r), None)
    if build:
        return (f"{build['paper_matched_alpha']:g}, from {build['settings']['measure_prompts']} prompts $\\times$ "
                f"{build['discount']['rollouts'] // build['settings']['measure_prompts']} rollouts")
    plan = read_json(Path(root) / STUDY_PLAN_FILE, default=None) or {}
    alpha = plan.get("paper_matched_alpha")
    return "---" if alpha is None else f"{alpha:g}, fixed by the plan (not measured on these warm starts)"


def paper_column(reported_dir: Path) -> list[str]:
    """The paper's cells, from its transcribed hyperparameters, running-text settings and main table."""
    def csv(name):
        return pd.read_csv(Path(reported_dir) / name, comment="#")
    text = csv("text_setup.csv").set_index("key")["value"]
    hp = csv("tab_hparams.csv").set_index("hyperparameter")["value"]
    models = csv("tab_main.csv")["model_label"].unique()
    return [
        ", ".join(sorted(models)),
        "--- (the instruct models)",
        "none",
        f"LoRA r{text['lora_r']}, $\\alpha$ {text['lora_alpha']}, dropout {text['lora_dropout']}",
        _lr(float(hp["Learning rate"])),
        f"grpo {text['steps_grpo']}; ah {text['steps_ah']}; sa {text['steps_sa']}",
        f"{hp['Batch prompts per step']} $\\times$ {hp['Completions per prompt G']}, "
        f"{hp['Gradient accumulation steps']} accumulated",
        f"{hp['Max completion tokens']}, {text['eval_max_new_tokens']}",
        "not stated",
        f"top-{text['entropy_top_k']}",
        f"GSM8K {text['n_train']}, {text['n_eval']}",
        f"1 (seed {text['seed']})",
        "---",
    ]


def _merged(cells: list[str], width: float) -> str:
    """A row's study cells, each run of equal neighbours printed once across the columns it spans."""
    out = []
    for cell, same in itertools.groupby(cells):
        span = len(list(same))
        spanned = RAGGED + rf"p{{\dimexpr{span * width:.3f}\linewidth+{2 * span - 2}\tabcolsep\relax}}"
        out.append(cell if span == 1 else rf"\multicolumn{{{span}}}{{{spanned}}}{{{cell}}}")
    return " & ".join(out)


def settings_table(results: dict, roots: dict, reported_dir: Path | None) -> str:
    """The table: a row per setting, the paper's column then each committed study's that has runs; a value that
    neighbouring studies share is printed once across them."""
    columns = {"Paper (reported)": paper_column(reported_dir)} if reported_dir else {}
    columns |= {heading: study_column(results[prefix].runs, roots[prefix]) for prefix, heading in STUDY_HEADINGS.items()
                if prefix in results and not results[prefix].is_empty()}
    if not columns:
        return ""
    width = 0.7 / len(columns)
    paper = ["Paper (reported)"] if reported_dir else []
    body = [" & ".join(["Setting", *columns]) + r" \\", r"\midrule"]
    for i, row in enumerate(ROWS):  # the paper's cell is never merged with ours
        cells = [c[i] for c in columns.values()]
        body.append(" & ".join([row, *cells[:len(paper)], _merged(cells[len(paper):], width)]) + r" \\")
    return say("settings_table", columns=(RAGGED + f"p{{{width:.3f}\\linewidth}}") * len(columns),
               ragged=RAGGED, body="\n".join(body)) + "\n"
