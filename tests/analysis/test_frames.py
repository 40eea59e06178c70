"""Run folders as DataFrames: one row per run, per evaluation, per logged step, with the tables' summaries."""

import json

import numpy as np
import pytest

from saah_lab.analysis import frames as F
from saah_lab.rundir.reader import read_folders


def test_one_row_per_run_with_its_summaries(tmp_path, run_maker):
    run_maker(tmp_path, "tiny-sa-s0", "tiny", "sa", 0.5, 0, evals={0: 0.4, 5: 0.5, 10: 0.7, 15: 0.6, 20: 0.6})
    folders, _ = read_folders(tmp_path)
    runs = F.runs_frame(folders)
    row = runs.iloc[0]
    assert (row.run_id, row.method, row.alpha, row.seed) == ("tiny-sa-s0", "sa", 0.5, 0)
    # final = last evaluated step, peak = best after step 0 (earliest of ties), step 0 kept apart
    assert (row.final_pass_at_1, row.final_step, row.peak_pass_at_1, row.peak_step) == (0.6, 20, 0.7, 10)
    assert row.step0_pass_at_1 == 0.4 and row.n_evals == 5 and row.n_steps_logged == 20
    assert bool(row.complete) and not bool(row.damaged) and row["data.train_ids.len"] == 3
    evals = F.evals_long(folders)
    assert list(evals.step) == [0, 5, 10, 15, 20] and set(evals.run_id) == {"tiny-sa-s0"}
    logs = F.train_logs_long(folders)
    assert list(logs.step) == list(range(1, 21)) and logs.kl.iloc[-1] == pytest.approx(0.02)


def test_a_missing_ci_is_filled_from_pass_at_1_and_n(tmp_path, baseline_maker):
    baseline_maker(tmp_path, "zero", "tiny", 50, 19, ci95=False)
    folders, _ = read_folders(tmp_path, "baselines")
    frame = F.evals_frame(folders[0])
    p = 19 / 50
    assert frame.ci95.iloc[0] == pytest.approx(1.96 * np.sqrt(p * (1 - p) / 50))


def test_a_run_whose_compiled_rollout_fell_back_says_so_in_its_row_and_the_run_table(tmp_path, run_maker):
    from saah_lab.analysis.resultset import ResultSet
    from saah_lab.report.tables import FALLBACK_MARK, table_setup

    for seed in (0, 1):
        run_maker(tmp_path, f"tiny-sa-s{seed}", "tiny", "sa", 0.5, seed)
    fallback = {"where": "rollout", "step": 3, "reason": "BackendCompilerFailed: inductor\n  raised"}
    (tmp_path / "runs" / "tiny-sa-s1" / "compile_health.json").write_text(
        json.dumps({"processes": [{"fallback": None}, {"fallback": fallback}]}))
    runs = F.runs_frame(read_folders(tmp_path)[0]).set_index("run_id")
    assert not isinstance(runs.loc["tiny-sa-s0", "compile_fallback"], str)  # None (NaN in a column of strings)
    assert runs.loc["tiny-sa-s1", "compile_fallback"] == (
        "compiled decoding fell back to hf in rollout at step 3: BackendCompilerFailed: inductor raised")
    table = table_setup(ResultSet.from_runs(tmp_path))
    assert table.count(FALLBACK_MARK) == 2  # the marked row and its note
    assert "1 of 2 runs fell back from the compiled rollout" in table and "BackendCompilerFailed" in table
