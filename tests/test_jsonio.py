import json
import logging
import math

import pytest

from saah_lib.jsonio import append_jsonl, atomic_write_json, read_jsonl, remove_temp_files, write_jsonl


def test_nan_is_written_as_null(tmp_path):
    append_jsonl(tmp_path / "a.jsonl", {"step": 1, "weight_neg_mean": float("nan"), "kl": math.inf})
    assert read_jsonl(tmp_path / "a.jsonl") == [{"step": 1, "weight_neg_mean": None, "kl": None}]


def test_torn_last_line_is_ignored_but_a_torn_middle_line_is_an_error(tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_text('{"step": 1}\n{"step": 2}\n{"ste')
    assert [r["step"] for r in read_jsonl(path)] == [1, 2]
    path.write_text('{"step": 1}\n{"ste\n{"step": 3}\n')
    with pytest.raises(ValueError, match="line 2"):
        read_jsonl(path)


def test_a_finished_file_has_no_torn_tail_and_tolerant_reading_warns(tmp_path, caplog):
    path = tmp_path / "x.jsonl"
    path.write_text('{"a": 1}\n\n{"a": 2}\n{"a": 3, "b"')
    assert read_jsonl(path) == [{"a": 1}, {"a": 2}]  # a log still being written
    with pytest.raises(ValueError, match=r"x.jsonl: line 4: not valid JSON"):
        read_jsonl(path, finished=True)
    path.write_text('{"a": 1}\nnot json\n\n{"a": 2}\n{"a": 3, "b"')
    with caplog.at_level(logging.WARNING):
        assert read_jsonl(path, strict=False) == [{"a": 1}, {"a": 2}]
    assert sum("line 2" in r.message for r in caplog.records) == 1  # only the middle line warns
    assert read_jsonl(tmp_path / "missing.jsonl") == []


def test_atomic_write_leaves_no_temporary_file(tmp_path):
    atomic_write_json(tmp_path / "c.json", {"a": (1, 2)})
    assert json.loads((tmp_path / "c.json").read_text()) == {"a": [1, 2]}
    assert [p.name for p in tmp_path.iterdir()] == ["c.json"]


def test_failed_atomic_write_keeps_the_old_file(tmp_path):
    atomic_write_json(tmp_path / "c.json", {"a": 1})
    with pytest.raises(TypeError):
        atomic_write_json(tmp_path / "c.json", {"a": 2, "b": object()})
    assert json.loads((tmp_path / "c.json").read_text()) == {"a": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["c.json"]




@pytest.mark.parametrize("mask", [0o022, 0o077, 0o002])
def test_atomic_writes_give_a_new_files_ordinary_permissions(tmp_path, mask):
    import os
    import stat

    old = os.umask(mask)
    try:
        atomic_write_json(tmp_path / "a.json", {"x": 1})
        write_jsonl(tmp_path / "b.jsonl", [{"step": 1}])
        with open(tmp_path / "reference", "w") as f:  # what open() gives a new file
            f.write("x")
    finally:
        os.umask(old)
    want = stat.S_IMODE((tmp_path / "reference").stat().st_mode)
    assert want == 0o666 & ~mask  # not mkstemp's 0600
    for name in ("a.json", "b.jsonl"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == want, name


def test_temporary_files_of_interrupted_writes_are_removed_and_nothing_else(tmp_path):
    stale = [tmp_path / ".eval.jsonl.3fa9c1d2e4b5.tmp", tmp_path / ".config.json.k2_x9abc.tmp"]  # ours, mkstemp's
    kept = [tmp_path / "eval.jsonl", tmp_path / ".run.lock", tmp_path / "notes.tmp", tmp_path / ".hidden"]
    for path in stale + kept:
        path.write_text("half")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / ".x.json.abc123.tmp").write_text("half")  # another folder: not this one's
    assert remove_temp_files(tmp_path) == sorted(stale)
    assert all(p.exists() for p in kept) and not any(p.exists() for p in stale)
    assert (tmp_path / "sub" / ".x.json.abc123.tmp").exists()
    assert remove_temp_files(tmp_path / "missing") == []


def test_bytes_that_are_not_utf8_are_named_by_file_and_line(tmp_path):
    from saah_lib.jsonio import read_json, read_text, scan_jsonl

    log = tmp_path / "log.jsonl"
    log.write_bytes(b'{"step": 1}\n{"step": 2, "note": "caf\xe9"}\n{"step": 3}\n')
    records, problems = scan_jsonl(log)
    assert [r["step"] for _, r in records] == [1, 3]
    assert problems == [(2, "not UTF-8 text (byte 0xe9 at column 25)")]
    with pytest.raises(ValueError, match=r"log.jsonl: line 2: not UTF-8 text"):
        read_jsonl(log, finished=True)
    config = tmp_path / "config.json"
    config.write_bytes(b'{\n  "a": 1,\n  "b": "\xff"\n}\n')
    for read in (read_json, read_text):
        with pytest.raises(ValueError, match=r"config.json: line 3: not UTF-8 text \(byte 0xff at column 9"):
            read(config)


def test_invalid_json_in_a_whole_file_names_it(tmp_path):
    from saah_lib.jsonio import read_json

    path = tmp_path / "c.json"
    path.write_text('{"a": 1,\n "b": }\n')
    with pytest.raises(json.JSONDecodeError, match=r"c.json: line 2: not valid JSON"):
        read_json(path)


def _no_space(*args, **kwargs):
    import errno

    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_full_disk_is_reported_as_such_with_the_path_and_keeps_what_was_written(tmp_path, monkeypatch):
    import saah_lib.jsonio as jsonio

    target = tmp_path / "runs" / "r1" / "config.json"
    atomic_write_json(target, {"a": 1})
    log = tmp_path / "runs" / "r1" / "train_log.jsonl"
    append_jsonl(log, {"step": 1})
    monkeypatch.setattr(jsonio.os, "fsync", _no_space)
    with pytest.raises(jsonio.DiskFullError, match=rf"No space left on device while writing {target}"):
        atomic_write_json(target, {"a": 2})
    with pytest.raises(jsonio.DiskFullError, match=rf"No space left on device while appending to {log}"):
        append_jsonl(log, {"step": 2})
    monkeypatch.undo()
    assert json.loads(target.read_text()) == {"a": 1}
    assert sorted(p.name for p in target.parent.iterdir()) == ["config.json", "train_log.jsonl"]  # no temp file
    assert [r["step"] for r in read_jsonl(log)][0] == 1


def test_torchs_short_write_counts_as_a_full_disk_only_when_the_disk_is_full(tmp_path, monkeypatch):
    import saah_lib.jsonio as jsonio

    short = RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 4160 vs 4096")
    assert not jsonio.is_disk_full(short, tmp_path / "optimizer.pt")
    monkeypatch.setattr(jsonio, "_free_bytes", lambda path: 0)
    assert jsonio.is_disk_full(short, tmp_path / "optimizer.pt")
    assert not jsonio.is_disk_full(RuntimeError("size mismatch"), tmp_path / "optimizer.pt")
