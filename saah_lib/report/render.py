"""Every table and figure of the report, from whichever result sources exist: :func:`render_report`.

The figures notebook (``notebooks/04_figures.ipynb``, run by ``make figures``)
is a call to this function, and so is a study that draws its own outputs.

======================  ============================================  =========
source                  folder                                        prefix
======================  ============================================  =========
the paper's numbers     ``results/paper_reported`` (transcribed)      reported
the CPU mini study      ``results/mini``                              mini
the extended study      ``results/extended``                          extended
your own runs           ``results/local`` (git-ignored)               ours
======================  ============================================  =========

Committed results are first checked against their ``MANIFEST.json``; runs are
read strictly (a damaged or incomplete run stops here, named) unless
``tolerate_problems``.  A source without data gives no tables or figures, and
older copies of them are removed.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from saah_lib.analysis.reported import read_paper_reported
from saah_lib.analysis.resultset import ResultSet
from saah_lib.jsonio import atomic_write_text
from saah_lib.paths import (
    EXTENDED_ROOT,
    FIGURES,
    LOCAL_RESULTS,
    MINI_ROOT,
    PAPER_REPORTED,
    PAPER_TABLES,
    in_repo,
    repo_relative,
)
from saah_lib.report.closing import closing_text, defer_text, overlap_text
from saah_lib.report.evidence_report import render_evidence
from saah_lib.report.plots import write_all_figures
from saah_lib.report.tables import write_all_tables
from saah_lib.rundir.layout import MANIFEST_FILE
from saah_lib.rundir.manifest import check_manifest

#: The run sources of the report, by prefix, in drawing order.
RUN_SOURCES = {"mini": MINI_ROOT, "extended": EXTENDED_ROOT, "ours": LOCAL_RESULTS}


def load_result_sets(sources: dict, paper_reported_dir=PAPER_REPORTED,
                     tolerate_problems: bool = False) -> dict[str, ResultSet]:
    """The paper's numbers (when ``paper_reported_dir`` holds them) and one result set per run source.

    Every existing root is checked against its manifest first (a root without one is an error),
    except the user's own ``ours`` root, which is checked only when it has one.  An absent or
    empty root gives an empty result set (drawing it removes stale outputs of its prefix).
    """
    checked = {"reported": paper_reported_dir, **sources} if paper_reported_dir else dict(sources)
    for prefix, root in checked.items():
        root = in_repo(root)
        if root.is_dir() and (prefix != "ours" or (root / MANIFEST_FILE).is_file()):
            check_manifest(root)
    result_sets = {}
    if paper_reported_dir and (in_repo(paper_reported_dir) / "tab_main.csv").is_file():
        result_sets["reported"] = read_paper_reported(in_repo(paper_reported_dir))
    for prefix, root in sources.items():
        result_sets[prefix] = ResultSet.from_runs(in_repo(root), tolerate_problems=tolerate_problems)
    return result_sets


def render_report(sources: dict | None = None, *, paper_reported_dir=PAPER_REPORTED, mini_root=MINI_ROOT,
                  tables_dir=PAPER_TABLES, figures_dir=FIGURES, tolerate_problems: bool = False,
                  verbose: bool = False) -> dict:
    """Write every table and figure of every source; returns ``{"result_sets": ..., "written": {prefix: [paths]}}``.

    ``sources`` maps a prefix to a results root (default :data:`RUN_SOURCES`, with
    ``mini_root`` for the mini study); ``paper_reported_dir=None`` leaves the paper's numbers out.
    """
    if sources is None:
        sources = {**RUN_SOURCES, "mini": mini_root}
    tables_dir, figures_dir = in_repo(tables_dir), in_repo(figures_dir)
    result_sets = load_result_sets(sources, paper_reported_dir, tolerate_problems)
    written, summaries = {}, {}
    for prefix, rs in result_sets.items():
        if verbose:
            for warning in rs.warnings:
                print(f"WARNING {prefix}: {warning}")
        tables = write_all_tables(rs, tables_dir, prefix=prefix)
        figures = write_all_figures(rs, figures_dir, prefix=prefix)
        # paired tests between methods at matched seeds, and the top-K ablation where it was run
        evidence = []
        if prefix in sources:
            out = render_evidence(in_repo(sources[prefix]), tables_dir, figures_dir, prefix=prefix,
                                  tolerate_problems=tolerate_problems)
            evidence, summaries[prefix] = out["written"], out["summary"]
        written[prefix] = tables + figures + evidence
        if verbose:
            print(f"{prefix}: {len(tables)} tables, {len(figures)} figure files"
                  + ("" if not rs.is_empty() else f" (no runs under {sources.get(prefix, paper_reported_dir)})"))
    written["studies"] = write_cross_study(summaries, {k: in_repo(v) for k, v in sources.items()}, result_sets,
                                           tables_dir, written)
    return {"result_sets": result_sets, "written": written}


#: Outputs that read several studies at once (:mod:`saah_lib.report.closing`) and the source switches.
CROSS_STUDY_FILES = ("studies_overlap", "studies_mini_defers", "studies_closing_note", "studies_sources")


def sources_tex(result_sets: dict, written: dict) -> str:
    """``\\newif`` switches saying which sources have results, and one ``generated@<name>`` mark per table or
    figure written, so the report includes exactly what exists (``\\ifgenerated`` in ``paper/main.tex``)."""
    lines = []
    for prefix in ("reported", *RUN_SOURCES):
        rs = result_sets.get(prefix)
        present = rs is not None and not rs.is_empty()
        lines += [f"\\newif\\ifhave{prefix}", f"\\have{prefix}{'true' if present else 'false'}"]
    names = sorted({Path(p).stem for paths in written.values() for p in paths if Path(p).suffix in (".tex", ".pdf")})
    lines += [f"\\expandafter\\def\\csname generated@{name}\\endcsname{{}}" for name in names]
    return "\n".join(lines) + "\n"


def write_cross_study(summaries: dict, roots: dict, result_sets: dict, tables_dir, written: dict) -> list:
    """The overlap sentence, the mini study's pointer to the powered study, the closing note and the source
    switches; a text with nothing to say is written empty (the report inputs every one of them)."""
    texts = {
        "studies_overlap": overlap_text(roots),
        "studies_mini_defers": defer_text(summaries.get("mini"), summaries.get("extended")),
        "studies_closing_note": closing_text(summaries, roots),
        "studies_sources": sources_tex(result_sets, written),
    }
    written = []
    for name in CROSS_STUDY_FILES:
        path = in_repo(tables_dir) / f"{name}.tex"
        atomic_write_text(path, CROSS_HEADER + texts[name])
        written.append(path)
    return written


CROSS_HEADER = "% Generated by saah_lib.report.render.render_report. Do not edit by hand: rerun make figures.\n"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m saah_lib.report.render", description=__doc__.splitlines()[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    for prefix, root in RUN_SOURCES.items():
        parser.add_argument(f"--{prefix}-root", default=repo_relative(root), help=f"results root drawn as '{prefix}'")
    parser.add_argument("--paper-reported-dir", default=repo_relative(PAPER_REPORTED), help="the paper's numbers")
    parser.add_argument("--tables-dir", default=repo_relative(PAPER_TABLES), help="LaTeX tables go here")
    parser.add_argument("--figures-dir", default=repo_relative(FIGURES), help="PDF and PNG figures go here")
    parser.add_argument("--tolerate-problems", action="store_true",
                        help="read damaged or incomplete runs anyway, flagged in every output")
    args = parser.parse_args(argv)
    sources = {prefix: getattr(args, f"{prefix}_root") for prefix in RUN_SOURCES}
    render_report(sources, paper_reported_dir=args.paper_reported_dir, tables_dir=args.tables_dir,
                  figures_dir=args.figures_dir, tolerate_problems=args.tolerate_problems, verbose=True)


if __name__ == "__main__":
    main()
