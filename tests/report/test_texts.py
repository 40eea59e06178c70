"""The report's texts: LaTeX free text, the evidence's sentences, and the texts across studies (shared runs, the
mini study's pointer, the closing note), all from the numbers."""

import json
import shutil

import pandas as pd
import pytest

from saah_lab.report.texts import (
    claim_status,
    closing_text,
    defer_text,
    earlier_claims_rows,
    earlier_claims_table,
    headline_text,
    left_out_warning,
    overlap_text,
    provenance_text,
    sentence_file,
    sources_tex,
    tex_text,
)
from saah_lib.paths import MINI_ROOT
from saah_lib.rundir.layout import MATCHED_ALPHA_FILE, WARMSTART_RECORD_FILE


def _row(key, diff, lo, hi, p_adjusted, mde, n=20, ws=2, a="SA-AH-GRPO (α=5.9)"):
    return {"primary": True, "key": key, "diff": diff, "ci_low": lo, "ci_high": hi, "p_adjusted": p_adjusted,
            "confidence": 0.975, "mde": mde, "n_units": n, "n_warm_starts": ws, "a": a, "b": "GRPO"}


def _summary(final, var, alpha=5.9):
    return {"level": 0.05, "rows": [final, var],
            "plan": {"primary": {"a": {"method": "sa", "alpha": alpha}, "b": {"method": "grpo", "alpha": 0.0}}}}


def test_closing_note_states_the_primary_result_whichever_way_it_goes(tmp_path):
    root = tmp_path / "extended"
    root.mkdir()
    (root / WARMSTART_RECORD_FILE).write_text(json.dumps({"parameters": 577152}))
    (root / MATCHED_ALPHA_FILE).write_text(json.dumps({"alpha": 5.9, "target": {"target": 0.3624},
                                                       "weight_neg_mean": {"at_alpha": 0.361, "at_main_alpha": 0.876}}))
    summary = _summary(_row("final", 0.004, -0.01, 0.018, 0.6, 0.021),
                       _row("train_var", 0.05, 0.02, 0.08, 0.004, 0.03))
    logs = pd.DataFrame({"method": ["sa", "sa", "sa", "grpo", "sa"], "alpha": [5.9, 5.9, 5.9, 0.0, 0.5],
                         "model_label": ["w1", "w1", "w2", "w1", "w1"], "weight_neg_mean": [0.2, 0.3, 0.5, 1.0, 0.9]})
    text = closing_text({"extended": summary}, {"extended": root}, {"extended": logs})
    assert "over 20 seed pairs from 2 independently built warm starts" in text
    assert "final Pass@1 differs by +0.004 (97.5\\% CI [-0.010, +0.018]): not established (adjusted p = 0.600; the " \
           "paper claims higher; a difference smaller than 0.021 would go unseen)" in text
    assert "variance" not in text  # the note is about final Pass@1; the evidence paragraphs give the rest
    # where the discount sat is what the primary arm's runs logged (per warm start), not the measurement
    assert "a 0.6M-parameter model" in text and "with SA-AH-GRPO ($\\alpha$=5.9) at the paper-matched $\\alpha$" in text
    assert ("logged mean weight on negative-advantage rollouts over training was 0.25 to 0.50 across its 2 warm "
            "starts, against a mean of 0.36 in the paper's 1.5B log") in text
    agreeing = _summary(_row("final", 0.04, 0.02, 0.06, 0.001, 0.02), _row("train_var", -0.05, -0.08, -0.02, 0.01, 0.03))
    assert "SA-AH-GRPO is higher, as the paper claims (adjusted p = 0.001)" in closing_text({"extended": agreeing},
                                                                                           {"extended": root})
    opposite = _summary(_row("final", -0.04, -0.06, -0.02, 0.001, 0.02), _row("train_var", 0.0, -0.1, 0.1, 1.0, 0.1))
    text = closing_text({"extended": opposite}, {"extended": root})
    assert "SA-AH-GRPO is lower, opposite to the paper's claim of higher (adjusted p = 0.001)" in text
    assert text.count(". ") <= 2  # two sentences
    near = _summary(_row("final", 0.019, -0.001, 0.038, 0.060, 0.026), _row("train_var", 0.01, -0.02, 0.04, 0.5, 0.03))
    text = closing_text({"extended": near}, {"extended": root})
    assert "+0.019 (97.5\\% CI [-0.001, +0.038]): not established (adjusted p = 0.060; the paper claims higher" in text
    incoherent = _summary(_row("final", 0.019, -0.003, 0.041, 0.026, 0.020), _row("train_var", 0.01, -0.02, 0.04, 0.5,
                                                                                  0.03))
    with pytest.raises(ValueError, match="disagree"):  # an interval that is not the test's own
        closing_text({"extended": incoherent}, {"extended": root})


