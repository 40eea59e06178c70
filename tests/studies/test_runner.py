"""A study's processes: its workers die with it, one study process at a time writes a results root, and the
runner prints one line per finished run (the workers are silent)."""

import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from saah_lab.studies import mini
from saah_lab.studies.execution.runner import run_line
from saah_lab.studies.verify.bits import compare_run
from saah_lib.paths import MINI_ROOT, REPO_ROOT
from saah_lib.rundir.folder import RunDir
from saah_lib.training.config import make_config


def plan(model_dir, root):
    # 40 prompts at 4 per step: the 10 steps are one epoch (a resume in a later epoch: test_grid_cluster.py)
    settings = dict(model_name=str(model_dir), alpha=0.5, max_steps=10, save_steps=2, eval_every=5, n_train=40,
                    n_eval=6, max_completion_length=12, eval_max_new_tokens=12, eval_batch_size=4,
                    results_dir=str(root), seed=0, learning_rate=1e-3)
    return [make_config("tiny", method=method, **settings) for method in ("grpo", "sa")]


# The grid's driver on a plan of two runs: a local Ray instance, its workers, the root held.
STUDY = """
import json, signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C as in a terminal, though pytest runs in background
from pathlib import Path
from saah_lab.studies.execution.grid import run_study
from saah_lab.studies.execution.runner import Plan, run_job
from saah_lib.training.config import RunConfig
configs = [RunConfig.from_dict(d) for d in json.loads(sys.argv[2])]
try:
    run_study(Plan("two", Path(sys.argv[1]), [run_job(c) for c in configs]),
              address=None, max_retries=1, step_seconds=None, slots=2)
except KeyboardInterrupt:
    sys.exit(130)
"""


def start_study(configs, root, log) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-c", STUDY, str(root), json.dumps([c.to_dict() for c in configs])],
                            env=env, stdout=log, stderr=log)


def alive(process: psutil.Process) -> bool:
    try:
        return process.status() != psutil.STATUS_ZOMBIE  # a dead orphan that no init process reaped
    except psutil.NoSuchProcess:
        return False


@pytest.mark.e2e
@pytest.mark.slow
def test_ctrl_c_stops_the_study_and_its_workers_at_once_and_the_rerun_matches_an_uninterrupted_one(
        tiny_random_model_dir, tmp_path):
    from saah_lab.training.run import run_training

    reference = [run_training(cfg, progress=False) for cfg in plan(tiny_random_model_dir, tmp_path / "reference")]
    configs = plan(tiny_random_model_dir, tmp_path / "study")
    runs = [RunDir(c.run_dir) for c in configs]
    with open(tmp_path / "study.log", "w") as log:
        study = start_study(configs, tmp_path / "study", log)
        deadline = time.monotonic() + 300
        while not any(len(r.train_log()) >= 3 for r in runs if r.dir.is_dir()):
            assert study.poll() is None and time.monotonic() < deadline, (tmp_path / "study.log").read_text()[-3000:]
            time.sleep(0.05)
        descendants = psutil.Process(study.pid).children(recursive=True)
        sent = time.monotonic()
        study.send_signal(signal.SIGINT)
        assert study.wait(timeout=30) == 130, (tmp_path / "study.log").read_text()[-3000:]
        stopped_after = time.monotonic() - sent
    assert stopped_after < 15, stopped_after
    assert not all(r.is_complete(10) for r in runs), "both runs finished before Ctrl-C: nothing was tested"
    deadline = time.monotonic() + 15
    while any(alive(p) for p in descendants) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert [p.cmdline() for p in descendants if alive(p)] == []  # no worker, raylet or Ray server left

    # Each run again, in this process (what the study's workers would do; which runs a study resubmits is
    # tested in test_grid.py): a finished one is left as it is, an interrupted one resumes.
    for cfg in configs:
        run_training(cfg, progress=False)
    for done, run in zip(reference, runs):
        result = compare_run(done, run.dir)
        assert result["identical"], json.dumps(result, default=str)[:3000]


def test_resume_refuses_to_start_while_another_study_holds_the_root(tmp_path, lock_holder, capsys):
    rerun = tmp_path / "rerun"
    (rerun / "runs").mkdir(parents=True)
    (rerun / "runs" / "marker").write_text("written by the running study")
    holder = lock_holder("study", rerun)
    for command, committed in ((["verify", "--resume"], MINI_ROOT), (["verify"], MINI_ROOT),
                               (["promote"], tmp_path / "committed")):
        with pytest.raises(SystemExit) as stop:
            mini.main([*command, "--root", str(committed), "--rerun-root", str(rerun)])
        assert stop.value.code == 1
        assert (f"error: results root {rerun} is being written by another process (pid {holder.pid}"
                in capsys.readouterr().err)
        assert (rerun / "runs" / "marker").is_file()  # nothing deleted or written
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rerun"]


def test_one_line_per_run_with_time_memory_and_pass_at_1():
    entry = {"run_id": "tiny-sa-a0.5-s0", "wall_s": 51.6, "peak_rss_mb": 590.4}
    evals = [{"step": 0, "pass_at_1": 0.27}, {"step": 60, "pass_at_1": 0.42}]
    assert run_line(3, 15, entry, evals) == "[3/15] tiny-sa-a0.5-s0: 52 s, 590 MB, Pass@1 0.270 -> 0.420"
    assert run_line(1, 1, entry, []) == "[1/1] tiny-sa-a0.5-s0: 52 s, 590 MB"


def test_a_job_holds_its_engine_task_and_its_id_is_the_tasks():
    from saah_lab.studies.execution.engine import Task
    from saah_lab.studies.execution.runner import Job

    job = Job.of("run", "r", dict, {"seconds": 0}, ("warmstart:w",), num_cpus=2, steps=5)
    assert job.task == Task("run:r", dict, {"seconds": 0}, ("warmstart:w",), 2.0, 0.0)
    assert (job.id, job.deps, job.num_cpus, job.steps) == ("run:r", ("warmstart:w",), 2.0, 5)
