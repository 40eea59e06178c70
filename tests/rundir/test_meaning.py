"""Logs that are valid JSON but wrong (issue 22's probes) are caught by the reader, on a copy of committed runs.

Each probe edits one file of a copy of six runs of ``results/mini`` (grpo / ah / sa at seeds 0 and 1) and its
baseline.  Read strictly, the reader names the file and line; read with problems tolerated, the run is
flagged in every table and figure, and the paired evidence leaves it out by name.
"""

import json
import re
import shutil
from pathlib import Path

import pytest

from saah_lab.analysis.resultset import ResultSet
from saah_lab.report import plots as P
from saah_lab.report.render import render_source
from saah_lab.report.tables import DAMAGED_MARK, RESULT_TABLES, with_notes
from saah_lab.report.texts import evidence_summary, left_out_warning
from saah_lab.rundir.reader import DamagedResultsError, read_folders
from saah_lib.paths import MINI_ROOT

RUN_IDS = [f"tiny-{m}-s{seed}" for seed in (0, 1) for m in ("grpo-a0", "ah-a0.5", "sa-a0.5")]
SA = "tiny-sa-a0.5-s0"

pytestmark = pytest.mark.skipif(not (MINI_ROOT / "runs" / SA).is_dir(), reason="no committed mini study")


@pytest.fixture
def study(tmp_path) -> Path:
    """A copy of six committed runs and the committed baseline (a results root in the committed format)."""
    root = tmp_path / "study"
    for run_id in RUN_IDS:
        shutil.copytree(MINI_ROOT / "runs" / run_id, root / "runs" / run_id)
    shutil.copytree(MINI_ROOT / "baselines", root / "baselines")
    return root