def test_the_mini_study_defers_to_the_powered_one():
    mini = {"rows": [_row("final", -0.005, -0.04, 0.03, 0.8, 0.086, n=3, ws=1)]}
    extended = {"rows": [_row("final", 0.0, -0.01, 0.01, 0.9, 0.017)]}
    text = defer_text(mini, extended)
    assert "With 3 seed pairs the mini study cannot detect a final Pass@1 difference below 0.086" in text
    assert "with 20 seed pairs (minimum detectable difference 0.017)" in text
    assert defer_text(mini, None) == ""


def test_overlap_names_the_runs_two_studies_share(tmp_path):
    if not (MINI_ROOT / "runs").is_dir():
        return
    a, b = tmp_path / "mini", tmp_path / "extended"
    for run in ("tiny-grpo-a0-s0", "tiny-sa-a0.5-s0"):
        shutil.copytree(MINI_ROOT / "runs" / run, a / "runs" / run)
        shutil.copytree(MINI_ROOT / "runs" / run, b / "runs" / run)
    # the same run trained again: only the step times differ
    log = b / "runs" / "tiny-sa-a0.5-s0" / "train_log.jsonl"
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    log.write_text("".join(json.dumps({**r, "step_time": 9.9}) + "\n" for r in lines))
    text = overlap_text({"mini": a, "extended": b})
    assert "2 of the 2 runs of" in text and "tiny-grpo-a0-s0" in text and "tiny-sa-a0.5-s0" in text
    # a different run under the same id is not shared
    lines[3]["reward_mean"] += 1
    log.write_text("".join(json.dumps(r) + "\n" for r in lines))
    text = overlap_text({"mini": a, "extended": b})
    assert "1 of the 2 runs" in text and "tiny-sa-a0.5-s0" not in text.split(":", 1)[1]


def test_tex_text_escapes_and_keeps_math():
    assert tex_text("A_b (α=0.5) p < 0.001, 2/2^3 = 0.25, 5%, KL 0.2 > 0.1") == \
        r"A\_b ($\alpha$=0.5) p $<$ 0.001, $2/2^{3}$ = 0.25, 5\%, KL 0.2 $>$ 0.1"


def test_a_nan_interval_beside_a_significant_p_is_an_error_in_the_closing_note(tmp_path):
    # the rule is significance.established: a p without the same test's interval is inconsistent input
    final = _row("final", 0.02, float("nan"), float("nan"), 0.01, 0.02)
    var = _row("train_var", -0.01, -0.02, -0.005, 0.01, 0.004)
    with pytest.raises(ValueError, match="without an interval"):
        closing_text({"extended": _summary(final, var)}, {"extended": tmp_path})
    untested = _row("final", 0.02, float("nan"), float("nan"), float("nan"), float("nan"))
    text = closing_text({"extended": _summary(untested, var)}, {"extended": tmp_path})
    assert "final Pass@1 differs by +0.020 (97.5\\% CI [n/a, n/a]): not established (no test;" in text


def test_the_evidence_sentences_split_the_paragraphs_and_say_nothing_without_rows():
    summary = {"rows": [{}], "paragraphs": {"primary": "P < 1.", "health": "H.", "secondary": "S.", "mcnemar": "",
                                            "floors": "F 2/2^3.", "warning": "W."}}
    assert sentence_file(summary, "primary") == "P $<$ 1. H.\n"
    assert sentence_file(summary, "secondary") == "S. F $2/2^{3}$. W.\n"
    assert sentence_file(summary, "whole") == "P $<$ 1. S. F $2/2^{3}$. H. W.\n"
    assert sentence_file({"rows": [], "paragraphs": summary["paragraphs"]}, "primary") == ""
    assert sentence_file(None, "whole") == ""
    assert left_out_warning({"left_out": ["r1"], "pairs_left_out": []}) == \
        "1 damaged or incomplete run(s) left out: r1."


def test_sources_tex_switches_and_marks():
    tex = sources_tex({"reported": True, "ours": False}, ["mini_main", "mini_main", "mini_paired"])
    assert tex.splitlines() == [
        "\\newif\\ifhavereported", "\\havereportedtrue", "\\newif\\ifhaveours", "\\haveoursfalse",
        "\\expandafter\\def\\csname generated@mini_main\\endcsname{}",
        "\\expandafter\\def\\csname generated@mini_paired\\endcsname{}"]


