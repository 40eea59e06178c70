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

from saah_lib.analysis.reported import read_paper_reported
from saah_lib.analysis.resultset import ResultSet
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
    written = {}
    for prefix, rs in result_sets.items():
        if verbose:
            for warning in rs.warnings:
                print(f"WARNING {prefix}: {warning}")
        tables = write_all_tables(rs, tables_dir, prefix=prefix)
        figures = write_all_figures(rs, figures_dir, prefix=prefix)
        # paired tests between methods at matched seeds, and the top-K ablation where it was run
        evidence = render_evidence(in_repo(sources[prefix]), tables_dir, figures_dir, prefix=prefix,
                                   tolerate_problems=tolerate_problems)["written"] if prefix in sources else []
        written[prefix] = tables + figures + evidence
        if verbose:
            print(f"{prefix}: {len(tables)} tables, {len(figures)} figure files"
                  + ("" if not rs.is_empty() else f" (no runs under {sources.get(prefix, paper_reported_dir)})"))
    return {"result_sets": result_sets, "written": written}


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
