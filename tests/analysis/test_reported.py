"""Checks on the transcription of the paper's numbers (results/paper_reported).

Several tests pin the *known* internal inconsistencies of the paper (listed in
docs/paper_reported.md).  They assert the exact list, so they fail if the
transcription changes -- a typo fixed or introduced shows up here.
"""

from __future__ import annotations

import math

import pytest

from saah_lab.analysis.reported import REPORTED_FILES, read_paper_reported, read_reported_csv
from saah_lib.paths import REPO_ROOT

REPO = REPO_ROOT
D = REPO / "results" / "paper_reported"
N_EVAL = 500


def _f(x: str) -> float:
    return float("nan") if x.strip() in ("", "---") else float(x)


def ci_formula(p: float, n: int = N_EVAL) -> float:
    return 1.96 * math.sqrt(p * (1 - p) / n)


@pytest.fixture(scope="module")
def main():
    return read_reported_csv(D / "tab_main.csv")


@pytest.fixture(scope="module")
def checkpoints():
    rows = {}
    for f, short in (("tab_checkpoints_3b.csv", "3B"), ("tab_checkpoints_1b.csv", "1.5B")):
        for _, r in read_reported_csv(D / f).iterrows():
            rows[(short, r["method"])] = {int(s): _f(r[s]) for s in ("30", "60", "90", "120", "150", "180")}
    return rows


def test_files_are_labelled_as_paper_numbers():
    readme = (D / "README.md").read_text()
    assert "not ours" in readme.lower() or "not results of this repository" in readme.lower()
    for name, label in REPORTED_FILES.items():
        first = (D / name).read_text().splitlines()[0]
        assert first.startswith("#") and "PAPER-REPORTED" in first and "NOT results of this repository" in first
        assert name in readme
        if label.startswith("tab:"):
            assert label in first and label in readme


def test_ci_column_against_formula(main):
    """CI cells of tab:main vs 1.96*sqrt(p(1-p)/500), rounded to the paper's 3 decimals."""
    mismatches = set()
    for _, r in main.iterrows():
        for kind in ("final", "peak"):
            p, ci = _f(r[f"{kind}_pass_at_1"]), _f(r[f"{kind}_ci95"])
            if math.isnan(p):
                continue
            if f"{ci_formula(p):.3f}" != f"{ci:.3f}":
                mismatches.add((r["model_short"], r["method"], kind, p, ci, round(ci_formula(p), 4)))
    assert mismatches == {
        ("3B", "base", "final", 0.831, 0.032, 0.0328),  # equals the CI of the raw 0.846 (0.0316) instead
        ("3B", "ah", "final", 0.848, 0.032, 0.0315),
    }


def test_base_ci_matches_raw_not_adjusted():
    base = read_reported_csv(D / "baselines.csv")
    for _, r in base.iterrows():
        assert _f(r["raw_pass_at_1"]) - _f(r["pass_at_1"]) == pytest.approx(0.015)
        assert f"{ci_formula(_f(r['raw_pass_at_1'])):.3f}" == r["ci95"]  # both models


def test_cells_repeated_across_models(main):
    """1.5B GRPO / AH-GRPO train variance and mean KL are copies of the 3B cells."""
    by = {(r["model_short"], r["method"]): r for _, r in main.iterrows()}
    repeated = {(m, col) for m in ("grpo", "ah", "sa") for col in ("final_pass_at_1", "peak_pass_at_1", "train_var", "mean_kl")
                if by[("3B", m)][col] == by[("1.5B", m)][col]}
    assert repeated == {("grpo", "train_var"), ("grpo", "mean_kl"), ("ah", "train_var"), ("ah", "mean_kl")}


def test_summary_agrees_with_checkpoint_tables(main, checkpoints):
    for _, r in main[main.method != "base"].iterrows():
        vals = {s: v for s, v in checkpoints[(r["model_short"], r["method"])].items() if not math.isnan(v)}
        assert max(vals) == int(r["steps"])  # last evaluated step = configured steps
        assert vals[max(vals)] == _f(r["final_pass_at_1"])
        assert max(vals.values()) == _f(r["peak_pass_at_1"])


def test_ablation_rows(checkpoints):
    ab = read_reported_csv(D / "tab_alpha_ablation.csv")
    steps = ("30", "60", "90", "120", "150")
    row = {r["row_label"]: r for _, r in ab.iterrows()}
    # rows shared with the 1.5B checkpoint table agree with it
    for label, method in (("0.00 (GRPO)", "grpo"), ("0.50", "ah"), ("SA-AH-GRPO 0.50", "sa")):
        assert [_f(row[label][s]) for s in steps] == [checkpoints[("1.5B", method)][int(s)] for s in steps]
    assert _f(row["(180 steps)"]["peak"]) == max(v for v in checkpoints[("1.5B", "sa")].values() if not math.isnan(v))
    # peak / final are the max / last of each row
    for label in ("-0.25", "0.00 (GRPO)", "0.10", "0.25", "0.50"):
        vals = [_f(row[label][s]) for s in steps]
        assert _f(row[label]["peak"]) == max(vals) and _f(row[label]["final"]) == vals[-1]
    # flagged partial ("steps 30--60 only") yet complete at every step
    partial = [lab for lab, r in row.items() if r["flag"] == "partial"]
    assert partial == ["0.25"]
    assert all(not math.isnan(_f(row["0.25"][s])) for s in steps)
    # the highest AH/GRPO peak is 0.676 (alpha 0.25 and 0.50), not alpha 0.10's 0.670 that the text names
    peaks = {lab: _f(row[lab]["peak"]) for lab in ("-0.25", "0.00 (GRPO)", "0.10", "0.25", "0.50")}
    assert max(peaks.values()) == 0.676 and peaks["0.10"] == 0.670
    assert sorted(lab for lab, v in peaks.items() if v == 0.676) == ["0.25", "0.50"]
    # "positive alpha uniformly better": the one per-step cell where it is not
    below = [(lab, s) for lab in ("0.10", "0.25", "0.50") for s in steps if _f(row[lab][s]) < _f(row["-0.25"][s])]
    assert below == [("0.25", "120")]


