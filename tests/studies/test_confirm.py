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
