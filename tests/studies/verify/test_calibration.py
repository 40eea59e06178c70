"""The level-2 rule's false-alarm rate, measured by simulation, stays within its budget; and the simulation can
see a rule that breaks it (a check of the check, both ways)."""

import numpy as np
import pytest

from saah_lab.studies.verify import calibration as C
from saah_lab.studies.verify import conclusions as K


@pytest.mark.parametrize("study", sorted(K.SAME_DESIGN))
def test_the_committed_calibration_keeps_every_study_within_five_percent(study):
    entry = K.read_calibration()[study]
    assert entry["simulated_reruns"] >= 2000
    assert entry["false_alarm"] + 2 * entry["monte_carlo_se"] <= 0.05, entry
    assert entry["false_alarm"] <= K.SHIFT_LEVEL + K.WARM_START_LEVEL + 2 * entry["monte_carlo_se"]


def test_the_verdict_quotes_the_committed_rate():
    assert K.measured_false_alarm("mini") == K.read_calibration()["mini"]["false_alarm"]
    assert K.measured_false_alarm(None) is None


def test_the_mini_calibration_reproduces_from_the_committed_studies():
    # a smaller draw than the committed one, same design: the rate agrees within Monte Carlo error
    entry = K.read_calibration()["mini"]
    fresh = C.calibrate_study("mini", n=600, n_power=0)
    assert abs(fresh["shift_tests_false_alarm"] - entry["shift_tests_false_alarm"]) < 0.03
    assert fresh["pooled_sd"] == pytest.approx(entry["pooled_sd"])


def test_the_simulation_sees_a_rule_that_breaks_its_budget(monkeypatch):
    # the same tests against an eighth of the yardstick would flag most reruns that only round differently
    original = K.yardstick

    def too_narrow(*studies):
        spread = original(*studies)
        return {**spread, "sigma": spread["sigma"] / 8}

    monkeypatch.setattr(C, "yardstick", too_narrow)
    design = C.design("mini")
    assert C._simulate(design, np.random.default_rng(0), 200).mean() > 0.5


def test_a_planted_shift_of_the_stated_mde_in_every_run_is_caught():
    design = C.design("mini")
    shift = C._planted(design, "all runs", C.stated_mde("mini"))
    assert C._simulate(design, np.random.default_rng(1), 200, shift=shift).mean() > 0.95
