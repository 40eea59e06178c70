"""The report's booktabs LaTeX tables: a result set's (:data:`RESULT_TABLES`), the paired evidence's and the
top-K measurement's, each a complete ``table`` float written as ``<prefix>_<name>.tex``.

Cells use the paper's number formats (:mod:`saah_lab.report.latex`); a (model, method, alpha) with several seeds
shows ``mean +- sample std`` across them and its seed count.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from saah_lab.analysis.groups import METHOD_LABELS, method_label, model_order, model_short, slug
from saah_lab.analysis.health import RULES
from saah_lab.analysis.quantities import decimals, number_or_nan
from saah_lab.analysis.resultset import ResultSet
from saah_lab.analysis.significance import MAX_UNITS_NEEDED, POWER, established
from saah_lab.report.latex import (
    FLAG_MARK,
    MISSING,
    bold_cell,
    fmt,
    fmt_alpha,
    fmt_pm,
    pm_cell,
    stacked,
    table_float,
    tex_escape,
    tex_path,
)
from saah_lab.report.texts import left_out_warning, say, tex_text
from saah_lib.method.methods import MAIN_ALPHA
from saah_lib.paths import repo_relative

DAMAGED_MARK = r"$^{\S}$"
FALLBACK_MARK = r"$^{\circ}$"  # the run's compiled rollout fell back to hf (models.compile_health)


# --- cells ------------------------------------------------------------------------------------------------------------

def _truth(v) -> bool | None:
    """A flag cell as a bool, None where it is missing (e.g. base rows have no ``damaged``)."""
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else bool(v)


def _source_phrase(rs: ResultSet) -> str:
    if rs.source == "paper_reported":
        return "Numbers reported in the paper (transcribed, not re-measured)"
    root = "our results" if rs.root is None else tex_path(repo_relative(rs.root))
    return f"Our runs (\\texttt{{{root}}})"


def _method_cell(method: str, alpha) -> str:
    return method_label(method, alpha, alpha_text=fmt_alpha, alpha_symbol="$\\alpha$")


def _match(df: pd.DataFrame, model, method, alpha) -> pd.DataFrame:
    if df is None or df.empty:
        return df
    a = number_or_nan(alpha)
    am = pd.to_numeric(df["alpha"], errors="coerce")
    alpha_ok = am.isna() if math.isnan(a) else np.isclose(am.fillna(-9e9), a)
    return df[(df["model_label"] == model) & (df["method"] == method) & alpha_ok]


def _multi_seed(df: pd.DataFrame) -> bool:
    return df is not None and len(df) and "n_seeds" in df and (pd.to_numeric(df["n_seeds"], errors="coerce").fillna(1) > 1).any()


def _seeds_cell(r: pd.Series, col: str, dp: int = decimals("pass_at_1"), sci: bool = False) -> str:
    """``r[col]``, ``mean +- std`` where the row has several seeds."""
    s = fmt(r.get(col), dp, sci=sci)
    std = number_or_nan(r.get(col + "_std"))
    if s != MISSING and not math.isnan(std) and number_or_nan(r.get("n_seeds")) > 1:
        s = pm_cell(s, fmt(std, dp, sci=sci))
    return s


# --- the tables -------------------------------------------------------------------------------------------------------

def main_rows(rs: ResultSet) -> pd.DataFrame:
    """Rows of the summary table: per model, Base then the main-comparison runs, then any other method's.

    A (model, method) without a run at its main alpha falls back to all of
    its alphas, so that no run silently disappears from the summary.
    """
    s = rs.summary
    if s is None or s.empty:
        return pd.DataFrame()
    models = {m: i for i, m in enumerate(model_order(s["model_label"]))}
    methods = {m: i for i, m in enumerate(("base", "grpo", "ah", "sa"))}
    main = s["in_main"].astype(bool) if "in_main" in s else pd.Series(True, index=s.index)
    has_main = main.groupby([s["model_label"], s["method"]], dropna=False).transform("any").astype(bool)
    keep = s[s["model_label"].isin(models) & (main | ~has_main | ~s["method"].isin(methods))]
    order = keep["model_label"].map(models) * (len(methods) + 1) + keep["method"].map(methods).fillna(len(methods))
    return keep.iloc[np.argsort(order.to_numpy(), kind="stable")].reset_index(drop=True)


MAIN_HEAD = ["Model", "Method", r"$\alpha$", "Steps", r"Pass@1$_{\mathrm{final}}$ $\uparrow$",
             r"Pass@1$_{\mathrm{peak}}$ $\uparrow$", r"Train\,Var $\downarrow$", r"Mean\,KL"]
INCOMPLETE_MARK = r"$^{\ast}$"


def table_main(rs: ResultSet, prefix: str = "reported") -> str:
    """Summary table: final and peak Pass@1 (+-95% CI), train variance, mean KL."""
    rows = main_rows(rs)
    if rows.empty:
        return ""
    multi = _multi_seed(rows)
    blocks = [rows[rows["model_label"] == model] for model in model_order(rows["model_label"])]
    body = [cells for block in blocks for cells in _main_block(block, multi, rs.source)]
    starts = np.cumsum([len(block) for block in blocks[:-1]])
    cells = pd.DataFrame(body, columns=MAIN_HEAD + (["Seeds"] if multi else []))
    return table_float(cells, "llcccccc" + ("c" if multi else ""), _main_caption(rs, rows, multi), f"{prefix}:main",
                       _main_notes(rs, pd.concat(blocks)), before={int(i): r"\midrule" for i in starts})


def _main_block(block: pd.DataFrame, multi: bool, source: str) -> list[list[str]]:
    """One model's rows; the model's name spans them."""
    best = _column_best(block[block["method"] != "base"])
    model = rf"\multirow{{{len(block)}}}{{*}}{{{tex_escape(model_short(block['model_label'].iloc[0]))}}}"
    return [[model if i == 0 else ""] + _main_cells(r, best, multi, source)
            for i, (_, r) in enumerate(block.iterrows())]


def _column_best(trained: pd.DataFrame) -> dict:
    """Per column, the value printed bold: the best of two or more trained rows (none if all tie)."""
    best = {}
    if len(trained) >= 2:
        for col, fn in (("final_pass_at_1", np.nanmax), ("peak_pass_at_1", np.nanmax), ("train_var", np.nanmin)):
            vals = pd.to_numeric(trained[col], errors="coerce")
            if vals.notna().sum() >= 2 and vals.dropna().nunique() > 1:
                best[col] = fn(vals)
    return best


def _main_cells(r: pd.Series, best: dict, multi: bool, source: str) -> list[str]:
    """A summary row's cells after the model: ``mean +- std`` across seeds where it has several, else the CI."""
    n = number_or_nan(r.get("n_seeds"))
    n = 1 if math.isnan(n) else int(n)
    base = r["method"] == "base"

    def is_best(col):
        return col in best and not base and np.isclose(number_or_nan(r[col]), best[col])

    def pm(col, errcol):
        err = r.get(col + "_std") if n > 1 else r.get(errcol)
        return fmt_pm(r.get(col), err, decimals("pass_at_1"), bold=is_best(col))

    method = METHOD_LABELS.get(r["method"], tex_escape(r["method"]))
    if base and source != "paper_reported":
        method = "Base (step 0)" if str(r.get("base_kind", "")) == "step0" else "Base (before RL)"
    cells = [method, MISSING if base else fmt_alpha(r["alpha"]), MISSING if base else fmt(r.get("steps"), 0)
             + _main_marks(r), pm("final_pass_at_1", "final_ci95"), pm("peak_pass_at_1", "peak_ci95")]
    cells += [bold_cell(_seeds_cell(r, col, decimals(col), sci=True), is_best(col)) for col in ("train_var", "mean_kl")]
    return cells + ([MISSING if base else str(n)] if multi else [])


