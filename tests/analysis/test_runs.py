"""The one reading of a results root: every folder once, health once, a copied run refused by both folders, and
runs whose settings differ named by what differs."""

import json
import shutil

import pytest

from saah_lab.analysis.runs import DuplicateRunError, read_runs, run_variants
from saah_lab.rundir.reader import DamagedResultsError, read_folders
from saah_lib.paths import RESULTS
from saah_lib.training.profiles import PROFILE_STEPS


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
    flagged = {f.config["run_id"]: study.flagged(f) for f in study.runs}
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


# ------------------------------------------------------------------ variants: runs whose settings differ

@pytest.fixture
def twenty_step_profile(monkeypatch):
    """The tiny profile trains 20 steps here, as many as the synthetic logs of ``run_maker`` stay valid for."""
    monkeypatch.setitem(PROFILE_STEPS, "tiny", {"grpo": 20, "ah": 20, "sa": 20})


def tiny_run(run_maker, root, method, alpha, seed, steps=20, run_id=None, **settings):
    """A run folder whose config is the tiny profile's: its default id unless one is given, ``settings`` on top."""
    run_id = run_id or f"tiny-{method}-a{alpha:g}-s{seed}"
    folder = run_maker(root, run_id, "tiny", method, alpha, seed, steps=steps, eval_every=20,
                       evals={0: 0.3, steps: 0.5 + 0.01 * seed})
    cfg = json.loads((folder / "config.json").read_text())
    cfg.update({"profile": "tiny", "model_name": "tiny-warmstart", "learning_rate": 2e-4,
                "warmup_steps": max(5, steps // 10), "generation_backend": "auto", **settings})
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder


@pytest.mark.usefixtures("twenty_step_profile")
def test_a_variant_of_the_same_seed_is_labelled_by_what_differs(tmp_path, run_maker):
    tiny_run(run_maker, tmp_path, "sa", 0.5, 0)
    tiny_run(run_maker, tmp_path, "sa", 0.5, 1)
    tiny_run(run_maker, tmp_path, "sa", 0.5, 0, steps=1, run_id="tiny-sa-a0.5-s0-steps1")
    tiny_run(run_maker, tmp_path, "sa", 0.5, 0, steps=1, run_id="tiny-sa-a0.5-s0-steps1-generation_backend=hf",
             generation_backend="hf")
    tiny_run(run_maker, tmp_path, "grpo", 0.0, 0, steps=2, run_id="tiny-grpo-a0-s0-steps2")  # no grpo at defaults
    study = read_runs(tmp_path)
    labels = {f.path.name: f.config["model_label"] for f in study.runs}
    assert labels == {"tiny-sa-a0.5-s0": "tiny", "tiny-sa-a0.5-s1": "tiny",
                      "tiny-sa-a0.5-s0-steps1": "tiny (steps=1)",
                      "tiny-sa-a0.5-s0-steps1-generation_backend=hf": "tiny (steps=1, generation_backend=hf)",
                      # compared with the model's runs at the defaults (another method's), its steps with the profile's
                      "tiny-grpo-a0-s0-steps2": "tiny (steps=2)"}
    assert run_variants(read_folders(tmp_path)[0])["tiny-sa-a0.5-s0-steps1"] == "steps=1"


@pytest.mark.usefixtures("twenty_step_profile")
def test_without_runs_at_the_defaults_the_most_common_settings_are_the_reference(tmp_path, run_maker):
    for seed in (0, 1):
        tiny_run(run_maker, tmp_path, "sa", 0.5, seed, run_id=f"mine-{seed}")
    tiny_run(run_maker, tmp_path, "sa", 0.5, 0, run_id="mine-lr", learning_rate=1e-3)
    variants = run_variants(read_folders(tmp_path)[0])
    assert variants == {"mine-0": "", "mine-1": "", "mine-lr": "learning_rate=0.001"}


@pytest.mark.usefixtures("twenty_step_profile")
def test_steps_of_each_method_and_the_top_k_estimate_make_no_variant(tmp_path, run_maker):
    # an unknown profile's methods may train for different numbers of steps (as the paper's SA-AH-GRPO does)
    run_maker(tmp_path, "a", "tiny", "sa", 0.5, 0, steps=25)
    run_maker(tmp_path, "b", "tiny", "grpo", 0.0, 0, steps=20)
    tiny_run(run_maker, tmp_path, "sa", 0.5, 1)
    tiny_run(run_maker, tmp_path, "sa", 0.5, 1, run_id="tiny-sa-a0.5-k5-s1", entropy_top_k=5)
    assert set(run_variants(read_folders(tmp_path)[0]).values()) == {""}


def test_the_committed_studies_have_no_variants():
    for root in (RESULTS / "mini", RESULTS / "extended"):
        folders, _ = read_folders(root)
        assert len(folders) > 10 and set(run_variants(folders).values()) == {""}


@pytest.mark.usefixtures("twenty_step_profile")
def test_two_runs_of_one_seed_with_their_own_ids_and_steps_are_two_variants(tmp_path, run_maker):
    # the newcomer's case: a 1-step run from the command line and a 2-step run from JupyterLab, both sa/0.5/seed 0
    tiny_run(run_maker, tmp_path, "sa", 0.5, 0, steps=1, run_id="cli-1step")
    tiny_run(run_maker, tmp_path, "sa", 0.5, 0, steps=2, run_id="jl-2steps")
    labels = {f.path.name: f.config["model_label"] for f in read_runs(tmp_path).runs}
    # the tiny profile trains 20 steps here: each says how many it trained, though neither runs at the defaults
    assert labels == {"cli-1step": "tiny (steps=1)", "jl-2steps": "tiny (steps=2)"}


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
        "model_label": "tiny", "max_steps": 60, "learning_rate": 1e-5}) for seed in range(300)]
    assert set(runs.run_variants(folders).values()) == {""}
    assert len(calls) < 1000
