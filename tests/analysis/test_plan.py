"""A study's plan: its primary comparison and pairs, written and read back, bad plans named; arms and their runs."""

import json

import pytest

from saah_lab.analysis.evidence import load_root_evidence
from saah_lab.analysis.plan import Arm, StudyPlan, default_plan, read_plan, write_plan
from saah_lib.rundir.layout import STUDY_PLAN_FILE

SA, AH, GRPO = Arm("sa", 0.5), Arm("ah", 0.5), Arm("grpo", 0.0)


def test_a_root_plan_names_its_primary_comparison(tmp_path):
    assert read_plan(tmp_path) == default_plan("")
    sa6, ah6 = Arm("sa", 5.9), Arm("ah", 5.9)
    plan = StudyPlan("extended", (sa6, GRPO), ((sa6, GRPO), (sa6, ah6), (SA, GRPO)), extra={"seeds": [0, 1]})
    write_plan(tmp_path, plan)
    back = read_plan(tmp_path)
    assert back.primary == (sa6, GRPO) and back.pairs == plan.pairs and back.extra == {"seeds": [0, 1]}
    assert back.describe() == "SA-AH-GRPO (α=5.9) vs GRPO on final Pass@1 and training-reward variance"
    bad = plan.to_dict()
    bad["primary"]["a"]["alpha"] = 99
    (tmp_path / STUDY_PLAN_FILE).write_text(json.dumps(bad))
    with pytest.raises(ValueError, match="primary.a: alpha must be"):
        read_plan(tmp_path)
    bad["primary"] = {"a": sa6.to_dict(), "b": GRPO.to_dict(), "quantities": ["speed"]}
    (tmp_path / STUDY_PLAN_FILE).write_text(json.dumps(bad))
    with pytest.raises(ValueError, match="unknown \\['speed'\\]"):
        read_plan(tmp_path)
    (tmp_path / STUDY_PLAN_FILE).write_text("{not json")
    with pytest.raises(ValueError, match="study_plan.json: not valid JSON"):
        read_plan(tmp_path)


def test_two_runs_of_one_arm_and_seed_are_an_error_naming_both_folders(tmp_path, run_maker):
    # two run ids, one setting and seed: which one is "the" run of that seed cannot be chosen silently
    first = run_maker(tmp_path, "tiny-sa-s0", "tiny", "sa", 0.5, 0)
    second = run_maker(tmp_path, "tiny-sa-s0-again", "tiny", "sa", 0.5, 0)
    runs = load_root_evidence(tmp_path)
    with pytest.raises(ValueError, match="share warm start") as err:
        SA.runs_by_unit(runs)
    assert str(first) in str(err.value) and str(second) in str(err.value)


def test_an_arm_matches_its_method_alpha_and_top_k(tmp_path, run_maker):
    run_maker(tmp_path, "tiny-sa-s0", "tiny", "sa", 0.5, 0)
    run_maker(tmp_path, "tiny-ah-s0", "tiny", "ah", 0.5, 0)
    run_maker(tmp_path, "tiny-sa-a1-s0", "tiny", "sa", 1.0, 0)
    runs = load_root_evidence(tmp_path)
    assert [r.run_id for r in SA.runs_by_unit(runs).values()] == ["tiny-sa-s0"]
    assert [r.run_id for r in AH.runs_by_unit(runs).values()] == ["tiny-ah-s0"]
    assert Arm("sa", 0.5, entropy_top_k=5).runs_by_unit(runs) == {}
    assert SA.label == "SA-AH-GRPO (α=0.5)" and GRPO.label == "GRPO"