def test_the_matched_alpha_in_words_gives_the_other_warm_starts_and_the_papers_other_levels():
    from saah_lab.report.texts import matched_alpha_text

    record = {"target": {"target": 0.3624, "file": "t_1.csv", "column": "weight_neg_mean", "steps": [5, 180]},
              "weight_neg_mean": {"at_alpha": 0.361, "at_main_alpha": 0.876}, "n_rollouts": 512, "warm_start":
              "tiny-warmstart", "n_prompts": 128, "per_prompt": 4, "n_negative": 243,
              "mean_completion_length": 61.7, "solved_alpha": 5.866, "alpha": 5.9}
    assert matched_alpha_text({}) == ""
    plain = matched_alpha_text(record)
    assert "loosely" not in plain and "0.876 at the main $\\alpha=0.5$" in plain and "\\texttt{t\\_1.csv}" in plain
    assert plain.endswith("rounded to $\\alpha=5.9$, where the mean weight is 0.361.\n")
    alphas = {"1.5b_low": {"target": 0.143, "alpha": None}, "1.5b_mean": {"target": 0.3624, "alpha": 5.217},
              "1.5b_high": {"target": 0.81, "alpha": 0.707}, "3b_mean": {"target": 0.4965, "alpha": 3.11}}
    others = {"tiny-warmstart-s1": {"weight_neg_mean": {"at_alpha": 0.3612}}}
    text = matched_alpha_text({**record, "alpha_range": {"alphas": alphas}, "other_warm_starts": others})
    assert "At that $\\alpha$ the other warm starts give \\texttt{tiny-warmstart-s1} 0.361." in text
    assert ("on the same rollouts the mean weight matches the lowest 1.5B snapshot (0.143) at no $\\alpha$ up to 10, "
            "the 1.5B mean (0.362) at $\\alpha=5.2$, the highest 1.5B snapshot (0.810) at $\\alpha=0.7$, the 3B mean "
            "(0.496) at $\\alpha=3.1$.") in text


def test_the_real_model_paragraph_states_the_measurement_and_its_command():
    from saah_lab.report.texts import real_model_text

    assert real_model_text(None) == ""
    matched = {"1.5b_low": {"target": 0.143, "alpha": 0.196}, "1.5b_mean": {"target": 0.362, "alpha": 0.059},
               "1.5b_high": {"target": 0.81, "alpha": 0.009}, "3b_mean": {"target": 0.4965, "alpha": 0.035}}
    record = {"model": "M_1", "data": "GSM8K", "prompts": 2, "per_prompt": 4, "max_new_tokens": 16,
              "temperature": 1.0, "seed": 0, "mean_normalised_entropy": 0.2256,
              "entropy_profile": [{"positions": [0, 16], "mean_entropy": 0.158},
                                  {"positions": [128, 256], "mean_entropy": 0.271}],
              "at_paper_alpha": {"alpha": 0.5, "mean_negative_weight": 0.062}, "matched_alphas": matched,
              "top_k_error": {"k": 500, "vocab_size": 49152, "mean_abs_entropy_error": 0.0239,
                              "max_abs_entropy_error": 0.2304, "mean_abs_last_weight_error_at_paper_alpha": 0.00059},
              "command": "python -m saah_lib.studies.real_model --seed 0", "wall_s": 600.0, "torch_threads": 2}
    text = real_model_text(record)  # the committed record names the module it had before the lab package
    for part in ("M\\_1", "0.226", "from 0.158 (tokens 0--15) to 0.271 (tokens 128--255)", "is 0.062",
                 "0.143--0.81", "discounts this model more than", "0.196, 0.059, 0.009 (its 3B mean: 0.035)",
                 "V = 49,152 errs by 0.024", "(0.230 at worst)", "0.0006", "saah\\_lab.studies.real\\_model",
                 "10 min on 2 CPU threads"):
        assert part in text, part
    within = real_model_text({**record, "at_paper_alpha": {"alpha": 0.5, "mean_negative_weight": 0.5}})
    assert "within the range of the paper's log" in within


def _claim_row(diff, lo, hi, p_adjusted, a="SA-AH-GRPO (α=5.9)", b="GRPO", key="final", primary=False):
    return {**_row(key, diff, lo, hi, p_adjusted, 0.02, a=a), "b": b, "primary": primary, "quantity": key}