def lines_of(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def write_lines(path: Path, records: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def edit_line(path: Path, number: int, **changes) -> None:
    """Change fields of the ``number``-th line (1-based) of a JSON-lines file."""
    records = lines_of(path)
    records[number - 1].update(changes)
    write_lines(path, records)


def run_file(root: Path, name: str, run_id: str = SA) -> Path:
    return root / "runs" / run_id / name


def strict_error(root: Path, kind: str = "runs") -> str:
    with pytest.raises(DamagedResultsError) as err:
        read_folders(root, kind)
    return str(err.value)


def test_the_copied_committed_runs_and_every_committed_run_pass_every_check(study):
    assert read_folders(study)[1] == [] and read_folders(study, "baselines")[1] == []
    for root in (MINI_ROOT, MINI_ROOT.parent / "extended"):
        for kind in ("runs", "baselines"):
            assert read_folders(root, kind)[1] == [], (root, kind)


# ---------------------------------------------------------------------------
# eval.jsonl
# ---------------------------------------------------------------------------

EVAL_PROBES = {
    "pass_at_1 above 1": (dict(pass_at_1=1.7), r"line 4: pass_at_1 is 1.7, outside \[0, 1\]"),
    "pass_at_1 below 0": (dict(pass_at_1=-0.2), r"line 4: pass_at_1 is -0.2, outside \[0, 1\]"),
    "pass_at_1 not n_correct / n": (dict(pass_at_1=0.9), r"line 4: pass_at_1 is 0.9, but n_correct / n = 84/200"),
    "n_correct above n": (dict(n_correct=201), r"line 4: n_correct is 201, not an integer from 0 to n = 200"),
    "n not an integer": (dict(n=200.5), r"line 4: n is 200.5, not a positive integer"),
    "ci95 not binomial": (dict(ci95=0.01), r"line 4: ci95 is 0.01, but 1.96 \* sqrt"),
    "n_correct missing": (dict(n_correct=None), r"line 4: n_correct is None, not a number"),
}


@pytest.mark.parametrize("probe", sorted(EVAL_PROBES))
def test_a_wrong_final_evaluation_is_an_error_naming_file_and_line(study, probe):
    changes, message = EVAL_PROBES[probe]
    edit_line(run_file(study, "eval.jsonl"), 4, **changes)
    assert re.search(f"{SA}/eval.jsonl: {message}", strict_error(study))


def test_a_repeated_evaluation_step_is_an_error_not_the_last_line_kept(study):
    path = run_file(study, "eval.jsonl")
    records = lines_of(path)
    write_lines(path, records + [{**records[-1], "pass_at_1": 0.815, "n_correct": 163,
                                  "ci95": records[-1]["ci95"]}])
    assert "eval.jsonl: line 5: step 60 evaluated again (line 4 has it)" in strict_error(study)
    # tolerated: the first line counts, the run is flagged
    runs = ResultSet.from_runs(study, tolerate_problems=True).runs.set_index("run_id")
    assert runs.loc[SA, "final_pass_at_1"] == pytest.approx(0.42) and runs.loc[SA, "damaged"]


def test_evaluations_off_the_schedule_or_missing_from_it_are_errors(study):
    path = run_file(study, "eval.jsonl")
    records = lines_of(path)
    extra = {**records[1], "step": 30}
    write_lines(path, records[:2] + [extra] + records[2:])
    assert "eval.jsonl: line 3: step 30 is not on the evaluation schedule (0, 20, 40, 60)" in strict_error(study)
    write_lines(path, [records[0], records[2], records[3]])  # step 20 gone, with its samples
    run_file(study, "eval_samples/step_0020.jsonl").unlink()
    assert "eval.jsonl: no evaluation at step 20 (scheduled: 0, 20, 40, 60; training reached step 60)" \
        in strict_error(study)
    write_lines(path, [records[0], records[2], records[1], records[3]])  # out of order
    assert "eval.jsonl: line 3: step 20 after step 40" in strict_error(study)


def test_the_baseline_is_checked_like_a_run(study):
    path = study / "baselines" / "tiny-warmstart" / "eval.jsonl"
    edit_line(path, 1, pass_at_1=0.9)
    assert "tiny-warmstart/eval.jsonl: line 1: pass_at_1 is 0.9, but n_correct / n" in strict_error(study, "baselines")


# ---------------------------------------------------------------------------
# train_log.jsonl
# ---------------------------------------------------------------------------

def _swap(records):
    records[9], records[10] = records[10], records[9]
    return records


def _renumber(records):
    for r in records[29:]:
        r["step"] += 1
    return records


TRAIN_PROBES = {  # name: (edit of the 60 lines, message)
    "duplicated": (lambda r: r[:10] + [r[9]] + r[10:],
                   ("line 11: step 10 where step 11 was expected (steps run 1, 2, 3, ... once each, in order; "
                    "step 10 is also on line 10)")),
    "swapped": (_swap, "line 10: step 11 where step 10 was expected"),
    "missing": (lambda r: r[:29] + r[30:], "line 30: step 31 where step 30 was expected"),
    "renumbered": (_renumber, "line 60: step 61 is beyond the run's 60 steps"),
    "extra": (lambda r: r + [{**r[-1], "step": 61}], "line 61: step 61 is beyond the run's 60 steps"),
    "reward_mean 1e6": (lambda r: [{**x, "reward_mean": 1e6} if x["step"] == 7 else x for x in r],
                        "line 7: reward_mean is 1000000.0, above 7.5"),
    "reward below the minimum total": (lambda r: [{**x, "reward_mean": -1.5} if x["step"] == 7 else x for x in r],
                                       "line 7: reward_mean is -1.5, below -1"),
    "kl -3": (lambda r: [{**x, "kl": -3} if x["step"] == 8 else x for x in r], "line 8: kl is -3, below 0"),
    "neg_frac 5": (lambda r: [{**x, "neg_frac": 5} if x["step"] == 9 else x for x in r],
                   "line 9: neg_frac is 5, above 1"),
    "weight 0": (lambda r: [{**x, "weight_mean": 0.0} if x["step"] == 9 else x for x in r],
                 "line 9: weight_mean is 0.0, not above 0"),
    "a component above its maximum": (lambda r: [{**x, "reward_correct": 4.5} if x["step"] == 3 else x for x in r],
                                      "line 3: reward_correct is 4.5, above 4"),
}


@pytest.mark.parametrize("probe", sorted(TRAIN_PROBES))
def test_a_wrong_training_log_is_an_error_naming_file_and_line(study, probe):
    edit, message = TRAIN_PROBES[probe]
    path = run_file(study, "train_log.jsonl")
    write_lines(path, edit(lines_of(path)))
    assert f"{SA}/train_log.jsonl: {message}" in strict_error(study)


def test_float_error_is_not_a_breach(study):
    path = run_file(study, "train_log.jsonl")
    write_lines(path, [{**r, "kl": -1e-9, "entropy_norm": 1 + 1e-9} if r["step"] == 5 else r for r in lines_of(path)])
    assert read_folders(study)[1] == []


def test_tolerated_breaches_leave_their_lines_out_and_flag_the_run(study):
    path = run_file(study, "train_log.jsonl")
    records = lines_of(path)
    records[30]["reward_mean"] = 1e6  # would make the training variance about 1e10
    write_lines(path, records[:10] + [records[9]] + records[10:])  # and step 10 twice
    runs = ResultSet.from_runs(study, tolerate_problems=True).runs.set_index("run_id")
    assert runs.loc[SA, "damaged"] and runs.loc[SA, "n_steps_logged"] == 59
    assert runs.loc[SA, "train_var"] < 10


# ---------------------------------------------------------------------------
# eval_samples/step_XXXX.jsonl
# ---------------------------------------------------------------------------

def _drop_one_record(path: Path) -> None:
    path.write_text("".join(path.read_text().splitlines(keepends=True)[1:]))


def test_a_sample_file_must_hold_exactly_the_evaluation_it_summarises(study):
    samples = run_file(study, "eval_samples/step_0060.jsonl")
    original = samples.read_text()
    _drop_one_record(samples)
    assert (f"{SA}/eval_samples/step_0060.jsonl: 199 records, but {study}/runs/{SA}/eval.jsonl line 4 says n = 200"
            in strict_error(study))
    records = [json.loads(line) for line in original.splitlines()]
    first_right = next(i for i, r in enumerate(records) if r["correct"])
    records[first_right].update(correct=False, extracted="-1")  # a wrong answer, scored as such
    write_lines(samples, records)
    assert "step_0060.jsonl: 83 correct, but" in strict_error(study) and "says n_correct = 84" in strict_error(study)
    records[first_right]["correct"] = "yes"
    write_lines(samples, records)
    assert f"step_0060.jsonl: line {first_right + 1}: correct is 'yes', not true or false" in strict_error(study)
    records = [json.loads(line) for line in original.splitlines()]
    records[5]["id"] = records[0]["id"]
    write_lines(samples, records)
    assert f"step_0060.jsonl: line 6: problem id {records[0]['id']!r} is also on line 1" in strict_error(study)
    samples.unlink()
    assert f"step_0060.jsonl: missing ({study}/runs/{SA}/eval.jsonl line 4 evaluated this step)" in strict_error(study)


def test_a_correct_flag_that_scoring_does_not_give_is_an_error_naming_file_and_line(study):
    samples = run_file(study, "eval_samples/step_0060.jsonl")
    records = lines_of(samples)
    right = next(i for i, r in enumerate(records) if r["correct"])
    wrong = next(i for i, r in enumerate(records) if not r["correct"] and r["extracted"] is not None)
    # two flags swapped: the count still agrees with eval.jsonl, the flags do not with the answers
    records[right]["correct"], records[wrong]["correct"] = False, True
    write_lines(samples, records)
    error = strict_error(study)
    assert (f"step_0060.jsonl: line {right + 1}: correct is False, but the extracted answer "
            f"{records[right]['extracted']!r} scored against the gold answer {records[right]['gold']!r} is right"
            in error)
    assert f"step_0060.jsonl: line {wrong + 1}: correct is True, but the extracted answer" in error
    assert "says n_correct" not in error
    kept, flagged = read_folders(study, tolerate_problems=True)
    assert SA in {f.path.name for f in kept if f.damage}


def _edit_config(root: Path, run_id: str, **changes) -> Path:
    path = run_file(root, "config.json", run_id)
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))
    return path