def _marks(r: pd.Series, flagged: bool, fallback: bool = False) -> str:
    """A trained row's marks: a run incomplete, with damaged logs, flagged by the health rules, fallen back to hf."""
    return "".join(mark for mark, on in ((INCOMPLETE_MARK, _truth(r.get("complete")) is False),
                                         (DAMAGED_MARK, _truth(r.get("damaged")) is True), (FLAG_MARK, flagged),
                                         (FALLBACK_MARK, fallback)) if on)


def _main_marks(r: pd.Series) -> str:
    return "" if r["method"] == "base" else _marks(r, number_or_nan(r.get("n_flagged")) > 0)


def _main_notes(rs: ResultSet, rows: pd.DataFrame) -> str:
    marks = "".join(_main_marks(r) for _, r in rows.iterrows())
    flagged = [r for _, r in rows.iterrows() if FLAG_MARK in _main_marks(r)]
    return say("main_notes", incomplete=INCOMPLETE_MARK if INCOMPLETE_MARK in marks else "",
               damaged=DAMAGED_MARK if DAMAGED_MARK in marks else "",
               flagged=_without_flagged_note(rs, flagged) if flagged else "")


def _main_caption(rs: ResultSet, rows: pd.DataFrame, multi: bool) -> str:
    if rs.source == "paper_reported":
        return say("caption_main", source=_source_phrase(rs), base=_reported_base_text(rs), multi=int(multi))
    b = rs.baselines
    names = [] if b is None or b.empty else [tex_escape(n) for n, k in zip(b["name"], b["kind"]) if k == "baseline"]
    kinds = set(rows.loc[rows["method"] == "base", "base_kind"].astype(str)) if "base_kind" in rows else set()
    base = say("main_base", baseline=int("baseline" in kinds), step0=int("step0" in kinds),
               names=", ".join(rf"\texttt{{{n}}}" for n in names))
    return say("caption_main", source=_source_phrase(rs), base=base, multi=int(multi))


