"""The report's figures (matplotlib Agg, no pyplot state): those of a :class:`~saah_lab.analysis.resultset.ResultSet`
(:data:`RESULT_FIGURES`, beside :func:`plot_warm_start_effect`), of the paired evidence (:func:`plot_paired`) and of
the top-K measurement (:func:`plot_topk`); :mod:`saah_lab.report.render` saves each as ``<figures>/<prefix>_<name>``
``.pdf`` and ``.png``. Panels that are compared share their y axis; PDFs embed TrueType fonts (``pdf.fonttype`` 42),
which journals ask for and which stay searchable.

Bands: a single run uses its logged ``ci95`` (the paper's numbers: the binomial formula with N=500). Several seeds:
the line is the mean across seeds, the band +-1 sample s.d. across seeds. A figure without data is not drawn (its
function returns None), never drawn from invented values.
"""
from __future__ import annotations

import io
import logging
import math
import os
import secrets
import textwrap
from pathlib import Path
from typing import Sequence

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator
from scipy import stats

from saah_lab.analysis.groups import METHOD_LABELS, is_main_alpha, method_label, model_order, model_short
from saah_lab.analysis.quantities import CHECKPOINTS, number_or_nan
from saah_lab.analysis.reported import logged_range
from saah_lab.analysis.resultset import ResultSet
from saah_lab.analysis.significance import LEVEL, POWER, established
from saah_lab.analysis.summaries import token_weights
from saah_lib.jsonio import read_jsonl
from saah_lib.method.methods import MAIN_ALPHA, METHODS
from saah_lib.paths import PAPER_REPORTED
from saah_lib.rundir import layout
from saah_lib.rundir.folder import RunDir
from saah_lib.tasks.synthetic import ANSWER_KINDS, count_answer_kinds

log = logging.getLogger(__name__)

METHOD_COLORS = {"grpo": "#1f77b4", "ah": "#d62728", "sa": "#2ca02c", "base": "0.35"}
METHOD_LINESTYLES = {"grpo": "-", "ah": "--", "sa": "-."}  # where curves lie on top of each other
SPARSE = 25  # draw markers when a curve has at most this many points
REWARD_WINDOW = 5  # steps in the reward's moving average
INLINE_DPI = 100  # PNG shown in a notebook: sharp on screen, a few tens of KB
HEALTH_NAMED = 3  # flagged runs named in a figure's title (the tables name them all)
SYMLOG_FROM = 2.0  # alphas beyond this (the CPU studies' paper-matched one) put the alpha axis on a symlog scale
PANELS_PER_ROW = 3  # the most panels of one kind side by side; more wrap into further rows


class InlineFigure(Figure):
    """A Figure that Jupyter displays as a PNG (``_repr_png_``) without pyplot or an inline backend."""

    def _repr_png_(self) -> bytes:
        buffer = io.BytesIO()
        self.savefig(buffer, format="png", dpi=INLINE_DPI, bbox_inches="tight")
        return buffer.getvalue()


def save_figure(fig: Figure, path: Path, dpi: int = 150) -> None:
    """Save as PDF (TrueType fonts, no creation date: the same figure gives the same bytes) or PNG, through a hidden
    temporary file renamed over ``path``: a killed save leaves no half-written figure (the next render removes it)."""
    path = Path(path)
    tmp = path.parent / f".{path.name}.{secrets.token_hex(6)}.tmp"
    try:  # TrueType (Type 42) fonts in PDFs instead of matplotlib's default Type 3
        with matplotlib.rc_context({"pdf.fonttype": 42, "ps.fonttype": 42}):
            fig.savefig(tmp, format=path.suffix.lstrip("."), dpi=dpi, bbox_inches="tight", pad_inches=0.05,
                        metadata={"CreationDate": None} if path.suffix == ".pdf" else None)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _fig(ncols: int = 1, nrows: int = 1, w: float = 4.6, h: float = 3.2, size: tuple | None = None,
         **kw) -> tuple[Figure, np.ndarray]:
    # at least 6.4 inches wide, so the shared legend and titles fit with a single panel
    fig = InlineFigure(figsize=size or (max(w * ncols, 6.4), h * nrows), layout="constrained")
    FigureCanvasAgg(fig)  # render with Agg regardless of the session's pyplot backend
    return fig, fig.subplots(nrows, ncols, squeeze=False, **kw)


