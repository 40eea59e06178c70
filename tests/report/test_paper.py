"""paper/main.tex includes every generated output or leaves it out on purpose, and stops on a missing one."""

import re
import shutil
import subprocess

import pytest

from saah_lib.paths import FIGURES, PAPER_TABLES, REPO_ROOT

MAIN = REPO_ROOT / "paper" / "main.tex"


def _tex() -> str:
    return MAIN.read_text()


def _included(kind: str) -> set[str]:
    return set(re.findall(r"\\(?:require|optional)" + kind + r"(?:\[[^\]]*\])?\{([A-Za-z0-9_]+)\}", _tex()))


def _left_out() -> set[str]:
    return set(re.findall(r"^% left out: ([A-Za-z0-9_]+) \(", _tex(), flags=re.MULTILINE))


def test_every_committed_output_is_included_or_deliberately_left_out():
    named = _included("input") | _included("figure") | _left_out()
    tables = {p.stem for p in PAPER_TABLES.glob("*.tex")}
    figures = {p.stem for p in FIGURES.glob("*.pdf")}
    assert sorted(tables - named) == []
    assert sorted(figures - named) == []
    # and nothing is both included and left out
    assert (_included("input") | _included("figure")) & _left_out() == set()


def test_a_missing_input_is_an_error_not_placeholder_text():
    tex = _tex()
    assert "maybeinput" not in tex and "maybefigure" not in tex and "not generated" not in tex
    assert re.search(r"\\newcommand\{\\requireinput\}.*?\\PackageError", tex, flags=re.DOTALL)
    assert re.search(r"\\newcommand\{\\requirefigure\}.*?\\PackageError", tex, flags=re.DOTALL)


def test_required_committed_inputs_exist():
    # the committed results have a mini and an extended study: what main.tex requires for them is committed
    required = set(re.findall(r"\\requireinput\{((?:mini|extended|reported|studies)_[A-Za-z0-9_]+)\}", _tex()))
    missing = sorted(name for name in required if not (PAPER_TABLES / f"{name}.tex").is_file())
    assert missing == []
    required_figures = set(re.findall(r"\\requirefigure(?:\[[^\]]*\])?\{((?:mini|extended|reported)_[a-z0-9_]+)\}",
                                      _tex()))
    assert sorted(name for name in required_figures if not (FIGURES / f"{name}.pdf").is_file()) == []


def test_the_results_lead_with_the_primary_comparison():
    tex = _tex()
    reproduced = tex.index(r"\section{Reproduced here}")
    primary = tex.index(r"\requireinput{extended_primary_sentence}")
    first_table = min(tex.index(r"\requireinput{extended_main}"), tex.index(r"\requireinput{mini_main}"))
    assert reproduced < primary < first_table
    assert tex.index(r"\requireinput{studies_closing_note}") > first_table


@pytest.mark.skipif(shutil.which("pdffonts") is None, reason="pdffonts (poppler-utils) not installed")
def test_the_committed_pdf_embeds_no_bitmap_fonts():
    pdf = REPO_ROOT / "paper" / "main.pdf"
    if not pdf.is_file():
        pytest.skip("paper/main.pdf not built")
    fonts = subprocess.run(["pdffonts", str(pdf)], capture_output=True, text=True, check=True).stdout
    assert fonts.count("\n") > 3, fonts
    assert "Type 3" not in fonts, f"a Type 3 (bitmap or unnamed) font in paper/main.pdf:\n{fonts}"