def _reported_base_text(rs: ResultSet) -> str:
    """How the paper's Base rows relate to its raw zero-shot evaluation, from ``baselines.csv`` of
    ``results/paper_reported`` ("" when it records no raw value)."""
    b = rs.baselines
    if b is None or b.empty or "raw_pass_at_1" not in b:
        return ""
    b = b[pd.to_numeric(b["raw_pass_at_1"], errors="coerce").notna()]
    if b.empty:
        return ""
    rows = [b[b["model_label"] == m].iloc[0] for m in reversed(model_order(b["model_label"]))]  # smallest first
    adjustments = {float(r["adjustment_pp"]) for r in rows}
    raw = ", ".join(f"{fmt(r['raw_pass_at_1'], decimals('pass_at_1'))} for {tex_escape(model_short(r['model_label']))}"
                    for r in rows)
    return say("reported_base", by=f"{adjustments.pop():g}" if len(adjustments) == 1 else "", raw=raw)


def _without_flagged_note(rs: ResultSet, flagged_rows: list) -> str:
    """For each row with a flagged run: its values over the other seeds (the flagged runs stay in the row)."""
    flagged_ids = set(rs.flagged_runs()["run_id"])
    parts = []
    for r in flagged_rows:
        group = _match(rs.runs, r["model_label"], r["method"], r["alpha"])
        is_flagged = group["run_id"].isin(flagged_ids)
        healthy = group[~is_flagged]
        names = ", ".join(tex_escape(x) for x in group.loc[is_flagged, "run_id"])
        label = f"{tex_escape(model_short(r['model_label']))} {_method_cell(r['method'], r['alpha'])}"
        if healthy.empty:
            parts.append(f"{label}: every run flagged ({names})")
            continue
        values = ", ".join(f"{name} {fmt(pd.to_numeric(healthy[col], errors='coerce').mean(), dp, sci=sci)}"
                           for name, col, dp, sci in (("final", "final_pass_at_1", decimals("pass_at_1"), False),
                                                      ("peak", "peak_pass_at_1", decimals("pass_at_1"), False),
                                                      ("Train Var", "train_var", decimals("train_var"), True),
                                                      ("Mean KL", "mean_kl", decimals("mean_kl"), True)))
        parts.append(f"{label} without {names}: {values} ({len(healthy)} seed{'s' if len(healthy) != 1 else ''})")
    return say("note_flagged_rows", mark=FLAG_MARK, rows="; ".join(parts))


def _spread(length: int, n: int) -> np.ndarray:
    """Indices of ``n`` of ``length`` items evenly spaced, first and last kept (all of them up to ``n``)."""
    return np.unique(np.round(np.linspace(0, length - 1, min(n, length))).astype(int))


def _step_head(first: str, title: str, steps: list[int], after: tuple = ()) -> pd.MultiIndex:
    """Two head rows: ``title`` over the steps, the other labels spanning both rows."""
    return pd.MultiIndex.from_tuples([(first, "")] + [(title, str(s)) for s in steps] + [(a, "") for a in after])


def _step_cells(ck: pd.DataFrame, model, method: str, alpha, steps: list[int], with_std: bool = True) -> list[str]:
    """Pass@1 of one (model, method, alpha) at each of ``steps``, ``mean +- std`` where seeds give a std."""
    g = _match(ck, model, method, alpha)
    vals = dict(zip(g["step"].astype(int), g["pass_at_1"]))
    stds = dict(zip(g["step"].astype(int), g.get("pass_at_1_std", pd.Series(np.nan, index=g.index))))
    cells = []
    for s in steps:
        c = fmt(vals.get(s), decimals("pass_at_1"))
        if with_std and c != MISSING and not math.isnan(number_or_nan(stds.get(s))):
            c = pm_cell(c, fmt(stds.get(s), decimals("pass_at_1")))
        cells.append(c)
    return cells


