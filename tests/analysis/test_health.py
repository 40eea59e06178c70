"""Run health rules: hand-made logs at and around each threshold, and the committed runs they were set from."""

import math

import pandas as pd
import pytest

from saah_lab.analysis.health import KL_BOUND, RULES, run_health
from saah_lab.analysis.runs import read_runs
from saah_lib.paths import EXTENDED_ROOT, MINI_ROOT


def _evals(points, n=200):
    return pd.DataFrame([{"step": s, "pass_at_1": p, "n": n} for s, p in points])


def _log(kls):
    return pd.DataFrame([{"step": i + 1, "kl": k} for i, k in enumerate(kls)])


def test_a_run_that_learned_is_healthy():
    h = run_health("r", _evals([(0, 0.27), (20, 0.36), (40, 0.40), (60, 0.405)]), _log([0.001, 0.03, 0.0595]))
    assert h.flags == () and not h.flagged and h.unchecked == ()
    assert (h.kl_max, h.start_pass_at_1, h.peak_pass_at_1, h.final_pass_at_1) == (0.0595, 0.27, 0.405, 0.405)


def test_kl_bound_is_strict():
    assert run_health("r", _evals([(0, 0.2), (20, 0.4)]), _log([KL_BOUND])).flags == ()
    assert run_health("r", _evals([(0, 0.2), (20, 0.4)]), _log([0.01, KL_BOUND + 1e-9])).flags == ("kl_diverged",)


def test_fell_below_start_is_measured_against_the_step0_half_width():
    # half-width at p = 0.40, N = 200: 1.96 * sqrt(0.40 * 0.60 / 200) = 0.06790
    half = 1.96 * math.sqrt(0.40 * 0.60 / 200)
    worse = run_health("r", _evals([(0, 0.40), (20, 0.36), (40, 0.33), (60, 0.33)]), _log([0.01]))
    assert worse.flags == ("fell_below_start",) and "final 0.330 below 0.400 at step 0" in worse.describe()
    assert run_health("r", _evals([(0, 0.40), (60, 0.40 - half - 1e-6)]), _log([0.01])).flags == ("fell_below_start",)
    assert run_health("r", _evals([(0, 0.40), (60, 0.40 - half + 1e-6)]), _log([0.01])).flags == ()
    # a flat run is not a broken one: no gain over the warm start is not flagged
    assert run_health("r", _evals([(0, 0.40), (20, 0.40), (40, 0.39), (60, 0.40)]), _log([0.01])).flags == ()


def test_fell_back_after_a_peak():
    # peak 0.45 at N = 200: half-width 1.96 * sqrt(0.45 * 0.55 / 200) = 0.06895
    h = run_health("r", _evals([(0, 0.27), (20, 0.45), (40, 0.30), (60, 0.38)]), _log([0.01]))
    assert h.flags == ("fell_back",) and "final 0.380 after a peak of 0.450" in h.describe()
    assert run_health("r", _evals([(0, 0.27), (20, 0.45), (60, 0.39)]), _log([0.01])).flags == ()


def test_missing_inputs_leave_a_rule_unchecked_not_passed():
    h = run_health("r", _evals([(20, 0.4), (40, 0.41)]), pd.DataFrame(columns=["step"]))
    assert h.flags == () and set(h.unchecked) == {"kl_diverged", "fell_below_start"}


def test_describe_names_every_broken_rule():
    h = run_health("r", _evals([(0, 0.40), (20, 0.30), (60, 0.29)]), _log([0.02, 0.169]))
    assert h.flags == ("kl_diverged", "fell_below_start")
    assert h.describe() == "KL up to 0.169, above 0.1; final 0.290 below 0.400 at step 0"
    assert set(h.to_dict()["flags"]) <= set(RULES)


@pytest.mark.skipif(not (EXTENDED_ROOT / "runs").is_dir(), reason="committed extended study absent")
def test_on_the_committed_studies_only_the_collapsed_grpo_seed_is_flagged():
    flagged = []
    for root in (MINI_ROOT, EXTENDED_ROOT):
        study = read_runs(root)
        assert set(study.health) == {f.path.name for f in study.runs}
        flagged += [(root.name, f.config["run_id"], study.health[f.path.name].flags) for f in study.runs
                    if study.flagged(f)]
    assert flagged == [("extended", "tiny-grpo-a0-s4", ("kl_diverged",))]


def _committed_healths():
    from saah_lib.jsonio import read_jsonl

    out = {}
    for root in (MINI_ROOT, EXTENDED_ROOT):
        for run in sorted((root / "runs").iterdir()):
            out[(root.name, run.name)] = run_health(run.name, pd.DataFrame(read_jsonl(run / "eval.jsonl")),
                                                    pd.DataFrame(read_jsonl(run / "train_log.jsonl")))
    return out


@pytest.mark.skipif(not (EXTENDED_ROOT / "runs").is_dir(), reason="committed extended study absent")
def test_the_docstrings_numbers_the_fall_rules_cannot_reach_in_the_committed_runs():
    healths = _committed_healths()
    falls = {key: (round(h.peak_pass_at_1 - h.final_pass_at_1, 3), round(h.start_pass_at_1 - h.final_pass_at_1, 3))
             for key, h in healths.items()}
    extended = {k: v for k, v in falls.items() if k[0] == "extended"}
    assert max(v[0] for v in extended.values()) == max(v[1] for v in extended.values()) == 0.040
    assert falls[("extended", "tiny-grpo-a0-s0-w1")] == (0.040, 0.040)
    assert max(v[0] for k, v in falls.items() if k[0] == "mini") == 0.010
    # every threshold (the half-width at the run's own step 0 or peak) lies above the largest fall
    smallest_threshold = min(1.96 * math.sqrt(p * (1 - p) / h.n_eval) for h in healths.values()
                             for p in (h.start_pass_at_1, h.peak_pass_at_1))
    assert round(smallest_threshold, 3) == 0.062 > 0.040
    # the KL rule: seeds 4 and 5 of GRPO on the first warm start both end near 0.270; only seed 4 is above 0.1
    s4, s5 = healths[("extended", "tiny-grpo-a0-s4")], healths[("extended", "tiny-grpo-a0-s5")]
    assert (s4.final_pass_at_1, s5.final_pass_at_1, s4.start_pass_at_1) == (0.29, 0.295, 0.27)
    assert round(s4.kl_max, 3) == 0.169 and round(s5.kl_max, 4) == 0.0792 and not s5.flagged
