"""Progress lines: the first at once, then at most one per interval, the last once; bars only where they redraw."""

import io
import sys

import pytest

from saah_lib import progress
from saah_lib.progress import ProgressLines


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


@pytest.fixture
def plain(monkeypatch):
    """Output as in papermill or a log file: not a terminal, not a widget-capable kernel."""
    monkeypatch.setattr(progress, "display_kind", lambda: "plain")


def test_lines_are_throttled_and_the_last_is_not_repeated(plain):
    clock, out = Clock(), io.StringIO()
    lines = ProgressLines("warm-start SFT", 100, every_s=20, stream=out, clock=clock)
    for step in range(1, 101):
        clock.now = step * 1.0  # one second per step
        lines.update(step, f"loss {1 / step:.3f}")
    lines.finish(note="loss 0.010")
    assert "\r" not in out.getvalue()  # whole lines, which a log file keeps apart (a tqdm bar redraws with \r)
    printed = out.getvalue().splitlines()
    assert printed[0] == "warm-start SFT: 0/100 steps"
    assert [line.split(":")[1].split()[0] for line in printed[1:]] == ["20/100", "40/100", "60/100", "80/100",
                                                                        "100/100"]
    # 20 s for 20 steps: 80 steps left at one second each (tqdm's format and estimate)
    assert printed[1] == "warm-start SFT: 20/100 steps (20%), 00:20, about 01:20 left, loss 0.050"
    assert printed[-1] == "warm-start SFT: 100/100 steps (100%), 01:40, loss 0.010"


def test_finish_prints_when_the_last_update_was_earlier(plain):
    clock, out = Clock(), io.StringIO()
    lines = ProgressLines("training", 3, every_s=20, stream=out, clock=clock)
    clock.now = 5.0
    lines.update(3)
    lines.finish()
    assert out.getvalue().splitlines() == ["training: 0/3 steps", "training: 3/3 steps (100%), 00:05"]


def test_the_time_left_is_at_the_average_pace_and_hours_show(plain):
    clock = Clock()
    lines = ProgressLines("x", 10, stream=io.StringIO(), clock=clock)
    clock.now = 120.0
    assert lines.line(5) == "x: 5/10 steps (50%), 02:00, about 02:00 left"
    clock.now = 4000.0
    assert lines.line(4) == "x: 4/10 steps (40%), 1:06:40, about 1:40:00 left"


def test_nothing_is_printed_without_progress_or_in_a_terminal(monkeypatch):
    out = io.StringIO()
    ProgressLines("quiet", 5, progress=False, stream=out).finish()
    monkeypatch.setattr(progress, "display_kind", lambda: "terminal")  # the bar says it there
    ProgressLines("terminal", 5, stream=out).finish()
    assert out.getvalue() == ""


def test_where_bars_and_lines_show(monkeypatch):
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False, raising=False)
    assert progress.display_kind() == "plain"  # pytest captures: no terminal, no kernel
    assert not progress.bars_shown() and progress.lines_shown()
    assert progress.bar(range(3), desc="x").disable
    monkeypatch.setattr(progress, "display_kind", lambda: "widget")
    assert progress.bars_shown() and progress.lines_shown() and not progress.bars_shown(False)


# --------------------------------------------------------------------------- jobs in other processes


def _log(path, steps, torn=False):
    text = "".join(f'{{"step": {s}, "loss": 0.1}}\n' for s in steps)
    path.write_text(text + ('{"step": 9' if torn else ""))


def test_last_step_reads_the_last_complete_line(tmp_path):
    log = tmp_path / "train_log.jsonl"
    assert progress.last_step(log) == 0  # not written yet
    _log(log, [1, 2, 3], torn=True)  # a worker is writing step 9
    assert progress.last_step(log) == 3


def test_follow_logs_prints_lines_of_jobs_that_run_elsewhere(plain, tmp_path):
    from saah_lib.progress import FollowLogs

    clock, out = Clock(), io.StringIO()
    a, b, done_before = tmp_path / "a.jsonl", tmp_path / "b.jsonl", tmp_path / "c.jsonl"
    _log(done_before, [1, 2])
    follow = FollowLogs({"a": (a, 4), "b": (b, 4), "c": (done_before, 2)}, every_s=20, stream=out, clock=clock)
    follow.poll()
    assert out.getvalue() == ""  # nothing started, and c was complete before
    _log(a, [1])
    clock.now = 10.0
    follow.poll()
    clock.now = 30.0
    _log(a, [1, 2])
    follow.poll()
    clock.now = 40.0
    _log(a, [1, 2, 3, 4])
    _log(b, [1, 2, 3, 4])  # b ran from start to end between two polls
    follow.poll()
    follow.poll()  # a finished job prints nothing more
    assert out.getvalue().splitlines() == [
        "training a: 0/4 steps",
        "training a: 2/4 steps (50%), 00:20, about 00:20 left",
        "training a: 4/4 steps (100%), 00:30",
        "training b: 0/4 steps",
        "training b: 4/4 steps (100%), 00:00",
    ]


def test_follow_logs_polls_in_a_thread_and_once_more_at_the_end(plain, tmp_path):
    from saah_lib.progress import FollowLogs

    out, log = io.StringIO(), tmp_path / "a.jsonl"
    with FollowLogs({"a": (log, 2)}, poll_s=0.01, stream=out):
        _log(log, [1, 2])
    assert out.getvalue().splitlines()[-1].startswith("training a: 2/2 steps (100%)")


def test_quiet_libraries_filters_the_known_warning_and_turns_off_the_hub_bars(monkeypatch):
    import warnings

    from huggingface_hub.utils import are_progress_bars_disabled, enable_progress_bars

    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "0")  # restored after the test
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        progress.quiet_libraries()
        warnings.warn("`is_gradient_checkpointing` is deprecated and will be removed in v6.", FutureWarning)
        warnings.warn("another FutureWarning", FutureWarning)  # only the known one is filtered
    try:
        assert [str(w.message) for w in caught] == ["another FutureWarning"]
        assert are_progress_bars_disabled()
    finally:
        # read at the hub's import: where the environment set it, the bars were off before the test too
        if not sys.modules["huggingface_hub.utils.tqdm"].HF_HUB_DISABLE_PROGRESS_BARS:
            enable_progress_bars()
