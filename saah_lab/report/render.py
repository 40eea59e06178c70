"""Every table, figure and text of the report, drawn from whichever result sources exist.

:func:`render_report` (``make figures``) draws the paper's numbers (``reported``) and :data:`RUN_SOURCES`; your
own runs (``ours``) go to ``paper/local.tex`` only, never the committed report. Three steps, so a bad input never
costs an output: **check** the sources (committed ones against their manifest), **read and make** every output
of :data:`OUTPUTS` in memory, then **write**, removing an older copy of an output without data this time.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from saah_lab.analysis.evidence import load_root_evidence
from saah_lab.analysis.reported import read_paper_reported
from saah_lab.analysis.resultset import ResultSet
from saah_lab.analysis.runs import read_runs
from saah_lab.report import plots, tables, texts
from saah_lab.report.settings import settings_table
from saah_lab.rundir.lock import FolderLock
from saah_lab.rundir.manifest import check_manifest
from saah_lib.jsonio import atomic_write_json, atomic_write_text, read_json, remove_temp_files
from saah_lib.paths import (
    CONFIRM_ROOT,
    EXTENDED_ROOT,
    FIGURES,
    LOCAL_RESULTS,
    MINI_ROOT,
    PAPER_REPORTED,
    PAPER_TABLES,
    REAL_MODEL_RECORD,
    REAL_STUDY_ROOT,
    in_repo,
    repo_relative,
)
from saah_lib.rundir.layout import MANIFEST_FILE, MATCHED_ALPHA_FILE, STUDY_PLAN_FILE, TOPK_ERROR_FILE

#: The run sources of the report, by prefix, in drawing order.
RUN_SOURCES = {"mini": MINI_ROOT, "extended": EXTENDED_ROOT, "confirm": CONFIRM_ROOT, "real": REAL_STUDY_ROOT,
               "ours": LOCAL_RESULTS}
#: Held in each output folder while a render writes there: a second render waits for none and stops, named.
RENDER_LOCK_FILE = ".render.lock"


class MissingSourceError(FileNotFoundError):
    """A named source folder does not exist; nothing was written or removed."""


# --- what one source contributes --------------------------------------------------------------------------------------

@dataclass
class Source:
    """One source's inputs, read once: the result set, and for a results root its paired evidence, the
    top-K runs' evidence, the paper-matched alpha and the top-K measurement."""

    prefix: str
    results: ResultSet
    origin: str  # where it comes from, as the generated files' headers name it
    root: Path | None = None  # a results root; None for the paper's numbers
    paired: dict | None = None
    topk_runs: dict | None = None
    matched_alpha: dict = field(default_factory=dict)
    topk: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Output:
    """One output of a source: its kind (where and how it is written) and the function that makes it from the
    :class:`Source` ("" or None: no data this time, so an older copy is removed)."""

    kind: str  # "table" or "text": <tables>/<prefix>_<name>.tex; "data": .json there; "figure": <figures> .pdf/.png
    make: Callable[[Source], object]


def _table(name: str) -> Output:
    return Output("table", lambda s: tables.with_notes(s.results, tables.RESULT_TABLES[name](s.results, s.prefix),
                                                       name, s.prefix))


def _figure(name: str) -> Output:
    return Output("figure", lambda s: plots.RESULT_FIGURES[name](s.results))


def _paired_table(summary: dict | None, s: Source, name: str, what: str) -> str:
    """The compact table, where some comparison can be tested (else only its sentence says anything)."""
    return tables.table_paired(summary["rows"], summary, s.prefix, name, what) if tables.testable(summary) else ""


def _paired_figure(summary: dict | None):
    """The paired figure, or None when no row has two seed pairs: one pair has no interval and no p, and a figure
    of n/a only shows nothing (its sentence says all there is)."""
    if not tables.testable(summary):
        return None
    return plots.plot_paired(summary["rows"], summary["level"], texts.left_out_warning(summary),
                             source=summary.get("root", ""))


