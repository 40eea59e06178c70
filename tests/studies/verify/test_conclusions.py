"""Level 2 of the reproduction report: every run against its committed twin, in units of the committed seed spread.

Hand-made study roots with 200 problems per evaluation; each test's numbers are worked out by hand in its
comments.  The design: grpo, ah and sa at one alpha each, seeds 0-2; every arm's committed Pass@1 is its mean
-0.01, mean, mean +0.01, so each arm's per-seed standard deviation is 0.01, pooled 0.01 with 3 x 2 = 6 df, and no
arm has the five seeds that would measure a heterogeneity factor (sigma = 0.01).  The groups: all 9 runs and each
method's 3 (each method has one arm, so the arms are not tested twice): 4 tests, each at 0.04 / 4 = 0.01,
two-sided: the t limit is t_6(0.995) = 3.7074.  Standard errors 0.01 x sqrt(2/3) = 0.0081650 (a method),
0.01 x sqrt(2/9) = 0.0047140 (all runs).
"""

import math
import shutil
from pathlib import Path

import pytest

from saah_lab.studies.verify import conclusions as C
from saah_lab.studies.verify.bits import compare_studies, conclusions_markdown, report_markdown
from saah_lab.studies.verify.conclusions import compare_conclusions, shift_tests, yardstick
from saah_lib.jsonio import atomic_write_json
from saah_lib.rundir.folder import RunDir

N = 200  # problems per evaluation
ALPHAS = {"grpo": 0.0, "ah": 0.5, "sa": 0.5}
SA, GRPO = "SA-AH-GRPO (α=0.5)", "GRPO"
# correct answers (of 200) at the final evaluation, per seed 0, 1, 2
COMMITTED = {"grpo": (76, 78, 80), "ah": (70, 72, 74), "sa": (78, 80, 82)}
T_LIMIT = 3.7074


def write_root(root: Path, correct: dict[str, tuple[int, ...]], steps: int = 2) -> Path:
    """One complete run per method and seed; a run's final evaluation gets the first k problems right."""
    for method, per_seed in correct.items():
        for seed, k in enumerate(per_seed):
            log = RunDir(root / "runs" / f"tiny-{method}-a{ALPHAS[method]:g}-s{seed}")
            log.write_config({"method": method, "alpha": ALPHAS[method], "seed": seed, "steps": steps,
                              "eval_every": steps, "model_label": "tiny", "model_name": "tiny-warmstart"}, {})
            for step in range(1, steps + 1):
                log.log_step({"step": step, "reward_mean": 1.0 + seed})
            for step, right in ((0, 20), (steps, k)):  # the committed format: counts beside Pass@1
                log.log_eval({"step": step, "pass_at_1": right / N, "n": N, "n_correct": right},
                             [{"id": f"p{i}", "correct": i < right} for i in range(N)])
    return root


def shifted(by: dict[str, int]) -> dict[str, tuple[int, ...]]:
    return {m: tuple(k + by.get(m, 0) for k in ks) for m, ks in COMMITTED.items()}


def by_group(result: dict) -> dict[str, dict]:
    return {t["group"]: t for t in result["tests"]}


def test_the_yardstick_pools_the_arms_spread_and_scales_by_the_noisiest_well_measured_arm():
    from saah_lab.analysis.plan import Arm

    three = {(Arm("grpo", 0.0), ("w", s)): v for s, v in enumerate((0.39, 0.40, 0.41))}
    assert yardstick(three) == pytest.approx({"sigma": 0.01, "df": 2, "pooled": 0.01, "heterogeneity": None})
    # five seeds of another arm with standard deviation 0.02: pooled sqrt((2 x 0.01^2 + 4 x 0.02^2) / 6) = 0.017321;
    # that arm has five seeds, so it measures the heterogeneity: 0.02 / 0.017321 = 1.1547, sigma 0.02
    five = {(Arm("sa", 0.5), ("w", s)): v
            for s, v in enumerate(0.5 + 0.02 * x for x in (-1.2649111, -0.6324555, 0, 0.6324555, 1.2649111))}
    got = yardstick(three, five)
    assert got["df"] == 6 and got["pooled"] == pytest.approx(0.017321, abs=1e-6)
    assert got["heterogeneity"] == pytest.approx(1.1547, abs=1e-4) and got["sigma"] == pytest.approx(0.02, abs=1e-6)


