"""A run's record says whether its checkout was clean: ``git_dirty`` beside the commit (which carries ``-dirty``)."""

import subprocess

from saah_lab.rundir.provenance import git_state, provenance


def _git(repo, *args):
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True,
                   capture_output=True)


def test_the_record_says_whether_tracked_files_differ_from_the_commit(tmp_path):
    _git(tmp_path, "init", "-q")
    (tmp_path / "a.py").write_text("x = 1\n")
    _git(tmp_path, "add", "a.py")
    _git(tmp_path, "commit", "-q", "-m", "a")
    commit, dirty = git_state(tmp_path)
    assert dirty is False and len(commit) == 40
    (tmp_path / "untracked.txt").write_text("not part of the checkout\n")
    assert git_state(tmp_path) == (commit, False)
    (tmp_path / "a.py").write_text("x = 2\n")  # the planted local change
    record = provenance(tmp_path)
    assert (record["git_commit"], record["git_dirty"]) == (commit + "-dirty", True)


def test_outside_a_checkout_nothing_is_claimed(tmp_path):
    assert git_state(tmp_path / "nowhere") == (None, None)
