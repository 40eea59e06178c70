"""The reader's cache (saah_lab.rundir.read_cache): a kept result is used only for the same folder content and
code, and never changes what is read (issue 39, item 15)."""

import os

from saah_lab.rundir import read_cache
from saah_lab.rundir.reader import read_folders, read_run_folder

RUN_ID = "tiny-grpo-a0-s1"


def _read(root):
    return read_folders(root, "runs", tolerate_problems=True)


def test_a_kept_result_is_the_result(tmp_path, run_maker, monkeypatch):
    monkeypatch.setenv(read_cache.CACHE_ENV, str(tmp_path / "cache"))
    run_maker(tmp_path / "root", RUN_ID, "tiny", "grpo", 0.0, 1)
    first, kept = _read(tmp_path / "root"), _read(tmp_path / "root")
    assert list((tmp_path / "cache").glob("*.pickle"))
    monkeypatch.setenv(read_cache.CACHE_ENV, "off")
    assert first == kept == _read(tmp_path / "root")


def test_a_file_rewritten_with_its_size_and_times_is_read_again(tmp_path, run_maker, monkeypatch):
    """Only the content tells: the same size, modification and access times, one digit changed."""
    monkeypatch.setenv(read_cache.CACHE_ENV, str(tmp_path / "cache"))
    run_dir = run_maker(tmp_path / "root", RUN_ID, "tiny", "grpo", 0.0, 1)
    assert read_run_folder(run_dir).damage == []
    assert read_cache.cached(run_dir, "read_run_folder", lambda: read_run_folder(run_dir)).damage == []
    config = run_dir / "config.json"
    times = os.stat(config)
    text = config.read_text()
    config.write_text(text.replace('"seed": 1', '"seed": 2'))
    os.utime(config, ns=(times.st_atime_ns, times.st_mtime_ns))
    assert os.path.getsize(config) == times.st_size
    (folder,), _ = _read(tmp_path / "root")
    assert any("seed 2 (the run id says 1)" in m for m in folder.damage)


def test_a_damaged_entry_is_computed_again(tmp_path, run_maker, monkeypatch):
    monkeypatch.setenv(read_cache.CACHE_ENV, str(tmp_path / "cache"))
    run_maker(tmp_path / "root", RUN_ID, "tiny", "grpo", 0.0, 1)
    first = _read(tmp_path / "root")
    for entry in (tmp_path / "cache").glob("*.pickle"):
        entry.write_bytes(b"not a pickle")
    assert _read(tmp_path / "root") == first


def test_off_writes_nothing(tmp_path, run_maker, monkeypatch):
    monkeypatch.setenv(read_cache.CACHE_ENV, "off")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    run_maker(tmp_path / "root", RUN_ID, "tiny", "grpo", 0.0, 1)
    _read(tmp_path / "root")
    assert not (tmp_path / "xdg").exists()


def test_the_variants_of_many_runs_take_comparisons_by_setting_not_by_run_pair(monkeypatch):
    """300 runs of one method at one setting: a few comparisons, not 300 x 300 (a root of 1,000 runs took minutes)."""
    from pathlib import Path

    from saah_lab.analysis import runs
    from saah_lab.rundir.reader import RunFolder

    calls = []
    compare = runs.differences
    monkeypatch.setattr(runs, "differences", lambda cfg, ref: calls.append(1) or compare(cfg, ref))
    folders = [RunFolder(Path(f"tiny-sa-a0.5-s{seed}"), {
        "run_id": f"tiny-sa-a0.5-s{seed}", "profile": "tiny", "method": "sa", "alpha": 0.5, "seed": seed,
        "model_label": "tiny", "steps": 60, "learning_rate": 1e-5}) for seed in range(300)]
    assert set(runs.run_variants(folders).values()) == {""}
    assert len(calls) < 1000
