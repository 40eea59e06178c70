"""paper/main.tex includes every generated output or leaves it out on purpose, and stops on a missing one; the
built reports (main.pdf from the committed results, local.pdf from your own runs) print no paragraph twice, no
undefined reference and no overfull box; the committed main.pdf is the one built from the committed inputs."""

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from saah_lab.report import paper_inputs
from saah_lab.report.render import OUTPUTS, file_stem, render_source
from saah_lib.paths import FIGURES, PAPER_TABLES, REPO_ROOT, RESULTS
from saah_lib.rundir.layout import MATCHED_ALPHA_FILE

PAPER = REPO_ROOT / "paper"
MAIN = PAPER / "main.tex"
LOCAL = PAPER / "local.tex"
#: An overfull box wider (or taller) than this, in points, is a layout fault.
OVERFULL_LIMIT_PT = 5.0


def _tex() -> str:
    return MAIN.read_text() + (PAPER / "preamble.tex").read_text()


def _included(kind: str) -> set[str]:
    return set(re.findall(r"\\(?:require|optional)" + kind + r"(?:\[[^\]]*\])?\{([A-Za-z0-9_]+)\}", _tex()))


def _left_out() -> set[str]:
    return set(re.findall(r"^% left out: ([A-Za-z0-9_]+) \(", _tex(), flags=re.MULTILINE))


def test_every_committed_output_is_included_or_deliberately_left_out():
    named = _included("input") | _included("figure") | _left_out()
    # ours_*: your own runs' outputs, git-ignored, for paper/local.tex
    tables = {p.stem for p in PAPER_TABLES.glob("*.tex") if not p.stem.startswith("ours_")}
    figures = {p.stem for p in FIGURES.glob("*.pdf") if not p.stem.startswith("ours_")}
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


# ---------------------------------------------------------------------------
# the built PDFs
# ---------------------------------------------------------------------------

def repeated_paragraphs(text: str, shortest: int = 120) -> list[str]:
    """Paragraphs (blank-line separated, whitespace normalised) of at least ``shortest`` characters printed twice."""
    paragraphs = [" ".join(p.split()) for p in re.split(r"\n\s*\n", text)]
    seen, twice = set(), []
    for p in paragraphs:
        if len(p) >= shortest:
            if p in seen and p not in twice:
                twice.append(p)
            seen.add(p)
    return twice


def overfull_boxes(log: str, limit: float = OVERFULL_LIMIT_PT) -> list[str]:
    """The LaTeX log's overfull boxes beyond ``limit`` points."""
    found = re.findall(r"^(Overfull \\[hv]box \((\d+(?:\.\d+)?)pt too (?:wide|high)\).*)$", log, flags=re.MULTILINE)
    return [line for line, points in found if float(points) > limit]


def layout_problems(text: str, log: str) -> list[str]:
    """What a reader should never see: a paragraph printed twice, an undefined reference, an overfull box."""
    problems = [f"printed twice: {p[:100]}..." for p in repeated_paragraphs(text)]
    problems += ["an undefined reference (??)"] if "??" in text else []
    return problems + overfull_boxes(log)


def test_the_layout_checks_can_fail():
    paragraph = "The paper-matched alpha is found by bisection on rollouts of the warm start, " * 2
    assert repeated_paragraphs(f"{paragraph}\n\nother\n\n{paragraph}") == [" ".join(paragraph.split())]
    assert repeated_paragraphs(f"{paragraph}\n\nshort\n\nshort") == []  # short lines (a table's) may repeat
    log = ("Overfull \\hbox (12.5pt too wide) in paragraph at lines 3--4\n"
           "Overfull \\hbox (0.8pt too wide) in paragraph at lines 9--9\n"
           "Overfull \\vbox (30.0pt too high) has occurred while \\output is active\n")
    assert [line.split(" in ")[0] for line in overfull_boxes(log)] == ["Overfull \\hbox (12.5pt too wide)",
                                                                       "Overfull \\vbox (30.0pt too high) has occurred while \\output is active"]
    assert layout_problems("See Table ?? for more.", "") == ["an undefined reference (??)"]
    assert layout_problems(f"{paragraph}\n\n{paragraph}", log)[0].startswith("printed twice: The paper-matched")


def build_pdf(tex: str, generated: Path, figures: Path, where: Path) -> tuple[str, str]:
    """``paper/<tex>`` built with latexmk from these generated tables and figures: its text and its log."""
    for tool in ("latexmk", "pdftotext"):
        if not shutil.which(tool):
            pytest.skip(f"{tool} not installed (tools/install_latex.sh installs it)")
    paper = where / "paper"
    paper.mkdir(parents=True)
    for name in ("main.tex", "local.tex", "preamble.tex"):
        shutil.copy(PAPER / name, paper / name)
    shutil.copytree(generated, paper / "generated")
    (where / "figures").symlink_to(figures.resolve())
    subprocess.run(["latexmk", "-pdf", "-interaction=nonstopmode", "-halt-on-error", tex], cwd=paper,
                   check=True, capture_output=True, timeout=300)
    pdf = paper / tex.replace(".tex", ".pdf")
    text = subprocess.run(["pdftotext", str(pdf), "-"], capture_output=True, text=True, check=True).stdout
    return text, (paper / tex.replace(".tex", ".log")).read_text(errors="replace")