def _wrapped(n: int, rows: int = 1, **kw) -> tuple[Figure, np.ndarray, int]:
    """A figure, its axes and columns for ``n`` warm starts, each ``rows`` panels tall, wrapped (spare ones hidden)."""
    ncols = min(n, PANELS_PER_ROW)
    fig, axes = _fig(ncols=ncols, nrows=rows * math.ceil(n / ncols), **kw)
    for i in range(n, axes.shape[0] // rows * ncols):
        for row in range(rows):
            axes[rows * (i // ncols) + row, i % ncols].set_visible(False)
    return fig, axes, ncols


def _steps_axis(ax, grid: bool = True) -> None:
    """x axis of training steps: integer ticks, label, at least two steps wide (so call it after drawing: one
    evaluated step would get an axis a fraction of a step wide); y axis without offset notation; a light grid."""
    ax.set_xlabel("training step")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.ticklabel_format(axis="y", useOffset=False)
    lo, hi = ax.dataLim.intervalx
    if np.isfinite(lo) and np.isfinite(hi) and hi - lo < 2:
        ax.set_xlim(max(0.0, lo - 1) if lo >= 0 else lo - 1, hi + 1)
    if grid:
        ax.grid(alpha=0.3)


def _numbers(rows: pd.DataFrame, column: str, default: float = np.nan) -> np.ndarray:
    """A column as floats (what is no number: NaN); ``default`` throughout where the column is missing."""
    values = rows[column] if column in rows else pd.Series(default, index=rows.index, dtype=float)
    return pd.to_numeric(values, errors="coerce").to_numpy(float)


def _groups(df: pd.DataFrame, model, main: dict | None = None) -> list[tuple[str, float, pd.DataFrame]]:
    """``(method, alpha, rows by step)`` of one model's main comparison, in method then alpha order: the rows
    ``in_main`` where the frame has that column; of a method with an alpha that ``main`` names, only those."""
    if df is None or df.empty:
        return []
    sub = df[df["model_label"] == model]
    if "in_main" in sub:
        sub = sub[sub["in_main"].astype(bool)]
    out = []
    for method in METHODS:
        m = sub[sub["method"] == method]
        alphas = sorted(pd.to_numeric(m["alpha"], errors="coerce").dropna().unique())
        if main and any(is_main_alpha(method, a, main) for a in alphas):
            alphas = [a for a in alphas if is_main_alpha(method, a, main)]
        out += [(method, a, m[np.isclose(pd.to_numeric(m["alpha"], errors="coerce"), a)].sort_values("step"))
                for a in alphas]
    return out


def _curve_groups(rs: ResultSet, model) -> list[tuple[str, float, pd.DataFrame]]:
    return _groups(rs.curves, model, (rs.notes or {}).get("main_alphas"))


def _line_kw(method: str, alpha: float, g: pd.DataFrame, ls: str, **kw) -> dict:
    """A method's curve: its colour, markers where it is sparse, and a label that says how many seeds it averages
    (`` (n=3)``; nothing for the paper's single runs)."""
    n = pd.Series(_numbers(g, "n_seeds")).max()
    return dict(color=METHOD_COLORS.get(method, "k"), ls=ls, marker="o" if len(g) <= SPARSE else None,
                label=method_label(method, alpha) + (f" (n={int(n)})" if pd.notna(n) else ""), **kw)


def _band(g: pd.DataFrame) -> tuple[np.ndarray, str]:
    """Half-width of the band and what it is."""
    n = np.nan_to_num(_numbers(g, "n_seeds", 1), nan=1)
    std, ci = _numbers(g, "pass_at_1_std"), _numbers(g, "ci95")
    if (n > 1).any() and not np.isnan(std).all():
        return np.where(n > 1, std, ci), "±1 s.d. across seeds"
    return ci, "95% CI"


#: The legend entry of each kind of band (:func:`_band`), so that a panel mixing both says which is which.
BAND_LEGEND = {"±1 s.d. across seeds": "shaded: ±1 s.d. across seeds (lines with n>1)",
               "95% CI": "shaded: 95% binomial CI (single runs)"}


def _draw_baseline(ax, rs: ResultSet, model) -> None:
    """The dashed baseline, its value written on this panel (the legend entry is shared by every panel)."""
    b = rs.baseline_for(model) or {}
    p = number_or_nan(b.get("pass_at_1"))
    if math.isnan(p):
        return
    text = ("zero-shot baseline" if rs.source == "paper_reported" else
            f"baseline {b.get('name')}" if b.get("kind") == "baseline" else "step-0 evaluation")
    ax.axhline(p, ls="--", color=METHOD_COLORS["base"], lw=1.1, label=text)
    ax.annotate(f"{p:.3f}", xy=(1, p), xycoords=("axes fraction", "data"), xytext=(-3, 2),
                textcoords="offset points", ha="right", va="bottom", fontsize=7, color=METHOD_COLORS["base"])


def _trajectory_panel(ax, rs: ResultSet, model, peak_in_label: bool = False) -> None:
    """One model's Pass@1 curves, their bands and its baseline, titled with the kinds of band."""
    band_kinds, drawn = set(), set()
    for method, a, g in _groups(rs.checkpoints, model):
        x, y = g["step"].to_numpy(float), g["pass_at_1"].to_numpy(float)
        half, kind = _band(g)
        band_kinds.add(kind)
        kw = _line_kw(method, a, g, _alpha_style(rs, method, a), ms=4, lw=1.5)
        if peak_in_label and np.isfinite(y).any():
            i = int(np.nanargmax(y))
            kw["label"] += f": peak {y[i]:.3f} at step {int(x[i])}, final {y[~np.isnan(y)][-1]:.3f}"
        ax.plot(x, y, **kw)
        ok = ~np.isnan(half)
        if ok.any():
            ax.fill_between(x[ok], (y - half)[ok], (y + half)[ok], color=kw["color"], alpha=0.15, lw=0)
            drawn.add(kind)
    for kind in sorted(drawn):  # one grey legend entry per kind of band (empty fills: no limits moved)
        ax.fill_between([], [], [], color="0.75", lw=0, label=BAND_LEGEND.get(kind, f"shaded: {kind}"))
    _draw_baseline(ax, rs, model)
    _steps_axis(ax)
    ax.set_ylabel("Pass@1")
    ax.set_title(f"{model_short(model)}  (bands: {', '.join(sorted(band_kinds))})", fontsize=9)


def plot_pass_at_1(rs: ResultSet) -> Figure | None:
    """Pass@1 trajectories: one panel per model, every main-comparison method with its band; the baseline dashed,
    its value written on its own panel. The panels share one y axis, so 0.01 looks the same size on every panel."""
    models = [m for m in rs.models if _groups(rs.checkpoints, m)]
    if not models:
        return None
    fig, axes, _ = _wrapped(len(models), sharey=True)  # six warm starts wrap into two rows, not one strip
    for ax, model in zip(axes.flat, models):
        _trajectory_panel(ax, rs, model)
    for ax in axes[:, 1:].flat:  # the shared axis is labelled once per row
        ax.set_ylabel("")
    return _finish(fig, axes, rs, "Pass@1 during training")


def plot_method_overlay(rs: ResultSet) -> Figure | None:
    """GRPO, AH-GRPO and SA-AH-GRPO on one panel for the largest model with at least two methods."""
    model = next((m for m in rs.models if len({meth for meth, _, _ in _groups(rs.checkpoints, m)}) >= 2), None)
    if model is None:
        return None
    fig, axes = _fig(w=6.0, h=3.8)
    ax = axes.flat[0]
    _trajectory_panel(ax, rs, model, peak_in_label=True)
    ax.set_title(f"{model}: all methods, bands {_band(_groups(rs.checkpoints, model)[0][2])[1]}", fontsize=9)
    return _finish(fig, axes, rs, "Method overlay", ncol=1)


def plot_alpha_ablation(rs: ResultSet) -> Figure | None:
    """Peak (filled circles) and final (open squares) Pass@1 against alpha; the baseline dashed, SA-AH-GRPO's
    reference a star; error bars (+-1 s.d. across seeds, where there are several) explained in the figure."""
    ab = rs.ablation
    if ab is None or ab.empty or (ab["method"] == "sa").all():
        return None
    model = ab["model_label"].iloc[0]
    core = ab[ab["method"] != "sa"].sort_values("alpha")
    fig, axes = _fig(w=5.6, h=3.6)
    ax = axes.flat[0]
    x = _numbers(core, "alpha")
    bars = _ah_points(ax, core, x)
    sa = ab[ab["method"] == "sa"].sort_values("alpha")
    bars |= _sa_points(ax, sa, x)
    _draw_baseline(ax, rs, model)
    ticks = sorted(set(np.round(np.concatenate([x, _numbers(sa, "alpha")]), 4)))  # a tick at every alpha drawn
    if ticks and max(ticks) > SYMLOG_FROM:  # a paper-matched alpha far right of the sweep: keep the sweep readable
        ax.set_xscale("symlog", linthresh=1.0, linscale=2.0)
    ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
    ax.set_xlabel("α (entropy discount strength; 0 = GRPO); n = seeds per point")
    ax.set_ylabel("Pass@1")
    ax.grid(alpha=0.3)
    ax.set_title(f"{model}" + (f"; error bars: ±1 s.d. across seeds ({bars_note(ab)}; "
                               "one seed elsewhere)" if bars else ""), fontsize=8 if bars else 9)
    return _finish(fig, axes, rs, "α ablation of AH-GRPO" + (" and SA-AH-GRPO" if len(sa) > 1 else ""), ncol=3,
                   fontsize=7)


def _ah_points(ax, core: pd.DataFrame, x) -> bool:
    """AH-GRPO's (and GRPO's) peak and final Pass@1 at each alpha; returns whether error bars were drawn."""
    peak, final = _numbers(core, "peak_pass_at_1"), _numbers(core, "final_pass_at_1")
    ax.plot(x, peak, color=METHOD_COLORS["ah"], lw=0.8, alpha=0.5)
    ax.plot(x, peak, "o", color=METHOD_COLORS["ah"], ms=7, label="AH-GRPO peak")
    ax.plot(x, final, "s", mfc="none", mec="k", ms=7, label="AH-GRPO final")
    bars = _seed_error_bars(ax, core, x, peak, final, METHOD_COLORS["ah"], "k")
    for xi, pi, partial in zip(x, peak, core["partial"].astype(bool)):
        if partial and not math.isnan(pi):
            ax.annotate("partial", (xi, pi), textcoords="offset points", xytext=(0, 8), ha="center", fontsize=7)
    _annotate_seeds(ax, x, peak, core, METHOD_COLORS["ah"], above=True)
    return bars


def _sa_points(ax, sa: pd.DataFrame, x) -> bool:
    """SA-AH-GRPO's points: a series like AH-GRPO's for a sweep, else one star; returns whether it drew error bars."""
    if sa.empty:
        return False
    color = METHOD_COLORS["sa"]
    sx, speak, sfinal = (_numbers(sa, c) for c in ("alpha", "peak_pass_at_1", "final_pass_at_1"))
    _annotate_seeds(ax, sx, speak, sa, color, above=False)
    if len(sa) == 1:
        steps = number_or_nan(sa["steps"].iloc[0])
        ax.plot(sx, speak, marker="*", ms=12, color=color, ls="none",
                label=f"SA-AH-GRPO peak ({'?' if math.isnan(steps) else int(steps)} steps)")
        ax.plot(sx, sfinal, marker="s", ms=7, mfc="none", mec=color, ls="none", label="SA-AH-GRPO final")
        return False
    ax.plot(sx, speak, "*-", color=color, ms=11, lw=0.8, label="SA-AH-GRPO peak")
    ax.plot(sx, sfinal, "s", ms=7, mfc="none", mec=color, label="SA-AH-GRPO final")
    # SA's bars a little to the right, so that they do not hide AH-GRPO's at the same alpha
    dodge = 0.012 * (np.nanmax(np.concatenate([x, sx])) - np.nanmin(np.concatenate([x, sx])))
    return _seed_error_bars(ax, sa, sx + dodge, speak, sfinal, color, color)


def _seed_error_bars(ax, rows: pd.DataFrame, x, peak, final, peak_color, final_color) -> bool:
    """±1 s.d. across seeds on points that have several seeds; returns whether any was drawn."""
    pstd, fstd = _numbers(rows, "peak_pass_at_1_std"), _numbers(rows, "final_pass_at_1_std")
    if np.isnan(pstd).all() and np.isnan(fstd).all():
        return False
    ax.errorbar(x, peak, yerr=np.nan_to_num(pstd), fmt="none", ecolor=peak_color, capsize=2)
    ax.errorbar(x, final, yerr=np.nan_to_num(fstd), fmt="none", ecolor=final_color, capsize=2)
    return True


def bars_note(ablation: pd.DataFrame) -> str:
    """Which points have error bars: ``3 seeds at α = 0, 0.5`` (from the ablation's ``n_seeds``)."""
    n = np.nan_to_num(_numbers(ablation, "n_seeds", 1), nan=1)
    seeds = " or ".join(str(c) for c in sorted({int(v) for v in n[n > 1]}))
    alphas = sorted({float(a) for a in _numbers(ablation, "alpha")[n > 1] if not math.isnan(a)})
    return f"{seeds} seeds at α = {', '.join(f'{a:g}' for a in alphas)}"


def _annotate_seeds(ax, x, y, rows: pd.DataFrame, color, above: bool) -> None:
    """``n=3`` beside each point: 1-seed points are drawn beside seed means, and the reader must see which."""
    for xi, yi, n in zip(x, y, _numbers(rows, "n_seeds")):
        if np.isfinite(yi) and np.isfinite(n):
            ax.annotate(f"n={int(n)}", (xi, yi), textcoords="offset points", xytext=(0, 8 if above else -14),
                        ha="center", fontsize=6.5, color=color)


def _curve_models(rs: ResultSet, *cols: str) -> list:
    """The models, in model order, with a value in any of these columns of the per-step curves."""
    c = rs.curves
    if c is None or c.empty:
        return []
    return [m for m in model_order(c["model_label"])
            if any(col in c and c.loc[c["model_label"] == m, col].notna().any() for col in cols)]


def moving_average(y: np.ndarray, window: int = REWARD_WINDOW) -> np.ndarray:
    """Trailing mean over up to ``window`` steps (fewer at the start), NaN steps skipped."""
    return pd.Series(y).rolling(window, min_periods=1).mean().to_numpy(float)


def _alpha_style(rs: ResultSet, method: str, alpha: float, default: str = "-") -> str:
    """Dotted for the paper-matched alpha of a study, so its AH/SA lines differ from the main alpha's."""
    matched = (rs.notes or {}).get("matched_alpha")
    return ":" if matched is not None and method != "grpo" and np.isclose(alpha, matched) else default


def _curve_rows(rs: ResultSet, models: list, columns, draw, title_size: int, **kw) -> tuple[Figure, np.ndarray]:
    """One row of panels per model, one column per ``(logged column, y label, title)`` of ``columns``, each column
    on one y scale; ``draw(ax, x, y, method, alpha, rows)`` draws an arm's curve (:func:`_groups`) on a panel."""
    fig, axes = _fig(ncols=len(columns), nrows=len(models), sharey="col", **kw)
    for row, model in enumerate(models):
        for method, a, g in _curve_groups(rs, model):
            for col, (key, _, _) in enumerate(columns):
                draw(axes[row, col], g["step"].to_numpy(float), _numbers(g, key), method, a, g)
        for ax, (_, ylabel, title) in zip(axes[row], columns):
            ax.set_ylabel(ylabel)
            ax.set_title(title.format(model=model), fontsize=title_size)
            _steps_axis(ax)
    return fig, axes


def plot_reward(rs: ResultSet) -> Figure | None:
    """Training reward per method: the step mean (left) and its spread over the step's completions (right). Each
    step's value is drawn faint with a moving average over :data:`REWARD_WINDOW` steps on top, so the methods'
    difference is not hidden under a band as wide as the reward's spread within a step."""
    models = _curve_models(rs, "reward_mean")
    if not models:
        return None
    columns = [("reward_mean", "mean reward of the step", "{model}")]
    if "reward_std" in rs.curves and not np.isnan(_numbers(rs.curves, "reward_std")).all():
        columns.append(("reward_std", "reward s.d. within the step", "{model}"))

    def draw(ax, x, y, method, a, g):
        kw = _line_kw(method, a, g, _alpha_style(rs, method, a))
        if kw["marker"]:
            ax.plot(x, y, lw=1.2, ms=4, **kw)
            return
        ax.plot(x, y, color=kw["color"], lw=0.6, alpha=0.3, ls=kw["ls"])
        ax.plot(x, moving_average(y), color=kw["color"], lw=1.6, label=kw["label"], ls=kw["ls"])

    fig, axes = _curve_rows(rs, models, columns, draw, 9, w=4.4, h=3.0)
    smoothing = "" if all(len(g) <= SPARSE for m in models for _, _, g in _curve_groups(rs, m)) else \
        f"\nfaint: each step; bold: mean of the last {REWARD_WINDOW} steps"
    return _finish(fig, axes, rs, "Training reward", smoothing + _curve_note(rs))


def plot_entropy_weight(rs: ResultSet) -> Figure | None:
    """Mean normalised entropy (left) and mean token weights, over all tokens and over negative-advantage rollouts
    (right), per step; one row per model."""
    models = _curve_models(rs, "entropy_norm", "weight_mean")
    if not models:
        return None
    columns = (("entropy_norm", "mean normalised entropy", "{model}: entropy"),
               ("weight_mean", "mean token weight", "{model}: weights, all tokens"),
               ("weight_neg_mean", "mean token weight", "{model}: weights, negative-advantage rollouts"))

    def draw(ax, x, y, method, a, g):
        if (~np.isnan(y)).any():
            ax.plot(x, y, **_line_kw(method, a, g, _alpha_style(rs, method, a, METHOD_LINESTYLES.get(method, "-")),
                                     lw=1.2, ms=4))

    fig, axes = _curve_rows(rs, models, columns, draw, 8, w=3.4, h=2.8)
    for ax in axes[:, 1:].flat:
        ax.set_ylim(0, 1.05)
    return _finish(fig, axes, rs, "Entropy and adaptive weights", _curve_note(rs), ncol=3)


def figure_arms(rs: ResultSet) -> list[tuple[str, float]]:
    """The arms ``(method, alpha)`` the per-arm figures draw, in method order: the main comparison's, and any other
    with as many seeds as its weighted arms (the SmolLM2 study's second alpha, not named paper-matched); a one-seed
    alpha sweep beside three-seed arms is left to the ablation figure."""
    runs = rs.runs
    if runs is None or runs.empty:
        return []
    main = (rs.notes or {}).get("main_alphas") or {}
    n = runs.assign(alpha=pd.to_numeric(runs["alpha"], errors="coerce")).groupby(["method", "alpha"])["seed"].nunique()
    in_main = {arm: is_main_alpha(arm[0], float(arm[1]), main) for arm in n.index}
    least = max((n[arm] for arm in n.index if in_main[arm] and arm[0] != "grpo"), default=math.inf)
    keep = [(str(m), float(a)) for (m, a) in n.index if in_main[(m, a)] or n[(m, a)] >= least]
    return sorted(keep, key=lambda arm: (METHODS.index(arm[0]) if arm[0] in METHODS else len(METHODS), arm[1]))


def _arm_style(rs: ResultSet, method: str, alpha: float, arms: list) -> str:
    """Dotted for the study's paper-matched alpha, as in the other figures; where the result set names none (the
    SmolLM2 study), dotted for any alpha of a method above its lowest; else the method's line style."""
    if (rs.notes or {}).get("matched_alpha") is not None:
        return _alpha_style(rs, method, alpha, METHOD_LINESTYLES.get(method, "-"))
    lowest = min(a for m, a in arms if m == method)
    return METHOD_LINESTYLES.get(method, "-") if np.isclose(alpha, lowest) else ":"


def _arm_rows(frame: pd.DataFrame, model, method: str, alpha: float) -> pd.DataFrame:
    alphas = pd.to_numeric(frame["alpha"], errors="coerce")
    return frame[(frame["model_label"] == model) & (frame["method"] == method) & np.isclose(alphas, alpha)]


#: The rows of the per-step diagnostics figure: the logged column and its axis label.
STEP_DIAGNOSTICS = (("weight_neg_mean", "mean token weight,\nnegative-advantage rollouts"),
                    ("entropy_norm", "mean normalised entropy"))


def plot_step_diagnostics(rs: ResultSet) -> Figure | None:
    """Per step and arm (:func:`figure_arms`, seed means): the mean token weight on negative-advantage rollouts
    (upper row) and the mean normalised entropy (lower row), one column per warm start; each quantity on one y
    scale with the range the paper logged (:func:`~saah_lab.analysis.reported.logged_range`) as a grey band. None
    for the paper's own numbers (their log against their own range shows nothing new)."""
    arms = figure_arms(rs)
    models = _curve_models(rs, *(key for key, _ in STEP_DIAGNOSTICS))
    if rs.source == "paper_reported" or not models or not arms:
        return None
    fig, axes, ncols = _wrapped(len(models), rows=2, w=3.4, h=2.5)
    paper = {key: logged_range(PAPER_REPORTED, key) for key, _ in STEP_DIAGNOSTICS}
    for i, model in enumerate(models):
        block, col = divmod(i, ncols)
        for row, (key, ylabel) in enumerate(STEP_DIAGNOSTICS):
            ax = axes[2 * block + row, col]
            if ax is not axes[row, 0]:
                ax.sharey(axes[row, 0])
            if band := paper[key]:
                ax.axhspan(band["low"], band["high"], color="0.82", lw=0, zorder=0,
                           label=f"the paper's logged range ({band['model']} SA-AH-GRPO, "
                                 f"steps {band['steps'][0]}–{band['steps'][1]})")
            for method, a in arms:
                g = _arm_rows(rs.curves, model, method, a).sort_values("step")
                y = _numbers(g, key)
                if len(g) and (~np.isnan(y)).any():
                    ax.plot(g["step"].to_numpy(float), y, **_line_kw(method, a, g, _arm_style(rs, method, a, arms),
                                                                      lw=1.1, ms=2.5))
            ax.set_title(str(model), fontsize=8)
            ax.set_ylabel(ylabel if col == 0 else "", fontsize=8)
            _steps_axis(ax)
            if row == 0:
                ax.set_xlabel("")
    return _finish(fig, axes, rs, "Weight on negative rollouts and entropy per step, per arm and warm start",
                   ncol=3)


#: The colour and legend name of each answer kind (:func:`saah_lib.tasks.synthetic.answer_kind`).
ANSWER_KIND_STYLE = {"correct": ("#2ca02c", "correct"),
                     "intermediate": ("#ff7f0e", "the planted habit (first intermediate result as the answer)"),
                     "other": ("0.65", "other error")}


def answer_kinds(rs: ResultSet) -> pd.DataFrame:
    """Per run of :func:`figure_arms` and its first and last evaluation: the answers by kind in its per-problem
    files (:func:`~saah_lib.tasks.synthetic.count_answer_kinds`). Empty without such files. A run the tolerant
    reader found damaged is left out (its files may not read; the figure's title warns of it)."""
    arms, rows = figure_arms(rs), []
    for r in (rs.runs.itertuples() if arms and rs.root is not None else ()):
        alpha = number_or_nan(r.alpha)
        if getattr(r, "damaged", False) or not any(r.method == m and np.isclose(alpha, a) for m, a in arms):
            continue
        files = list(RunDir(Path(rs.root) / layout.RUNS / str(r.run_id)).sample_files().items())
        for when, (step, path) in zip(("first", "last"), (files[0], files[-1]) if files else ()):
            rows.append({"model_label": r.model_label, "method": r.method, "alpha": alpha, "seed": r.seed,
                         "when": when, "step": step, **count_answer_kinds(read_jsonl(path))})
    return pd.DataFrame(rows)


def _answer_kind_panel(ax, kinds: pd.DataFrame, arms: list) -> None:
    """Two stacked bars per arm (first and last evaluation), the mean count of each kind written in its part."""
    ticks, labels, names = [], [], []
    groups = [(m, a, kinds[(kinds["method"] == m) & np.isclose(kinds["alpha"], a)]) for m, a in arms]
    for i, (method, alpha, g) in enumerate([group for group in groups if len(group[2])]):
        for j, when in enumerate(("first", "last")):
            at, x, bottom = g[g["when"] == when], i + (j - 0.5) * 0.42, 0.0
            total = float(at[list(ANSWER_KINDS)].sum(axis=1).mean())
            for kind in ANSWER_KINDS:
                height = float(at[kind].mean())
                color, name = ANSWER_KIND_STYLE[kind]
                ax.bar(x, height, 0.4, bottom=bottom, color=color, label=name, edgecolor="white", lw=0.5)
                if height >= 0.06 * total:  # a count fits in its part of the bar
                    ax.text(x, bottom + height / 2, f"{height:.0f}", ha="center", va="center", fontsize=6.5)
                bottom += height
            steps = sorted(set(at["step"]))
            ticks.append(x), labels.append(f"step {steps[0]}" if len(steps) == 1 else when)
        n = g["seed"].nunique()
        names.append(f"{method_label(method, alpha)}\nn={n} seed{'s' if n > 1 else ''}")
    ax.set_xticks(ticks, labels, fontsize=6.5)
    below = ax.secondary_xaxis(-0.09)  # the arms, under their two bars' step labels
    below.set_xticks(range(len(names)), names, fontsize=7)
    below.tick_params(length=0)
    below.spines["bottom"].set_visible(False)
    ax.grid(axis="y", alpha=0.3)


def plot_answer_kinds(rs: ResultSet) -> Figure | None:
    """Evaluation answers by kind (correct, the planted intermediate-result habit, other errors) at the first and
    the last evaluation of each arm (:func:`figure_arms`), as means over the arm's seeds: one panel per warm
    start, all on one y scale. None without per-problem evaluation files (the paper's numbers)."""
    kinds = answer_kinds(rs)
    if kinds.empty:
        return None
    arms, models = figure_arms(rs), model_order(kinds["model_label"])
    fig, axes, _ = _wrapped(len(models), w=max(3.4, 1.6 * len(arms)), h=3.4, sharey=True)
    totals = sorted({int(t) for t in kinds[list(ANSWER_KINDS)].sum(axis=1)})
    for ax, model in zip(axes.flat, models):
        _answer_kind_panel(ax, kinds[kinds["model_label"] == model], arms)
        ax.set_title(str(model), fontsize=9)
    for ax in axes[:, 0]:
        ax.set_ylabel("evaluation answers" + (f" (of {totals[0]})" if len(totals) == 1 else "")
                      + ",\nmean over seeds")
    return _finish(fig, axes, rs, "Answers by kind at the first and the last evaluation", ncol=3)


def warm_start_effects(rs: ResultSet, a: tuple[str, float], b: tuple[str, float] = ("grpo", 0.0)) -> pd.DataFrame:
    """Per warm start, over the seeds that ran both arms: ``gain``, arm b's mean final Pass@1 minus the warm
    start's own Pass@1 (its baseline); ``diff``, the mean of a − b final Pass@1 seed by seed; ``half``, the
    half-width of that mean's 95% t interval over the seeds (NaN for one seed); ``n``, the seeds."""
    runs, rows = rs.runs, []
    for model in (rs.models if runs is not None and not runs.empty else ()):
        finals = [_arm_rows(runs, model, *arm).set_index("seed")["final_pass_at_1"].astype(float) for arm in (a, b)]
        diffs = (finals[0] - finals[1]).dropna()
        base = number_or_nan((rs.baseline_for(model) or {}).get("pass_at_1"))
        if diffs.empty or math.isnan(base):
            continue
        n = len(diffs)
        half = float(stats.t.ppf(0.975, n - 1) * diffs.std(ddof=1) / math.sqrt(n)) if n > 1 else math.nan
        rows.append({"model_label": model, "gain": float(finals[1][diffs.index].mean()) - base,
                     "diff": float(diffs.mean()), "half": half, "n": n})
    return pd.DataFrame(rows)


def plot_warm_start_effect(rs: ResultSet, primary: dict | None = None) -> Figure | None:
    """Per warm start and SA-AH-GRPO arm of :func:`figure_arms`: GRPO's own gain over the warm start (x) against
    SA-AH-GRPO − GRPO on final Pass@1 (y; seed mean, 95% t interval), the plan's ``primary`` arm (``{"a": {method,
    alpha}, ...}``) filled and named; zero lines on both axes. None with fewer than two warm starts."""
    primary_a = (primary or {}).get("a") or {}
    series = [(a, warm_start_effects(rs, ("sa", a))) for m, a in figure_arms(rs) if m == "sa"]
    series = [(a, e) for a, e in series if len(e) >= 2]
    if not series:
        return None
    fig, axes = _fig(w=7.0, h=4.6)
    ax = axes.flat[0]
    span = max(float(np.ptp(e["gain"])) for _, e in series) or 0.01
    for k, (a, e) in enumerate(series):
        is_primary = primary_a.get("method") == "sa" and np.isclose(a, number_or_nan(primary_a.get("alpha")))
        n = f"{e['n'].min()}" if e["n"].nunique() == 1 else f"{e['n'].min()}–{e['n'].max()}"
        label = f"{method_label('sa', a)} − GRPO{' (primary)' if is_primary else ''}, n={n} seeds per warm start"
        x = e["gain"].to_numpy(float) + 0.012 * span * k  # a little apart, so the intervals do not hide each other
        ax.errorbar(x, e["diff"], yerr=e["half"].fillna(0), fmt="o" if is_primary else "s", ms=6, capsize=3,
                    color=METHOD_COLORS["sa"], mfc=METHOD_COLORS["sa"] if is_primary else "white", label=label)
    # each warm start named once, above the higher of its intervals
    tops = pd.concat([e.assign(top=e["diff"] + e["half"].fillna(0)) for _, e in series]).groupby("model_label")
    for model, g in tops:
        ax.annotate(str(model), (g["gain"].mean(), g["top"].max()), textcoords="offset points", xytext=(0, 4),
                    ha="center", fontsize=7)
    ax.axhline(0, color="0.4", lw=0.8, ls="--")
    ax.axvline(0, color="0.4", lw=0.8, ls="--")
    ax.margins(y=0.12)  # room for the names above the intervals
    ax.set_xlabel("GRPO's gain over its warm start: final Pass@1 − the warm start's Pass@1\n(mean over seeds)")
    ax.set_ylabel("SA-AH-GRPO − GRPO, final Pass@1\n(seed mean, 95% t interval over seeds)")
    ax.grid(alpha=0.3)
    return _finish(fig, axes, rs, "The effect per warm start against GRPO's own gain", ncol=1)


def plot_token_weights(h_pos: Sequence[float], h_neg: Sequence[float], alpha: float,
                       title: str | None = None) -> Figure:
    """Token weights of GRPO, AH-GRPO and SA-AH-GRPO on a rollout with positive and one with negative advantage,
    from their per-token normalised entropies ``h_pos``/``h_neg`` (:func:`saah_lab.analysis.summaries.token_weights`:
    GRPO 1; AH ``exp(-alpha * cumsum(H))`` on both; SA that discount on the negative rollout only)."""
    hs = (np.asarray(h_pos, float), np.asarray(h_neg, float))
    fig, axes = _fig(ncols=2, nrows=4, w=4.6, h=1.35)
    for col, (side, hh, adv) in enumerate(zip(("positive", "negative"), hs, (1.0, -1.0))):
        t = np.arange(1, len(hh) + 1)
        axes[0, col].bar(t, hh, width=1.0, color="0.5")
        axes[0, col].set_title(f"{side}-advantage rollout ({len(hh)} tokens)", fontsize=9)
        axes[0, col].set_ylabel("$\\tilde H_t$", fontsize=8)
        for row, method in enumerate(METHODS, start=1):
            w = token_weights(hh, alpha, method, adv)
            ax = axes[row, col]
            ax.bar(t, w, width=1.0, color=matplotlib.colormaps["viridis"](np.clip(w, 0, 1)))
            ax.set_ylim(0, 1.08 if alpha >= 0 else max(1.08, float(np.nanmax(w)) * 1.05))
            ax.set_ylabel(METHOD_LABELS[method], fontsize=8)
            ax.text(0.99, 0.9, f"mean w = {np.mean(w):.3f}", transform=ax.transAxes, ha="right", va="top", fontsize=7)
        axes[3, col].set_xlabel("token position t")
    for ax in axes.flat:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.tick_params(labelsize=7)
        ax.set_xlim(0.5, max(map(len, hs)) + 0.5)
    fig.suptitle(title or f"Token weights from logged entropies (α={alpha:g})", fontsize=10)
    return fig


def _curve_note(rs: ResultSet) -> str:
    return "\n(the paper tabulates these only for SA-AH-GRPO, at the steps shown)" * (rs.source == "paper_reported")


def _finish(fig: Figure, axes, rs: ResultSet, what: str, extra: str = "", ncol: int = 4, fontsize: int = 8) -> Figure:
    """One legend below the panels, merging the entries of all axes (first occurrence wins), and the title: what
    the figure shows, whose numbers, what a tolerant reading flagged and the flagged runs."""
    entries = {}
    for ax in np.ravel(axes):
        for h, lab in zip(*ax.get_legend_handles_labels()):
            entries.setdefault(lab, h)
    if entries:
        fig.legend(list(entries.values()), list(entries), loc="outside lower center",
                   ncol=min(ncol, len(entries)), fontsize=fontsize, frameon=False)
    fig.suptitle(f"{what} — {'reported in the paper' if rs.source == 'paper_reported' else 'our runs'}"
                 + problems_note(rs) + health_line(rs) + extra, fontsize=10)
    return fig


def health_line(rs: ResultSet) -> str:
    """A visible line naming the runs the health rules flag (included in every curve and point)."""
    flagged = rs.flagged_runs()
    if flagged.empty:
        return ""
    shown = [f"{r.run_id} ({r.health})" for r in flagged.itertuples()][:HEALTH_NAMED]
    more = len(flagged) - len(shown)
    text = (f"{len(flagged)} of {rs.runs_counted()} flagged by the health rules, included: " + "; ".join(shown)
            + (f"; and {more} more (see the tables)" if more else ""))
    return "\n" + textwrap.fill(text, width=110)


def problems_note(rs: ResultSet) -> str:
    """A visible line for figures drawn from results read with problems tolerated ("" when there were none)."""
    if not rs.warnings:
        return ""
    excluded = len(rs.excluded)
    return (f"\nWARNING: read with problems tolerated: {len(rs.warnings) - excluded} problem(s) flagged, "
            f"{excluded} run folder(s) left out (see ResultSet.warnings)")


def pick_rollout_pair(token_entropies: pd.DataFrame) -> dict | None:
    """Choose one positive- and one negative-advantage rollout logged at the same step: a run at the main alpha
    (:data:`~saah_lib.method.methods.MAIN_ALPHA`, chosen by value, not by the run id's spelling) first, SA-AH-GRPO
    before AH-GRPO before any, then by run id; within a run the latest step that has both signs. Returns
    ``{run_id, step, alpha, h_pos, h_neg, adv_pos, adv_neg}`` or None."""
    te = token_entropies
    if te is None or te.empty:
        return None

    def order(run_id):  # np.isclose is False for a NaN alpha
        first = te.loc[te.run_id == run_id].iloc[0]
        return not np.isclose(number_or_nan(first["alpha"]), MAIN_ALPHA), {"sa": 0, "ah": 1}.get(first["method"], 2), \
            str(run_id)

    for rid in sorted(te["run_id"].unique(), key=order):
        for step, at in reversed(list(te[te.run_id == rid].groupby("step"))):  # the latest step first
            pos, neg = at[at.advantage > 0], at[at.advantage < 0]
            if len(pos) and len(neg):
                p, n = pos.iloc[0], neg.iloc[0]
                return {"run_id": rid, "step": float(step), "alpha": number_or_nan(p["alpha"]),
                        "h_pos": np.asarray(p["entropy_norm"], float), "h_neg": np.asarray(n["entropy_norm"], float),
                        "adv_pos": float(p["advantage"]), "adv_neg": float(n["advantage"])}
    return None


def plot_rollout_weights(rs: ResultSet) -> Figure | None:
    """GRPO's, AH-GRPO's and SA-AH-GRPO's token weights on one logged positive and one negative rollout
    (:func:`pick_rollout_pair`), from their logged per-token entropies."""
    pair = pick_rollout_pair(rs.token_entropies)
    if pair is None:
        return None
    alpha, note = pair["alpha"], ""
    if math.isnan(alpha) or alpha == 0:
        alpha, note = MAIN_ALPHA, f" (run had α=0; weights drawn with α={MAIN_ALPHA:g})"
    return plot_token_weights(
        pair["h_pos"], pair["h_neg"], alpha,
        title=f"Token weights from run {pair['run_id']}, step {int(pair['step'])}, α={alpha:g}{note}"
              + problems_note(rs) + health_line(rs))


#: The figures of a result set, by name: ``<figures>/<prefix>_<name>.{pdf,png}``.
RESULT_FIGURES = {
    "pass_at_1": plot_pass_at_1,
    "overlay": plot_method_overlay,
    "alpha_ablation": plot_alpha_ablation,
    "reward": plot_reward,
    "entropy_weight": plot_entropy_weight,
    "token_weights": plot_rollout_weights,
    "step_diagnostics": plot_step_diagnostics,
    "answer_kinds": plot_answer_kinds,
}


def _draw_quantity(ax, r: dict, y: float, color: str, level: float) -> None:
    """One row: the per-seed differences (crosses for flagged seed pairs), the mean, the family interval and
    a band of +-MDE around 0 (differences inside it are below what these seeds detect with 80% power)."""
    diffs = np.asarray(r["detail"]["diffs"], float)
    flagged = np.array([u in r["flagged_units"] for u in r["detail"]["units"]])
    if math.isfinite(r["mde"]):
        ax.fill_between([-r["mde"], r["mde"]], y - 0.35, y + 0.35, color="0.88", lw=0, zorder=0)
    ax.scatter(diffs[~flagged], np.full((~flagged).sum(), y), s=12, color=color, alpha=0.45, zorder=2)
    if flagged.any():
        ax.scatter(diffs[flagged], np.full(flagged.sum(), y), s=28, marker="x", color="k", zorder=3)
    ax.plot([r["ci_low"], r["ci_high"]], [y, y], color=color, lw=2, zorder=2)
    filled = established(r["p_adjusted"], r["ci_low"], r["ci_high"], level)
    ax.scatter([r["diff"]], [y], s=40, zorder=4, color=color if filled else "white", edgecolor=color)


#: The paired figure's panels, top to bottom: title and the quantities of its rows.
PAIRED_PANELS = (("Pass@1 (A − B)", CHECKPOINTS), ("training-reward variance (A − B)", ("train_var",)),
                 ("mean KL (A − B)", ("mean_kl",)))


def plot_paired(rows: list[dict], level: float = LEVEL, warning: str = "", source: str = "") -> Figure | None:
    """Per pair of methods, seed by seed: Pass@1 (final, peak), training-reward variance and mean KL differences
    with their mean, family interval and a grey band of +-MDE; one panel per quantity, one row per pair (and
    checkpoint), the primary pair on top, named on the left and its statistics on the right (outside the data).
    ``warning`` (what a tolerant reading left out) and ``source`` (the results root: two studies' titles differ)
    go into the title."""
    if not rows:
        return None
    pairs = list(dict.fromkeys((r["a"], r["b"]) for r in sorted(rows, key=lambda r: not r["primary"])))
    primary = {(r["a"], r["b"]) for r in rows if r["primary"]}
    heights = [len(pairs) * len(keys) for _, keys in PAIRED_PANELS]
    fig, axes = _fig(nrows=len(PAIRED_PANELS), size=(7.5, 1.6 + 0.34 * sum(heights) + 0.45 * len(PAIRED_PANELS)),
                     gridspec_kw={"height_ratios": heights})
    colors = {"final": "#1f77b4", "peak": "#ff7f0e", "train_var": "#2ca02c", "mean_kl": "#9467bd"}
    for ax, (title, keys) in zip(axes[:, 0], PAIRED_PANELS):
        ticks, names, stats = [], [], []
        for i, (a, b) in enumerate(pairs):
            for j, key in enumerate(keys):
                match = [r for r in rows if (r["a"], r["b"], r["key"]) == (a, b, key)]
                if not match:
                    continue
                y = -(i * len(keys) + j)
                _draw_quantity(ax, match[0], y, colors[key], level)
                name = f"{'PRIMARY: ' if (a, b) in primary else ''}{a}\nvs {b}" if j == 0 else ""
                if len(keys) > 1:
                    name = f"{name}: {key}" if name else key
                ticks.append(y), names.append(name), stats.append(
                    "n={n_units}  p={p_value:.2g}\nadj. {p_adjusted:.2g}  MDE {mde:.2g}".format(**match[0]))
            if i:
                ax.axhline(-(i * len(keys)) + 0.5, color="0.8", lw=0.6)
        ax.axvline(0, color="0.5", lw=0.8, ls="--")
        ax.set_title(title, fontsize=9)
        ax.set_ylim(-(len(pairs) * len(keys)) + 0.4, 0.6)
        ax.set_yticks(ticks, names, fontsize=7.5)
        right = ax.secondary_yaxis("right")
        right.set_yticks(ticks, stats, fontsize=7)
        right.tick_params(length=0)
        ax.tick_params(axis="x", labelsize=8)
        ax.xaxis.set_major_locator(MaxNLocator(nbins=6))
        ax.ticklabel_format(axis="x", style="sci", scilimits=(-3, 3))
    handles = [*(Line2D([], [], color=colors[k], lw=2, marker="o", label=f"{k} checkpoint (family CI)")
                 for k in ("final", "peak")),
               Line2D([], [], color="0.4", ls="", marker="o", markersize=4, alpha=0.5, label="one seed pair"),
               Line2D([], [], color="k", ls="", marker="x", label="seed pair with a flagged run"),
               Line2D([], [], color="0.85", lw=6, label=f"±MDE ({POWER:.0%} power)"),
               Line2D([], [], color="0.4", ls="", marker="o", markerfacecolor="white",
                      label="mean (open: not established)")]
    fig.legend(handles=handles, loc="outside lower center", ncol=3, fontsize=7.5, frameon=False)
    fig.suptitle(f"Paired differences{f' in {source}' if source else ''}, the seed as the unit: bars = CI of the "
                 "crossed seed x problem t test at\n"
                 f"1 - {level:g}/m (m tests in the family); filled = established at {level:.0%} after Bonferroni; "
                 "right: n seed pairs, p, adjusted p, MDE" + (f"\nWARNING: {warning}" if warning else ""), fontsize=9)
    return fig


def plot_topk(result: dict, alpha: str = f"{MAIN_ALPHA:g}") -> Figure | None:
    """Entropy error, tail mass and horizon-weight error against K (log axes; K = V, error 0, left out)."""
    rows = [r for r in result.get("per_k", []) if not r["exact"]]
    if not rows or alpha not in rows[0]["weights"]:
        return None
    k = np.array([r["k"] for r in rows])
    fig, axes = _fig(ncols=2, w=4.5, h=3.3)
    ax_h, ax_w = axes[0]
    ax_h.plot(k, [r["entropy_abs_err"]["mean"] for r in rows], "o-", label="mean |ΔH|")
    ax_h.plot(k, [r["entropy_abs_err"]["max"] for r in rows], "s--", label="max |ΔH|")
    ax_h.plot(k, [1 - r["topk_mass"]["mean"] for r in rows], "^:", color="0.4",
              label="mean probability outside the top K")
    ax_h.set_ylabel("normalised entropy error")
    weights = [r["weights"][alpha] for r in rows]
    ax_w.plot(k, [w["rel_err"]["mean"] for w in weights], "o-", label="mean over tokens")
    ax_w.plot(k, [w["last_token_rel_err"]["mean"] for w in weights], "d-", label="mean at the last token")
    ax_w.plot(k, [w["rel_err"]["max"] for w in weights], "s--", label="max over tokens")
    ax_w.set_ylabel(f"relative weight error |Δw|/w (α={alpha})")
    for ax in (ax_h, ax_w):
        ax.set_xscale("log")
        ax.set_yscale("log", nonpositive="mask")
        ax.set_xlabel(f"K (vocabulary V = {result['vocab_size']})")
        ax.legend(fontsize=7, frameon=False)
    fig.suptitle(f"Top-K entropy estimate vs exact: {result['n_tokens']:,} tokens of {result['n_rollouts']} "
                 f"sampled rollouts ({result['model']})", fontsize=9)
    return fig


def plot_run(run_dir: str | Path) -> Figure | None:
    """One run at a glance: training reward (mean +- std) and Pass@1 (with its 95% band)."""
    log_ = RunDir(Path(run_dir))
    steps, evals = pd.DataFrame(log_.train_log()), pd.DataFrame(log_.evals())
    if steps.empty and evals.empty:
        log.info("no logged steps or evaluations in %s", run_dir)
        return None
    fig, axes = _fig(ncols=2)
    for ax, rows, value, half, title, marker in (
            (axes[0, 0], steps, "reward_mean", "reward_std", "training reward (mean ± std)", None),
            (axes[0, 1], evals, "pass_at_1", "ci95", "greedy Pass@1 (95% band)", "o")):
        if not rows.empty:
            y, h = rows[value].astype(float), rows[half].astype(float)
            ax.plot(rows["step"], y, marker=marker, color="0.2")
            ax.fill_between(rows["step"], y - h, y + h, color="0.2", alpha=0.2, linewidth=0)
            ax.set_title(title, fontsize=9)
        _steps_axis(ax, grid=False)
    fig.suptitle(Path(run_dir).name, fontsize=10)
    return fig
