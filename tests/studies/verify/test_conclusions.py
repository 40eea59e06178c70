"""Level 2 of the reproduction report: method means within a seed-spread tolerance, the primary comparison kept.

Hand-made study roots with 200 problems per evaluation; each test's numbers are worked out by hand
in its comments.
"""

import math
import shutil
from pathlib import Path

import pytest

from saah_lib.rundir.folder import RunDir
from saah_lib.studies.verify.conclusions import compare_conclusions, method_within_tolerance
from saah_lib.studies.verify.bits import compare_studies, conclusions_markdown, report_markdown

N = 200  # problems per evaluation
ALPHAS = {"grpo": 0.0, "ah": 0.5, "sa": 0.5}
SA, GRPO = "SA-AH-GRPO (α=0.5)", "GRPO"
# correct answers (of 200) at the final evaluation, per seed 0, 1, 2
COMMITTED = {"grpo": (78, 80, 76), "ah": (70, 72, 74), "sa": (80, 82, 78)}


def write_root(root: Path, correct: dict[str, tuple[int, ...]], steps: int = 2) -> Path:
    """One complete run per method and seed; a run's final evaluation gets the first k problems right."""
    for method, per_seed in correct.items():
        for seed, k in enumerate(per_seed):
            log = RunDir(root / "runs" / f"tiny-{method}-a{ALPHAS[method]:g}-s{seed}")
            log.write_config({"method": method, "alpha": ALPHAS[method], "seed": seed, "steps": steps,
                              "eval_every": steps, "model_label": "tiny"}, {})
            for step in range(1, steps + 1):
                log.log_step({"step": step, "reward_mean": 1.0 + seed})
            for step, right in ((0, 20), (steps, k)):  # the committed format: counts beside Pass@1
                log.log_eval({"step": step, "pass_at_1": right / N, "n": N, "n_correct": right},
                             [{"id": f"p{i}", "correct": i < right} for i in range(N)])
    return root


def shifted(by: dict[str, int]) -> dict[str, tuple[int, ...]]:
    return {m: tuple(k + by.get(m, 0) for k in ks) for m, ks in COMMITTED.items()}


def test_the_tolerance_is_two_standard_errors_of_a_difference_of_seed_means_with_a_binomial_floor():
    # grpo: 0.39, 0.40, 0.38 -> mean 0.39, sd 0.01 < floor sqrt(0.39 * 0.61 / 200) = 0.034489;
    # tolerance 2 * 0.034489 * sqrt(2 / 3) = 0.056321
    floor = method_within_tolerance({0: 0.39, 1: 0.40, 2: 0.38}, {0: 0.44, 1: 0.45, 2: 0.43}, N)
    assert floor["sigma"] == pytest.approx(0.034489, abs=1e-6)
    assert floor["tolerance"] == pytest.approx(0.056321, abs=1e-6)
    assert floor["difference"] == pytest.approx(0.05) and floor["within"] is True
    # 0.45, 0.35, 0.40 -> sd 0.05 above the floor 0.034641; tolerance 2 * 0.05 * sqrt(2 / 3) = 0.081650
    spread = method_within_tolerance({0: 0.45, 1: 0.35, 2: 0.40}, {0: 0.49, 1: 0.40, 2: 0.53}, N)
    assert spread["sigma"] == pytest.approx(0.05) and spread["tolerance"] == pytest.approx(0.081650, abs=1e-6)
    assert spread["difference"] == pytest.approx(0.073333, abs=1e-6) and spread["within"] is True
    assert method_within_tolerance({0: 0.4}, {0: 0.4}, N)["within"] is None  # one seed: no spread


def test_identical_studies_reproduce_their_conclusions(tmp_path):
    committed = write_root(tmp_path / "a", COMMITTED)
    result = compare_conclusions(committed, write_root(tmp_path / "b", COMMITTED))
    assert result["reproduced"] is True
    assert result["line"] == "conclusions reproduced: 3/3 methods within tolerance, primary comparison unchanged"
    assert all(m["difference"] == 0 for m in result["methods"].values())
    # sa - grpo at seeds 0, 1, 2: +0.01, +0.01, +0.01 -> above; sign-flip p = 2/8 = 0.25 (all signs equal)
    assert result["primary"]["committed"]["direction"] == "above"
    assert result["primary"]["committed"]["p_value"] == pytest.approx(0.25)


def test_a_shift_within_the_tolerance_keeps_the_conclusions(tmp_path):
    # every method 10 problems (0.05) higher at every seed: below each tolerance (about 0.056),
    # and sa - grpo unchanged
    committed = write_root(tmp_path / "a", COMMITTED)
    result = compare_conclusions(committed, write_root(tmp_path / "b", shifted({"grpo": 10, "ah": 10, "sa": 10})))
    assert result["reproduced"] is True
    assert [m["difference"] for m in result["methods"].values()] == pytest.approx([0.05] * 3)


