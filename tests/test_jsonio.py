import json
import logging
import math

import pytest

from saah_lib.jsonio import append_jsonl, atomic_write_json, read_jsonl


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