@pytest.mark.parametrize("changes, contradiction", [
    ({"alpha": 0.25}, "alpha 0.25 (the run id says 0.5)"),
    ({"method": "ah"}, "method ah (the run id says sa)"),
    ({"seed": 3}, "seed 3 (the run id says 0)"),
])
def test_a_config_that_contradicts_its_run_id_is_an_error_naming_the_folder(study, changes, contradiction):
    _edit_config(study, SA, **changes)
    folder = study / "runs" / SA
    assert f"{folder}: config.json contradicts the run id {SA!r}: {contradiction}" in strict_error(study)
    kept, flagged = read_folders(study, tolerate_problems=True)
    assert any(m.startswith(f"{folder}: config.json contradicts the run id") for m in flagged)


def test_swapped_or_renamed_run_folders_are_errors_naming_the_folder(study):
    a, b = study / "runs" / "tiny-sa-a0.5-s0", study / "runs" / "tiny-sa-a0.5-s1"
    a.rename(study / "swap")
    b.rename(a)
    (study / "swap").rename(b)
    error = strict_error(study)
    assert (f"{a}: the folder's name is not its config's run id 'tiny-sa-a0.5-s1'" in error
            and f"{b}: the folder's name is not its config's run id 'tiny-sa-a0.5-s0'" in error)
    assert f"{a}: config.json contradicts the folder name 'tiny-sa-a0.5-s0': seed 1 (the folder name says 0)" in error


