"""The paragraph written from the paired evidence: it claims no more than the rows show."""

import pytest

from saah_lib.analysis.evidence import adjust, compare_arms, compare_pairs, load_root_evidence
from saah_lib.analysis.plan import Arm, default_plan
from saah_lib.analysis.sentences import evidence_paragraphs, num

SA, GRPO = Arm("sa", 0.5), Arm("grpo", 0.0)


@pytest.fixture
def two_arms(tmp_path, run_maker):
    """Seed by seed, SA-AH-GRPO right on the first ``a`` of 40 problems at step 20 and GRPO on the first ``b``
    (both 2 of 40 at step 0: every run gains more than evaluation noise, so none is flagged)."""
    def write(a_right: dict[int, int], b_right: dict[int, int]):
        for seed in a_right:
            for method, alpha, right in (("sa", 0.5, a_right[seed]), ("grpo", 0.0, b_right[seed])):
                run_maker(tmp_path, f"tiny-{method}-s{seed}", "tiny", method, alpha, seed, steps=20, eval_every=20,
                          evals={0: 2 / 40, 20: right / 40}, n_eval=40)
        return load_root_evidence(tmp_path)
    return write


def paragraph(rows, **kw) -> str:
    return " ".join(p for p in evidence_paragraphs(rows, **kw).values() if p)


def test_num_rounds_each_quantity_as_the_tables_do():
    assert num(0.48251, "final") == "0.483" and num(0.48251, "final", signed=True) == "+0.483"
    assert num(0.012345, "train_var") == "0.0123"
    assert num(0.0012345, "mean_kl") == "0.00123"  # KL keeps 5 decimals, as in the tables
    assert num(3e-7, "mean_kl") == "3.0e-07" and num(1e-13, "final", signed=True) == "+0.000"
    assert num(float("nan"), "final") == "n/a"


def test_sentence_established_primary_result(two_arms):
    runs = two_arms({0: 30, 1: 28, 2: 31}, {0: 10, 1: 12, 2: 9})
    plan = default_plan()
    rows = compare_pairs(runs, plan.pairs, plan=plan, n_resamples=1000)
    final = next(r for r in rows if r.key == "final" and r.primary)
    assert final.is_established()
    text = paragraph(rows, plan=plan, runs=runs)
    assert text.startswith("Primary comparison, fixed in the study plan before the runs: SA-AH-GRPO (α=0.5) vs GRPO "
                           "on final Pass@1 and training-reward variance, over 3 seed pairs")
    assert "SA-AH-GRPO (α=0.5) has higher final Pass@1 than GRPO by 0.483" in text
    assert f"MDE {final.mde:.3f}" in text
    assert "cannot give p below 2/2^3 = 0.25" in text
    assert "none of the 33 runs" not in text and "none of the 6 runs breaks a health rule" in text


def test_sentence_no_difference_always_gives_the_mde(two_arms):
    runs = two_arms({0: 20, 1: 21, 2: 19}, {0: 20, 1: 20, 2: 20})
    plan = default_plan()
    rows = compare_pairs(runs, plan.pairs, plan=plan, n_resamples=500)
    text = paragraph(rows, plan=plan)
    final = next(r for r in rows if r.key == "final")
    assert "no difference detected" in text and "higher final" not in text and "lower final" not in text
    assert f"the smallest difference 3 seed pairs detect with 80% power is {final.mde:.3f}" in text
    n3, n2 = final.units_needed["0.03"], final.units_needed["0.02"]
    assert f"detecting 0.03 would take {n3}, 0.02 would take {n2} seed pairs" in text


def test_sentence_counts_a_repeated_peak_once_and_explains_mcnemar(two_arms):
    # every seed: A right on 25 of 40 problems, B on 15 -> McNemar p tiny; but the seeds disagree in size
    runs = two_arms({0: 25, 1: 16, 2: 30}, {0: 15, 1: 15, 2: 14})
    rows = compare_pairs(runs, [(SA, GRPO)], n_resamples=500)
    text = paragraph(rows)
    assert "Peak and final are the same checkpoint in every run of SA-AH-GRPO (α=0.5) vs GRPO" in text
    assert "of 3 distinct differences" in text or "none of the 3 distinct differences" in text
    final = next(r for r in rows if r.key == "final")
    if not final.is_established():
        assert "these particular models differ on such problems" in text


def test_sentence_needs_adjusted_rows(two_arms):
    runs = two_arms({0: 30, 1: 29}, {0: 10, 1: 9})
    rows = compare_arms(SA, GRPO, runs, n_resamples=100)
    with pytest.raises(ValueError, match="adjust"):
        paragraph(rows)
    assert paragraph(adjust(rows))
    assert not any(evidence_paragraphs([]).values())


