"""LaTeX cells and table floats, in the paper's number formats (decimals per quantity:
:data:`saah_lab.analysis.quantities.DECIMALS`), so tables of ``results/paper_reported`` reproduce its cells."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from saah_lab.analysis.quantities import number_or_nan

MISSING = "---"
#: Marks a row that includes a run flagged by the health rules (saah_lab.analysis.health).
FLAG_MARK = r"$^{\ddagger}$"


TEX_SPECIALS = str.maketrans({"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                              "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"})


def tex_escape(s: Any) -> str:
    """Escape LaTeX special characters in free text (labels, run ids)."""
    return str(s).translate(TEX_SPECIALS)


def tex_path(path: Any) -> str:
    """A path as LaTeX text that may break after each ``/``: a results root outside the repository is printed
    whole, and in a caption it would otherwise run into the margin."""
    return tex_escape(path).replace("/", "/\\allowbreak{}")


def fmt(x, dp: int, sci: bool = False) -> str:
    """Fixed-point number with ``dp`` decimals, ``---`` if missing; scientific notation for a non-zero value that
    would print as zero, or with ``sci`` keep under two significant digits (tiny variances and KL of CPU runs)."""
    x = number_or_nan(x)
    if math.isnan(x):
        return MISSING
    limit = 10 ** (-dp + 1) if sci else 0.5 * 10 ** (-dp)
    if x != 0 and abs(x) < limit:
        mant, exp = f"{x:.1e}".split("e")
        return f"${mant}\\times10^{{{int(exp)}}}$"
    return f"{x:.{dp}f}"


def pm_cell(value: str, err: str) -> str:
    """``$value \\pm err$`` from two formatted numbers (either may already be in math mode)."""
    return f"${value.strip('$')} \\pm {err.strip('$')}$"


def fmt_pm(x, err, dp: int, bold: bool = False) -> str:
    """``$x \\pm err$`` (``---`` if x is missing; just x if err is missing)."""
    xs, es = fmt(x, dp), fmt(err, dp)
    if xs == MISSING:
        return MISSING
    return bold_cell(f"${xs.strip('$')}$" if es == MISSING else pm_cell(xs, es), bold)


def fmt_alpha(a, min_dp: int = 1, phantom: bool = False) -> str:
    """Alpha with at least ``min_dp`` decimals and no more than needed (max 4)."""
    a = number_or_nan(a)
    if math.isnan(a):
        return MISSING
    dp = next((d for d in range(min_dp, 4) if abs(round(a, d) - a) <= 1e-9), max(min_dp, 4))
    s = f"{a:.{dp}f}"
    if s.startswith("-"):
        return f"${s}$"
    return f"$\\phantom{{-}}{s}$" if phantom else s


def bold_cell(s: str, on: bool) -> str:
    if not on or s == MISSING:
        return s
    if s.startswith("$"):
        return f"$\\mathbf{{{s.strip('$')}}}$"
    return f"\\textbf{{{s}}}"


def stacked(*lines: str) -> str:
    """Several lines in one table cell (a narrow column head)."""
    return r"\begin{tabular}[b]{@{}c@{}}" + r" \\ ".join(lines) + r"\end{tabular}"


def tabular(cells: pd.DataFrame, colspec: str, before: dict[int, str] | None = None) -> str:
    """The booktabs ``tabular`` of already formatted one-line cells, by ``Styler.to_latex``: the column labels
    are the head (with a second level, a second row under a ``\\cmidrule`` of the columns that have one);
    ``before[i]``: lines set before body row ``i`` (a rule or a title between blocks)."""
    lines = cells.style.hide(axis="index").to_latex(column_format=colspec, hrules=True,
                                                     multicol_align="c").splitlines()
    spans = [i + 1 for i, label in enumerate(cells.columns) if cells.columns.nlevels == 2 and label[1]]
    if spans:  # Styler spans their first-level label (\multicolumn) but sets no rule under it
        lines.insert(3, rf"\cmidrule(lr){{{spans[0]}-{spans[-1]}}}")
    first = lines.index(r"\midrule") + 1
    for i, text in sorted((before or {}).items(), reverse=True):
        lines.insert(first + i, text)
    return "\n".join(lines)


def table_float(cells: pd.DataFrame, colspec: str, caption: str, label: str, notes: str = "",
                fontsize: str = r"\small", before: dict[int, str] | None = None) -> str:
    """A ``table`` float holding the :func:`tabular` of ``cells``, scaled down only if wider than the text."""
    lines = [r"\begin{table}[H]", r"\centering", fontsize, rf"\caption{{{caption}}}", rf"\label{{{label}}}",
             r"\resizebox{\ifdim\width>\linewidth\linewidth\else\width\fi}{!}{%",
             tabular(cells, colspec, before) + "}"]
    if notes:
        lines += [r"\par\smallskip", rf"{{\footnotesize {notes}\par}}"]
    lines += [r"\end{table}", ""]
    return "\n".join(lines)