def test_two_folders_holding_one_run_are_an_error_naming_both(study):
    copy = study / "runs" / "tiny-sa-a0.5-s7"
    shutil.copytree(study / "runs" / SA, copy)
    original = study / "runs" / SA
    error = strict_error(study)
    assert f"{copy}: holds run {SA!r}, as does {original}; a run is in one folder" in error
    assert f"{original}: holds run {SA!r}, as does {copy}; a run is in one folder" in error
    kept, flagged = read_folders(study, tolerate_problems=True)
    assert {m for m in flagged if "a run is in one folder" in m} and len(kept) == len(RUN_IDS) + 1


def test_a_sample_file_without_its_evaluation_line_is_an_error(study):
    shutil.copy(run_file(study, "eval_samples/step_0020.jsonl"), run_file(study, "eval_samples/step_0030.jsonl"))
    assert "eval_samples/step_0030.jsonl: no line of eval.jsonl evaluates step 30" in strict_error(study)


@pytest.mark.slow
def test_a_deleted_sample_record_never_silently_drops_paired_tests(study, tmp_path):
    full = evidence_summary(study)
    _drop_one_record(run_file(study, "eval_samples/step_0060.jsonl"))
    with pytest.raises(DamagedResultsError, match="step_0060.jsonl: 199 records"):
        evidence_summary(study)
    tolerated = evidence_summary(study, tolerate_problems=True)
    assert tolerated["left_out"] == [SA]
    assert f"WARNING: 1 damaged or incomplete run(s) were left out: {SA}." in tolerated["sentence"]
    # with one SA seed left its pairs cannot be tested over seeds: named, not silently dropped
    sa_pairs = {(r["a"], r["b"]) for r in full["rows"] if r["a"].startswith("SA")}
    assert sa_pairs and not any(r["a"].startswith("SA") for r in tolerated["rows"])
    assert len(tolerated["not_tested"]) == len(sa_pairs)
    assert f"Not tested ({len(sa_pairs)} planned comparison(s)):" in tolerated["sentence"]
    render_source(study, tmp_path / "t", tmp_path / "f", prefix="x", tolerate_problems=True)
    table = (tmp_path / "t" / "x_paired.tex").read_text()
    assert rf"\textbf{{Warning:}} 1 damaged or incomplete run(s) left out: {SA}." in table
    assert f"left out: {SA}" in (tmp_path / "t" / "x_paired_sentence.tex").read_text()
    figure = P.plot_paired(tolerated["rows"], tolerated["level"], left_out_warning(tolerated))
    assert f"WARNING: 1 damaged or incomplete run(s) left out: {SA}." in figure._suptitle.get_text()


# ---------------------------------------------------------------------------
# a tolerated breach is visible in every table and figure
# ---------------------------------------------------------------------------

def test_a_tolerated_breach_is_flagged_in_every_table_and_figure(study, tmp_path):
    edit_line(run_file(study, "eval.jsonl"), 4, pass_at_1=0.9)
    rs = ResultSet.from_runs(study, tolerate_problems=True)
    assert any(f"{SA}/eval.jsonl: line 4" in w for w in rs.warnings)
    sa = rs.summary[rs.summary["method"] == "sa"].iloc[0]
    assert sa["damaged"] and sa["final_pass_at_1"] != pytest.approx((0.9 + 0.42) / 2)
    tables = {name: with_notes(rs, make(rs, "x")) for name, make in RESULT_TABLES.items()}
    tables = {name: text for name, text in tables.items() if text}
    assert tables
    for name, text in tables.items():
        assert r"\textbf{Warning:} read with problems tolerated" in text, name
    main = tables["main"]
    assert DAMAGED_MARK in main and SA.replace("_", r"\_") in main
    figures = {name: draw(rs) for name, draw in P.RESULT_FIGURES.items()}
    figures = {name: fig for name, fig in figures.items() if fig is not None}
    assert figures and all("WARNING: read with problems tolerated" in f._suptitle.get_text() for f in figures.values())
