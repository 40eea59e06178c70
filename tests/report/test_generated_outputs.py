"""The committed tables and figures are exactly what the code makes from the committed results.

Regenerates them from ``results/mini`` and ``results/paper_reported`` into a
temporary folder and compares bytes with ``paper/generated/`` and ``figures/``,
so a change to the readers, summaries or formatting that moves any number
(or a committed output edited by hand) fails here.
"""

import hashlib
from pathlib import Path

import pytest

from saah_lib.analysis.reported import read_paper_reported
from saah_lib.analysis.resultset import ResultSet
from saah_lib.paths import REPO_ROOT
from saah_lib.report.evidence_report import render_evidence
from saah_lib.report.plots import write_all_figures
from saah_lib.report.tables import write_all_tables

REPO = REPO_ROOT
SOURCES = {"reported": lambda: read_paper_reported(REPO / "results" / "paper_reported"),
           "mini": lambda: ResultSet.from_runs(REPO / "results" / "mini"),
           "extended": lambda: ResultSet.from_runs(REPO / "results" / "extended")}
ROOTS = {"mini": REPO / "results" / "mini", "extended": REPO / "results" / "extended"}  # paired tests, top-K


def _evidence(prefix: str, tmp_path: Path, kind: str) -> list[Path]:
    if prefix not in ROOTS:
        return []
    written = render_evidence(ROOTS[prefix], tmp_path / "t", tmp_path / "f", prefix=prefix)["written"]
    return [p for p in written if p.parent.name == kind]


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _compare(written: list[Path], committed_dir: Path, prefix: str) -> None:
    committed = sorted(p.name for p in committed_dir.glob(f"{prefix}_*") if p.suffix in {".tex", ".pdf", ".png"})
    assert sorted(p.name for p in written) == committed
    differ = [p.name for p in written if _sha256(p) != _sha256(committed_dir / p.name)]
    assert differ == [], f"regenerated outputs differ from the committed ones: {differ}"


@pytest.mark.parametrize("prefix", sorted(SOURCES))
def test_tables_regenerate_byte_identical(prefix, tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)  # captions name the results root relative to the working directory
    written = write_all_tables(SOURCES[prefix](), tmp_path, prefix=prefix) + _evidence(prefix, tmp_path, "t")
    _compare([p for p in written if p.suffix == ".tex"], REPO / "paper" / "generated", prefix)


@pytest.mark.slow
@pytest.mark.parametrize("prefix", sorted(SOURCES))
def test_figures_regenerate_byte_identical(prefix, tmp_path):
    written = write_all_figures(SOURCES[prefix](), tmp_path, prefix=prefix) + _evidence(prefix, tmp_path, "f")
    _compare(written, REPO / "figures", prefix)


@pytest.mark.slow
def test_cross_study_texts_regenerate_byte_identical(tmp_path, monkeypatch):
    """The overlap sentence, the mini study's pointer, the closing note and the source switches."""
    from saah_lib.report.render import CROSS_STUDY_FILES, render_report

    monkeypatch.chdir(REPO)
    render_report(tables_dir=tmp_path / "t", figures_dir=tmp_path / "f")
    for name in CROSS_STUDY_FILES:
        regenerated = (tmp_path / "t" / f"{name}.tex").read_bytes()
        assert regenerated == (REPO / "paper" / "generated" / f"{name}.tex").read_bytes(), name
