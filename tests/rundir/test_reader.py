"""Tests of saah_lab.rundir.reader: the loaders, and strict reading of finished runs.

Results roots are written by hand (``make_results_root`` in conftest.py).
"""

import json

import pytest

from saah_lab.analysis import frames as F
from saah_lab.analysis.resultset import ResultSet
from saah_lab.rundir import reader as A
from saah_lib.tasks.scoring import pass_at_1_ci

TINY = "tiny"


def load_runs(root, tolerate_problems=False):
    return F.runs_frame(A.read_folders(root, "runs", tolerate_problems)[0])


def load_evals(root, tolerate_problems=False):
    return F.evals_long(A.read_folders(root, "runs", tolerate_problems)[0])


def load_train_logs(root, tolerate_problems=False):
    return F.train_logs_long(A.read_folders(root, "runs", tolerate_problems)[0])


def load_baselines(root, tolerate_problems=False):
    return F.baselines_frame(A.read_folders(root, "baselines", tolerate_problems)[0])


def test_load_runs(results_root):
    runs = load_runs(results_root, tolerate_problems=True).set_index("run_id")
    assert len(runs) == 7
    for col in ("model_label", "method", "alpha", "max_steps", "seed", "final_pass_at_1", "final_ci95", "final_step",
                "peak_pass_at_1", "peak_ci95", "peak_step", "train_var", "mean_kl", "n_steps_logged"):
        assert col in runs.columns
    r = runs.loc["tiny-grpo-s1"]
    assert r["n_steps_logged"] == 20
    assert r["final_step"] == 20 and r["final_pass_at_1"] == pytest.approx(0.61)
    assert r["complete"]
    assert r["data.train_ids.len"] == 3 and r["versions.torch"] == "x"
    inc = runs.loc["tiny-ah-a-0.25"]
    assert inc["n_steps_logged"] == 12 and not inc["complete"] and inc["final_step"] == 10
    # train_var follows the definition on the logged steps
    log = load_train_logs(results_root, tolerate_problems=True)
    one = log[log.run_id == "tiny-grpo-s2"]
    assert runs.loc["tiny-grpo-s2", "train_var"] == pytest.approx(one["reward_mean"].iloc[10:].var(ddof=1))
    assert runs.loc["tiny-grpo-s2", "mean_kl"] == pytest.approx(one["kl"].mean())


def test_long_loaders(results_root):
    ev = load_evals(results_root, tolerate_problems=True)
    assert {"run_id", "model_label", "method", "alpha", "seed", "step", "pass_at_1", "ci95"} <= set(ev.columns)
    assert ev[ev.run_id == "tiny-ah-a-0.25"]["step"].tolist() == [0, 5, 10]
    tl = load_train_logs(results_root, tolerate_problems=True)
    assert tl[tl.run_id == "tiny-sa-s1"]["step"].max() == 25
    assert tl["weight_neg_mean"].isna().any()  # null stays null
    base = load_baselines(results_root)
    assert len(base) == 1 and base["model_label"].iloc[0] == TINY
    assert base["ci95"].iloc[0] == pytest.approx(pass_at_1_ci(0.38, 50))  # filled from n


def test_empty_root(tmp_path):
    assert load_runs(tmp_path).empty
    assert load_evals(tmp_path).empty
    rs = ResultSet.from_runs(tmp_path)
    assert rs.is_empty()


# ---------------------------------------------------------------------------
# strict reading of finished runs (issue 13's probes)
# ---------------------------------------------------------------------------

