"""A run being written is read as a run in progress, never as a damaged one (issue 39, item 17).

The trainer writes a step's per-problem file, then its ``eval.jsonl`` line, then its training-log line,
each line with one append; a reader can see any moment in between, a line half appended included.
"""

import shutil
import threading

import pytest

from saah_lab.rundir.reader import read_run_folder
from saah_lib.jsonio import write_jsonl
from saah_lib.rundir.folder import RunDir

STEPS, EVERY, N_EVAL, RUN_ID = 10, 5, 8, "tiny-grpo-a0-s1"


def _append(path, text):
    with open(path, "a") as f:
        f.write(text)


def _writes(finished, run_dir):
    """Every write of the finished run's files into ``run_dir`` (its config there already), in the trainer's
    order, each line in two parts."""
    run, done = RunDir(run_dir), RunDir(finished)
    eval_lines = done.eval_path.read_text().splitlines(keepends=True)
    train_lines = done.train_log_path.read_text().splitlines(keepends=True)
    for step in range(STEPS + 1):
        if step % EVERY == 0:
            shutil.copy(done.samples_path(step), run.samples_path(step))
            yield f"samples file of step {step}"
            text = eval_lines[step // EVERY]
            _append(run.eval_path, text[:len(text) // 2])
            yield f"half the eval line of step {step}"
            _append(run.eval_path, text[len(text) // 2:])
            yield f"eval line of step {step}"
        if step:
            text = train_lines[step - 1]
            _append(run.train_log_path, text[:20])
            yield f"part of the training line of step {step}"
            _append(run.train_log_path, text[20:])
            yield f"training line of step {step}"


@pytest.fixture
def finished_and_new(tmp_path, run_maker):
    """A finished run, and a folder holding its config only: the same run just started."""
    finished = run_maker(tmp_path / "finished", RUN_ID, "tiny", "grpo", 0.0, 1, steps=STEPS, eval_every=EVERY,
                         n_eval=N_EVAL)
    run_dir = tmp_path / "live" / "runs" / RUN_ID
    (run_dir / "eval_samples").mkdir(parents=True)
    shutil.copy(finished / "config.json", run_dir / "config.json")
    return finished, run_dir


def test_every_moment_of_a_run_being_written_reads_as_in_progress(finished_and_new):
    finished, run_dir = finished_and_new
    for moment in _writes(finished, run_dir):
        folder = read_run_folder(run_dir)
        assert folder.damage == [], moment
    folder = read_run_folder(run_dir)
    assert folder.damage == [] and folder.incomplete == ""
    assert [e["step"] for e in folder.evals] == [0, 5, 10] and len(folder.train_log) == STEPS


def test_a_reader_beside_a_writer_never_sees_damage(finished_and_new):
    """Another thread writes while this one reads, as often as it can (bounded: at most 2,000 reads)."""
    finished, run_dir = finished_and_new
    done = threading.Event()

    def write_all():
        for _ in _writes(finished, run_dir):
            pass
        done.set()

    writer = threading.Thread(target=write_all)
    writer.start()
    damaged, reads = [], 0
    while not done.is_set() and reads < 2000:
        damaged += read_run_folder(run_dir).damage
        reads += 1
    writer.join()
    assert damaged == []
    assert read_run_folder(run_dir).incomplete == ""


def test_a_complete_run_with_a_torn_last_line_or_a_lone_samples_file_is_damaged(tmp_path, run_maker):
    """Nothing appends to a complete run: what is a moment of a run being written is damage there."""
    torn = run_maker(tmp_path, "tiny-grpo-a0-s1", "tiny", "grpo", 0.0, 1, steps=STEPS, eval_every=EVERY,
                    n_eval=N_EVAL, trailing='{"step": 11, "loss"')
    assert sum("torn" in m for m in read_run_folder(torn).damage) == 2  # train_log.jsonl and eval.jsonl
    lone = run_maker(tmp_path, "tiny-grpo-a0-s2", "tiny", "grpo", 0.0, 2, steps=STEPS, eval_every=EVERY,
                    n_eval=N_EVAL)
    write_jsonl(lone / "eval_samples" / "step_0015.jsonl", [])
    assert any("no line of eval.jsonl evaluates step 15" in m for m in read_run_folder(lone).damage)
