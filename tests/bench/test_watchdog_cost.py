"""bench/watchdog.py: both versions timed on one live Ray instance; a revision git does not have refused
before Ray starts."""

from __future__ import annotations

import json
import os

import pytest
import ray

from bench import watchdog as bench_watchdog


def test_a_revision_git_does_not_have_is_refused_before_ray_starts(tmp_path):
    with pytest.raises(SystemExit, match="--baseline-rev no-such-revision: git has no saah_lab/studies/watchdog.py"):
        bench_watchdog.main(["--baseline-rev", "no-such-revision", "--out", str(tmp_path)])
    assert not ray.is_initialized() and not list(tmp_path.iterdir())


@pytest.mark.slow
def test_both_versions_are_timed_each_round_on_the_same_processes(tmp_path):
    assert bench_watchdog.main(["--baseline-rev", "HEAD", "--rounds", "2", "--calls", "2",
                                "--out", str(tmp_path)]) == 0
    (written,) = tmp_path.glob("*-watchdog-look.json")
    report = json.loads(written.read_text())
    assert [len(report["cpu_ms_per_look"][name]) for name in ("baseline", "current")] == [2, 2]
    assert report["instance_processes"] >= 4  # the GCS server, the raylet and two workers at least
    assert report["summary"]["current_share_of_a_core"] > 0 and not ray.is_initialized()
    assert "RAY_AUTH_TOKEN_PATH" not in os.environ  # the marker does not outlive the instance
