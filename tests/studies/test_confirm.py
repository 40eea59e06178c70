"""The confirmatory study's pre-registration: what it fixes, read back as the evidence will read it."""

import json
import math
import subprocess

import numpy as np
import pytest

from saah_lab.analysis.crossed_simulation import gaussian_studies
from saah_lab.analysis.plan import read_plan
from saah_lab.analysis.significance import crossed_p_values, t_mde
from saah_lab.studies.confirm import N_EVAL, confirm_plan, projected_mde, write_confirm_plan
from saah_lib.paths import REPO_ROOT


def test_the_plan_is_written_and_read_back_with_its_primary_comparison(tmp_path):
    path = write_confirm_plan(tmp_path)
    plan = read_plan(tmp_path)
    assert plan.to_dict() == confirm_plan().to_dict() == json.loads(path.read_text())
    assert plan.describe() == "SA-AH-GRPO (α=5.9) vs GRPO on final Pass@1"  # a family of one
    assert [(a.label, b.label) for a, b in plan.pairs] == [("SA-AH-GRPO (α=5.9)", "GRPO"),
                                                          ("SA-AH-GRPO (α=0.5)", "GRPO")]
    extra = plan.extra
    assert len(extra["warm_starts"]) >= 6 and not {"tiny-warmstart", "tiny-warmstart-s1"} & set(extra["warm_starts"])
    assert len(extra["seeds"]) == 5 and extra["evaluation"]["n_eval"] >= 1000 and extra["level"] == 0.05
    assert set(extra["health_rules"]) == {"kl_diverged", "fell_below_start", "fell_back"}


def test_projected_mde_is_the_formula_and_holds_in_simulation():
    # hand formula: Var = s2_ws/6 + s2_seed/30 + s2_problem/1000 + s2_e/30000, on 5 df
    var = 4.6e-4 / 6 + 4.6e-4 / 30 + 2.8e-3 / 1000 + 0.105 / 30000
    mde = projected_mde(4.6e-4, 4.6e-4, 2.8e-3, 0.105)
    assert mde == pytest.approx(t_mde(math.sqrt(var), 5))
    assert projected_mde(0.0, 4.6e-4, 2.8e-3, 0.105) < mde  # the warm-start spread is what costs power
    # the rule on simulated confirm studies with that true difference detects it about 80% of the time
    d, labels = gaussian_studies(np.random.default_rng(1), 2000, 5, 6, N_EVAL, 4.6e-4, 2.8e-3, 0.105, effect=mde,
                                 ws_spread=0.0, s2_warm_start=4.6e-4)
    power = float((crossed_p_values(d, labels)[3] < 0.05).mean())
    assert power == pytest.approx(0.8, abs=3 * math.sqrt(0.16 / 2000))


def test_the_committed_pre_registration_is_the_plan_this_code_writes(tmp_path):
    from saah_lab.studies.confirm import CONFIRM_ROOT

    write_confirm_plan(tmp_path)
    assert (tmp_path / "study_plan.json").read_bytes() == (CONFIRM_ROOT / "study_plan.json").read_bytes()


def test_the_matched_alpha_is_read_from_the_committed_records_and_a_root_without_one_is_named(tmp_path):
    from saah_lab.studies.confirm import CONFIRM_ROOT, recorded_alpha
    from saah_lib.paths import EXTENDED_ROOT

    assert recorded_alpha(CONFIRM_ROOT) == recorded_alpha(EXTENDED_ROOT) == 5.9  # the plan fixes the measurement
    with pytest.raises(ValueError, match=f"{tmp_path}.* records no paper-matched alpha .*paper_matched_alpha.json"):
        recorded_alpha(tmp_path)


def test_the_grid_plan_runs_every_arm_on_every_warm_start_and_seed_and_leaves_the_plan_file_alone(tmp_path):
    from saah_lab.studies.confirm import DATA_SEED, SEEDS, WARM_STARTS, make_plan
    from saah_lab.studies.plans import study_plan

    plan = make_plan(tmp_path)
    kinds = [j.kind for j in plan.jobs]
    assert kinds.count("warmstart") == kinds.count("baseline") == len(WARM_STARTS) == 6
    configs = [j.kwargs["config"] for j in plan.runs]
    assert len(configs) == 3 * len(SEEDS) * len(WARM_STARTS) == 90
    arms = {(c["method"], c["alpha"]) for c in configs}
    assert arms == {("sa", 5.9), ("grpo", 0.0), ("sa", 0.5)}  # the pre-registered alpha
    assert {(c["n_eval"], c["data_seed"], c["max_steps"]) for c in configs} == {(N_EVAL, DATA_SEED, 60)}
    assert len({j.name for j in plan.runs}) == 90 and all(j.name.startswith("confirm-") for j in plan.runs)
    assert not (tmp_path / "study_plan.json").exists()  # the pre-registration is committed, never rewritten
    assert [j.name for j in study_plan("confirm", root=tmp_path).jobs] == [j.name for j in plan.jobs]



def _git(*args) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True)


def test_the_plan_was_committed_alone_before_every_run_that_records_a_clean_commit():
    from saah_lab.studies.confirm import CONFIRM_ROOT

    plan_file = "results/confirm/study_plan.json"
    history = _git("log", "--format=%H", "--", plan_file).stdout.split()
    if not history or _git("rev-parse", "--is-shallow-repository").stdout.strip() != "false":
        pytest.skip("no full git history of the plan here")
    assert len(history) == 1, "the plan changed after its first commit"
    (plan_commit,) = history
    assert _git("show", "--format=", "--name-only", plan_commit).stdout.split() == [plan_file]  # alone
    commits = {json.loads(p.read_text()).get("git_commit", "") for p in (CONFIRM_ROOT / "runs").glob("*/config.json")}
    if not commits:
        pytest.skip("the confirmatory study has no runs yet")
    assert all(c and not c.endswith("-dirty") for c in commits), commits  # every run ran a clean checkout
    for commit in commits:  # ... at or after the plan's commit
        assert _git("merge-base", "--is-ancestor", plan_commit, commit).returncode == 0, commit


def test_the_ancestry_check_can_fail():
    first = _git("rev-list", "--max-parents=0", "HEAD").stdout.split()
    if not first or _git("rev-parse", "--is-shallow-repository").stdout.strip() != "false":
        pytest.skip("no full git history here")
    assert _git("merge-base", "--is-ancestor", "HEAD", first[0]).returncode != 0 or first[0] == _git(
        "rev-parse", "HEAD").stdout.strip()


def test_a_rerun_goes_to_its_own_root_with_the_committed_plan_byte_for_byte(tmp_path):
    from saah_lab.studies.confirm import CONFIRM_ROOT, carry_plan
    from saah_lab.studies.execution.grid import default_root
    from saah_lib.paths import RERUN_ROOT

    assert default_root("confirm", "run") == RERUN_ROOT / "confirm"  # never the committed root
    assert default_root("confirm", "plan") is None  # plan reads the committed one
    committed = (CONFIRM_ROOT / "study_plan.json").read_bytes()
    assert carry_plan(tmp_path / "rerun").read_bytes() == committed
    assert carry_plan(tmp_path / "rerun").read_bytes() == committed  # there already: kept
    assert carry_plan(CONFIRM_ROOT) == CONFIRM_ROOT / "study_plan.json"
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "study_plan.json").write_text('{"study": "extended"}')
    with pytest.raises(ValueError, match="is not the committed plan"):
        carry_plan(tmp_path / "other")
    assert (tmp_path / "other" / "study_plan.json").read_text() == '{"study": "extended"}'  # left alone
