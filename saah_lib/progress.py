"""Progress that a person sees within seconds, in a terminal, a notebook, papermill or a log file.

Two kinds, each used only where it shows well (:func:`display_kind`):

* **bars** (``tqdm.auto``): in a terminal (redrawn in place on stderr) and in a Jupyter kernel
  with ipywidgets (one widget updated in place, so an executed notebook stays small). Anywhere
  else a bar prints one line per update, so :func:`bar` is off there.
* **lines** (:class:`ProgressLines`): short lines on stdout, the first at once, then at most one
  every ``every_s`` seconds, and the last, wherever stdout is not a terminal (papermill's
  ``--stdout-file /dev/stdout``, a log file, an executed notebook).

Jobs in other processes (Ray workers, papermill jobs) get the same lines from the logs they write
(:class:`FollowLogs`). Libraries' own bars and known deprecation warnings, which say nothing to a
reader of our lines, are turned off in runs (:func:`quiet_libraries`).
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import threading
import time
import warnings
from pathlib import Path
from typing import Callable, TextIO

from tqdm.auto import tqdm

#: seconds between two progress lines: a few lines a minute, so a 4-minute build prints about a dozen
EVERY_S = 20.0


def _in_jupyter_kernel() -> bool:
    ipython = sys.modules.get("IPython")  # never imported here: a kernel has imported it already
    shell = ipython.get_ipython() if ipython is not None else None
    return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"


def display_kind() -> str:
    """Where progress goes: ``"widget"`` (a Jupyter kernel with ipywidgets), ``"terminal"``, or ``"plain"``
    (a kernel without ipywidgets, a pipe, a log file: only whole lines show well there)."""
    if _in_jupyter_kernel():
        return "widget" if importlib.util.find_spec("ipywidgets") is not None else "plain"
    return "terminal" if sys.stderr.isatty() else "plain"


def bars_shown(progress: bool = True) -> bool:
    return progress and display_kind() != "plain"


def lines_shown(progress: bool = True) -> bool:
    return progress and display_kind() != "terminal"


def bar(iterable=None, *, desc: str, progress: bool = True, **kwargs) -> tqdm:
    """``tqdm.auto`` where a bar redraws in place (terminal, widget); a silent one elsewhere."""
    return tqdm(iterable, desc=desc, disable=not bars_shown(progress), **kwargs)


#: A progress line as tqdm formats it; while a job runs, the time left at its average pace follows the elapsed time.
LINE_FORMAT = "{desc}: {n_fmt}/{total_fmt} {unit} ({percentage:.0f}%), {elapsed}"


class ProgressLines:
    """Throttled progress lines for a job of ``total`` units: ``what: 240/2400 steps (10%), 00:31, about 04:39
    left, loss 0.412``.  The first line is printed by the constructor, the last by :meth:`finish`.

    tqdm formats each line and estimates the time left (:meth:`tqdm.tqdm.format_meter`); the lines are printed
    here, whole, because a tqdm bar redraws itself with carriage returns, which a log file keeps as one line."""

    def __init__(self, what: str, total: int, *, unit: str = "steps", progress: bool = True,
                 every_s: float = EVERY_S, stream: TextIO | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.what, self.total, self.unit, self.every_s = what, total, unit, every_s
        self.enabled = lines_shown(progress)
        self.stream, self.clock = stream, clock
        self.started = self.last = clock()
        self.last_done = 0
        self.lines: list[str] = []  # what was printed (tests read it)
        self._print(f"{what}: 0/{total} {unit}")

    def _print(self, line: str) -> None:
        self.lines.append(line)
        if self.enabled:
            print(line, file=self.stream or sys.stdout, flush=True)

    def line(self, done: int, note: str = "") -> str:
        left = ", about {remaining} left" if 0 < done < self.total else ""
        return tqdm.format_meter(done, self.total, self.clock() - self.started, prefix=self.what, unit=self.unit,
                                 bar_format=LINE_FORMAT + left + "{postfix}", postfix=note)

    def update(self, done: int, note: str = "") -> bool:
        """Print a line if ``every_s`` seconds passed since the last one; returns whether it printed."""
        if self.clock() - self.last < self.every_s:
            return False
        self.last, self.last_done = self.clock(), done
        self._print(self.line(done, note))
        return True

    def finish(self, done: int | None = None, note: str = "") -> None:
        """The last line (not repeated when the last update already said it)."""
        done = self.total if done is None else done
        if done != self.last_done or len(self.lines) == 1:
            self._print(self.line(done, note))
        self.last_done = done


def say(text: str, progress: bool = True) -> None:
    """One line of news (a build starting, a run done), wherever progress is shown."""
    if progress:
        print(text, flush=True)


#: Warnings of libraries that a run triggers every time and that say nothing about it: (message start, category).
#: TRL 1.16 uses transformers 5's deprecated gradient-checkpointing names: it reads
#: ``model.is_gradient_checkpointing`` at every generation, calls ``gradient_checkpointing_enable``/``_disable``
#: around it, and its ``GRPOConfig`` sets the ``gradient_checkpointing`` argument by default.
KNOWN_LIBRARY_WARNINGS = (
    (r"`is_gradient_checkpointing` is deprecated", FutureWarning),
    (r"`gradient_checkpointing_(en|dis)able` is deprecated", FutureWarning),
    (r"`gradient_checkpointing` is deprecated", FutureWarning),
)


def quiet_libraries() -> None:
    """Turn off the progress bars of huggingface_hub and transformers (``Loading weights``, ``Writing model
    shards``: one per model load and checkpoint, each a 0% line in a log) and filter :data:`KNOWN_LIBRARY_WARNINGS`
    in this process.  Our own bars and lines are untouched.  Called by every run; idempotent."""
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"  # read by processes started from here, and at hub import
    for message, category in KNOWN_LIBRARY_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=category)
    # Libraries loaded already read the variable at their import: switch them off through their own functions.
    if "huggingface_hub.utils" in sys.modules:
        sys.modules["huggingface_hub.utils"].disable_progress_bars()
    if "transformers.utils.logging" in sys.modules:  # it copies the hub's switch at its import
        sys.modules["transformers.utils.logging"].disable_progress_bar()


def last_step(log: Path) -> int:
    """The ``step`` of the last complete line of a JSON-lines log (0 while it is missing or empty)."""
    try:
        text = Path(log).read_bytes()
    except FileNotFoundError:
        return 0
    complete = text[:text.rfind(b"\n") + 1].splitlines()
    for line in reversed(complete):
        try:
            return int(json.loads(line)["step"])
        except (ValueError, KeyError, TypeError):
            continue
    return 0


class FollowLogs:
    """Progress lines of jobs that run in other processes, read from the logs they write.

    ``jobs``: name -> (log file, units in all); a unit is done when a complete line with that ``step`` is in
    the log.  Used as a context manager around the call that runs the jobs: a thread polls the logs every
    ``poll_s`` seconds and prints, per job, :class:`ProgressLines` from its first logged step to its last.
    """

    def __init__(self, jobs: dict[str, tuple[Path, int]], *, what: str = "training", unit: str = "steps",
                 progress: bool = True, poll_s: float = 2.0, every_s: float = EVERY_S, stream: TextIO | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.jobs, self.what, self.unit, self.poll_s = dict(jobs), what, unit, poll_s
        self.progress, self.every_s, self.stream, self.clock = progress, every_s, stream, clock
        self.started = {name: last_step(log) for name, (log, _) in self.jobs.items()}  # done before: not news
        self.lines: dict[str, ProgressLines] = {}
        self.finished: set[str] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def poll(self) -> None:
        for name, (log, total) in self.jobs.items():
            if name in self.finished:
                continue
            done = last_step(log)
            if name not in self.lines:
                if done == self.started[name]:
                    continue  # not started yet (or complete before: nothing to follow)
                self.lines[name] = ProgressLines(f"{self.what} {name}", total, unit=self.unit, progress=self.progress,
                                                 every_s=self.every_s, stream=self.stream, clock=self.clock)
            if done >= total:
                self.lines[name].finish(done)
                self.finished.add(name)
            else:
                self.lines[name].update(done)

    def _follow(self) -> None:
        while not self._stop.wait(self.poll_s):
            self.poll()

    def __enter__(self) -> "FollowLogs":
        self._thread = threading.Thread(target=self._follow, daemon=True, name="follow-logs")
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.poll()
