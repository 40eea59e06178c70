"""Reproducibility: the study comparison, portable run folders, and bit-identical reruns on CPU."""

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from saah_lab.studies.verify.bits import compare_run, compare_studies, report_markdown, write_report
from saah_lib.models.names import TINY_WARMSTART
from saah_lib.paths import REPO_ROOT
from saah_lib.rundir.folder import RunDir
from saah_lib.training.config import make_config

ABSOLUTE_PATH_MARKERS = ("/work/", "/home/", "/Users/", "/root/", "/mnt/", "C:\\\\")


# ---------------------------------------------------------------------- no machine paths


def committed_files(*folders):
    listed = subprocess.run(["git", "ls-files", *folders], cwd=REPO_ROOT, capture_output=True, text=True)
    if listed.returncode != 0:
        pytest.skip("not a git checkout")
    return [REPO_ROOT / name for name in listed.stdout.split()]


def test_no_committed_result_notebook_doc_or_paper_file_holds_an_absolute_path():
    offenders = []
    for path in committed_files("results", "notebooks", "docs", "paper", "figures", "README.md"):
        if path.suffix in {".pdf", ".png"} or not path.is_file():
            continue
        text = path.read_text(errors="replace")
        found = [marker for marker in ABSOLUTE_PATH_MARKERS + (str(REPO_ROOT),) if marker in text]
        if found:
            offenders.append(f"{path.relative_to(REPO_ROOT)}: {found}")
    assert not offenders, "absolute paths in committed files:\n" + "\n".join(offenders)


# ---------------------------------------------------------------------- the comparison


def fake_run(folder: Path, rewards=(1.0, 2.0), correct=(True, False), completion="x", weight_neg=(0.5, 0.5)):
    log = RunDir(folder)
    log.write_config({"method": "sa", "alpha": 0.5, "model_name": TINY_WARMSTART}, {"git_commit": "abc"})
    for step, (reward, weight) in enumerate(zip(rewards, weight_neg), 1):
        log.log_step({"step": step, "reward_mean": reward, "weight_neg_mean": weight, "step_time": random.random()})
    samples = [{"id": f"p{i}", "correct": c, "completion": completion} for i, c in enumerate(correct)]
    log.log_eval({"step": 2, "pass_at_1": sum(correct) / len(correct)}, samples)


def test_identical_studies_are_reported_identical_whatever_the_timings_and_commit(tmp_path):
    for root in ("a", "b"):
        fake_run(tmp_path / root / "runs" / "r1")
    report = compare_studies(tmp_path / "a", tmp_path / "b")
    assert report["runs_identical"] == report["runs_compared"] == 1
    assert report["verdict"].startswith("1/1 runs reproduced exactly")


def test_differences_are_located_and_sized(tmp_path):
    fake_run(tmp_path / "a" / "runs" / "r1")
    fake_run(tmp_path / "b" / "runs" / "r1", rewards=(1.0, 2.25), correct=(False, False), completion="y")
    fake_run(tmp_path / "a" / "runs" / "r2")
    report = compare_studies(tmp_path / "a", tmp_path / "b")
    # never a bare "0/2 reproduced": these runs are no study (one seed each), so level 2 says it could not check
    assert report["verdict"].startswith("bits differ on 2/2 runs (and warm start, answer_kinds.json); "
                                        "conclusions not checked: fewer than two runs on both sides")
    assert report["outcome"] == "conclusions not checked"
    assert report["largest_difference"]["reward_mean"] == {"difference": 0.25, "step": 2, "run": "r1"}
    assert report["largest_difference"]["eval/pass_at_1"]["difference"] == 0.5
    r1 = report["runs"]["r1"]
    assert r1["eval_samples"]["correctness_differs"] == {2: ["p0"]}
    assert r1["eval_samples"]["completion_differs"] == {2: 2}
    assert report["runs"]["r2"]["missing"]
    json_path, md_path = write_report(report, tmp_path / "b")
    assert json.loads(json_path.read_text())["runs_compared"] == 2
    assert "| r2 | no (not in the rerun study) |" in md_path.read_text() and "0.25" in report_markdown(report)


def test_only_the_planned_runs_are_compared_and_the_others_are_named(tmp_path):
    fake_run(tmp_path / "a" / "runs" / "r1")
    fake_run(tmp_path / "a" / "runs" / "extra")
    fake_run(tmp_path / "b" / "runs" / "r1")
    report = compare_studies(tmp_path / "a", tmp_path / "b", run_ids=["r1"])
    assert report["verdict"].startswith("1/1 runs reproduced exactly")
    assert report["committed_runs_not_compared"] == ["extra"]
    assert "not compared (1): extra" in report_markdown(report)