#: Every output of a source, by name (the file is ``<prefix>_<name>`` plus the kind's suffix), in writing order.
OUTPUTS: dict[str, Output] = {
    **{name: _table(name) for name in tables.RESULT_TABLES},
    **{name: _figure(name) for name in plots.RESULT_FIGURES},
    "warm_start_effect": Output("figure", lambda s: plots.plot_warm_start_effect(
        s.results, ((s.paired or {}).get("plan") or {}).get("primary"))),
    "paired_evidence": Output("data", lambda s: s.paired if s.paired and s.paired["rows"] else None),
    "paired": Output("table", lambda s: _paired_table(s.paired, s, "paired", "Paired comparisons")),
    "paired_details": Output("table", lambda s: tables.table_paired_details(s.paired["rows"], s.paired, s.prefix)
                             if tables.testable(s.paired) else ""),
    "primary_sentence": Output("text", lambda s: texts.sentence_file(s.paired, "primary")),
    "paired_sentence": Output("text", lambda s: texts.sentence_file(s.paired, "secondary")),
    "paired_figure": Output("figure", lambda s: _paired_figure(s.paired)),
    "topk_runs_evidence": Output("data", lambda s: s.topk_runs if s.topk_runs and s.topk_runs["rows"] else None),
    "topk_runs": Output("table", lambda s: _paired_table(
        s.topk_runs, s, "topk_runs", "Top-$K$ training runs against the exact entropy, paired by seed")),
    "topk_runs_sentence": Output("text", lambda s: texts.sentence_file(s.topk_runs, "whole")),
    "topk_runs_figure": Output("figure", lambda s: _paired_figure(s.topk_runs)),
    "matched_alpha": Output("text", lambda s: texts.matched_alpha_text(s.matched_alpha)),
    "topk": Output("table", lambda s: tables.table_topk(s.topk, s.prefix) if s.topk else ""),
    "topk_figure": Output("figure", lambda s: plots.plot_topk(s.topk) if s.topk else None),
}


def file_stem(prefix: str, name: str) -> str:
    """``<prefix>_<name>``; a figure that shares its table's name (``paired``) drops the ``_figure``."""
    return f"{prefix}_{name.removesuffix('_figure')}"


#: Texts that read several studies at once (:mod:`saah_lab.report.texts`), and the source switches of
#: ``paper/main.tex``: all from the committed sources only, so that your own runs never change them.
CROSS_STUDY_FILES = ("studies_overlap", "studies_mini_defers", "studies_closing_note", "studies_sources",
                     "studies_real_model", "studies_real_study", "studies_headline", "studies_earlier_claims",
                     "studies_confirm_provenance", "studies_settings")
#: The sources ``paper/main.tex`` reports (committed); your own runs (``ours``) have ``paper/local.tex``.
STUDY_PREFIXES = ("reported", "mini", "extended", "confirm", "real")
#: The source switch and the marks of what was written for ``paper/local.tex`` (git-ignored, like every ours_ file).
LOCAL_SOURCES_FILE = "ours_sources"
CROSS_HEADER = "% Generated by saah_lab.report.render.render_report. Do not edit by hand: rerun make figures.\n"


def header(origin: str) -> str:
    return f"% Generated by saah_lab.report.render from {origin}. Do not edit by hand: rerun make figures.\n"


# --- 1. check ---------------------------------------------------------------------------------------------------------

def check_sources(sources: dict, paper_reported_dir=PAPER_REPORTED, *, committed: bool = True) -> None:
    """Raise before anything is written: a missing source folder (:class:`MissingSourceError`; only your own runs'
    default folder may be absent) or results that differ from their manifest (a ``committed`` root, every one but
    ``ours``, must have one)."""
    named = {"reported": paper_reported_dir, **sources} if paper_reported_dir else dict(sources)
    for prefix, root in named.items():
        path = in_repo(root)
        if path.is_dir() or (prefix == "ours" and path == in_repo(LOCAL_RESULTS) and not path.exists()):
            continue
        what = "is not a folder" if path.exists() else "does not exist"
        raise MissingSourceError(f"the {prefix!r} source folder {root} {what}; nothing was written or removed "
                                 "(a relative path is taken from the repository root)")
    for prefix, root in named.items():
        path = in_repo(root)
        if path.is_dir() and ((committed and prefix != "ours") or (path / MANIFEST_FILE).is_file()):
            check_manifest(path)


