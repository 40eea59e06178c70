"""Tests of saah_lab.report.plots (Agg, files written to tmp_path)."""

from __future__ import annotations

import re

import matplotlib
import numpy as np
import pytest

from saah_lab.analysis.reported import read_paper_reported
from saah_lab.analysis.resultset import ResultSet
from saah_lab.analysis.summaries import token_weights
from saah_lab.report import plots as P
from saah_lab.report import render
from saah_lab.report.render import OUTPUTS
from saah_lib.paths import REPO_ROOT

REPORTED = REPO_ROOT / "results" / "paper_reported"


def _names(paths):
    return {p.name for p in paths}


def all_figures(rs: ResultSet) -> dict:
    """Every figure of a result set that has data, by name, as the renderer makes them."""
    made = {name: draw(rs) for name, draw in P.RESULT_FIGURES.items()}
    return {name: fig for name, fig in made.items() if fig is not None}


def save_all(rs: ResultSet, out, prefix: str, formats=("pdf", "png")) -> list:
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, fig in all_figures(rs).items():
        for ext in formats:
            P.save_figure(fig, out / f"{prefix}_{name}.{ext}", dpi=40)
            paths.append(out / f"{prefix}_{name}.{ext}")
    return paths


def test_no_pyplot_state():
    import sys

    fig = P.plot_token_weights([0.1, 0.2], [0.3], 0.5)
    assert fig.canvas.__class__.__name__ == "FigureCanvasAgg"
    # building figures must not depend on (or switch) a pyplot backend
    assert "matplotlib.pyplot" not in sys.modules or matplotlib.get_backend()


@pytest.mark.slow
def test_reported_figures(tmp_path):
    rs = read_paper_reported(REPORTED)
    paths = save_all(rs, tmp_path, "reported")
    expected = {f"reported_{n}.{e}" for n in ("pass_at_1", "overlay", "alpha_ablation", "reward", "entropy_weight")
                for e in ("pdf", "png")}
    assert _names(paths) == expected  # no token entropies in the paper: schematic skipped
    for p in paths:
        assert p.stat().st_size > 2_000
        head = p.read_bytes()[:8]
        assert head.startswith(b"%PDF") if p.suffix == ".pdf" else head.startswith(b"\x89PNG")


def test_reported_trajectory_uses_paper_points():
    rs = read_paper_reported(REPORTED)
    fig = P.plot_pass_at_1(rs)
    ax3b = fig.axes[0]
    sa = [ln for ln in ax3b.get_lines() if ln.get_label().startswith("SA-AH-GRPO")][0]
    assert list(sa.get_xdata()) == [30, 60, 90, 120, 150, 180]
    assert np.allclose(sa.get_ydata(), [0.858, 0.844, 0.858, 0.854, 0.854, 0.846])
    base = [ln for ln in ax3b.get_lines() if "baseline" in str(ln.get_label())][0]
    assert np.allclose(base.get_ydata(), 0.831)


def test_synthetic_figures(tmp_path, results_root):
    rs = ResultSet.from_runs(results_root, tolerate_problems=True)
    paths = save_all(rs, tmp_path / "figs", "mini", formats=("png",))
    assert _names(paths) == {f"mini_{n}.png" for n in P.RESULT_FIGURES}
    assert not list((tmp_path / "figs").glob(".*"))  # each save renamed its temporary file into place


def test_multi_seed_band_is_std_across_seeds(results_root):
    rs = ResultSet.from_runs(results_root, tolerate_problems=True)
    ck = rs.checkpoints
    g = ck[(ck.model_label == "tiny") & (ck.method == "grpo")].sort_values("step")
    half, kind = P._band(g)
    assert kind == "±1 s.d. across seeds"
    assert np.allclose(half, g["pass_at_1_std"])


def test_token_weight_schematic_draws_real_weights():
    h_pos = np.array([0.1, 0.5, 0.2, 0.9])
    h_neg = np.array([0.3, 0.7, 0.6])
    fig = P.plot_token_weights(h_pos, h_neg, alpha=0.5)
    axes = np.array(fig.axes).reshape(4, 2)
    for col, (h, adv) in enumerate(((h_pos, 1.0), (h_neg, -1.0))):
        assert np.allclose([b.get_height() for b in axes[0, col].patches], h)
        for row, method in enumerate(("grpo", "ah", "sa"), start=1):
            heights = [b.get_height() for b in axes[row, col].patches]
            assert np.allclose(heights, token_weights(h, 0.5, method, adv))
    # SA: discount on the negative rollout only
    assert np.allclose([b.get_height() for b in axes[3, 0].patches], 1.0)
    assert np.allclose([b.get_height() for b in axes[3, 1].patches], np.exp(-0.5 * np.cumsum(h_neg)))