def table_checkpoints(rs: ResultSet, model, prefix: str = "reported") -> str:
    """Pass@1 of one model's main-comparison runs at their evaluated steps (evenly thinned to 10, last kept)."""
    ck = rs.checkpoints
    if ck is None or ck.empty:
        return ""
    sub = ck[(ck["model_label"] == model) & ck["in_main"].astype(bool)]
    all_steps = sorted({int(s) for s in sub["step"].dropna()})
    steps = [all_steps[i] for i in _spread(len(all_steps), 10)]
    if not steps:
        return ""
    multi = _multi_seed(sub)
    body = [[_method_cell(method, a)] + _step_cells(sub, model, method, a, steps, multi)
            for method in ("grpo", "ah", "sa")
            for a in sorted(pd.to_numeric(sub.loc[sub.method == method, "alpha"]).unique())]
    cells = pd.DataFrame(body, columns=_step_head(r"\multirow{2}{*}{Method}", "Pass@1 by Checkpoint Step", steps))
    cap = say("caption_checkpoints", source=_source_phrase(rs), model=tex_escape(model),
              reported=int(rs.source == "paper_reported"), multi=int(multi), n_steps=len(all_steps), shown=len(steps))
    return table_float(cells, "l" + "c" * len(steps), cap, f"{prefix}:checkpoints:{slug(model)}")


def table_ablation(rs: ResultSet, prefix: str = "reported") -> str:
    """Alpha ablation: per-step Pass@1, peak and final per alpha, plus the SA-AH-GRPO reference."""
    ab = rs.ablation
    if ab is None or ab.empty:
        return ""
    model, ck = ab["model_label"].iloc[0], rs.checkpoints
    core, sa = ab[ab["method"] != "sa"], ab[ab["method"] == "sa"]
    steps = sorted({int(s) for _, r in core.iterrows()
                    for s in _match(ck, model, r["method"], r["alpha"])["step"].dropna()})
    steps = [steps[i] for i in _spread(len(steps), 8)]
    phantom = bool((pd.to_numeric(ab["alpha"], errors="coerce") < 0).any())
    body, notes = _ablation_rows(ck, model, core, steps, phantom)
    sa_body, sa_notes = _ablation_sa_rows(ck, model, sa, steps)
    head = _step_head(r"\multirow{2}{*}{$\alpha$}", "Pass@1 by Step", steps,
                      (r"\multirow{2}{*}{Peak $\uparrow$}", r"\multirow{2}{*}{Final $\uparrow$}"))
    cap = say("caption_ablation", source=_source_phrase(rs), model=tex_escape(model), sweep=int(len(sa) > 1),
              multi=int(bool(_multi_seed(ab))), reported=int(rs.source == "paper_reported"))
    return table_float(pd.DataFrame(body + sa_body, columns=head), "l" + "c" * len(steps) + "cc", cap,
                       f"{prefix}:ablation", " ".join(dict.fromkeys(notes + sa_notes)),
                       before={len(body): r"\midrule"} if sa_body else None)


def _ablation_rows(ck: pd.DataFrame, model, core: pd.DataFrame, steps: list[int],
                   phantom: bool) -> tuple[list, list[str]]:
    """The AH-GRPO/GRPO rows by alpha, the highest peak bold, and their notes."""
    peaks = pd.to_numeric(core["peak_pass_at_1"], errors="coerce")
    best_peak = peaks.max() if peaks.dropna().nunique() > 1 else float("nan")
    rows, notes = [], []
    for _, r in core.iterrows():
        label = fmt_alpha(r["alpha"], min_dp=2, phantom=phantom) + (" (GRPO)" if r["method"] == "grpo" else "")
        peak = bold_cell(_seeds_cell(r, "peak_pass_at_1"), np.isclose(number_or_nan(r["peak_pass_at_1"]), best_peak)
                         and core["peak_pass_at_1"].notna().sum() >= 2)
        if bool(r.get("partial")):
            peak += r"$^{\dagger}$"
            notes.append(r"$^{\dagger}$ " + (tex_escape(r["note"]) if r.get("note") else
                                            "run incomplete; its peak covers only the steps it reached."))
        rows.append([label, *_step_cells(ck, model, r["method"], r["alpha"], steps), peak,
                     _seeds_cell(r, "final_pass_at_1")])
    return rows, notes


def _ablation_sa_rows(ck: pd.DataFrame, model, sa: pd.DataFrame, steps: list[int]) -> tuple[list, list[str]]:
    """The SA-AH-GRPO reference rows; a run longer than the step columns puts its peak and final on a line below."""
    rows, notes = [], []
    for _, r in sa.iterrows():
        name = f"SA-AH-GRPO {fmt_alpha(r['alpha'], min_dp=2)}"
        steps_run = number_or_nan(r.get("steps"))
        extra = "" if not bool(r.get("partial")) else INCOMPLETE_MARK
        ends = [_seeds_cell(r, "peak_pass_at_1") + extra, _seeds_cell(r, "final_pass_at_1")]
        cells = _step_cells(ck, model, r["method"], r["alpha"], steps)
        if not math.isnan(steps_run) and steps_run > max(steps, default=0):
            rows += [[name, *cells, MISSING, MISSING],
                     [rf"\quad ({int(steps_run)} steps)", *[MISSING] * len(steps), *ends]]
        else:
            rows.append([name, *cells, *ends])
        if extra:
            notes.append(r"$^{\ast}$ SA-AH-GRPO run incomplete.")
    return rows, notes


