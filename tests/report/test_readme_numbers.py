"""The README's and docs/results.md's result numbers are the generated ones, not typed-in copies that can go stale.

Every decimal number (two or more decimals) in the README's "Results" section and in the confirmatory and
powered studies' sections of docs/results.md must occur, with the same digits, in a file that code wrote from
the committed results: the generated LaTeX and evidence JSON under paper/generated/, or a committed study's
JSON records. A rerun that
changes a number without the prose being updated fails here; so does a number copied from the paper.
"""

from __future__ import annotations

import re

import pytest

from saah_lib.paths import PAPER_TABLES, REPO_ROOT, RESULTS

NUMBER = re.compile(r"(?<![\w.])[-+−]?(\d+\.\d{2,})(?![\w.]*\d)")
# Numbers that are arithmetic stated in the text itself, not results (e.g. the smallest sign-flip p with n seeds).
DERIVED = {"0.25": "2/2^3, the smallest sign-flip p with three seeds",
           "0.05": "the 5% level",
           "0.02": "a difference size the text asks about (seeds needed to detect 0.02)",
           "0.03": "a difference size the text asks about (seeds needed to detect 0.03)",
           "0.80": "80% power"}


def _section(text: str, heading: str) -> str:
    match = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", text, flags=re.M | re.S)
    assert match, f"no '## {heading}' section"
    return match.group(1)


def _generated_numbers() -> set[str]:
    files = [*PAPER_TABLES.glob("*.tex"), *PAPER_TABLES.glob("*.json")]
    for study in ("mini", "extended", "confirm"):
        files += [p for p in (RESULTS / study).glob("*.json") if p.name != "MANIFEST.json"]
    return {m.group(1) for f in files for m in NUMBER.finditer(f.read_text())}


def numbers_in(markdown: str) -> set[str]:
    without_code = re.sub(r"```.*?```|`[^`]*`", "", markdown, flags=re.S)
    return {m.group(1) for m in NUMBER.finditer(without_code)}


def test_number_pattern_reads_signed_and_bracketed_values():
    assert numbers_in("Δ −0.012 [−0.031, +0.009], p 0.21, seeds 0.1.2 `0.999` 12.50") == {"0.012", "0.031", "0.009",
                                                                                          "0.21", "12.50"}


SECTIONS = [("README.md", "Results"),
            ("docs/results.md", "Confirmatory CPU study (pre-registered, committed under `results/confirm/`)"),
            ("docs/results.md", "Powered CPU study (`make extended`, committed under `results/extended/`)")]


@pytest.mark.parametrize("document, heading", SECTIONS)
def test_result_numbers_come_from_generated_files(document, heading):
    if not any(PAPER_TABLES.glob("*.tex")):
        pytest.skip("paper/generated/ not present")
    stated = numbers_in(_section((REPO_ROOT / document).read_text(), heading))
    assert stated, "the section states no numbers: the pattern or the heading is wrong"
    missing = sorted(stated - _generated_numbers() - set(DERIVED))
    assert missing == [], f"{document} '{heading}' states numbers found in no generated file: {missing}"