def test_missing_data_draws_no_figure(tmp_path, run_maker):
    root = tmp_path / "results"
    run_maker(root, "g", "tiny", "grpo", 0.0, 1)  # one run: no ablation, no token entropies
    names = set(all_figures(ResultSet.from_runs(root)))
    # a single method is no overlay; its logged weights, entropies and answers are drawn
    assert names == {"pass_at_1", "reward", "entropy_weight", "step_diagnostics", "answer_kinds"}
    assert all_figures(ResultSet.from_runs(tmp_path / "empty")) == {}


def test_tolerated_problems_are_named_in_figure_titles(tmp_path, results_root):
    rs = ResultSet.from_runs(results_root, tolerate_problems=True)  # one run is incomplete
    figs = all_figures(rs)
    assert figs and all("WARNING: read with problems tolerated" in f._suptitle.get_text() for f in figs.values())
    clean = tmp_path / "clean"
    for seed in (1, 2):
        run = results_root / "runs" / f"tiny-grpo-s{seed}"
        (clean / "runs").mkdir(parents=True, exist_ok=True)
        run.rename(clean / "runs" / run.name)
    assert not any("WARNING" in f._suptitle.get_text()
                   for f in all_figures(ResultSet.from_runs(clean)).values())


def test_every_figure_in_the_paper_names_the_function_that_draws_it():
    tex = (REPO_ROOT / "paper" / "main.tex").read_text().splitlines()
    figures = [i for i, line in enumerate(tex) if re.match(r"\\(require|optional)figure\b", line)]
    assert len(figures) >= 3 * len(P.RESULT_FIGURES)
    prefixes = [*render.STUDY_PREFIXES, "ours"]
    for i in figures:
        stem = re.search(rf"\{{((?:{'|'.join(prefixes)})_[a-z_0-9]+)\}}", tex[i]).group(1)
        note = re.fullmatch(r"% (\w+): drawn by saah_lab\.report\.plots\.(\w+) "
                            r"\(saved by saah_lab\.report\.render\.write_outputs\)", tex[i - 1])
        assert note and note.group(1) == stem, tex[i]
        name = stem.split("_", 1)[1]
        output = OUTPUTS[name if OUTPUTS.get(name, OUTPUTS["topk"]).kind == "figure" else f"{name}_figure"]
        assert output.kind == "figure" and callable(getattr(P, note.group(2)))
        # the registered maker calls the drawer: through RESULT_FIGURES, or through a helper of the renderer
        called = set(output.make.__code__.co_names)
        if "RESULT_FIGURES" in called:
            called.add(P.RESULT_FIGURES[name].__name__)
        called |= {n for helper in called if callable(getattr(render, helper, None)) and hasattr(
            getattr(render, helper), "__code__") for n in getattr(render, helper).__code__.co_names}
        assert note.group(2) in called, (stem, note.groups())


# --- what a reader sees: inline display, legends, bands, error bars, axes, fonts -------------------------------

def test_figures_display_as_png_in_jupyter_without_pyplot():
    from IPython.core.formatters import DisplayFormatter  # the formatter a Jupyter kernel uses

    fig = P.plot_token_weights([0.1, 0.2], [0.3], 0.5)
    data, _ = DisplayFormatter().format(fig)
    assert data["image/png"][:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data["image/png"]) < 200_000


def test_one_baseline_legend_entry_and_each_panels_value_on_its_panel():
    fig = P.plot_pass_at_1(read_paper_reported(REPORTED))
    (legend,) = fig.legends
    labels = [t.get_text() for t in legend.get_texts()]
    assert labels.count("zero-shot baseline") == 1 and not any("(0." in lab for lab in labels)
    values = [[t.get_text() for t in ax.texts] for ax in fig.axes]
    assert values == [["0.831"], ["0.637"]]  # the paper's 3B and 1.5B baselines, each on its panel


