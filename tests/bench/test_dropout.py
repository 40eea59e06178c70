"""bench.dropout: both implementations timed in turn, written as a report a reader can check."""

import json

from bench import dropout


def test_the_report_holds_each_repeat_of_both_and_their_ratio(tmp_path, monkeypatch):
    monkeypatch.setattr(dropout, "CALLS_PER_SHAPE", 1)
    monkeypatch.setattr(dropout, "SHAPES", ((2, 8, 16), (2, 8, 32)))
    assert dropout.main(["--repeats", "2", "--out", str(tmp_path)]) == 0
    report = json.loads(next(tmp_path.glob("*-lora-dropout.json")).read_text())
    assert report["command"] == "python -m bench.dropout --repeats 2"
    assert [len(v) for v in report["cpu_s_per_step"].values()] == [2, 2]
    assert report["calls_per_step"] == 4
    assert report["ratio_torch_to_gap"] > 0
