"""LaTeX cells: the paper's number formats, missing values, tiny values in one math group, escaping; the booktabs
tabular that Styler builds of them."""

import pandas as pd

from saah_lab.report.latex import (
    MISSING,
    bold_cell,
    fmt,
    fmt_alpha,
    fmt_pm,
    pm_cell,
    stacked,
    table_float,
    tabular,
    tex_escape,
)


def test_formatting():
    assert fmt(float("nan"), 3) == MISSING and fmt(None, 3) == MISSING
    assert fmt(0.063, 4) == "0.0630" and fmt(243.0, 0) == "243"
    assert fmt(3e-7, 5) == "$3.0\\times10^{-7}$"
    assert fmt_pm(0.846, 0.0316, 3) == "$0.846 \\pm 0.032$"
    assert fmt_pm(0.846, None, 3) == "$0.846$"
    assert fmt_pm(float("nan"), 0.1, 3) == MISSING
    assert fmt_alpha(0.0) == "0.0" and fmt_alpha(0.25) == "0.25" and fmt_alpha(0.1, 2) == "0.10"
    assert fmt_alpha(-0.25, 2, phantom=True) == "$-0.25$"
    assert fmt_alpha(0.5, 2, phantom=True) == "$\\phantom{-}0.50$"
    assert tex_escape("a_b & 50%") == "a\\_b \\& 50\\%"


def test_tiny_values_stay_in_one_math_group():
    assert fmt(1.2e-5, 5, sci=True) == "$1.2\\times10^{-5}$"
    assert fmt(0.00537, 5, sci=True) == "0.00537"  # the paper's KL keeps its form
    assert pm_cell(fmt(1.2e-5, 5, sci=True), fmt(1.8e-6, 5, sci=True)) == "$1.2\\times10^{-5} \\pm 1.8\\times10^{-6}$"


def test_bold_cells_and_the_table_float():
    assert bold_cell("0.5", True) == "\\textbf{0.5}" and bold_cell("$0.5$", True) == "$\\mathbf{0.5}$"
    assert bold_cell(MISSING, True) == MISSING and bold_cell("0.5", False) == "0.5"
    tex = table_float(pd.DataFrame([["a", "$b$"]], columns=["A", "B"]), "lc", "Cap", "x:y", notes="N")
    assert tex.splitlines()[:5] == ["\\begin{table}[H]", "\\centering", "\\small", "\\caption{Cap}", "\\label{x:y}"]
    assert "\\begin{tabular}{lc}\n\\toprule\nA & B \\\\\n\\midrule\na & $b$ \\\\\n\\bottomrule\n\\end{tabular}}" in tex
    assert "{\\footnotesize N\\par}" in tex and tex.endswith("\\end{table}\n")


def test_a_tabular_with_a_two_row_head_and_rules_between_blocks():
    """A second level of labels is a second head row under a cmidrule of the spanned columns; the lines of
    ``before`` go before their body rows (the rules and titles between blocks)."""
    head = pd.MultiIndex.from_tuples([("\\multirow{2}{*}{M}", ""), ("By step", "10"), ("By step", "20"), ("Peak", "")])
    cells = pd.DataFrame([["a", "1", "2", "3"], ["b", "4", "5", "6"], ["c", "7", "8", "9"]], columns=head)
    assert tabular(cells, "lccc", before={0: "T0 \\\\", 2: "\\midrule"}).splitlines() == [
        "\\begin{tabular}{lccc}", "\\toprule",
        "\\multirow{2}{*}{M} & \\multicolumn{2}{c}{By step} & Peak \\\\", "\\cmidrule(lr){2-3}", " & 10 & 20 &  \\\\",
        "\\midrule", "T0 \\\\", "a & 1 & 2 & 3 \\\\", "b & 4 & 5 & 6 \\\\", "\\midrule", "c & 7 & 8 & 9 \\\\",
        "\\bottomrule", "\\end{tabular}"]


def test_a_stacked_head():
    assert stacked("Seeds", "(A/B)") == "\\begin{tabular}[b]{@{}c@{}}Seeds \\\\ (A/B)\\end{tabular}"
