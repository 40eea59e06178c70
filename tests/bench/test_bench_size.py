"""The benchmarks stay small (issue 58): bench/ and tools/ under a line ceiling, and every benchmark a doc cites
either in bench/ or named with the commit that has it (tests/test_function_length.py holds their functions short)."""

import re

from saah_lib.paths import REPO_ROOT

#: Python lines of bench/ and tools/ together (4,550 before the one-off probes left, 3,060 after; run_profile and
#: smollm2_step stay: issue 60 profiles the SmolLM2 step with them, before and after; +70 for bench.dropout, its
#: side-by-side measure of the LoRA dropout cut).
BENCH_AND_TOOLS_CEILING = 3_140
#: A script that no longer lives in bench/ is cited with the commit that has it.
AT_A_COMMIT = re.compile(r"git checkout [0-9a-f]{7,40} -- bench\b|at commit [0-9a-f]{7,40}")
#: ``bench.x`` or ``bench/x.py``, not ``results/bench/...`` nor ``tests/bench/...``
CITED = re.compile(r"(?<![\w/.-])bench(?:\.([a-z_0-9]+)|/([a-z_0-9]+)\.py)")


def _python_files():
    return sorted([*(REPO_ROOT / "bench").glob("*.py"), *(REPO_ROOT / "tools").rglob("*.py")])


def uncited_scripts(text: str, modules: set[str]) -> list[str]:
    """Benchmarks a text cites that are not in ``modules`` and whose paragraph (a table with the paragraph before
    it) names no commit."""
    blocks = []
    for block in text.split("\n\n"):
        if blocks and block.lstrip().startswith("|"):
            blocks[-1] += "\n" + block
        else:
            blocks.append(block)
    return [name for block in blocks for name in map("".join, CITED.findall(block))
            if name not in modules and not AT_A_COMMIT.search(block)]


def test_bench_and_tools_are_under_their_ceiling():
    total = sum(len(path.read_text().splitlines()) for path in _python_files())
    assert total <= BENCH_AND_TOOLS_CEILING, f"bench/ and tools/ are {total} lines"


def test_every_benchmark_a_doc_cites_is_in_bench_or_named_with_its_commit():
    modules = {path.stem for path in (REPO_ROOT / "bench").glob("*.py")} | {"py"}
    docs = [*REPO_ROOT.glob("docs/**/*.md"), REPO_ROOT / "README.md", *REPO_ROOT.glob("results/**/*.md"),
            *REPO_ROOT.glob("paper/*.tex")]
    problems = {str(d.relative_to(REPO_ROOT)): names for d in docs if (names := uncited_scripts(d.read_text(), modules))}
    assert problems == {}


def test_the_check_finds_a_script_cited_without_its_commit():
    cited = "Measured with `python -m bench.gone --out x`.\n\n| `python -m bench.gone` | 1 s |\n"
    assert uncited_scripts(cited, {"step"}) == ["gone", "gone"]
    assert uncited_scripts("`git checkout 1a2b3c4 -- bench` first:\n\n| `python -m bench.gone` | 1 s |", {"step"}) == []
