"""One writer per run folder and per study root: an OS lock that a killed holder cannot leave behind."""

import os
import signal

import pytest

from saah_lab.rundir.lock import FolderLockedError, run_lock, study_lock
from saah_lib.rundir.layout import RUN_LOCK_FILE, STUDY_LOCK_FILE


def test_a_second_writer_of_a_run_is_refused_with_the_holders_pid(tmp_path, lock_holder):
    run = tmp_path / "runs" / "tiny-sa-a0.5-s0"
    first = lock_holder("run", run)
    with pytest.raises(FolderLockedError, match=rf"run 'tiny-sa-a0.5-s0' \({run}\) is being written by another "
                                                rf"process \(pid {first.pid}, lock {run / RUN_LOCK_FILE}\)"):
        run_lock(run).acquire()


def test_a_lock_left_by_a_killed_process_is_no_obstacle(tmp_path, lock_holder):
    run = tmp_path / "run"
    first = lock_holder("run", run)
    first.send_signal(signal.SIGKILL)
    first.wait()
    assert (run / RUN_LOCK_FILE).read_text().strip() == str(first.pid)  # the file stays: it means nothing
    with run_lock(run):
        assert (run / RUN_LOCK_FILE).read_text().strip() == str(os.getpid())
    assert not (run / RUN_LOCK_FILE).exists()  # a released lock leaves no file in the run folder


def test_two_locks_of_one_folder_exclude_each_other_even_in_one_process(tmp_path):
    with run_lock(tmp_path / "run"):
        with pytest.raises(FolderLockedError, match=f"pid {os.getpid()}"):
            run_lock(tmp_path / "run").acquire()
    with run_lock(tmp_path / "run"):  # released: free again
        pass


def test_the_study_lock_is_reentrant_in_its_process_and_exclusive_between_processes(tmp_path, lock_holder):
    root = tmp_path / "study"
    with study_lock(root):
        with study_lock(root):  # a study's stages hold the root again
            assert (root / STUDY_LOCK_FILE).is_file()
        assert (root / STUDY_LOCK_FILE).is_file()  # still held by the outer one
    assert not (root / STUDY_LOCK_FILE).exists()
    first = lock_holder("study", root)
    with pytest.raises(FolderLockedError, match=rf"results root {root} is being written by another process "
                                                rf"\(pid {first.pid}"):
        with study_lock(root):
            pass