def table_diagnostics_per_group(rs: ResultSet, prefix: str = "reported") -> str:
    """One diagnostics table per SA-AH-GRPO (model, alpha) group, in one file."""
    d = rs.diagnostics
    if d is None or d.empty:
        return ""
    sa = d[d["method"] == "sa"]
    return "\n".join(filter(None, (table_diagnostics(rs, model, "sa", a, prefix)
                                   for model in model_order(d["model_label"])
                                   for a in sorted(pd.to_numeric(sa.loc[sa["model_label"] == model, "alpha"],
                                                                 errors="coerce").dropna().unique()))))


def table_diagnostics(rs: ResultSet, model, method: str, alpha, prefix: str) -> str:
    """Per-step training diagnostics of one (model, method, alpha) at 14 evenly spaced logged steps."""
    sub = _match(rs.diagnostics, model, method, alpha).sort_values("step")
    sub = sub.iloc[_spread(len(sub), 14)]
    head = ["Step", "Pass@1", r"$\bar{r}$", "KL", r"$\bar{H}$", r"$\bar{w}$", r"$\bar{w}_-$", r"$f_-$", "len"]
    body, dagger = [], False
    for _, r in sub.iterrows():
        wneg = fmt(r.get("weight_neg_mean"), decimals("weight"))
        if str(r.get("weight_neg_note", "")) == "all_positive":
            wneg += r"$^{\dagger}$"
            dagger = True
        rew = fmt_pm(r.get("reward_mean"), r.get("reward_std"), decimals("reward"))
        body.append([fmt(r["step"], 0), fmt(r.get("pass_at_1"), decimals("pass_at_1")), rew,
                     fmt(r.get("kl"), decimals("kl"), sci=True), fmt(r.get("entropy_norm"), decimals("entropy")),
                     fmt(r.get("weight_mean"), decimals("weight")), wneg, fmt(r.get("neg_frac"), decimals("neg_frac")),
                     fmt(r.get("completion_length"), decimals("completion_length"))])
    name = METHOD_LABELS.get(method, method)
    n = pd.to_numeric(sub.get("n_seeds", pd.Series([1])), errors="coerce").max()
    cap = say("caption_diagnostics", source=_source_phrase(rs), method=name, alpha=fmt_alpha(alpha),
              model=tex_escape(model), n_seeds=0 if math.isnan(n) else int(n))
    notes = say("note_all_positive", reported=int(rs.source == "paper_reported")) if dagger else ""
    label = f"{prefix}:diag:{method}:{slug(model)}"
    if not np.isclose(number_or_nan(alpha), MAIN_ALPHA):  # one table per alpha: each needs its own label
        label += f":a{number_or_nan(alpha):g}"
    return table_float(pd.DataFrame(body, columns=head), "rcccccccc", cap, label, notes)


def table_hparams(rs: ResultSet, prefix: str = "reported") -> str:
    """The paper's hyperparameter table (only for the reported source)."""
    hp = rs.hparams
    if hp is None or len(hp) == 0:
        return ""
    cells = pd.DataFrame({"Hyperparameter": hp["hyperparameter_latex"], "Value": hp["value_latex"]})
    return table_float(cells, "lc", say("caption_hparams", source=_source_phrase(rs)), f"{prefix}:hparams")


def table_setup(rs: ResultSet, prefix: str = "ours") -> str:
    """The runs that were found, with their configuration and how far they got."""
    runs = rs.runs
    if runs is None or runs.empty:
        return ""
    head = ["Run", "Model", "Method", r"$\alpha$", "Seed", "Steps", "Eval every", "Logged", "Evals",
            r"Pass@1$_{\mathrm{final}}$"]
    body, order = [], {m: i for i, m in enumerate(model_order(runs["model_label"]))}
    for _, r in runs.assign(_o=runs["model_label"].map(order)).sort_values(["_o", "method", "alpha", "seed"],
                                                                           kind="stable").iterrows():
        marks = _marks(r, _truth(r.get("flagged")) is True, isinstance(r.get("compile_fallback"), str))
        body.append([r"\texttt{" + tex_escape(r["run_id"]) + "}" + marks, tex_escape(r.get("model_label")),
                     METHOD_LABELS.get(r.get("method"), tex_escape(r.get("method"))), fmt_alpha(r.get("alpha")),
                     fmt(r.get("seed"), 0), fmt(r.get("max_steps"), 0), fmt(r.get("eval_every"), 0),
                     str(int(r.get("n_steps_logged", 0))), str(int(r.get("n_evals", 0))),
                     fmt(r.get("final_pass_at_1"), decimals("pass_at_1"))])
    return (table_float(pd.DataFrame(body, columns=head), "lllcccccc c", say("caption_setup", source=_source_phrase(rs)),
                        f"{prefix}:setup",
                        fontsize=r"\scriptsize") + fallback_note(runs))