# --- 2. read and make -------------------------------------------------------------------------------------------------

def read_source(prefix: str, root, *, tolerate_problems: bool = False) -> Source:
    """A results root read once for its result set and its evidence (the paired comparisons and the top-K runs are
    separate families: top-K runs never change the main comparison's p-values)."""
    study = read_runs(root, tolerate_problems)
    left_out: list[str] = []
    loaded = (paired_within_variants(study, load_root_evidence(study, tolerate_problems, left_out)), left_out)
    summaries = {which: texts.evidence_summary(study, which, tolerate_problems=tolerate_problems, loaded=loaded)
                 for which in ("plan", "topk")}
    return Source(prefix, ResultSet.from_runs(study), repo_relative(study.root), study.root,
                  paired=summaries["plan"], topk_runs=summaries["topk"],
                  matched_alpha=read_json(study.root / MATCHED_ALPHA_FILE, default={}),
                  topk=read_json(study.root / TOPK_ERROR_FILE, default={}))


def paired_within_variants(study, runs: list) -> list:
    """The runs' evidence, each variant's runs (:func:`saah_lab.analysis.runs.run_variants`) starting from a
    warm start named after it (``tiny-warmstart (steps=1)``): a comparison pairs a run only with a run of the
    same settings and seed, and a variant beside a run of the defaults at the same seed is no duplicate."""
    variants = {str(f.config.get("run_id")): f.config.get("variant", "") for f in study.runs}
    return [dataclasses.replace(r, warm_start=f"{r.warm_start} ({variants[r.run_id]})")
            if variants.get(r.run_id) else r for r in runs]


def make_outputs(source: Source) -> dict[str, object]:
    """Every output of :data:`OUTPUTS` for one source, made in memory."""
    return {name: output.make(source) for name, output in OUTPUTS.items()}


def _has_data(made) -> bool:
    return made is not None and not (isinstance(made, str) and made == "")


# --- 3. write ---------------------------------------------------------------------------------------------------------

def output_paths(kind: str, stem: str, tables_dir: Path, figures_dir: Path) -> list[Path]:
    if kind == "figure":
        return [figures_dir / f"{stem}.{ext}" for ext in ("pdf", "png")]
    return [tables_dir / f"{stem}.{'json' if kind == 'data' else 'tex'}"]


def write_or_remove(kind: str, paths: list[Path], made, origin: str = "") -> list[Path]:
    """Write one output (a table or text with its header, JSON data, or a figure as PDF and PNG), or, when it
    has no data, remove its older copies.  Returns the paths written."""
    if not _has_data(made):
        for path in paths:
            path.unlink(missing_ok=True)
        return []
    for path in paths:
        if kind == "figure":
            plots.save_figure(made, path)
        elif kind == "data":
            atomic_write_json(path, made)
        else:
            atomic_write_text(path, header(origin) + made)
    return paths


def write_outputs(source: Source, made: dict[str, object], tables_dir: Path, figures_dir: Path) -> list[Path]:
    """Write (or remove) every output of one source, as :func:`make_outputs` made them; the paths written."""
    return [path for name, output in OUTPUTS.items()
            for path in write_or_remove(output.kind, output_paths(output.kind, file_stem(source.prefix, name),
                                                                  tables_dir, figures_dir),
                                        made[name], source.origin)]


@contextmanager
def _output_folders(*folders: Path):
    """Hold the output folders for one render and clear what an interrupted render left there."""
    with ExitStack() as held:
        for folder in dict.fromkeys(folders):
            held.enter_context(FolderLock(folder, RENDER_LOCK_FILE, f"the report's output folder {folder}"))
            remove_temp_files(folder)
        yield


# --- the whole report -------------------------------------------------------------------------------------------------