def test_entropy_and_weights_have_one_legend_entry_per_method_and_no_hidden_series(results_root):
    rs = ResultSet.from_runs(results_root, tolerate_problems=True)
    fig = P.plot_entropy_weight(rs)
    (legend,) = fig.legends
    # one entry per method and seed count (the two models of this root differ in seeds), each saying how many
    # seeds its lines average; the three panels of a row share them
    labels = [t.get_text() for t in legend.get_texts()]
    assert len(labels) == len(set(labels)) and all(re.search(r" \(n=\d+\)$", lab) for lab in labels)
    assert {re.sub(r" \(n=\d+\)$", "", lab) for lab in labels} == {"GRPO (α=0)", "AH-GRPO (α=0.5)",
                                                                   "SA-AH-GRPO (α=0.5)"}
    axes = np.array(fig.axes).reshape(-1, 3)
    titles = [ax.get_title() for ax in axes[0]]
    assert [t.split(": ")[1] for t in titles] == ["entropy", "weights, all tokens",
                                                  "weights, negative-advantage rollouts"]
    # AH and SA differ in line style, so equal curves stay visible on top of each other
    styles = {ln.get_label(): ln.get_linestyle() for ln in axes[0, 2].get_lines()}
    assert len(set(styles.values())) == len(styles)


def test_reward_is_drawn_per_step_and_as_a_moving_average_without_wide_bands():
    rs = ResultSet.from_runs(REPO_ROOT / "results" / "mini")  # 60 steps: dense enough to smooth
    fig = P.plot_reward(rs)
    ax = [a for a in fig.axes if a.get_title() == "tiny" and a.get_ylabel() == "mean reward of the step"][0]
    assert not any(a.collections for a in fig.axes)  # no ±std band over the means
    g = [g for m, _, g in P._curve_groups(rs, "tiny") if m == "grpo"][0]
    y = g["reward_mean"].to_numpy(float)
    bold = [ln for ln in ax.get_lines() if ln.get_label() == "GRPO (α=0) (n=3)"][0]
    expected = [np.mean(y[max(0, i - 4): i + 1]) for i in range(len(y))]  # trailing 5-step mean, by hand
    assert np.allclose(bold.get_ydata(), expected)
    assert np.allclose(P.moving_average(np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0]), 3), [1, 1.5, 2, 3, 4, 5])


def test_alpha_ablation_error_bars_are_explained():
    rs = ResultSet.from_runs(REPO_ROOT / "results" / "mini")
    fig = P.plot_alpha_ablation(rs)
    title = fig.axes[0].get_title()
    assert "error bars: ±1 s.d. across seeds (3 seeds at α = 0, 0.5; one seed elsewhere)" in title
    reported = P.plot_alpha_ablation(read_paper_reported(REPORTED))
    assert "error bars" not in reported.axes[0].get_title()  # one number per alpha in the paper: no bars


def test_a_run_with_one_evaluation_gets_an_axis_of_whole_steps(tmp_path, run_maker):
    run = run_maker(tmp_path, "one", "tiny", "sa", 0.5, 0, steps=1, eval_every=5, evals={4: 0.5})
    fig = P.plot_run(run)
    lo, hi = fig.axes[1].get_xlim()
    assert hi - lo >= 2 and lo <= 3 and hi >= 5


def test_pdfs_embed_truetype_fonts(tmp_path):
    import shutil
    import subprocess

    path = tmp_path / "f.pdf"
    P.save_figure(P.plot_token_weights([0.1, 0.2], [0.3], 0.5), path)
    pdf = path.read_bytes()
    assert b"/FontFile2" in pdf and b"/Type3" not in pdf  # TrueType programs embedded, no Type 3 glyph procedures
    if shutil.which("pdffonts"):
        listing = subprocess.run(["pdffonts", str(path)], capture_output=True, text=True, check=True).stdout
        fonts = listing.splitlines()[2:]
        assert fonts and all("TrueType" in line and " yes " in line for line in fonts), listing


def test_every_plotted_line_and_point_says_how_many_seeds_it_averages(results_root):
    rs = ResultSet.from_runs(results_root, tolerate_problems=True)
    fig = P.plot_pass_at_1(rs)
    labels = [ln.get_label() for ax in fig.axes for ln in ax.get_lines() if not ln.get_label().startswith("_")]
    curves = [lab for lab in labels if "GRPO" in lab]
    assert curves and all(re.search(r"\(n=\d+\)", lab) for lab in curves), curves
    ablation = P.plot_alpha_ablation(rs)
    if ablation is not None:
        texts = [t.get_text() for t in ablation.axes[0].texts]
        assert any(t.startswith("n=") for t in texts)


