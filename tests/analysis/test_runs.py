"""The one reading of a results root: every folder once, health once, a copied run refused by both folders."""

import shutil

import pytest

from saah_lib.analysis.runs import DuplicateRunError, read_runs
from saah_lib.rundir.reader import DamagedResultsError


def test_a_root_is_read_once_with_each_runs_health(tmp_path, run_maker, baseline_maker):
    run_maker(tmp_path, "tiny-sa-s0", "tiny", "sa", 0.5, 0)
    # a run that fell from 0.40 at step 0 to 0.20: below the start by more than its half-width (0.096 at N=100),
    # and below its peak of 0.30 at step 5 by more than that one's (0.090)
    run_maker(tmp_path, "tiny-grpo-s0", "tiny", "grpo", 0.0, 0, evals={0: 0.40, 5: 0.30, 10: 0.25, 15: 0.2, 20: 0.2})
    baseline_maker(tmp_path, "tiny_zero_shot", "tiny", 50, 19)
    study = read_runs(tmp_path)
    assert [f.path.name for f in study.runs] == ["tiny-grpo-s0", "tiny-sa-s0"]
    assert [f.path.name for f in study.baselines] == ["tiny_zero_shot"]
    assert study.warnings == [] and study.unreadable == []
    flagged = {study.run_id(f): study.flagged(f) for f in study.runs}
    assert flagged == {"tiny-grpo-s0": True, "tiny-sa-s0": False}
    assert study.health["tiny-grpo-s0"].flags == ("fell_below_start", "fell_back")


def test_a_copied_run_folder_is_an_error_naming_both_folders(tmp_path, run_maker):
    original = run_maker(tmp_path, "tiny-sa-s0", "tiny", "sa", 0.5, 0)
    copy = shutil.copytree(original, tmp_path / "runs" / "tiny-sa-s0 copy")
    for tolerate in (False, True):  # a second copy is never a problem to tolerate: it would count twice
        # strict reading stops in the run-folder reader, tolerant reading in the study's: both name both folders
        with pytest.raises((DuplicateRunError, DamagedResultsError), match="tiny-sa-s0") as err:
            read_runs(tmp_path, tolerate_problems=tolerate)
        assert str(original) in str(err.value) and str(copy) in str(err.value)


def test_damage_stops_the_reading_or_is_flagged_and_named(tmp_path, run_maker):
    run_maker(tmp_path, "tiny-sa-s0", "tiny", "sa", 0.5, 0)
    run_maker(tmp_path, "tiny-ah-s0", "tiny", "ah", 0.5, 0, logged=12)  # stopped at step 12 of 20
    (tmp_path / "runs" / "no-config").mkdir()
    with pytest.raises(DamagedResultsError, match="tiny-ah-s0"):
        read_runs(tmp_path)
    study = read_runs(tmp_path, tolerate_problems=True)
    assert [f.path.name for f in study.runs] == ["tiny-ah-s0", "tiny-sa-s0"]
    assert study.unreadable == ["no-config"]
    assert any("tiny-ah-s0" in w for w in study.warnings) and any("no-config" in w for w in study.warnings)


def test_an_absent_root_has_no_runs(tmp_path):
    study = read_runs(tmp_path / "absent")
    assert study.runs == [] and study.baselines == [] and study.health == {}