def test_identical_studies_reproduce_and_the_line_says_what_was_and_was_not_checked(tmp_path):
    committed = write_root(tmp_path / "a", COMMITTED)
    result = compare_conclusions(committed, write_root(tmp_path / "b", COMMITTED))
    assert result["reproduced"] is True and result["sigma"] == pytest.approx(0.01) and result["df"] == 6
    assert list(by_group(result)) == ["all runs", "method ah", "method grpo", "method sa"]
    assert all(t["shift"] == 0 and t["critical"] == pytest.approx(T_LIMIT, abs=1e-4) for t in result["tests"])
    # sa - grpo = +0.01 at every seed: sign-flip p = 2/8 = 0.25 on both sides, so its direction is not judged
    assert result["primary"]["judged"] is False
    assert result["line"].startswith("conclusions reproduced: 4 shift tests over 9 runs against their committed twins "
                                     "(sigma 0.010, 6 df; detectable with 80% power: ")
    assert result["line"].endswith(f"not checkable: the direction of {SA} vs {GRPO}, not significant on the "
                                   "committed or rerun side (sign-flip p 0.25 committed, 0.25 rerun; 3 units can "
                                   "give p down to 0.25): its direction is not judged")


def test_a_shift_of_one_method_is_named_with_its_t_and_limit(tmp_path):
    # ah 12 problems (+0.06) higher at every seed: method ah t = 0.06 / 0.0081650 = 7.35 > 3.71; all runs shift
    # 0.02, t = 0.02 / 0.0047140 = 4.24 > 3.71: flagged too; grpo and sa unmoved
    committed = write_root(tmp_path / "a", COMMITTED)
    result = compare_conclusions(committed, write_root(tmp_path / "b", shifted({"ah": 12})))
    tests = by_group(result)
    assert tests["method ah"]["t"] == pytest.approx(7.348, abs=1e-3) and tests["method ah"]["flagged"]
    assert tests["all runs"]["t"] == pytest.approx(4.243, abs=1e-3) and tests["all runs"]["flagged"]
    assert not tests["method grpo"]["flagged"] and not tests["method sa"]["flagged"]
    assert result["reproduced"] is False
    assert result["line"].startswith("conclusions changed: all runs shifted by +0.020 (t = +4.2, limit 3.7); "
                                     "method ah shifted by +0.060 (t = +7.3, limit 3.7) [4 shift tests")


def test_a_small_shift_of_one_method_passes(tmp_path):
    # ah +2 problems (+0.01): t = 0.01 / 0.0081650 = 1.22; all runs 0.00333 / 0.0047140 = 0.71
    committed = write_root(tmp_path / "a", COMMITTED)
    result = compare_conclusions(committed, write_root(tmp_path / "b", shifted({"ah": 2})))
    assert by_group(result)["method ah"]["t"] == pytest.approx(1.2247, abs=1e-4)
    assert result["reproduced"] is True


def test_a_shift_of_every_run_is_caught_by_the_all_runs_test_though_no_method_alone_crosses_its_limit(tmp_path):
    # every run +6 problems (+0.03): each method t = 0.03 / 0.0081650 = 3.674 < 3.707; all runs 0.03 / 0.0047140
    # = 6.364 > 3.707
    committed = write_root(tmp_path / "a", COMMITTED)
    result = compare_conclusions(committed, write_root(tmp_path / "b", shifted({"grpo": 6, "ah": 6, "sa": 6})))
    tests = by_group(result)
    assert [tests[f"method {m}"]["flagged"] for m in ("ah", "grpo", "sa")] == [False] * 3
    assert tests["method ah"]["t"] == pytest.approx(3.674, abs=1e-3)
    assert tests["all runs"]["flagged"] and result["reproduced"] is False


def test_the_primary_direction_is_judged_only_where_both_sides_find_it_significant(tmp_path):
    # six seeds: sign-flip p can reach 2/64 = 0.031. Committed sa - grpo = +0.02 at every seed (p 0.031); a rerun
    # with -0.02 at every seed reverses it; one with -0.02, +0.02 alternating is not significant: not judged
    grpo = (76, 78, 80, 76, 78, 80)
    committed = write_root(tmp_path / "a", {"grpo": grpo, "sa": tuple(k + 4 for k in grpo)})
    reversed_ = write_root(tmp_path / "b", {"grpo": grpo, "sa": tuple(k - 4 for k in grpo)})
    mixed = write_root(tmp_path / "c", {"grpo": grpo, "sa": tuple(k + (4 if i % 2 else -4) for i, k in enumerate(grpo))})
    flipped = compare_conclusions(committed, reversed_)["primary"]
    assert flipped["judged"] and flipped["reversed"] and flipped["committed"]["p_value"] == pytest.approx(2 / 64)
    assert "opposite direction (+0.020 -> -0.020)" in flipped["why"]
    unjudged = compare_conclusions(committed, mixed)["primary"]
    assert not unjudged["judged"] and not unjudged["reversed"]
    assert unjudged["why"].startswith("not significant on the rerun side")