def test_token_weights_come_from_a_run_at_the_main_alpha_chosen_by_value():
    import pandas as pd

    def row(run_id, method, alpha):
        return [{"run_id": run_id, "method": method, "alpha": alpha, "step": 5.0, "advantage": a,
                 "entropy_norm": [0.1, 0.2]} for a in (1.0, -1.0)]

    # as strings "tiny-sa-a-0.25-s0" sorts before "tiny-sa-a0.5-s0"; the main alpha must win anyway
    te = pd.DataFrame(row("tiny-sa-a-0.25-s0", "sa", -0.25) + row("tiny-sa-a0.5-s0", "sa", 0.5)
                      + row("tiny-ah-a0.5-s0", "ah", 0.5))
    assert P.pick_rollout_pair(te)["run_id"] == "tiny-sa-a0.5-s0"
    te = pd.DataFrame(row("tiny-sa-a-0.25-s0", "sa", -0.25) + row("tiny-ah-a0.5-s0", "ah", 0.5))
    assert P.pick_rollout_pair(te)["run_id"] == "tiny-ah-a0.5-s0"  # the main alpha before the method


def test_flagged_runs_are_named_in_every_figure_title(results_root, monkeypatch):
    rs = ResultSet.from_runs(results_root, tolerate_problems=True)
    rs.runs = rs.runs.assign(flagged=False, health="")
    assert P.health_line(rs) == ""
    first = rs.runs["run_id"].iloc[0]
    rs.runs.loc[rs.runs["run_id"] == first, ["flagged", "health"]] = [True, "KL up to 0.200, above 0.1"]
    figs = all_figures(rs)
    assert figs and all(first in f._suptitle.get_text() for f in figs.values())


def test_six_warm_starts_wrap_into_rows_of_three_panels(tmp_path, run_maker):
    from saah_lab.report.plots import PANELS_PER_ROW, plot_pass_at_1

    for w in range(6):
        for method, alpha in (("grpo", 0.0), ("sa", 0.5)):
            run_maker(tmp_path, f"{method}-w{w}", f"tiny-w{w}", method, alpha, 0, steps=10, eval_every=5)
    fig = plot_pass_at_1(ResultSet.from_runs(tmp_path))
    shown = [ax for ax in fig.axes if ax.get_visible()]
    assert len(shown) == 6 and PANELS_PER_ROW == 3
    assert len({round(ax.get_position().y0, 3) for ax in shown}) == 2  # two rows
    assert len({round(ax.get_position().x0, 3) for ax in shown}) == 3  # of three


def test_a_paired_figure_names_its_results_root_so_two_studies_never_draw_the_same_title():
    # the confirmatory and extended studies share their primary pair: without the root their titles matched
    import json
    summary = json.loads((REPO_ROOT / "paper" / "generated" / "extended_paired_evidence.json").read_text())
    titles = {root: render._paired_figure({**summary, "root": root})._suptitle.get_text()
              for root in ("results/extended", "results/confirm")}
    assert titles["results/confirm"].startswith("Paired differences in results/confirm, the seed as the unit")
    assert titles["results/extended"] != titles["results/confirm"]


# --- the per-arm figures: per-step diagnostics, answers by kind, the effect per warm start -----------------------

def _two_warm_starts(root, run_maker, finals=None, seeds=(0, 1)):
    """GRPO and SA-AH-GRPO (alpha 0.5) from two warm starts at the same seeds, evaluated at steps 0 and 10 on 40
    problems (``finals``: (warm start, method, seed) -> problems right at step 10; step 0 has 8 right)."""
    for w in ("tiny", "tiny-w1"):
        for method, alpha in (("grpo", 0.0), ("sa", 0.5)):
            for seed in seeds:
                right = (finals or {}).get((w, method, seed), 12)
                run_maker(root, f"{w}-{method}-s{seed}", w, method, alpha, seed, steps=10, eval_every=10,
                          evals={0: 8 / 40, 10: right / 40}, n_eval=40)
    return root


