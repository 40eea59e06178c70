"""Tests of saah_lab.report.tables.

The main check regenerates the tables from ``results/paper_reported`` and
compares them, row by row and cell by cell, with the tables parsed out of the
paper's own LaTeX source -- an independent check of the CSV transcription
and of the number formatting.  It is skipped when the paper is not available.
"""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from saah_lab.analysis.reported import read_paper_reported
from saah_lab.analysis.resultset import ResultSet
from saah_lab.report.latex import MISSING
from saah_lab.report.tables import RESULT_TABLES, with_notes
from saah_lib.paths import REPO_ROOT

REPO = REPO_ROOT
REPORTED = REPO / "results" / "paper_reported"
# The paper's LaTeX source is not part of this repository; it sits beside it where available.
PAPER = REPO.parent / "shared" / "spec" / "sa-ah-grpo-paper.tex"
needs_paper = pytest.mark.skipif(not PAPER.is_file(), reason=f"paper source not found at {PAPER}")

# paper label -> (generated file stem, generated label)
TABLE_MAP = {
    "tab:main": ("main", "reported:main"),
    "tab:checkpoints_3b": ("checkpoints", "reported:checkpoints:3b"),
    "tab:checkpoints_1b": ("checkpoints", "reported:checkpoints:1p5b"),
    "tab:alpha_ablation": ("ablation", "reported:ablation"),
    "tab:sa_log_3b": ("diagnostics", "reported:diag:sa:3b"),
    "tab:sa_log_1b": ("diagnostics", "reported:diag:sa:1p5b"),
}


def render_all_tables(rs: ResultSet, prefix: str = "reported") -> dict[str, str]:
    """Every table of a result set that has data, by name, as the renderer makes them."""
    made = {name: with_notes(rs, make(rs, prefix)) for name, make in RESULT_TABLES.items()}
    return {name: text for name, text in made.items() if text}


# ---------------------------------------------------------------------------
# a small, independent parser of booktabs tables
# ---------------------------------------------------------------------------

def tabular_after_label(tex: str, label: str) -> str:
    """Body of the first ``tabular`` after ``\\label{label}``."""
    i = tex.index(f"\\label{{{label}}}")
    j = tex.index("\\begin{tabular}", i)
    k = tex.index("\\end{tabular}", j)
    return tex[j:k]


def data_rows(tabular: str) -> list[list[str]]:
    """Cells of the data rows: from the first ``\\midrule`` to ``\\bottomrule``."""
    body = tabular[tabular.index("\\midrule") + len("\\midrule"):tabular.index("\\bottomrule")]
    body = re.sub(r"\\(mid|top|bottom)rule|\\cmidrule(\([^)]*\))?\{[^}]*\}", "", body)
    rows = [r for r in (x.strip() for x in body.split("\\\\")) if r]
    return [[c.strip() for c in r.split("&")] for r in rows]


def cell_tokens(cell: str) -> tuple[str, ...]:
    """The numbers (as written) and '---' markers of a cell, ignoring markup."""
    c = re.sub(r"\\multirow\{[^}]*\}\{[^}]*\}\{([^}]*)\}", r"\1", cell)
    c = c.replace("\\phantom{-}", "")
    c = re.sub(r"\^\{?\\dagger\}?|\^\{?\\ast\}?", "", c)
    return tuple(re.findall(r"---|-?\d+\.\d+|-?\d+", c))


def table_tokens(tex: str, label: str) -> list[list[tuple[str, ...]]]:
    return [[cell_tokens(c) for c in row] for row in data_rows(tabular_after_label(tex, label))]


@pytest.fixture(scope="module")
def reported_tables(tmp_path_factory) -> dict[str, str]:
    return render_all_tables(read_paper_reported(REPORTED), "reported")


@needs_paper
@pytest.mark.parametrize("paper_label", list(TABLE_MAP))
def test_reported_tables_match_paper_cell_for_cell(paper_label, reported_tables):
    paper = PAPER.read_text(encoding="utf-8")
    stem, ours_label = TABLE_MAP[paper_label]
    expected = table_tokens(paper, paper_label)
    got = table_tokens(reported_tables[stem], ours_label)
    assert len(got) == len(expected), f"{paper_label}: {len(got)} rows generated, paper has {len(expected)}"
    for i, (g, e) in enumerate(zip(got, expected)):
        assert g == e, f"{paper_label} row {i}: generated {g} != paper {e}"
    # and the numbers appear exactly as the paper writes them (same rounding)
    n_cells = sum(len(c) for row in expected for c in row)
    assert n_cells > 10


