"""The power of level 2: runs trained with a planted defect, held against the committed mini study.

The runs were trained by ``tools/plant_defects.py`` (recorded in ``data/planted_defects.json``: the final
Pass@1 of the mini study's main comparison and its paper-matched runs, per defect); each defect is planted
by ``tests/planted_defects/sitecustomize.py``.  The rule must catch every defect that moves a method's final
Pass@1 by more than the mini study's stated minimum detectable effect; :data:`CAUGHT` records which it catches
(docs/reproducibility.md tabulates them).  The last test plants one defect into a whole ``make mini`` path.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from saah_lab.analysis.plan import Arm
from saah_lab.studies.verify.calibration import stated_mde
from saah_lab.studies.verify.conclusions import conclusions_of, final_pass_at_1
from saah_lib.numerics import cpu_numerics_record
from saah_lib.paths import EXTENDED_ROOT, MINI_ROOT, REPO_ROOT

RECORD = json.loads((Path(__file__).parent / "data" / "planted_defects.json").read_text())["runs"]
PLANTED = REPO_ROOT / "tests" / "planted_defects"
#: What the rule finds for each recorded defect (True: conclusions changed).
CAUGHT = {"correctness_dropped": True, "kl_sign_flipped": False, "eval_on_training_problems": False,
          "sa_on_positive": False, "alpha_ignored": False}


@pytest.fixture(scope="module")
def committed():
    return final_pass_at_1(MINI_ROOT)[0], final_pass_at_1(EXTENDED_ROOT)[0]


def planted(defect: str) -> dict:
    return {(Arm(r["method"], r["alpha"]), ("tiny-warmstart", r["seed"])): r["pass_at_1"]
            for r in RECORD[defect].values()}


def method_shifts(committed: dict, rerun: dict) -> dict[str, float]:
    """Per method, the mean of rerun - committed over its recorded runs."""
    methods = {arm.method for arm, _ in rerun}
    return {m: float(np.mean([v - committed[k] for k, v in rerun.items() if k[0].method == m])) for m in methods}


def test_every_defect_of_the_record_was_trained_on_the_same_runs():
    assert sorted(RECORD) == sorted(CAUGHT)
    assert len({tuple(sorted(runs)) for runs in RECORD.values()}) == 1


@pytest.mark.parametrize("defect", sorted(CAUGHT))
def test_a_planted_defect_is_caught_as_recorded_and_always_beyond_the_stated_mde(defect, committed):
    mini, extended = committed
    rerun = planted(defect)
    result = conclusions_of(mini, rerun, [extended])  # as a partial rerun: the runs it lacks are not compared
    moved = {m: s for m, s in method_shifts(mini, rerun).items() if abs(s) > stated_mde("mini")}
    if moved:
        assert result["reproduced"] is False, (defect, moved, result["line"])
    assert (result["reproduced"] is False) == CAUGHT[defect], result["line"]


def test_the_committed_runs_against_themselves_pass(committed):
    mini, extended = committed
    runs = planted("alpha_ignored").keys()
    same = {k: v for k, v in mini.items() if k in runs}
    assert conclusions_of(mini, same, [extended])["reproduced"] is True


@pytest.mark.skipif(not cpu_numerics_record().get("pin_holds"), reason="needs the pinned numerics")
@pytest.mark.e2e
def test_make_mini_with_a_planted_defect_ends_in_conclusions_changed(tmp_path):
    runs = ["tiny-grpo-a0-s0", "tiny-ah-a0.5-s0", "tiny-sa-a0.5-s0"]
    env = {**os.environ, "SAAH_PLANTED_DEFECT": "correctness_dropped", "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join([str(PLANTED), str(REPO_ROOT)])}
    done = subprocess.run([sys.executable, "-m", "saah_lab.studies.mini", "verify", "--runs", *runs,
                           "--rerun-root", str(tmp_path / "rerun")], env=env, cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=900)
    tail = done.stdout[-3000:] + done.stderr[-2000:]
    assert done.returncode == 1, tail
    report = json.loads((tmp_path / "rerun" / "reproduction.json").read_text())
    assert report["runs_identical"] == 0 and report["conclusions"]["reproduced"] is False, tail
    assert "FAILED: conclusions changed" in done.stdout.splitlines()[-1], tail