def _tear_last_line(path):
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:-1] + [lines[-1][: len(lines[-1]) // 2]]))


def _complete_root(root, run_maker):
    run_maker(root, "tiny-grpo-s1", TINY, "grpo", 0.0, 1)
    run_maker(root, "tiny-grpo-s2", TINY, "grpo", 0.0, 2)
    run_maker(root, "tiny-ah-s1", TINY, "ah", 0.5, 1)
    run_maker(root, "tiny-sa-s1", TINY, "sa", 0.5, 1)
    return root


def test_a_complete_root_reads_strictly(tmp_path, run_maker):
    rs = ResultSet.from_runs(_complete_root(tmp_path, run_maker))
    assert rs.warnings == [] and rs.runs["complete"].all() and not rs.runs["damaged"].any()


def test_torn_last_eval_line_is_an_error_naming_file_and_line(tmp_path, run_maker):
    root = _complete_root(tmp_path, run_maker)
    _tear_last_line(root / "runs" / "tiny-grpo-s1" / "eval.jsonl")  # the step-20 (final) evaluation
    with pytest.raises(A.DamagedResultsError, match=r"tiny-grpo-s1/eval.jsonl: line 5: not valid JSON"):
        ResultSet.from_runs(root)
    # tolerated: the run is kept, flagged damaged and incomplete (its final evaluation is gone)
    rs = ResultSet.from_runs(root, tolerate_problems=True)
    run = rs.runs.set_index("run_id").loc["tiny-grpo-s1"]
    assert run["damaged"] and not run["complete"] and run["final_step"] == 15
    assert any("eval.jsonl: line 5" in w for w in rs.warnings)
    grpo = rs.summary[rs.summary.method == "grpo"].iloc[0]
    assert grpo["damaged"] and not grpo["complete"]


def test_non_numeric_metric_is_an_error(tmp_path, run_maker):
    root = _complete_root(tmp_path, run_maker)
    path = root / "runs" / "tiny-sa-s1" / "eval.jsonl"
    lines = path.read_text().splitlines()
    rec = json.loads(lines[-1])
    rec["pass_at_1"] = "0.9x"
    path.write_text("\n".join(lines[:-1] + [json.dumps(rec)]) + "\n")
    with pytest.raises(A.DamagedResultsError, match=r"tiny-sa-s1/eval.jsonl: line 5: pass_at_1 is '0.9x', not a number"):
        load_runs(root)
    runs = load_runs(root, tolerate_problems=True).set_index("run_id")
    assert runs.loc["tiny-sa-s1", "damaged"] and runs.loc["tiny-sa-s1", "final_step"] == 15
    # a training-log metric too; null stays allowed there
    tpath = root / "runs" / "tiny-ah-s1" / "train_log.jsonl"
    tpath.write_text(tpath.read_text().replace('"kl": 0.003', '"kl": "high"', 1))
    with pytest.raises(A.DamagedResultsError, match=r"tiny-ah-s1/train_log.jsonl: line 3: kl is 'high'"):
        load_train_logs(root)


def test_missing_final_evaluation_makes_a_run_incomplete(tmp_path, run_maker):
    # trained to its 20 steps, but the step-20 evaluation was never written
    run_maker(tmp_path, "tiny-grpo-s1", TINY, "grpo", 0.0, 1, evals={0: 0.4, 5: 0.45, 10: 0.5, 15: 0.5})
    with pytest.raises(A.DamagedResultsError, match=r"incomplete: trained to step 20 of 20, not evaluated at step 20"):
        load_runs(tmp_path)
    assert not load_runs(tmp_path, tolerate_problems=True)["complete"].iloc[0]


def test_missing_or_torn_config_is_an_error_and_never_grouped(tmp_path, run_maker):
    root = _complete_root(tmp_path, run_maker)
    (root / "runs" / "tiny-ah-s1" / "config.json").unlink()
    _tear_last_line(root / "runs" / "tiny-sa-s1" / "config.json")
    with pytest.raises(A.DamagedResultsError) as err:
        ResultSet.from_runs(root)
    assert "tiny-ah-s1/config.json: missing" in str(err.value)
    assert "tiny-sa-s1/config.json: line 1: not valid JSON" in str(err.value)
    # tolerated: both runs are left out (never averaged into an untitled group) and named
    rs = ResultSet.from_runs(root, tolerate_problems=True)
    assert set(rs.runs["run_id"]) == {"tiny-grpo-s1", "tiny-grpo-s2"}
    assert set(rs.summary["method"]) == {"base", "grpo"} and rs.summary["method"].notna().all()
    assert len(rs.excluded) == 2 and all("excluded" in w for w in rs.excluded)
    assert set(rs.evals["run_id"]) == {"tiny-grpo-s1", "tiny-grpo-s2"}


def test_baseline_folders_are_read_strictly(tmp_path, run_maker):
    root = _complete_root(tmp_path, run_maker)
    base = root / "baselines" / "zero"
    base.mkdir(parents=True)
    (base / "eval.jsonl").write_text('{"step": 0, "pass_at_1": 0.3, "n": 50}\n{"step": 0, "pass_at_1"')
    with pytest.raises(A.DamagedResultsError, match="baselines/zero/config.json: missing"):
        ResultSet.from_runs(root)
    (base / "config.json").write_text(json.dumps({"model_label": TINY}))
    with pytest.raises(A.DamagedResultsError, match="zero/eval.jsonl: line 2"):
        ResultSet.from_runs(root)


def test_a_byte_that_is_not_utf8_is_an_error_naming_file_and_line_and_tolerant_reading_flags_the_run(
        tmp_path, run_maker):
    root = _complete_root(tmp_path / "r", run_maker)
    run_ids = sorted(p.name for p in (root / "runs").iterdir())
    log = root / "runs" / run_ids[0] / "train_log.jsonl"
    lines = log.read_bytes().splitlines(keepends=True)
    log.write_bytes(b"".join(lines[:2] + [lines[2].replace(b'"step"', b'"st\xe9p"')] + lines[3:]))
    config = root / "runs" / run_ids[1] / "config.json"
    config.write_bytes(config.read_bytes().replace(b'"profile"', b'"pro\xfffile"'))
    with pytest.raises(A.DamagedResultsError) as err:
        A.read_folders(root)
    assert f"{log}: line 3: not UTF-8 text" in str(err.value)
    assert f"{config}: line 1: not UTF-8 text" in str(err.value)
    kept, flagged = A.read_folders(root, tolerate_problems=True)
    assert {f.path.name for f in kept} == set(run_ids) - {run_ids[1]}
    assert any(m.startswith(f"{log}: line 3: not UTF-8") for m in flagged)
    assert any(m.startswith(f"{config.parent}: excluded") for m in flagged)


def test_a_compile_health_record_that_cannot_be_read_is_damage_named_not_a_crash(tmp_path, run_maker):
    from saah_lab.rundir.reader import read_run_folder

    run_maker(tmp_path, "tiny-sa-s0", "tiny", "sa", 0.5, 0)
    folder = tmp_path / "runs" / "tiny-sa-s0"
    assert read_run_folder(folder).compile_fallback is None and not read_run_folder(folder).damage
    (folder / "compile_health.json").write_text('{"processes": [')
    read = read_run_folder(folder)
    assert read.compile_fallback is None
    assert any("compile_health.json: not a compile-health record" in d for d in read.damage)


def test_reading_a_root_reads_each_result_file_once(tmp_path, run_maker, monkeypatch):
    """No cache that hashes every file to decide whether to read it (issue 58): one read per result file."""
    from pathlib import Path

    run_maker(tmp_path, "tiny-grpo-a0-s1", TINY, "grpo", 0.0, 1)
    reads, read_bytes = [], Path.read_bytes
    monkeypatch.setattr(Path, "read_bytes", lambda self: reads.append(str(self)) or read_bytes(self))
    A.read_folders(tmp_path, "runs")
    assert reads and sorted(reads) == sorted(set(reads))


def test_the_lab_takes_config_json_from_the_library_reader(tmp_path, run_maker, monkeypatch):
    """One read_config: the lab's checks of config.json read it through RunDir.read_config."""
    from saah_lib.rundir.folder import RunDir

    run_dir = run_maker(tmp_path, "tiny-grpo-a0-s1", TINY, "grpo", 0.0, 1)
    seen, read_config = [], RunDir.read_config
    monkeypatch.setattr(RunDir, "read_config", lambda self: seen.append(self.dir) or read_config(self))
    (folder,), _ = A.read_folders(tmp_path, "runs")
    assert seen == [run_dir] and folder.config["run_id"] == "tiny-grpo-a0-s1"
