"""The confirmatory study's pre-registration: what it fixes, read back as the evidence will read it."""

import json
import math

import numpy as np
import pytest

from saah_lib.analysis.crossed_simulation import gaussian_studies
from saah_lib.analysis.plan import read_plan
from saah_lib.analysis.significance import crossed_p_values, t_mde
from saah_lib.studies.confirm import N_EVAL, confirm_plan, projected_mde, write_confirm_plan


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
    from saah_lib.studies.confirm import CONFIRM_ROOT

    write_confirm_plan(tmp_path)
    assert (tmp_path / "study_plan.json").read_bytes() == (CONFIRM_ROOT / "study_plan.json").read_bytes()


def test_the_grid_plan_runs_every_arm_on_every_warm_start_and_seed_and_leaves_the_plan_file_alone(tmp_path):
    from saah_lib.studies.confirm import DATA_SEED, MATCHED_ALPHA, SEEDS, WARM_STARTS, make_plan
    from saah_lib.studies.plans import study_plan

    plan = make_plan(tmp_path)
    kinds = [j.kind for j in plan.jobs]
    assert kinds.count("warmstart") == kinds.count("baseline") == len(WARM_STARTS) == 6
    configs = [j.kwargs["config"] for j in plan.runs]
    assert len(configs) == 3 * len(SEEDS) * len(WARM_STARTS) == 90
    arms = {(c["method"], c["alpha"]) for c in configs}
    assert arms == {("sa", MATCHED_ALPHA), ("grpo", 0.0), ("sa", 0.5)}
    assert {(c["n_eval"], c["data_seed"], c["max_steps"]) for c in configs} == {(N_EVAL, DATA_SEED, 60)}
    assert len({j.name for j in plan.runs}) == 90 and all(j.name.startswith("confirm-") for j in plan.runs)
    assert not (tmp_path / "study_plan.json").exists()  # the pre-registration is committed, never rewritten
    assert [j.name for j in study_plan("confirm", root=tmp_path).jobs] == [j.name for j in plan.jobs]
