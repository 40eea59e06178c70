"""The paragraph written from the paired evidence: it claims no more than the rows show."""

from types import SimpleNamespace

import pytest

from saah_lab.analysis.evidence import adjust, compare_arms, compare_pairs, load_root_evidence
from saah_lab.analysis.plan import Arm, default_plan
from saah_lab.report.texts import _per_warm_start, evidence_paragraphs, num, percent

SA, GRPO = Arm("sa", 0.5), Arm("grpo", 0.0)


@pytest.fixture
def two_arms(tmp_path, run_maker):
    """Seed by seed, SA-AH-GRPO right on ``a`` of ``n`` problems at step 20 and GRPO on ``b`` (both 5% at
    step 0: every run gains more than evaluation noise, so none is flagged)."""
    def write(a_right: dict[int, int], b_right: dict[int, int], n: int = 40):
        for seed in a_right:
            for method, alpha, right in (("sa", 0.5, a_right[seed]), ("grpo", 0.0, b_right[seed])):
                run_maker(tmp_path, f"tiny-{method}-s{seed}", "tiny", method, alpha, seed, steps=20, eval_every=20,
                          evals={0: 0.05, 20: right / n}, n_eval=n)
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
    # 400 problems: with 40 the problem term alone keeps 3 seeds from establishing anything at 2.5%
    runs = two_arms({0: 300, 1: 290, 2: 305}, {0: 100, 1: 95, 2: 102}, n=400)
    plan = default_plan()
    rows = compare_pairs(runs, plan.pairs, plan=plan)
    final = next(r for r in rows if r.key == "final" and r.primary)
    assert final.is_established() and final.ci_low > 0
    text = paragraph(rows, plan=plan, runs=runs)
    assert text.startswith("Primary comparison, fixed in the study plan before the runs: SA-AH-GRPO (α=0.5) vs GRPO "
                           "on final Pass@1 and training-reward variance, over 3 seed pairs (Bonferroni over its 2 "
                           "tests: each at level 0.025, intervals at 97.5%).")
    assert f"SA-AH-GRPO (α=0.5) has higher final Pass@1 than GRPO by {final.diff:.3f} (97.5% CI [" in text
    assert (f"crossed t over seeds x problems, {final.df:.0f} df, p < 0.001, Bonferroni over 2 p < 0.001"
            in text) or f"Bonferroni over 2 p = {final.p_adjusted:.3f}" in text
    assert f"MDE {final.mde:.3f}" in text
    assert "cannot give p below 2/2^3 = 0.25" in text
    assert "none of the 33 runs" not in text and "none of the 6 runs breaks a health rule" in text


def test_a_primary_family_of_one_is_said_so_not_as_bonferroni_over_one(two_arms):
    from saah_lab.analysis.plan import StudyPlan

    runs = two_arms({0: 300, 1: 290, 2: 305}, {0: 100, 1: 95, 2: 102}, n=400)
    plan = StudyPlan("one", (SA, GRPO), ((SA, GRPO),), quantities=("final",))
    text = paragraph(compare_pairs(runs, plan.pairs, plan=plan), plan=plan, runs=runs)
    assert "over 3 seed pairs (a family of one test, at level 0.05 with a 95% interval)." in text
    assert "Bonferroni over its 1" not in text


def test_sentence_no_difference_always_gives_the_mde(two_arms):
    runs = two_arms({0: 20, 1: 21, 2: 19}, {0: 20, 1: 20, 2: 20})
    plan = default_plan()
    rows = compare_pairs(runs, plan.pairs, plan=plan)
    text = paragraph(rows, plan=plan)
    final = next(r for r in rows if r.key == "final")
    assert "not established at the family's level" in text and "higher final" not in text
    assert "lower final" not in text and "no difference" not in text
    assert (f"the smallest difference this test detects with 80% power at level 0.025 over 3 seed pairs is "
            f"{final.mde:.3f}") in text
    n3, n2 = (f"{n:,}" if n else "more than 10,000" for n in (final.units_needed["0.03"], final.units_needed["0.02"]))
    assert f"detecting 0.03 would take {n3}, 0.02 would take {n2} seed pairs on these problems" in text


def test_sentence_counts_a_repeated_peak_once_and_explains_mcnemar(two_arms):
    # every seed: A right on 25 of 40 problems, B on 15 -> McNemar p tiny; but the seeds disagree in size
    runs = two_arms({0: 25, 1: 16, 2: 30}, {0: 15, 1: 15, 2: 14})
    rows = compare_pairs(runs, [(SA, GRPO)])
    text = paragraph(rows)
    assert "Peak and final are the same checkpoint in every run of SA-AH-GRPO (α=0.5) vs GRPO" in text
    assert "of 5 distinct differences" in text or "none of the 5 distinct differences" in text
    final = next(r for r in rows if r.key == "final")
    if not final.is_established():
        assert "these particular models differ on such problems" in text


def test_sentence_needs_adjusted_rows(two_arms):
    runs = two_arms({0: 30, 1: 29}, {0: 10, 1: 9})
    rows = compare_arms(SA, GRPO, runs)
    with pytest.raises(ValueError, match="adjust"):
        paragraph(rows)
    assert paragraph(adjust(rows))
    assert not any(evidence_paragraphs([]).values())




def _row_with_warm_starts(*per):
    """A row as the sentences read it, with each warm start's (mean difference, p, significant)."""
    detail = {"per_warm_start": {f"w{k}": {"n": 10, "mean_diff": d, "p_value": p, "significant": sig}
                                 for k, (d, p, sig) in enumerate(per)}}
    return SimpleNamespace(quantity="final Pass@1", key="final", detail=detail, level=0.05, family_size=2)


def test_per_warm_start_sentence_never_says_established_and_counts_significant_ones():
    both = _per_warm_start(_row_with_warm_starts((0.02, 0.15, False), (0.018, 0.08, False)))
    assert "the same sign in both, significant in neither at level 0.025" in both
    assert "established" not in both.replace("cannot establish", "")
    one = _per_warm_start(_row_with_warm_starts((0.02, 0.01, True), (0.018, 0.08, False)))
    assert "the same sign in both, significant in one at level 0.025" in one
    split = _per_warm_start(_row_with_warm_starts((0.02, 0.01, True), (-0.01, 0.4, False)))
    assert "a different sign between them" in split
    assert _per_warm_start(_row_with_warm_starts((0.02, 0.01, True))) == ""  # one warm start: nothing to compare


def test_percent_prints_the_family_confidence():
    assert (percent(0.95), percent(0.975), percent(1 - 0.05 / 3), percent(0.9875)) == ("95%", "97.5%", "98.3%",
                                                                                       "98.8%")