def test_step_diagnostics_draw_each_arm_per_warm_start_on_one_scale_against_the_papers_range(tmp_path, run_maker):
    from saah_lab.analysis.reported import logged_range

    rs = ResultSet.from_runs(_two_warm_starts(tmp_path, run_maker))
    fig = P.plot_step_diagnostics(rs)
    axes = np.array(fig.axes).reshape(2, 2)  # rows: weight, entropy; one column per warm start
    assert [ax.get_title() for ax in axes[0]] == ["tiny", "tiny-w1"]
    paper = {key: logged_range(REPORTED, key) for key in ("weight_neg_mean", "entropy_norm")}
    assert paper["weight_neg_mean"]["low"] == 0.143 and paper["weight_neg_mean"]["high"] == 0.81
    for row, key in enumerate(("weight_neg_mean", "entropy_norm")):
        assert axes[row, 0].get_ylim() == axes[row, 1].get_ylim()  # one scale per quantity
        for ax in axes[row]:
            (band,) = ax.patches
            ys = band.get_path().transformed(band.get_patch_transform()).vertices[:, 1]
            assert np.allclose([ys.min(), ys.max()], [paper[key]["low"], paper[key]["high"]])
            assert {ln.get_label() for ln in ax.get_lines()} == {"GRPO (α=0) (n=2)", "SA-AH-GRPO (α=0.5) (n=2)"}
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "the paper's logged range (Qwen2.5-1.5B-Instruct SA-AH-GRPO, steps 5–180)" in labels
    assert P.plot_step_diagnostics(read_paper_reported(REPORTED)) is None  # the paper's log against itself


def test_answer_kinds_are_counted_at_the_first_and_last_evaluation_and_averaged_over_seeds(tmp_path, run_maker):
    import json

    right = {(w, m, seed): 10 if seed == 0 else 40
             for w in ("tiny", "tiny-w1") for m in ("grpo", "sa") for seed in (0, 1)}
    root = _two_warm_starts(tmp_path, run_maker, right)
    working = "1. 3 * 4 = 12\n2. 12 + 7 = 19\n"
    for run in (root / "runs").iterdir():  # at step 10: seed 0 gives 10 correct, 20 habit, 10 other; seed 1 all correct
        answers = (19, 12, 12, 5) * 10 if run.name.endswith("s0") else (19,) * 40
        lines = [json.dumps({"id": f"p{j:03d}", "question": "q", "gold": "19", "extracted": str(a),
                             "completion": working + f"<SOLUTION>{a}</SOLUTION>", "correct": a == 19})
                 for j, a in enumerate(answers)]
        (run / "eval_samples" / "step_0010.jsonl").write_text("\n".join(lines) + "\n")
    rs = ResultSet.from_runs(root)
    kinds = P.answer_kinds(rs)
    last = kinds[(kinds["when"] == "last") & (kinds["model_label"] == "tiny") & (kinds["method"] == "sa")]
    assert sorted(last["step"]) == [10, 10] and list(last.sort_values("seed")["correct"]) == [10, 40]
    first = kinds[kinds["when"] == "first"]
    assert set(first["step"]) == {0} and set(first["other"]) == {40}  # the fixture's step-0 answers are no answer
    fig = P.plot_answer_kinds(rs)
    ax = fig.axes[0]
    # per arm: the first evaluation's stack (other: 40), then the last one's, each kind the mean over the 2 seeds
    heights = [round(b.get_height(), 3) for b in ax.patches]
    assert heights[:6] == [0, 0, 40, 25, 10, 5]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["step 0", "step 10"] * 2
    assert fig.axes[0].get_ylim() == fig.axes[1].get_ylim()
    assert P.plot_answer_kinds(read_paper_reported(REPORTED)) is None  # no evaluation files
    # a torn sample file, read tolerantly: that run is left out (the arm's count says so), the figure still drawn
    with open(root / "runs" / "tiny-sa-s1" / "eval_samples" / "step_0010.jsonl", "a") as f:
        f.write("not json\n")
    tolerated = ResultSet.from_runs(root, tolerate_problems=True)
    kinds = P.answer_kinds(tolerated)
    assert sorted(kinds.loc[(kinds["model_label"] == "tiny") & (kinds["method"] == "sa"), "seed"]) == [0, 0]
    assert "WARNING" in P.plot_answer_kinds(tolerated)._suptitle.get_text()