def render_report(sources: dict | None = None, *, paper_reported_dir=PAPER_REPORTED, mini_root=MINI_ROOT,
                  tables_dir=PAPER_TABLES, figures_dir=FIGURES, tolerate_problems: bool = False,
                  verbose: bool = False) -> dict:
    """Write every output of every source; returns ``{"result_sets": ..., "written": {prefix: [paths]}}``.
    ``sources``: prefix -> results root (default :data:`RUN_SOURCES`); a root "" or None (or
    ``paper_reported_dir=None``) leaves that source out, its outputs neither drawn nor removed."""
    if sources is None:
        sources = {**RUN_SOURCES, "mini": mini_root}
    sources = {prefix: root for prefix, root in sources.items() if root not in ("", None)}
    tables_dir, figures_dir = in_repo(tables_dir), in_repo(figures_dir)
    check_sources(sources, paper_reported_dir)
    read = []
    if paper_reported_dir and (in_repo(paper_reported_dir) / "tab_main.csv").is_file():
        read.append(Source("reported", read_paper_reported(in_repo(paper_reported_dir)),
                           repo_relative(in_repo(paper_reported_dir))))
    read += [read_source(prefix, root, tolerate_problems=tolerate_problems) for prefix, root in sources.items()]
    made = {s.prefix: make_outputs(s) for s in read}
    by_prefix = {s.prefix: s for s in read}
    reported = in_repo(paper_reported_dir) if "reported" in by_prefix else None
    cross = cross_study_texts([s for s in read if s.prefix in STUDY_PREFIXES], made, reported)
    with _output_folders(tables_dir, figures_dir):
        written = {}
        for source in read:
            if verbose:
                for warning in source.results.warnings:
                    print(f"WARNING {source.prefix}: {warning}")
            written[source.prefix] = write_outputs(source, made[source.prefix], tables_dir, figures_dir)
            if verbose:
                empty = "" if not source.results.is_empty() else f" (no runs under {source.origin})"
                print(f"{source.prefix}: {len(written[source.prefix])} files{empty}")
        written["studies"] = [tables_dir / f"{name}.tex" for name in CROSS_STUDY_FILES]
        for name, path in zip(CROSS_STUDY_FILES, written["studies"]):
            atomic_write_text(path, CROSS_HEADER + cross[name])
        if "ours" in by_prefix:
            written["ours"].append(write_local_sources(by_prefix["ours"], made["ours"], tables_dir))
    return {"result_sets": {s.prefix: s.results for s in read}, "written": written}


def render_source(root, tables_dir=PAPER_TABLES, figures_dir=FIGURES, prefix: str = "ours", *,
                  tolerate_problems: bool = False) -> dict:
    """Every output of one results root (no cross-study texts): checked, read, made, then written.
    Returns ``{"source": Source, "written": [paths]}``."""
    check_sources({prefix: root}, paper_reported_dir=None, committed=False)
    source = read_source(prefix, root, tolerate_problems=tolerate_problems)
    made = make_outputs(source)
    tables_dir, figures_dir = in_repo(tables_dir), in_repo(figures_dir)
    with _output_folders(tables_dir, figures_dir):
        written = write_outputs(source, made, tables_dir, figures_dir)
        if prefix == "ours":
            written.append(write_local_sources(source, made, tables_dir))
        return {"source": source, "written": written}


def written_names(prefix: str, made: dict[str, object]) -> list[str]:
    """The file stems of one source's tables, texts and figures that have data this time."""
    return [file_stem(prefix, name) for name, out in made.items() if OUTPUTS[name].kind != "data" and _has_data(out)]


def write_local_sources(source: Source, made: dict[str, object], tables_dir: Path) -> Path:
    """``ours_sources.tex``: whether your own runs have results, and what was written, for ``paper/local.tex``."""
    path = tables_dir / f"{LOCAL_SOURCES_FILE}.tex"
    text = texts.sources_tex({"ours": not source.results.is_empty()}, written_names(source.prefix, made))
    atomic_write_text(path, header(source.origin) + text)
    return path


