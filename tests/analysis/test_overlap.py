"""Runs shared by two study roots: the same settings, evaluations and training values, step times aside."""

import json
import shutil

from saah_lab.analysis.overlap import same_run, shared_runs


def test_a_copied_run_is_shared_and_a_changed_one_is_not(tmp_path, run_maker):
    for seed in (0, 1):
        run_maker(tmp_path / "a", f"tiny-sa-s{seed}", "tiny", "sa", 0.5, seed)
    shutil.copytree(tmp_path / "a" / "runs" / "tiny-sa-s0", tmp_path / "b" / "runs" / "tiny-sa-s0")
    run_maker(tmp_path / "b", "tiny-sa-s1", "tiny", "sa", 0.5, 1, evals={0: 0.4, 5: 0.5, 10: 0.5, 15: 0.5, 20: 0.6})
    run_maker(tmp_path / "b", "tiny-ah-s0", "tiny", "ah", 0.5, 0)
    assert shared_runs(tmp_path / "a", tmp_path / "b") == {"shared": ["tiny-sa-s0"], "differ": ["tiny-sa-s1"],
                                                          "n_a": 2, "n_b": 3}


def test_where_and_how_fast_a_run_ran_does_not_make_it_another_run(tmp_path, run_maker):
    a = run_maker(tmp_path / "a", "r", "tiny", "grpo", 0.0, 0)
    b = shutil.copytree(a, tmp_path / "b" / "runs" / "r")
    config = json.loads((b / "config.json").read_text())
    (b / "config.json").write_text(json.dumps({**config, "results_dir": "elsewhere", "git_commit": "abc",
                                               "model_name": "org/tiny"}))
    log = [json.loads(line) for line in (b / "train_log.jsonl").read_text().splitlines()]
    (b / "train_log.jsonl").write_text("".join(json.dumps({**r, "step_time": 9.9}) + "\n" for r in log))
    assert same_run(a, b)
    (b / "config.json").write_text(json.dumps({**config, "learning_rate": 1e-5}))
    assert not same_run(a, b)