def test_a_shift_beyond_the_tolerance_is_named(tmp_path):
    # ah 12 problems (0.06) higher; its tolerance: mean 0.36, sd 0.01, floor sqrt(0.36 * 0.64 / 200) = 0.033941,
    # 2 * 0.033941 * sqrt(2 / 3) = 0.055426 < 0.06
    committed = write_root(tmp_path / "a", COMMITTED)
    result = compare_conclusions(committed, write_root(tmp_path / "b", shifted({"ah": 12})))
    assert result["reproduced"] is False
    assert result["methods"]["AH-GRPO (α=0.5)"]["tolerance"] == pytest.approx(0.055426, abs=1e-6)
    assert result["line"] == ("conclusions changed: AH-GRPO (α=0.5) outside tolerance (rerun 0.420, committed 0.360 "
                              "± 0.055)")


def test_a_reversed_primary_comparison_is_named_even_with_every_method_within_tolerance(tmp_path):
    # grpo +6 problems (+0.03), sa -6 (-0.03): both within about 0.056, but sa - grpo goes from +0.01 to -0.05
    committed = write_root(tmp_path / "a", COMMITTED)
    result = compare_conclusions(committed, write_root(tmp_path / "b", shifted({"grpo": 6, "sa": -6})))
    assert all(m["within"] for m in result["methods"].values())
    assert result["reproduced"] is False and result["primary"]["unchanged"] is False
    assert result["line"] == f"conclusions changed: primary comparison reversed ({SA} - {GRPO}: +0.010 -> -0.050)"


def test_a_method_missing_from_the_rerun_leaves_the_conclusions_unchecked_not_reproduced(tmp_path):
    committed = write_root(tmp_path / "a", COMMITTED)
    result = compare_conclusions(committed, write_root(tmp_path / "b", {"grpo": COMMITTED["grpo"],
                                                                        "sa": COMMITTED["sa"]}))
    assert result["reproduced"] is None
    assert result["line"].startswith("conclusions not checked: AH-GRPO (α=0.5): 0 common seed(s)")


def test_the_report_gives_both_levels_when_bits_differ(tmp_path):
    committed = write_root(tmp_path / "a", COMMITTED)
    rerun = write_root(tmp_path / "b", shifted({"grpo": 1}))  # grpo 0.005 higher: sa - grpo +0.005 at every seed
    report = compare_studies(committed, rerun)
    # (these roots hold no warm-start record or answer kinds, which the verdict names too)
    assert report["verdict"] == ("bits differ on 3/9 runs (and warm start, answer_kinds.json); conclusions "
                                 "reproduced: 3/3 methods within tolerance, primary comparison unchanged")
    assert report["outcome"] == "conclusions reproduced"
    text = report_markdown(report)
    assert "| GRPO | 0, 1, 2 | 0.390 | 0.395 | +0.005 | 0.056 | yes |" in text
    assert f"Primary comparison, rerun: {SA} above {GRPO} by +0.005" in text
    assert "sign-flip p = 0.25" in text and "Primary comparison unchanged." in text
    # level 2 is not asked when every run is identical, and another level 2 can be plugged in
    same = compare_studies(committed, write_root(tmp_path / "c", COMMITTED), conclusions=None)
    assert same["verdict"].startswith("9/9 runs reproduced exactly") and same["conclusions"] is None
    custom = compare_studies(committed, rerun, conclusions=lambda a, b: {"reproduced": False, "line": "no way"})
    assert custom["verdict"].endswith("; no way") and custom["outcome"] == "conclusions changed"


def test_sign_flip_significance_is_reported_with_its_smallest_possible_p(tmp_path):
    committed = write_root(tmp_path / "a", COMMITTED)
    result = compare_conclusions(committed, write_root(tmp_path / "b", COMMITTED))
    side = result["primary"]["committed"]
    assert side["min_p"] == pytest.approx(2 / 2**3) and side["significant"] is False
    assert math.isclose(side["mean_difference"], 0.01, abs_tol=1e-12)


def test_runs_that_cannot_be_paired_leave_the_conclusions_unchecked_with_the_reason(tmp_path):
    committed = write_root(tmp_path / "a", COMMITTED)
    rerun = write_root(tmp_path / "b", COMMITTED)
    shutil.copytree(rerun / "runs" / "tiny-sa-a0.5-s0", rerun / "runs" / "tiny-sa-a0.5-s0-again")  # seed 0 twice
    result = compare_conclusions(committed, rerun)
    assert result["reproduced"] is None and "and seed 0" in result["line"]
    assert conclusions_markdown(result) == [f"Conclusions (level 2, because bits differ): {result['line']}"]