def test_without_two_seeds_of_any_arm_there_is_no_yardstick_and_nothing_is_claimed(tmp_path):
    one_seed = {m: ks[:1] for m, ks in COMMITTED.items()}
    result = compare_conclusions(write_root(tmp_path / "a", one_seed), write_root(tmp_path / "b", one_seed))
    assert result["reproduced"] is None
    assert result["line"] == ("conclusions not checked: the committed study has no arm with two seeds of one warm "
                              "start: no per-seed spread to measure against")


def test_the_spread_can_be_pooled_with_another_committed_study_of_the_same_design(tmp_path):
    committed = write_root(tmp_path / "a", COMMITTED)
    other = write_root(tmp_path / "other", {"grpo": (60, 80, 100)})  # sd 0.1: pooled sqrt((6e-4 + 2e-2) / 8)
    result = compare_conclusions(committed, write_root(tmp_path / "b", COMMITTED), spread_from=(committed, other))
    assert result["df"] == 8 and result["pooled"] == pytest.approx(math.sqrt((6 * 1e-4 + 2 * 0.01) / 8))


def test_a_rebuilt_warm_start_is_held_to_the_spread_of_the_shipped_builds(tmp_path, monkeypatch):
    # shipped builds spread 0.05 with 7 df; one rebuilt warm start: limit t_7(0.995) x 0.05 x sqrt(2) = 0.2474
    monkeypatch.setattr(C, "shipped_build_spread", lambda: (0.05, 7))
    committed = write_root(tmp_path / "a", COMMITTED)
    atomic_write_json(committed / "warmstart_build.json", {"weights_sha256": "aa", "heldout_pass_at_1": 0.30})
    near, far = (write_root(tmp_path / name, COMMITTED) for name in ("near", "far"))
    atomic_write_json(near / "warmstart_build.json", {"weights_sha256": "bb", "heldout_pass_at_1": 0.45})
    atomic_write_json(far / "warmstart_build.json", {"weights_sha256": "bb", "heldout_pass_at_1": 0.60})
    within = compare_conclusions(committed, near)
    assert within["warm_starts"][0]["limit"] == pytest.approx(0.2474, abs=1e-4) and within["reproduced"] is True
    beyond = compare_conclusions(committed, far)
    assert beyond["reproduced"] is False and "rebuilt warm start tiny-warmstart held-out Pass@1 0.600" in beyond["line"]


def test_the_report_gives_both_levels_when_bits_differ(tmp_path):
    committed = write_root(tmp_path / "a", COMMITTED)
    rerun = write_root(tmp_path / "b", shifted({"grpo": 1}))  # grpo 0.005 higher
    report = compare_studies(committed, rerun)
    # (these roots hold no warm-start record or answer kinds, which the verdict names too)
    assert report["verdict"].startswith("bits differ on 3/9 runs (and warm start, answer_kinds.json); conclusions "
                                        "reproduced: 4 shift tests over 9 runs")
    assert report["outcome"] == "conclusions reproduced"
    text = report_markdown(report)
    assert "| method grpo | 3 | +0.0050 | +0.61 | ±3.71 |" in text
    assert f"Primary comparison, rerun: {SA} - {GRPO} = +0.005 over 3 units (sign-flip p = 0.25" in text
    # level 2 is not asked when every run is identical, and another level 2 can be plugged in
    same = compare_studies(committed, write_root(tmp_path / "c", COMMITTED), conclusions=None)
    assert same["verdict"].startswith("9/9 runs reproduced exactly") and same["conclusions"] is None
    custom = compare_studies(committed, rerun, conclusions=lambda a, b: {"reproduced": False, "line": "no way"})
    assert custom["verdict"].endswith("; no way") and custom["outcome"] == "conclusions changed"


def test_runs_that_cannot_be_paired_leave_the_conclusions_unchecked_with_the_reason(tmp_path):
    committed = write_root(tmp_path / "a", COMMITTED)
    rerun = write_root(tmp_path / "b", COMMITTED)
    shutil.copytree(rerun / "runs" / "tiny-sa-a0.5-s0", rerun / "runs" / "tiny-sa-a0.5-s0-again")  # seed 0 twice
    result = compare_conclusions(committed, rerun)
    assert result["reproduced"] is None and "and seed 0" in result["line"]
    assert conclusions_markdown(result) == [f"Conclusions (level 2, because bits differ): {result['line']}"]


def test_a_test_limit_is_the_bonferroni_t_quantile():
    from saah_lab.analysis.plan import Arm

    committed = {(Arm("grpo", 0.0), ("w", s)): v for s, v in enumerate((0.39, 0.40, 0.41))}
    tests = shift_tests(committed, dict(committed), sigma=0.01, df=2, level=0.04)
    # two groups (all runs; the method holds the same runs and is not tested twice): one test at 0.04
    assert [t["group"] for t in tests] == ["all runs"]
    assert tests[0]["critical"] == pytest.approx(4.8487, abs=1e-4)  # t_2(0.98)
