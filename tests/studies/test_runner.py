"""The study runner prints one line per finished run (the workers are silent)."""

from saah_lib.studies.runner import run_line


def test_one_line_per_run_with_time_memory_and_pass_at_1():
    entry = {"run_id": "tiny-sa-a0.5-s0", "wall_s": 51.6, "peak_rss_mb": 590.4}
    evals = [{"step": 0, "pass_at_1": 0.27}, {"step": 60, "pass_at_1": 0.42}]
    assert run_line(3, 15, entry, evals) == "[3/15] tiny-sa-a0.5-s0: 52 s, 590 MB, Pass@1 0.270 -> 0.420"
    assert run_line(1, 1, entry, []) == "[1/1] tiny-sa-a0.5-s0: 52 s, 590 MB"
