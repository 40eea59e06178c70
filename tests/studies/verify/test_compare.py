"""``python -m saah_lab.studies.verify compare``: one run against the committed run of the same name."""

import json
import shutil
import subprocess
import sys

import pytest

from saah_lab.studies.verify.compare import compare_one, main
from saah_lib.paths import MINI_ROOT, REPO_ROOT

RUN = "tiny-sa-a0.5-s0"


def _copy_of_committed_run(tmp_path):
    copy = tmp_path / "runs" / RUN
    shutil.copytree(MINI_ROOT / "runs" / RUN, copy)
    return copy


def _edit_jsonl(path, step, key, change):
    records = [json.loads(line) for line in path.read_text().splitlines()]
    for r in records:
        if r["step"] == step:
            r[key] = change(r[key])
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def test_a_copy_of_a_committed_run_is_identical(tmp_path, capsys):
    assert main(["compare", str(_copy_of_committed_run(tmp_path))]) == 0
    out = capsys.readouterr().out
    assert f"against the committed results/mini/runs/{RUN}" in out and "identical" in out


def test_changed_numbers_are_named_with_their_size_and_step(tmp_path):
    copy = _copy_of_committed_run(tmp_path)
    _edit_jsonl(copy / "train_log.jsonl", 3, "loss", lambda v: v + 0.25)
    _edit_jsonl(copy / "train_log.jsonl", 7, "kl", lambda v: v + 0.001)
    config = json.loads((copy / "config.json").read_text())
    config["learning_rate"] = config.get("learning_rate", 0) * 2 + 1e-6
    (copy / "config.json").write_text(json.dumps(config))
    status, text = compare_one(copy, MINI_ROOT)
    assert status == 1, text
    lines = text.splitlines()
    assert lines[1] == "  settings differ: learning_rate"
    # the largest first, each with the step where it is largest (hand-made differences of 0.25 and 0.001)
    assert lines[2] == "  train log, largest differences: loss 0.25 (step 3), kl 0.001 (step 7)"
    assert len(lines) == 3  # nothing else changed


def test_a_missing_step_and_a_rescored_problem_are_reported(tmp_path):
    copy = _copy_of_committed_run(tmp_path)
    log = copy / "train_log.jsonl"
    log.write_text("".join(line + "\n" for line in log.read_text().splitlines()[:-1]))  # the last step lost
    samples = sorted((copy / "eval_samples").iterdir())[-1]
    records = [json.loads(line) for line in samples.read_text().splitlines()]
    records[0]["correct"] = not records[0]["correct"]
    samples.write_text("".join(json.dumps(r) + "\n" for r in records))
    status, text = compare_one(copy, MINI_ROOT)
    assert status == 1
    assert "train log: steps only the committed run has: 60" in text
    assert f"problems scored differently ({records[0]['id']})" in text


@pytest.mark.slow
def test_no_committed_run_of_that_name_is_exit_status_2(tmp_path):
    other = tmp_path / "runs" / "tiny-sa-a0.5-s99"
    other.mkdir(parents=True)
    done = subprocess.run([sys.executable, "-m", "saah_lab.studies.verify", "compare", str(other)], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "holds no run named tiny-sa-a0.5-s99" in done.stderr


# unreadable or nothing to compare: exit status 2 naming the file, never "identical" or "differs" (issue 39, item 6)

def test_a_torn_last_log_line_is_unreadable_not_identical(tmp_path, capsys):
    copy = _copy_of_committed_run(tmp_path)
    log = copy / "train_log.jsonl"
    log.write_text(log.read_text() + '{"step": 61, "loss": 0.')  # a write cut short after the run's last step
    assert main(["compare", str(copy)]) == 2
    err = capsys.readouterr().err
    assert f"{log}: line 61: not valid JSON" in err and "cannot compare" in err


def test_an_empty_folder_is_nothing_to_compare(tmp_path, capsys):
    empty = tmp_path / "runs" / RUN
    empty.mkdir(parents=True)
    assert main(["compare", str(empty)]) == 2
    assert f"{empty / 'config.json'}: missing" in capsys.readouterr().err


def test_a_garbage_line_is_unreadable_without_a_traceback(tmp_path, capsys):
    copy = _copy_of_committed_run(tmp_path)
    samples = sorted((copy / "eval_samples").iterdir())[0]
    lines = samples.read_text().splitlines(keepends=True)
    samples.write_text("".join(lines[:2] + ["garbage\n"] + lines[2:]))
    assert main(["compare", str(copy)]) == 2
    assert f"{samples}: line 3: not valid JSON" in capsys.readouterr().err