def _footnote(text: str) -> str:
    """A note set under a table float's body, in small type."""
    return r"\par\smallskip{\footnotesize " + text + r"\par}" + "\n"


def fallback_note(runs) -> str:
    """Names the runs whose compiled rollout fell back to ``hf`` (the same policy and settings, sampled at
    generate's speed), with why."""
    fell = [r for _, r in runs.iterrows() if isinstance(r.get("compile_fallback"), str)] if "compile_fallback" in runs else []
    if not fell:
        return ""
    listed = "; ".join(f"\\texttt{{{tex_escape(r['run_id'])}}}: {tex_escape(r['compile_fallback'])}" for r in fell)
    return _footnote(say("note_fallback", mark=FALLBACK_MARK, k=len(fell), n=len(runs), runs=listed))


# --- the paired evidence and the top-K measurement --------------------------------------------------------------------

def fmt_p_cell(p: float) -> str:
    if p is None or math.isnan(p):
        return MISSING
    return "$<0.001$" if p < 0.001 else f"{p:.3f}"


def _signed(x: float, dp: int, mark: str = "") -> str:
    """A difference in math mode with its sign (``+`` for positive), optionally marked (``^{*}``)."""
    if x is not None and abs(x) < 1e-12:  # differences that cancel exactly, up to float rounding
        x = 0.0
    s = fmt(x, dp, sci=dp >= 4)
    if s == MISSING:
        return s
    return f"${'+' if x > 0 else ''}{s.strip('$')}{mark}$"


def _row_cells(r: dict, level: float) -> list[str]:
    """The compact table's cells: the difference, its interval and adjusted p, the MDE and the seed pairs."""
    dp = decimals(r["key"])
    ci = MISSING if math.isnan(r["ci_low"]) else f"[{_signed(r['ci_low'], dp)}, {_signed(r['ci_high'], dp)}]"
    mark = r"^{*}" if established(r["p_adjusted"], r["ci_low"], r["ci_high"], level) else ""
    return [_quantity_cell(r), fmt(r["a_value"], dp, sci=dp >= 4), fmt(r["b_value"], dp, sci=dp >= 4),
            _signed(r["diff"], dp, mark), ci, fmt_p_cell(r["p_adjusted"]), fmt(r["mde"], dp, sci=dp >= 4),
            f"{r['n_units']} ({r['units_a_ahead']}/{r['units_b_ahead']})"]


def _quantity_cell(r: dict) -> str:
    quantity = tex_text(r["quantity"]) + (FLAG_MARK if r["flagged_units"] else "")
    return quantity + (r" (= final)" if r["same_as_final"] else "")


def _detail_cells(r: dict) -> list[str]:
    """The details table's cells: the unadjusted tests, the seeds a smaller difference would need, McNemar."""
    needed = r["units_needed"] or {}
    needed_cell = " / ".join(r"$>$" + f"{MAX_UNITS_NEEDED:,}" if needed[k] is None else str(needed[k])
                             for k in needed) if needed else MISSING
    return [_quantity_cell(r), fmt_p_cell(r["p_value"]), fmt_p_cell(r["p_signflip"]), needed_cell,
            fmt_p_cell(r["mcnemar_p"])]


def _blocks(rows: list[dict]) -> list[tuple[str, list[dict]]]:
    """The primary comparison's rows first (one block), then each pair's other rows, each with its title."""
    primary = [r for r in rows if r["primary"]]
    blocks = [("Primary (fixed in the study plan): ", primary)] if primary else []
    blocks += [("Secondary: " if primary else "", [r for r in rows if (r["a"], r["b"]) == pair and not r["primary"]])
               for pair in dict.fromkeys((r["a"], r["b"]) for r in rows)]
    return [(rf"{kind}\textbf{{{tex_text(block[0]['a'])}}} vs \textbf{{{tex_text(block[0]['b'])}}}", block)
            for kind, block in blocks if block]