def test_a_value_logged_on_one_side_only_is_said_so_not_printed_as_inf(tmp_path):
    fake_run(tmp_path / "a" / "runs" / "r1")
    fake_run(tmp_path / "b" / "runs" / "r1", weight_neg=(0.5, None))  # no negative rollout at step 2
    report = compare_studies(tmp_path / "a", tmp_path / "b")
    assert not report["runs"]["r1"]["identical"]
    text = report_markdown(report)
    assert "weight_neg_mean logged on one side only" in text and "| weight_neg_mean | logged on one side only |" in text
    assert "inf" not in text.replace("info", "")


def test_a_table_naming_the_rerun_root_compares_equal_to_the_committed_one(tmp_path):
    from saah_lab.report.latex import tex_path
    from saah_lab.studies.verify.bits import compare_files

    def table(root: str, body: str = "1.0") -> str:
        return f"% Generated from {root}.\n\\caption{{Our runs (\\texttt{{{tex_path(root)}}}): {body}}}\n"
    (tmp_path / "committed.tex").write_text(table("results/mini"))
    (tmp_path / "rerun.tex").write_text(table("results/rerun/mini"))
    (tmp_path / "changed.tex").write_text(table("results/rerun/mini", "2.0"))
    pairs = {"same": (tmp_path / "committed.tex", tmp_path / "rerun.tex"),
             "changed": (tmp_path / "committed.tex", tmp_path / "changed.tex")}
    assert compare_files(pairs, renamed=("results/rerun/mini", "results/mini")) == {"same": True, "changed": False}
    assert compare_files(pairs) == {"same": False, "changed": False}


def test_a_changed_setting_is_a_difference(tmp_path):
    fake_run(tmp_path / "a")
    fake_run(tmp_path / "b")
    config = json.loads((tmp_path / "b" / "config.json").read_text())
    (tmp_path / "b" / "config.json").write_text(json.dumps({**config, "alpha": 0.25}))
    same_numbers = compare_run(tmp_path / "a", tmp_path / "b")
    assert same_numbers["config_differs"] == ["alpha"] and same_numbers["results_identical"]
    assert not same_numbers["identical"]
    fake_run(tmp_path / "x" / "runs" / "r")
    shutil.copytree(tmp_path / "b", tmp_path / "y" / "runs" / "r")
    assert "| r | no (settings differ: alpha) |" in report_markdown(compare_studies(tmp_path / "x", tmp_path / "y"))
    # how completions were decoded is not a setting: the decoded tokens are compared themselves
    (tmp_path / "b" / "config.json").write_text(json.dumps({**config, "generation_backend": "hf"}))
    assert compare_run(tmp_path / "a", tmp_path / "b")["identical"]


# ---------------------------------------------------------------------- CPU numerics: recorded, not compared

NUMERICS = {"mode": "pinned", "pinned_settings": {"ATEN_CPU_CAPABILITY": "avx2"}, "capability": "AVX2",
            "torch_threads": 1, "pin_holds": True, "cpu_model": "AMD EPYC", "machine": "x86_64"}


def test_cpu_numerics_are_not_a_difference_but_both_sides_are_printed(tmp_path):
    fake_run(tmp_path / "a" / "runs" / "r1")  # made before numerics were recorded
    fake_run(tmp_path / "b" / "runs" / "r1")
    path = tmp_path / "b" / "runs" / "r1" / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "cpu_numerics": NUMERICS}))
    report = compare_studies(tmp_path / "a", tmp_path / "b")
    assert report["runs_identical"] == 1 and report["verdict"].startswith("1/1 runs reproduced exactly")
    rerun_side = "pinned (ATEN_CPU_CAPABILITY=avx2); torch CPU capability AVX2, 1 thread; CPU AMD EPYC (x86_64)"
    assert report["cpu_numerics"] == [{"committed": "not recorded", "rerun": rerun_side, "where": ["r1"]}]
    assert f"- r1: committed: not recorded; rerun: {rerun_side}" in report_markdown(report)
    same = compare_run(tmp_path / "b" / "runs" / "r1", tmp_path / "b" / "runs" / "r1")
    assert same["cpu_numerics"] is None


def test_differing_numerics_print_both_sides_and_a_pin_that_did_not_hold_says_so(tmp_path):
    for root, numerics in (("a", NUMERICS), ("b", {**NUMERICS, "capability": "AVX512", "pin_holds": False})):
        fake_run(tmp_path / root)
        path = tmp_path / root / "config.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), "cpu_numerics": numerics}))
    diff = compare_run(tmp_path / "a", tmp_path / "b")["cpu_numerics"]
    assert diff["fields"] == ["capability", "pin_holds"]
    assert diff["rerun"].startswith("pinned (ATEN_CPU_CAPABILITY=avx2) NOT HOLDING; torch CPU capability AVX512")


