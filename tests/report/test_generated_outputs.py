"""The committed tables and figures are exactly what the code makes from the committed results.

Renders the whole report once (:func:`saah_lab.report.render.render_report`, what ``make figures`` runs) from
every committed results root and ``results/paper_reported`` into a temporary folder and compares
bytes with ``paper/generated/`` and ``figures/``, so a change to the readers, summaries or formatting that
moves any number (or a committed output edited by hand) fails here.
"""

import hashlib
from pathlib import Path

import pytest

from saah_lab.report.render import CROSS_STUDY_FILES, STUDY_PREFIXES
from saah_lib.paths import FIGURES, PAPER_TABLES

PREFIXES = STUDY_PREFIXES  # the report's committed sources: the paper's numbers and every committed study


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _compare(regenerated_dir: Path, committed_dir: Path, prefix: str, suffixes: set[str]) -> None:
    def names(folder):
        return sorted(p.name for p in folder.glob(f"{prefix}_*") if p.suffix in suffixes)
    assert names(regenerated_dir) == names(committed_dir)
    differ = [n for n in names(regenerated_dir) if _sha256(regenerated_dir / n) != _sha256(committed_dir / n)]
    assert differ == [], f"regenerated outputs differ from the committed ones: {differ}"


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.parametrize("prefix", PREFIXES)
def test_tables_and_evidence_regenerate_byte_identical(prefix, committed_report):
    _compare(committed_report / "tables", PAPER_TABLES, prefix, {".tex", ".json"})


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.parametrize("prefix", PREFIXES)
def test_figures_regenerate_byte_identical(prefix, committed_report):
    _compare(committed_report / "figures", FIGURES, prefix, {".pdf", ".png"})


@pytest.mark.e2e
@pytest.mark.slow
def test_cross_study_texts_regenerate_byte_identical(committed_report):
    """The overlap sentence, the mini study's pointer, the closing note and the source switches."""
    for name in CROSS_STUDY_FILES:
        regenerated_text = (committed_report / "tables" / f"{name}.tex").read_bytes()
        assert regenerated_text == (PAPER_TABLES / f"{name}.tex").read_bytes(), name


def test_the_comparison_sees_a_changed_byte(tmp_path):
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    (tmp_path / "a" / "mini_x.tex").write_text("0.393")
    (tmp_path / "b" / "mini_x.tex").write_text("0.394")
    with pytest.raises(AssertionError, match="mini_x.tex"):
        _compare(tmp_path / "a", tmp_path / "b", "mini", {".tex"})