def _flag_notes(rows: list[dict]) -> str:
    lines = []
    for r in rows:
        w = r.get("without_flagged")
        if not r["flagged_units"] or not w:
            continue
        dp = decimals(r["key"])
        what = f"{tex_text(r['a'])} vs {tex_text(r['b'])}, {tex_text(r['quantity'])}"
        if w.get("untestable"):
            lines.append(f"{what}: fewer than two seed pairs left")
            continue
        lines.append(f"{what}: {_signed(w['diff'], dp)} [{_signed(w['ci_low'], dp)}, {_signed(w['ci_high'], dp)}], "
                     f"$p$ {fmt_p_cell(w['p_value'])}, {w['n_units']} seed pairs")
    units = tex_escape(", ".join(sorted({u for r in rows for u in r["flagged_units"]})))
    return say("note_flagged_pairs", mark=FLAG_MARK, units=units, rows="; ".join(lines)) if lines else ""


def testable(summary: dict | None) -> bool:
    """Whether any comparison rests on two or more seed pairs: without one, every test is n/a and the sentence
    (:func:`saah_lab.report.texts.sentence_file`) says all there is."""
    return any(r["n_units"] >= 2 for r in (summary or {}).get("rows", []))


def _paired_body(rows: list[dict], head: list[str], cells) -> dict:
    """:func:`table_float`'s cells of the blocks (:func:`_blocks`) and each block's rule and title line."""
    body, before = [], {}
    for title, block in _blocks(rows):
        before[len(body)] = (r"\midrule" + "\n" if body else "") + rf"\multicolumn{{{len(head)}}}{{l}}{{{title}}} \\"
        body += [cells(r) for r in block]
    return {"cells": pd.DataFrame(body, columns=head), "before": before}


def table_paired(rows: list[dict], summary: dict, prefix: str = "mini", name: str = "paired",
                 what: str = "Paired comparisons at matched seeds") -> str:
    """Booktabs table: the primary comparison first, then each pair; per row the difference over seed pairs, its
    interval and adjusted p, and the MDE (the other statistics: :func:`table_paired_details`)."""
    if not rows:
        return ""
    head = ["Quantity", "A", "B", r"$\Delta$ (A$-$B)", "CI", r"$p_{\mathrm{adj}}$", "MDE",
            stacked("Seeds", "(A/B ahead)")]
    caption = say("caption_paired", what=what, root=tex_path(summary["root"]), n_ws=max(r["n_warm_starts"] for r in rows),
                  level=f"{summary['level']:g}", power=f"{100 * POWER:g}", percent=f"{100 * summary['level']:g}")
    warning = left_out_warning(summary)
    if warning:
        caption += r" \textbf{Warning:} " + tex_escape(warning)
    return table_float(colspec="lccccccc", caption=caption, label=f"{prefix}:{name}", notes=_flag_notes(rows),
                       **_paired_body(rows, head, lambda r: _row_cells(r, summary["level"])))


def table_paired_details(rows: list[dict], summary: dict, prefix: str = "mini") -> str:
    """The paired comparisons' other statistics, for the appendix: the unadjusted and sign-flip tests, the seed
    pairs a smaller difference would need, and McNemar's test over problems."""
    if not rows:
        return ""
    head = ["Quantity", "$p$", r"$p_{\mathrm{flip}}$", stacked("Seeds for", "0.03 / 0.02"),
            stacked("McNemar", "$p$")]
    caption = say("caption_paired_details", prefix=prefix, root=tex_path(summary["root"]), n_ws=max(r["n_warm_starts"] for r in rows),
                  rule=tex_escape(summary["family_rule"]))
    return table_float(colspec="lcccc", caption=caption, label=f"{prefix}:paired_details",
                       **_paired_body(rows, head, _detail_cells))


def table_topk(result: dict, prefix: str = "mini", alpha: str = f"{MAIN_ALPHA:g}") -> str:
    """Booktabs table: per K, entropy error, top-K mass and horizon-weight error at one alpha."""
    rows = [r for r in result.get("per_k", []) if not r["exact"]]
    if not rows or alpha not in rows[0]["weights"]:
        return ""
    head = [r"$K$", r"$K/V$", r"mean $|\Delta H|$", r"max $|\Delta H|$", r"mean signed $\Delta H$",
            "tail mass mean (max)", r"mean rel.\ $\Delta w$", r"max rel.\ $\Delta w$",
            r"last-token rel.\ $\Delta w$ (mean / max)"]

    def e(x):
        return MISSING if x is None or (isinstance(x, float) and math.isnan(x)) else _sci(x)

    body = [[str(r["k"]), f"{100 * r['frac_vocab']:.1f}\\%", e(r["entropy_abs_err"]["mean"]),
             e(r["entropy_abs_err"]["max"]), e(r["entropy_signed_err_mean"]),
             f"{e(1 - r['topk_mass']['mean'])} ({e(1 - r['topk_mass']['min'])})", e(w["rel_err"]["mean"]),
             e(w["rel_err"]["max"]), f"{e(w['last_token_rel_err']['mean'])} / {e(w['last_token_rel_err']['max'])}"]
            for r in rows for w in [r["weights"][alpha]]]
    caption = say("caption_topk", n_rollouts=result["n_rollouts"], n_tokens=f"{result['n_tokens']:,}",
                  n_prompts=result["n_prompts"], per_prompt=result["per_prompt"],
                  temperature=f"{result['temperature']:g}", model=tex_escape(result["model"]),
                  vocab=result["vocab_size"], mean=f"{result['exact_entropy_norm']['mean']:.4f}",
                  max=f"{result['exact_entropy_norm']['max']:.4f}", alpha=alpha)
    return table_float(pd.DataFrame(body, columns=head), "rrccccccc", caption, f"{prefix}:topk")


