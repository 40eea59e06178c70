"""The one reading of a results root that the result set, the paired evidence and every output share.

:func:`read_runs` reads a root's run and baseline folders once (strictly, through
:func:`saah_lib.rundir.reader.read_folders`), applies the health rules to each run once
(:mod:`saah_lib.analysis.health`), and refuses a root in which two folders hold the same run:
a copied folder would otherwise count twice in every mean and every test.  Whether a run is
*flagged* is :meth:`StudyRuns.flagged` (the health rules' verdict, ``RunHealth.flagged``), and nowhere else.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from saah_lib.analysis.frames import evals_frame, train_log_frame
from saah_lib.analysis.health import RunHealth, run_health
from saah_lib.paths import in_repo
from saah_lib.rundir import layout
from saah_lib.rundir.reader import RunFolder, duplicate_runs, read_folders


class DuplicateRunError(ValueError):
    """Two folders of one root hold the same run; the message names both folders."""


@dataclass
class StudyRuns:
    """A results root as read once: its run and baseline folders, the problems found, each run's health."""

    root: Path
    runs: list[RunFolder]  # readable run folders (flagged, not dropped, where damaged or incomplete)
    baselines: list[RunFolder]
    warnings: list[str] = field(default_factory=list)  # one line per problem; empty when read strictly
    health: dict[str, RunHealth] = field(default_factory=dict)  # by run folder name
    unreadable: list[str] = field(default_factory=list)  # run folders whose config could not be read

    def run_id(self, folder: RunFolder) -> str:
        return str(folder.config.get("run_id") or folder.path.name)

    def flagged(self, folder: RunFolder) -> bool:
        """Whether a run breaks a health rule: the one definition every table, figure and text uses."""
        return self.health[folder.path.name].flagged


def read_runs(root: str | Path, tolerate_problems: bool = False) -> StudyRuns:
    """Read ``root`` once; a damaged or incomplete run raises unless ``tolerate_problems`` (then it is kept,
    flagged, and named in ``warnings``); two folders with one run id always raise, naming both."""
    root = in_repo(root)
    runs, warnings = read_folders(root, layout.RUNS, tolerate_problems)
    baselines, baseline_warnings = read_folders(root, layout.BASELINES, tolerate_problems)
    _refuse_duplicates(runs)
    readable = {f.path.name for f in runs}
    unreadable = sorted(p.name for p in layout.folders(root, layout.RUNS) if p.name not in readable)
    study = StudyRuns(root, runs, baselines, warnings + baseline_warnings, unreadable=unreadable)
    study.health = {f.path.name: run_health(study.run_id(f), evals_frame(f), train_log_frame(f)) for f in runs}
    return study


def _refuse_duplicates(folders: list[RunFolder]) -> None:
    """A run id in two folders (a copied folder) is an error naming both, tolerated reading or not: neither copy
    can be chosen silently.  The run-folder reader finds them (:func:`saah_lib.rundir.reader.duplicate_runs`)."""
    copies = duplicate_runs(folders)
    if copies:
        raise DuplicateRunError("; ".join(copies) + ". A run counts once in every mean and test, so remove the "
                                "copy (or give it its own run id)")