def test_both_studies_match_the_same_alpha_so_main_tex_prints_one_paragraph():
    # main.tex prints the extended study's paper-matched alpha paragraph only: lossless while the mini study's
    # alpha is the same
    alphas = {study: json.loads((RESULTS / study / MATCHED_ALPHA_FILE).read_text())["alpha"]
              for study in ("mini", "extended")}
    assert alphas["mini"] == alphas["extended"]


@pytest.mark.e2e
@pytest.mark.slow
def test_the_committed_report_prints_nothing_twice_and_no_overfull_box(tmp_path, committed_report):
    # drawn afresh from the committed results, as `make paper` on a fresh clone does (no runs of your own)
    text, log = build_pdf("main.tex", committed_report / "tables", committed_report / "figures", tmp_path / "build")
    assert "Paired comparisons" in text
    assert layout_problems(text, log) == []
    assert "full-scale" not in text.lower() and "results/local" in text  # it points to local.pdf, shows none
    # no build date in the file: rebuilding from the same inputs leaves the committed PDF unchanged
    assert b"/CreationDate" not in (tmp_path / "build" / "paper" / "main.pdf").read_bytes()


@pytest.mark.slow
def test_your_own_runs_get_a_report_of_their_own(tmp_path, run_maker):
    root = tmp_path / "local"
    for seed in (0, 1):
        for method, alpha in (("sa", 0.5), ("grpo", 0.0)):
            run_maker(root, f"tiny-{method}-s{seed}", "tiny", method, alpha, seed, steps=20, eval_every=10)
    run_maker(root, "tiny-sa-s0-steps10", "tiny", "sa", 0.5, 0, steps=10, eval_every=10)  # a variant of seed 0
    generated, figures = tmp_path / "generated", tmp_path / "figures-out"
    written = render_source(root, generated, figures, prefix="ours")["written"]
    assert generated / "ours_sources.tex" in written
    assert not any(p.name.startswith("studies_") for p in generated.iterdir())
    text, log = build_pdf("local.tex", generated, figures, tmp_path / "build")
    (Path(os.environ.get("SAAH_KEEP_LATEX_LOG", tmp_path)) / "local.log").write_text(log)
    assert "Your own runs (results/local)" in text and "full-scale" not in text.lower()
    assert "tiny (steps=10)" in text
    assert layout_problems(text, log) == []


def test_local_tex_includes_every_output_of_your_runs():
    tex = LOCAL.read_text()
    named = set(re.findall(r"\\(?:require|optional)(?:input|figure)(?:\[[^\]]*\])?\{([A-Za-z0-9_]+)\}", tex))
    made = {file_stem("ours", name) for name, output in OUTPUTS.items() if output.kind != "data"}
    assert sorted(made - named) == [] and "ours_sources" in named


def _paper_copy(tmp_path: Path) -> Path:
    for name in ("paper", "figures"):
        shutil.copytree(REPO_ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("ours_*", "*.aux", "*.log"))
    return tmp_path


def test_the_committed_pdf_is_current_with_its_inputs():
    assert paper_inputs.stale() == [], "rebuild it: make paper"


def test_a_planted_stale_input_is_named(tmp_path):
    root = _paper_copy(tmp_path)
    assert paper_inputs.stale(root) == []
    table = root / "paper" / "generated" / "mini_main.tex"
    table.write_text(table.read_text().replace("0.", "0.9", 1))
    (root / "figures" / "mini_reward.pdf").unlink()
    (root / "paper" / "generated" / "mini_extra.tex").write_text("new\n")
    assert paper_inputs.stale(root) == ["changed since the PDF was built: paper/generated/mini_main.tex",
                                        "new since the PDF was built: paper/generated/mini_extra.tex",
                                        "gone since the PDF was built: figures/mini_reward.pdf"]
    paper_inputs.record(root)  # as make paper does after building: the edit is now what the PDF was built from
    assert paper_inputs.stale(root) == []


def test_a_pdf_other_than_the_recorded_one_is_named(tmp_path):
    root = _paper_copy(tmp_path)
    (root / "paper" / "main.pdf").write_bytes(b"%PDF-1.5 another build\n")
    assert paper_inputs.stale(root) == ["paper/main.pdf is not the PDF the record was written for"]