# ---------------------------------------------------------------------- bit-identical reruns (slow)


def short_run(model_dir, results_dir, **overrides):
    settings = dict(model_name=str(model_dir), method="sa", alpha=0.5, max_steps=6, save_steps=2, eval_every=3,
                    n_train=32, n_eval=6, max_completion_length=12, eval_max_new_tokens=12, eval_batch_size=4,
                    results_dir=str(results_dir), seed=0, learning_rate=1e-3, save_total_limit=None)
    return make_config("tiny", **{**settings, **overrides})


def assert_identical_runs(a: Path, b: Path):
    result = compare_run(a, b)
    assert result["identical"], json.dumps(result, indent=1, default=str)[:3000]


@pytest.mark.slow
def test_the_same_seed_twice_gives_identical_logs(tiny_random_model_dir, tmp_path):
    from saah_lab.training.run import run_training

    first = run_training(short_run(tiny_random_model_dir, tmp_path / "a", max_steps=3), progress=False)
    second = run_training(short_run(tiny_random_model_dir, tmp_path / "b", max_steps=3), progress=False)
    assert_identical_runs(first, second)


CHILD = """
import json, sys, torch
torch.set_num_threads(1)
from saah_lib.training.config import RunConfig
from saah_lab.training.run import run_training
run_training(RunConfig.from_dict(json.loads(sys.argv[1])), progress=False)
"""


@pytest.mark.slow
def test_a_run_killed_at_a_random_step_resumes_to_identical_logs(tiny_random_model_dir, tmp_path):
    """SIGKILL (no clean-up at all) in the middle of a step, then resume: same logs as never killed."""
    from saah_lab.training.run import run_training

    reference = run_training(short_run(tiny_random_model_dir, tmp_path / "reference"), progress=False)

    cfg = short_run(tiny_random_model_dir, tmp_path / "killed")
    kill_after = random.Random(time.time_ns()).randint(2, 5)  # logged steps before the kill
    print(f"killing after {kill_after} logged steps")
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "HF_HUB_OFFLINE": "1"}
    child = subprocess.Popen([sys.executable, "-c", CHILD, json.dumps(cfg.to_dict())],
                             env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    log = RunDir(cfg.run_dir)
    deadline = time.monotonic() + 600
    while len(log.train_log()) < kill_after and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert child.poll() is None, child.stderr.read().decode()[-2000:]
    child.send_signal(signal.SIGKILL)
    child.wait()
    assert len(log.train_log()) < cfg.trainer.max_steps

    run_training(cfg, progress=False)
    assert [r["step"] for r in log.train_log()] == list(range(1, cfg.trainer.max_steps + 1))
    assert_identical_runs(reference, cfg.run_dir)


@pytest.mark.slow
def test_a_moved_run_folder_resumes_and_completes(tiny_random_model_dir, tmp_path, capsys):
    from transformers import TrainerCallback

    from saah_lab.training.run import run_training

    class StopAfter(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == 2:
                control.should_training_stop = True

    reference = run_training(short_run(tiny_random_model_dir, tmp_path / "reference", max_steps=4), progress=False)
    run_training(short_run(tiny_random_model_dir, tmp_path / "before", max_steps=4), callbacks=[StopAfter()],
                 progress=False)
    shutil.move(tmp_path / "before", tmp_path / "elsewhere" / "after")  # a new clone, a renamed folder
    moved = short_run(tiny_random_model_dir, tmp_path / "elsewhere" / "after", max_steps=4)
    assert [r["step"] for r in RunDir(moved.run_dir).train_log()] == [1, 2]
    run_training(moved, progress=False)
    assert_identical_runs(reference, moved.run_dir)

    shutil.move(tmp_path / "elsewhere", tmp_path / "again")
    run_training(short_run(tiny_random_model_dir, tmp_path / "again" / "after", max_steps=4), progress=False)
    assert "already complete" in capsys.readouterr().out


@pytest.mark.slow
def test_the_warm_start_rebuilds_bit_identically(tmp_path):
    from saah_lab.studies.execution.runner import warm_start_record
    from saah_lib.models.warmstart import WarmStartSettings, build_warm_start

    settings = WarmStartSettings(hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1, intermediate_size=64,
                                 tokenizer_problems=200, sft_steps=20, n_sft_problems=200, n_heldout=10,
                                 max_new_tokens=24)
    records = []
    for name in ("a", "b"):
        records.append(warm_start_record(build_warm_start(tmp_path / name, settings=settings, progress=False)))
    for key in ("weights_sha256", "tokenizer_sha256", "final_sft_loss", "heldout_pass_at_1"):
        assert records[0][key] == records[1][key], key