def _sci(x: float) -> str:
    """Four decimals, or scientific notation outside [0.001, 1000); math mode for negatives."""
    if x == 0:
        return "0"
    if 1e-3 <= abs(x) < 1e3:
        text = f"{x:.4f}" if abs(x) < 1 else f"{x:.2f}"
        return f"${text}$" if x < 0 else text
    mant, exp = f"{x:.1e}".split("e")
    return f"${mant}\\times10^{{{int(exp)}}}$"


# --- writing ----------------------------------------------------------------------------------------------------------

#: The tables of a result set, by name: ``<tables>/<prefix>_<name>.tex`` (checkpoints: one table per model).
RESULT_TABLES = {
    "main": table_main,
    "checkpoints": lambda rs, prefix: "\n".join(filter(None, (table_checkpoints(rs, m, prefix) for m in rs.models))),
    "ablation": table_ablation,
    "diagnostics": table_diagnostics_per_group,
    "hparams": table_hparams,
    "setup": table_setup,
}


def with_notes(rs: ResultSet, table: str, name: str = "main", prefix: str | None = None) -> str:
    """A result set's table with the notes every one of its tables carries: problems tolerated, runs with
    another entropy estimate, run health ("" stays ""; no table).  The main table names the runs; the others
    (``name``, given a ``prefix``) point to it, so that the report does not print the same list under each."""
    pointer = None if name == "main" or prefix is None else rf"Table~\ref{{{prefix}:main}}"
    note = problems_note(rs) + other_entropy_note(rs, pointer) + health_note(rs, pointer)
    return table.replace("\\end{table}", note + "\\end{table}") if table and note else table


def other_entropy_note(rs: ResultSet, pointer: str | None = None) -> str:
    """Names the runs left out because they used another entropy estimate, or counts them and points to the table
    that names them (``pointer``) ("" when none)."""
    names = (rs.notes or {}).get("other_entropy_runs") or []
    if not names:
        return ""
    return _footnote(say("note_other_entropy", n=len(names), pointer=pointer or "", runs=tex_escape(", ".join(names))))


def health_note(rs: ResultSet, pointer: str | None = None) -> str:
    """Names the runs the health rules flag (:mod:`saah_lab.analysis.health`), which stay in every number, or
    counts them and points to the table that names them (``pointer``) ("" when none is flagged or the source has
    no runs)."""
    flagged = rs.flagged_runs()
    if flagged.empty:
        return ""
    if pointer:
        return _footnote(say("note_health_pointer", mark=FLAG_MARK, k=len(flagged), n=len(rs.runs), pointer=pointer))
    listed = "; ".join(f"\\texttt{{{tex_escape(r.run_id)}}} ({tex_escape(r.health)})" for r in flagged.itertuples())
    runs = rs.runs[rs.runs["method"] != "grpo"]
    paired = not runs.empty and runs.groupby(["model_label", "method", "alpha"])["seed"].nunique().max() >= 2
    return _footnote(say("note_health", mark=FLAG_MARK, rules="; ".join(tex_escape(v) for v in RULES.values()), k=len(flagged),
                         n=rs.runs_counted(), runs=listed, paired=int(bool(paired))))


def problems_note(rs: ResultSet) -> str:
    """A visible warning for tables built from results read with problems tolerated ("" when there were none)."""
    if not rs.warnings:
        return ""
    flagged = [] if rs.runs is None or rs.runs.empty else [
        tex_escape(r["run_id"]) for _, r in rs.runs.iterrows() if _truth(r.get("damaged")) is True or _truth(r.get("complete")) is False]
    excluded = [tex_escape(Path(w.split(": excluded (")[0]).name) for w in rs.excluded]
    return (r"\par\smallskip{\footnotesize" + say("note_problems", k=len(flagged), flagged=", ".join(flagged),
                                                   n=len(excluded), excluded=", ".join(excluded)) + "\\par}\n")