def test_warm_start_effect_plots_the_seed_mean_difference_against_grpos_own_gain(tmp_path, run_maker,
                                                                                  baseline_maker):
    finals = {("tiny", "grpo", 0): 12, ("tiny", "grpo", 1): 14, ("tiny", "sa", 0): 14, ("tiny", "sa", 1): 18,
              ("tiny-w1", "grpo", 0): 8, ("tiny-w1", "grpo", 1): 8, ("tiny-w1", "sa", 0): 8, ("tiny-w1", "sa", 1): 7}
    root = _two_warm_starts(tmp_path, run_maker, finals)
    rs = ResultSet.from_runs(root)
    effects = P.warm_start_effects(rs, ("sa", 0.5)).set_index("model_label")
    # tiny: GRPO 0.3 and 0.35 from 0.2 (step 0); SA - GRPO 0.05 and 0.1 per seed
    assert np.isclose(effects.loc["tiny", "gain"], 0.125) and np.isclose(effects.loc["tiny", "diff"], 0.075)
    from scipy import stats
    assert np.isclose(effects.loc["tiny", "half"], stats.t.ppf(0.975, 1) * np.std([0.05, 0.1], ddof=1) / np.sqrt(2))
    assert np.isclose(effects.loc["tiny-w1", "gain"], 0.0) and np.isclose(effects.loc["tiny-w1", "diff"], -0.0125)
    fig = P.plot_warm_start_effect(rs, {"a": {"method": "sa", "alpha": 0.5}, "b": {"method": "grpo", "alpha": 0}})
    ax = fig.axes[0]
    assert [t.get_text() for t in fig.legends[0].get_texts()] == [
        "SA-AH-GRPO (α=0.5) − GRPO (primary), n=2 seeds per warm start"]
    assert any(np.allclose(ln.get_ydata(), 0) for ln in ax.get_lines())  # zero lines on both axes
    assert any(np.allclose(ln.get_xdata(), 0) for ln in ax.get_lines())
    # one warm start only: nothing to set side by side
    one = tmp_path / "one"
    for method, alpha in (("grpo", 0.0), ("sa", 0.5)):
        run_maker(one, f"{method}", "tiny", method, alpha, 0, steps=10, eval_every=10)
    assert P.plot_warm_start_effect(ResultSet.from_runs(one)) is None


def test_panels_that_are_compared_share_their_y_scale(tmp_path, run_maker, results_root):
    # warm starts at different levels: without a shared axis each panel would zoom onto its own lines
    high = {("tiny-w1", m, s): 36 for m in ("grpo", "sa") for s in (0, 1)}
    root = _two_warm_starts(tmp_path / "two", run_maker, high)
    fig = P.plot_pass_at_1(ResultSet.from_runs(root))
    assert len({ax.get_ylim() for ax in fig.axes}) == 1
    fig = P.plot_entropy_weight(ResultSet.from_runs(results_root, tolerate_problems=True))  # two models, two rows
    entropy = np.array(fig.axes).reshape(-1, 3)[:, 0]
    assert len(entropy) == 2 and entropy[0].get_ylim() == entropy[1].get_ylim()


def test_a_panel_with_two_kinds_of_band_names_each_in_the_legend(tmp_path, run_maker):
    # as in the SmolLM2 study: GRPO over two seeds (a s.d. band), SA-AH-GRPO a single run (its binomial interval)
    for method, alpha, seeds in (("grpo", 0.0, (0, 1)), ("sa", 0.5, (0,))):
        for seed in seeds:
            run_maker(tmp_path, f"{method}-s{seed}", "tiny", method, alpha, seed, steps=10, eval_every=5)
    fig = P.plot_pass_at_1(ResultSet.from_runs(tmp_path))
    bands = [t.get_text() for t in fig.legends[0].get_texts() if t.get_text().startswith("shaded")]
    assert bands == ["shaded: 95% binomial CI (single runs)", "shaded: ±1 s.d. across seeds (lines with n>1)"]
    single = P.plot_pass_at_1(read_paper_reported(REPORTED))  # single runs only: the binomial band alone
    assert [t.get_text() for t in single.legends[0].get_texts() if t.get_text().startswith("shaded")] == [
        "shaded: 95% binomial CI (single runs)"]


def test_a_paired_figure_of_single_seed_rows_is_not_drawn():
    # the top-K runs: one seed each, so every row is n=1 with no p: a figure of n/a only is left out
    import json
    generated = REPO_ROOT / "paper" / "generated"
    topk = json.loads((generated / "extended_topk_runs_evidence.json").read_text())
    assert topk["rows"] and all(r["n_units"] == 1 for r in topk["rows"])
    assert render._paired_figure(topk) is None
    assert render.OUTPUTS["topk_runs_figure"].make(render.Source("x", None, "", paired=None, topk_runs=topk)) is None
    paired = json.loads((generated / "extended_paired_evidence.json").read_text())
    assert render._paired_figure(paired) is not None