def test_diagnostic_tables():
    for f, short in (("tab_sa_log_3b.csv", "3B"), ("tab_sa_log_1b.csv", "1.5B")):
        d = read_reported_csv(D / f)
        ck = read_reported_csv(D / ("tab_checkpoints_3b.csv" if short == "3B" else "tab_checkpoints_1b.csv"))
        sa = ck[ck.method == "sa"].iloc[0]
        for _, r in d.iterrows():
            if r["step"] in sa.index:
                assert r["pass_at_1"] == sa[r["step"]]
            f_neg = _f(r["neg_frac"])
            assert (f_neg * 4) == int(f_neg * 4) and f_neg < 1  # multiples of 1/4, never 1
            w, wn = _f(r["weight_mean"]), _f(r["weight_neg_mean"])
            if r["weight_neg_note"] == "all_positive":
                assert f_neg == 0 and w == 1.0 and wn == 0.0
            else:
                assert wn <= w <= 1.0
    # text: "std < 0.25 in later training"; step 120 of the 3B run has 0.488
    d3 = read_reported_csv(D / "tab_sa_log_3b.csv")
    assert [r["step"] for _, r in d3.iterrows() if int(r["step"]) >= 90 and _f(r["reward_std"]) >= 0.25] == ["120"]


def test_headline_ratios(main):
    by = {(r["model_short"], r["method"]): r for _, r in main.iterrows()}
    v = lambda m, c: _f(by[m][c])  # noqa: E731
    assert round(v(("3B", "grpo"), "train_var") / v(("3B", "sa"), "train_var"), 1) == 3.6
    assert round(v(("3B", "ah"), "train_var") / v(("3B", "sa"), "train_var"), 1) == 2.6
    assert round((v(("1.5B", "sa"), "final_pass_at_1") - v(("1.5B", "base"), "final_pass_at_1")) * 100, 1) == 4.9
    # against the raw zero-shot number the gain is 3.4 pp
    assert round((v(("1.5B", "sa"), "final_pass_at_1") - 0.652) * 100, 1) == 3.4


def test_resultset_roundtrip_keeps_paper_rounding():
    rs = read_paper_reported(D)
    raw = read_reported_csv(D / "tab_main.csv")
    for col in ("final_pass_at_1", "final_ci95", "train_var", "mean_kl"):
        for text, val in zip(raw[col], rs.summary[col]):
            if text != "---":
                dp = len(text.split(".")[1])
                assert f"{val:.{dp}f}" == text


def test_negative_weight_target_is_the_mean_of_the_logged_weights(tmp_path):
    from saah_lab.analysis.reported import negative_weight_target

    got = negative_weight_target(D)
    # tab_sa_log_1b: 0.143, 0.810, 0.462, 0.169, 0.439, 0.174, 0.340 at steps 5..180
    assert got["values"] == [0.143, 0.810, 0.462, 0.169, 0.439, 0.174, 0.340]
    assert got["steps"] == [5, 30, 60, 90, 120, 150, 180]
    assert got["target"] == pytest.approx(2.537 / 7)
    assert got["file"] == "results/paper_reported/tab_sa_log_1b.csv"
    # a step without negative rollouts has no weight and does not count
    text = (D / "tab_sa_log_1b.csv").read_text().replace(",0.143,,", ",0.000,all_positive,")
    (tmp_path / "tab_sa_log_1b.csv").write_text(text)
    assert negative_weight_target(tmp_path)["steps"] == [30, 60, 90, 120, 150, 180]
    with pytest.raises(FileNotFoundError, match="tab_sa_log_1b.csv"):
        negative_weight_target(tmp_path / "nowhere")


def test_logged_range_spans_the_papers_log_without_its_placeholder_weights(tmp_path):
    from saah_lab.analysis.reported import logged_range

    assert logged_range(D, "weight_neg_mean") == {"low": 0.143, "high": 0.810, "model": "Qwen2.5-1.5B-Instruct",
                                                  "steps": (5, 180)}
    assert (logged_range(D, "entropy_norm")["low"], logged_range(D, "entropy_norm")["high"]) == (0.0153, 0.0432)
    # the 3B log's 0.000 at steps without a negative rollout is no weight: its lowest weight is 0.174
    assert logged_range(D, "weight_neg_mean", "tab_sa_log_3b.csv")["low"] == 0.174
    assert logged_range(D, "entropy_norm", "tab_sa_log_3b.csv")["low"] == 0.0085  # entropies of those steps count
    assert logged_range(tmp_path, "weight_neg_mean") is None and logged_range(D, "no_such_column") is None