@pytest.mark.parametrize("earlier, later, status", [
    ((0.03, 0.01, 0.05, 0.01), (0.02, 0.005, 0.035, 0.02), "confirmed"),
    ((0.03, 0.01, 0.05, 0.01), (-0.02, -0.035, -0.005, 0.02), "overturned"),
    ((0.03, 0.01, 0.05, 0.01), (0.01, -0.005, 0.025, 0.2), "not confirmed"),
    ((0.01, -0.01, 0.03, 0.3), (0.02, 0.005, 0.035, 0.02), "newly established"),
    ((0.01, -0.01, 0.03, 0.3), (0.01, -0.005, 0.025, 0.2), "still not established"),
])
def test_claim_status_reads_both_verdicts(earlier, later, status):
    assert claim_status(_claim_row(*earlier), _claim_row(*later), 0.05) == status
    assert claim_status(_claim_row(*earlier), None, 0.05) == "not tested"


def test_earlier_claims_keep_repeated_established_and_primary_comparisons():
    extended = {"level": 0.05, "rows": [
        _claim_row(0.019, -0.001, 0.038, 0.06, primary=True),                           # repeated, primary
        _claim_row(0.038, 0.012, 0.063, 0.003, b="AH-GRPO (α=5.9)"),                     # not repeated, established
        _claim_row(-0.019, -0.05, 0.013, 0.4, a="AH-GRPO (α=5.9)"),                       # not repeated, not established
    ]}
    confirm = {"level": 0.05, "rows": [_claim_row(0.025, 0.008, 0.042, 0.01, primary=True)]}
    rows = earlier_claims_rows(confirm, extended)
    assert [(r["a"], r["b"], r["status"]) for r in rows] == [
        ("SA-AH-GRPO (α=5.9)", "GRPO", "newly established"), ("SA-AH-GRPO (α=5.9)", "AH-GRPO (α=5.9)", "not tested")]
    table = earlier_claims_table(confirm, extended)
    assert "+0.019 (0.060) & +0.025* (0.010) & newly established" in table
    assert "(1 newly established; 1 not tested)" in table and "\\label{tab:earlier-claims}" in table
    assert earlier_claims_table(None, extended) == "" and earlier_claims_table(confirm, {"rows": []}) == ""


def test_the_headline_is_the_confirmatory_studys_primary_result_with_its_mde():
    extended = _summary(_row("final", 0.019, -0.001, 0.038, 0.06, 0.026), _row("train_var", 0.05, -0.004, 0.11, 0.07, 0.08))
    confirm_row = {**_row("final", 0.004, -0.008, 0.016, 0.45, 0.017, n=30, ws=6), "confidence": 0.95,
                   "n_problems": 1000}
    confirm = {"level": 0.05, "rows": [confirm_row]}
    text = headline_text({"extended": extended, "confirm": confirm})
    assert text.startswith("In our pre-registered confirmatory study (30 seed pairs from 6 warm starts, 1,000 "
                           "evaluation problems)")
    assert "+0.004 (95\\% CI [-0.008, +0.016], adjusted $p$ = 0.450): not established" in text and "is 0.017." in text
    assert headline_text({"extended": extended}).startswith("In our extended study (20 seed pairs from 2 warm starts)")
    assert headline_text({}) == ""


#: how a clean checkout is stated, and what the claim rests on
CLEAN = ("not marked \\texttt{-dirty} (a run marks its commit so when tracked files differed from it; newer records "
         "also say so in \\texttt{git\\_dirty})")


def test_provenance_names_the_commits_the_runs_record(tmp_path):
    plan_path = tmp_path / "study_plan.json"
    plan = {"warm_starts": ["w2", "w3"], "seeds": [0, 1], "pairs": [[{}, {}]],
            "evaluation": {"n_eval": 1000, "data_seed": 2026}}
    assert provenance_text(plan, [], plan_path) == ""
    text = provenance_text(plan, ["abd6ec6f00", "abd6ec6f00"], plan_path)
    assert "2 newly built warm starts $\\times$ 2 training seeds, 1 comparisons with GRPO, 1,000 evaluation" in text
    assert text.endswith("Its 2 runs record commit \\texttt{abd6ec6}, " + CLEAN + ".\n")
    assert ("record commits \\texttt{5a9da52}-dirty, \\texttt{abd6ec6}, 1 of them with local changes or none "
            "recorded.") in provenance_text(plan, ["abd6ec6f00", "5a9da52aa-dirty"], plan_path)
    assert "1 of them with local changes or none recorded" in provenance_text(plan, ["abd6ec6f00", None], plan_path)
    # the committed study's sentence, drawn from its source as read, is held byte for byte by test_generated_outputs

    assert provenance_text(None, ["abd6ec6f00"], plan_path) == \
        "Its one run records commit \\texttt{abd6ec6}, " + CLEAN + ".\n"
