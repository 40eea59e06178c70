"""bench/make_target.py: the two forms alternated round by round, pytest's summary kept, a failure reported."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import make_target as bench_make

# A stand-in for the project's Makefile: `test` prints a pytest-like summary naming its TEST_ARGS, and fails on "bad"
MAKEFILE = """
TEST_ARGS ?=
setup:
\t@echo set up >> {log}
test:
\t@echo "ran $(TEST_ARGS)" >> {log}
\t@echo "======= 3 passed in 0.01s ($(TEST_ARGS)) ======="
\t@case "$(TEST_ARGS)" in *bad*) exit 4;; esac
"""


@pytest.fixture
def makefile(tmp_path) -> Path:
    path = tmp_path / "Makefile"
    path.write_text(MAKEFILE.format(log=tmp_path / "log"))
    return path


def test_the_forms_alternate_and_the_file_holds_each_trial(makefile, tmp_path, capsys, monkeypatch):
    """Run from inside a make (`make test TEST_ARGS=...`): the caller's variables reach neither form."""
    monkeypatch.setenv("TEST_ARGS", "--from-the-caller")
    monkeypatch.setenv("MAKEFLAGS", " -- TEST_ARGS=--from-the-caller")
    out = tmp_path / "bench"
    status = bench_make.main(["test", "--baseline", "TEST_ARGS=--dist load", "--rounds", "2",
                              "--make", f"make -s -f {makefile}", "--out", str(out)])
    assert status == 0
    files = list(out.glob("*-make-test.json"))
    assert len(files) == 1
    report = json.loads(files[0].read_text())
    assert [t["variant"] for t in report["trials"]] == ["baseline", "current", "current", "baseline"]
    assert report["trials"][0]["command"] == "make test 'TEST_ARGS=--dist load'"
    assert report["trials"][0]["pytest"] == "3 passed in 0.01s (--dist load)"
    assert report["trials"][1]["pytest"] == "3 passed in 0.01s ()"
    assert all(t["exit_status"] == 0 and t["wall_s"] >= 0 for t in report["trials"])
    assert set(report["summary"]) == {"baseline_wall_s_median", "current_wall_s_median", "baseline_over_current"}
    # setup once, untimed, then the four trials in their order
    assert [line.strip() for line in (tmp_path / "log").read_text().splitlines()] == [
        "set up", "ran --dist load", "ran", "ran", "ran --dist load"]


def test_a_failed_trial_is_kept_with_its_output_and_the_exit_status_is_1(makefile, tmp_path, capsys):
    out = tmp_path / "bench"
    status = bench_make.main(["test", "--baseline", "TEST_ARGS=bad", "--make", f"make -s -f {makefile}",
                              "--out", str(out)])
    assert status == 1
    report = json.loads(next(out.glob("*-make-test.json")).read_text())
    failed = [t for t in report["trials"] if t["exit_status"] != 0]
    assert [t["variant"] for t in failed] == ["baseline"] and "3 passed" in failed[0]["output_tail"]
    assert report["summary"] is None
    assert "make test TEST_ARGS=bad exited 2" in capsys.readouterr().err  # make's own status for a failed recipe


@pytest.mark.parametrize("args, message", [(["test"], "give the baseline form"),
                                           (["test", "--baseline", "load"], "not a make variable assignment"),
                                           (["test", "--baseline", "A=1", "--rounds", "0"], "at least 1")])
def test_bad_arguments_are_refused_before_anything_runs(args, message, tmp_path, capsys):
    with pytest.raises(SystemExit) as exited:
        bench_make.main([*args, "--make", f"make -f {tmp_path / 'none'}", "--out", str(tmp_path / "bench")])
    assert exited.value.code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "bench").exists()


@pytest.mark.parametrize("line, summary", [
    ("1558 passed in 493.97s (0:08:13)", "1558 passed in 493.97s (0:08:13)"),
    ("===== 2 failed, 10 passed, 1 warning in 3.10s =====", "2 failed, 10 passed, 1 warning in 3.10s"),
    ("8.99s call     tests/test_notebooks.py::test_x", None)])
def test_pytests_summary_line_is_found(line, summary):
    assert bench_make.pytest_summary(f"....\n{line}\n") == summary