@needs_paper
def test_reported_hparams_match_paper(reported_tables):
    paper = PAPER.read_text(encoding="utf-8")
    norm = lambda rows: [[re.sub(r"\s+", "", c) for c in r] for r in rows]  # noqa: E731
    assert norm(data_rows(tabular_after_label(reported_tables["hparams"], "reported:hparams"))) == \
        norm(data_rows(tabular_after_label(paper, "tab:hparams")))


def test_reported_tables_written(reported_tables):
    assert set(reported_tables) == {"main", "checkpoints", "ablation", "diagnostics", "hparams"}
    t = reported_tables["ablation"]
    assert "0.676}$^{\\dagger}$" in t and "(180 steps)" in t  # bold (highest peak) and flagged partial
    assert "0.000$^{\\dagger}$" in reported_tables["diagnostics"]
    for text in reported_tables.values():
        assert "\\toprule" in text and "\\bottomrule" in text


# ---------------------------------------------------------------------------
# our runs
# ---------------------------------------------------------------------------

@pytest.fixture
def synthetic(tmp_path, results_root):
    rs = ResultSet.from_runs(results_root, tolerate_problems=True)
    out = tmp_path / "generated"
    out.mkdir()
    tables = render_all_tables(rs, "mini")
    for name, text in tables.items():
        (out / f"mini_{name}.tex").write_text(text)
    return rs, out, tables


def test_synthetic_tables(synthetic):
    rs, out, t = synthetic
    assert set(t) == {"main", "checkpoints", "ablation", "diagnostics", "setup"}
    main = t["main"]
    assert "Seeds" in main  # the two GRPO seeds are aggregated
    rows = data_rows(tabular_after_label(main, "mini:main"))
    grpo = [r for r in rows if r[1] == "GRPO" and "tiny" not in r[0]]
    assert any(r[-1] == "2" for r in grpo)  # seed count of tiny GRPO
    assert any("Base (before RL)" in r[1] for r in rows) and any("Base (step 0)" in r[1] for r in rows)
    # missing values are '---', never 0 or nan
    assert "nan" not in "".join(t.values()).lower()
    ck = data_rows(tabular_after_label(t["checkpoints"], "mini:checkpoints:tiny"))
    grpo_row = [r for r in ck if r[0].startswith("GRPO")][0]
    assert grpo_row[-1] == MISSING  # GRPO has no step 25
    # the incomplete alpha=-0.25 run: '---' after step 10 and a dagger on its peak
    ab = data_rows(tabular_after_label(t["ablation"], "mini:ablation"))
    neg = [r for r in ab if r[0] == "$-0.25$"][0]
    assert neg[3:5] == [MISSING, MISSING] and "\\dagger" in neg[5]
    # diagnostics: first logged step plus every eval_every, Pass@1 only where evaluated
    d = data_rows(tabular_after_label(t["diagnostics"], "mini:diag:sa:tiny"))
    assert [r[0] for r in d] == ["1", "5", "10", "15", "20", "25"]
    assert d[0][1] == MISSING and d[1][1] != MISSING
    assert "\\texttt{tiny-ah-a-0.25}" in t["setup"]


@pytest.mark.skipif(shutil.which("pdflatex") is None, reason="pdflatex not installed (tools/install_latex.sh)")
def test_generated_tables_compile(synthetic, reported_tables, tmp_path):
    _, out, _ = synthetic
    for name, text in reported_tables.items():
        (out / f"reported_{name}.tex").write_text(text)
    inputs = "\n".join(f"\\input{{{p.stem}}}" for p in sorted(out.glob("*.tex")))
    doc = (r"\documentclass{article}\usepackage{booktabs,graphicx,amsmath,float}"
           r"\IfFileExists{multirow.sty}{\usepackage{multirow}}{}\providecommand{\multirow}[3]{#3}"
           r"\begin{document}" + inputs + r"\end{document}")
    (out / "doc.tex").write_text(doc)
    res = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "doc.tex"], cwd=out,
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout[-3000:]