def cross_study_texts(read: list[Source], made: dict[str, dict], reported_dir: Path | None = None) -> dict[str, str]:
    """The overlap sentence, the mini study's pointer to the powered study, the closing note and the source
    switches of the sources ``read`` (the committed ones: :data:`STUDY_PREFIXES`); a text with nothing to say is
    empty (the report inputs every one of them)."""
    roots = {s.prefix: s.root for s in read if s.root is not None}
    summaries = {s.prefix: s.paired for s in read if s.paired is not None}
    by_prefix = {s.prefix: s for s in read}
    present = {prefix: prefix in by_prefix and not by_prefix[prefix].results.is_empty() for prefix in STUDY_PREFIXES}
    names = [name for prefix in by_prefix for name in written_names(prefix, made[prefix])]
    return {
        "studies_overlap": texts.overlap_text(roots),
        "studies_mini_defers": texts.defer_text(summaries.get("mini"), summaries.get("extended")),
        "studies_closing_note": texts.closing_text(summaries, roots,
                                                   {p: s.results.train_logs for p, s in by_prefix.items()}),
        "studies_sources": texts.sources_tex(present, names),
        "studies_real_model": texts.real_model_text(read_json(REAL_MODEL_RECORD, default=None)),
        "studies_real_study": texts.real_study_text(roots.get("real")),
        "studies_headline": texts.headline_text(summaries),
        "studies_earlier_claims": texts.earlier_claims_table(summaries.get("confirm"), summaries.get("extended")),
        "studies_confirm_provenance": _provenance(by_prefix.get("confirm")),
        "studies_settings": settings_table({p: s.results for p, s in by_prefix.items()}, roots, reported_dir),
    }


def _provenance(source: Source | None) -> str:
    """What a study's plan fixed and which commits its runs recorded, from the source as read (its plan in the
    paired evidence, its runs' configs in the result set)."""
    runs = source.results.runs if source is not None else None
    if runs is None or runs.empty:
        return ""
    commits = list(runs["git_commit"]) if "git_commit" in runs else [None] * len(runs)
    return texts.provenance_text((source.paired or {}).get("plan"), commits, source.root / STUDY_PLAN_FILE)


#: What --help says under the options: where each source comes from and what the two reports hold.
HELP_EPILOG = ("Sources: the paper's numbers (results/paper_reported, prefix reported), the mini study (results/mini, "
               "mini), the extended study (results/extended, extended), the confirmatory study (results/confirm, "
               "confirm) and your own runs (results/local, ours). "
               "Tables go to paper/generated/<prefix>_*.tex, figures to figures/<prefix>_*.pdf and .png. "
               "paper/main.tex reports the committed sources only; paper/local.tex reports your own runs.")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m saah_lab.report.render",
                                     description=__doc__.splitlines()[0], epilog=HELP_EPILOG,
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    for prefix, root in RUN_SOURCES.items():
        parser.add_argument(f"--{prefix}-root", default=repo_relative(root), help=f"results root drawn as '{prefix}'")
    parser.add_argument("--paper-reported-dir", default=repo_relative(PAPER_REPORTED), help="the paper's numbers")
    parser.add_argument("--tables-dir", default=repo_relative(PAPER_TABLES), help="LaTeX tables go here")
    parser.add_argument("--figures-dir", default=repo_relative(FIGURES), help="PDF and PNG figures go here")
    parser.add_argument("--tolerate-problems", action="store_true",
                        help="read damaged or incomplete runs anyway, flagged in every output")
    parser.add_argument("--only", metavar="ROOT", help="draw this one results root only, as the prefix --prefix "
                        "(no other source, no texts across studies)")
    parser.add_argument("--prefix", default="ours", help="with --only: the prefix of its outputs")
    args = parser.parse_args(argv)
    sources = {prefix: getattr(args, f"{prefix}_root") for prefix in RUN_SOURCES}
    try:
        if args.only:
            rendered = render_source(args.only, args.tables_dir, args.figures_dir, args.prefix,
                                     tolerate_problems=args.tolerate_problems)
            if rendered["source"].results.is_empty():  # outputs of earlier runs were removed: none is stale
                print(f"error: {args.only} holds no runs (under runs/): nothing to report; older {args.prefix} "
                      "outputs, if any, were removed", file=sys.stderr)
                return 1
            print(f"{args.prefix}: {len(rendered['written'])} files from {args.only}")
            return 0
        render_report(sources, paper_reported_dir=args.paper_reported_dir, tables_dir=args.tables_dir,
                      figures_dir=args.figures_dir, tolerate_problems=args.tolerate_problems, verbose=True)
    except (OSError, ValueError, RuntimeError) as err:  # bad input, named; nothing written before the checks
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