def test_tolerated_problems_are_marked_in_every_table(tmp_path, run_maker):
    root = tmp_path / "results"
    for run_id, method, alpha, seed in (("g1", "grpo", 0.0, 1), ("g2", "grpo", 0.0, 2), ("a1", "ah", 0.5, 1),
                                        ("s1", "sa", 0.5, 1), ("s2", "sa", 0.5, 2)):
        run_maker(root, run_id, "tiny", method, alpha, seed)
    clean = render_all_tables(ResultSet.from_runs(root))
    assert not any("Warning" in t or r"\S" in t for t in clean.values())
    ev = root / "runs" / "g1" / "eval.jsonl"  # torn final evaluation of one GRPO seed
    ev.write_text(ev.read_text()[:-20])
    (root / "runs" / "s2" / "config.json").unlink()  # an SA run that cannot be placed
    tables = render_all_tables(ResultSet.from_runs(root, tolerate_problems=True))
    rows = data_rows(tabular_after_label(tables["main"], "reported:main"))
    grpo = [r for r in rows if r[1] == "GRPO"][0]
    assert grpo[3].endswith(r"$^{\ast}$$^{\S}$")  # incomplete and damaged
    assert [r for r in rows if r[1] == "SA-AH-GRPO"][0][3] == "20"  # the intact SA seed is unmarked
    assert "damaged logs in a run of this row" in tables["main"]
    for name, text in tables.items():
        assert r"\textbf{Warning:} read with problems tolerated" in text, name
        assert "flagged (1): g1" in text and "left out, config unusable (1): s2" in text
    assert r"\texttt{g1}$^{\ast}$$^{\S}$" in tables["setup"]


def test_flagged_runs_are_marked_and_given_without_them_and_captions_name_only_present_rows(tmp_path, run_maker):
    root = tmp_path / "results"
    for seed, final in ((0, 0.55), (1, 0.6), (2, 0.1)):  # seed 2 ends far below its step-0 level
        run_maker(root, f"tiny-grpo-a0-s{seed}", "tiny", "grpo", 0.0, seed, evals={0: 0.3, 10: final, 20: final},
                  eval_every=10)
    tables = render_all_tables(ResultSet.from_runs(root), "t")
    main = tables["main"]
    assert "GRPO & 0.0 & 20$^{\\ddagger}$" in main
    assert "without tiny-grpo-a0-s2: final 0.575" in main.replace("\\_", "_")
    assert "Base (step 0)" in main and "Base (before RL)" not in main  # no baseline folder: step 0 only
    for name, text in tables.items():
        assert "Run health" in text and "tiny-grpo-a0-s2" in text.replace("\\_", "_"), name
    assert "tiny-grpo-a0-s2}$^{\\ddagger}$" in tables["setup"].replace("\\_", "_")


def test_the_reported_base_rows_caption_takes_the_papers_raw_numbers_from_the_transcription(tmp_path):
    shutil.copytree(REPORTED, tmp_path / "reported")
    base = tmp_path / "reported" / "baselines.csv"
    base.write_text(base.read_text().replace("0.846,1.5", "0.861,3").replace("0.652,1.5", "0.667,3"))
    caption = render_all_tables(read_paper_reported(tmp_path / "reported"))["main"]
    assert "lowered by 3 points from its raw evaluation (0.667 for 1.5B, 0.861 for 3B)" in caption
    committed = render_all_tables(read_paper_reported(REPORTED))["main"]
    assert "lowered by 1.5 points from its raw evaluation (0.652 for 1.5B, 0.846 for 3B)" in committed


def test_the_run_lists_of_the_notes_are_printed_under_the_main_table_only(tmp_path, run_maker):
    run_maker(tmp_path, "tiny-sa-s0", "tiny", "sa", 0.5, 0)
    # fell from 0.40 at step 0 to 0.20: flagged by the health rules (as in tests/analysis/test_runs.py)
    run_maker(tmp_path, "tiny-grpo-s0", "tiny", "grpo", 0.0, 0, evals={0: 0.40, 5: 0.30, 10: 0.25, 15: 0.2, 20: 0.2})
    rs = ResultSet.from_runs(tmp_path)
    main = with_notes(rs, RESULT_TABLES["main"](rs, "x"), "main", "x")
    checkpoints = with_notes(rs, RESULT_TABLES["checkpoints"](rs, "x"), "checkpoints", "x")
    assert "tiny-grpo-s0" in main and "Run health (" in main
    assert "tiny-grpo-s0" not in checkpoints and "1 of 2 runs flagged by the health rules" in checkpoints
    assert r"named under Table~\ref{x:main}" in checkpoints
