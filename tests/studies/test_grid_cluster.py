"""The grid on a two-node Ray cluster on loopback (tools/ray_sandbox.py: its own PID and network namespace where
permitted): runs spread over the nodes give the bits one machine gives, and a node lost mid-run costs nothing but
time (the run is retried on the other node and resumes from its checkpoint).

Where the retry resumes is wherever the lost run's last checkpoint is: often in a later pass over the training
prompts (an epoch) than the first.  The data order of every epoch must then be the uninterrupted run's, so the
lost node is killed only once its run is past its first epoch: a resume inside epoch 0 retraces the run even
when later epochs replay epoch 0's order, and the test would then depend on how far the run got before the kill."""

import json
import os
import subprocess
import sys

import pytest

from saah_lab.studies.verify.bits import compare_run
from saah_lib.numerics import cpu_numerics_record
from saah_lib.paths import MINI_ROOT, REPO_ROOT
from saah_lib.rundir.folder import RunDir
from saah_lib.training.config import make_config

SANDBOX = REPO_ROOT / "tools" / "ray_sandbox.py"
TWO_NODES = ["--node", "num_cpus=1", "--node", "num_cpus=1"]
STEPS = 12
# 16 prompts at 4 per step: an epoch is 4 steps; the lost node's run is killed after KILL_AFTER logged steps, so
# it resumes from checkpoint 4 or 6, in its second epoch.
N_TRAIN, STEPS_PER_EPOCH, KILL_AFTER = 16, 4, 7
# A resume in a later epoch must see that epoch's prompt order, not epoch 0's again (saah_lib.training.sampler).
pytestmark = [pytest.mark.slow, pytest.mark.skipif(not SANDBOX.is_file(), reason="tools/ray_sandbox.py absent")]

# Inside the sandbox: the study's driver in a thread, the worker node's raylet killed once a run is under way.
KILL_A_NODE_MID_RUN = """
import json, os, signal, sys, threading, time
from pathlib import Path
import psutil
from saah_lib.rundir.folder import RunDir
from saah_lib.rundir.layout import RUN_LOCK_FILE
from saah_lab.studies.execution.grid import run_study
from saah_lab.studies.execution.runner import Plan, run_job
from saah_lib.training.config import RunConfig
root, kill_after = Path(sys.argv[1]), int(sys.argv[3])
configs = [RunConfig.from_dict(d) for d in json.loads(sys.argv[2])]
runs = [RunDir(c.run_dir) for c in configs]
raylet = int(os.environ["SAAH_SANDBOX_WORKER_RAYLET_PID"])
def on_worker_node(run):  # its writer (the pid in its lock file) is a worker of the node to lose
    try:
        return psutil.Process(int((run.dir / RUN_LOCK_FILE).read_text())).ppid() == raylet
    except (OSError, ValueError, psutil.Error):
        return False
def kill_worker_node():
    while True:
        lost = [r for r in runs if r.dir.is_dir() and len(r.train_log()) >= kill_after and on_worker_node(r)]
        if lost:
            break
        time.sleep(0.02)
    logged = len(lost[0].train_log())
    os.kill(raylet, signal.SIGKILL)
    (root / "killed.json").write_text(json.dumps({"run": lost[0].dir.name, "logged": logged}))
threading.Thread(target=kill_worker_node, daemon=True).start()
run_study(Plan("two", root, [run_job(c) for c in configs]), address="auto", max_retries=2, step_seconds=None,
          slots=2)
"""


def sandbox(*command, timeout=300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, str(SANDBOX), *TWO_NODES, "--", sys.executable, *command], env=env,
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=timeout)


@pytest.mark.skipif(not cpu_numerics_record().get("comparable_bit_for_bit"),
                    reason="this CPU does not run the committed studies' kernels: their bits cannot reproduce here")
@pytest.mark.e2e
def test_two_mini_runs_on_two_nodes_reproduce_the_committed_bits(tmp_path):
    runs = ["tiny-grpo-a0-s0", "tiny-sa-a0.5-s0"]
    done = sandbox("-m", "saah_lab.studies.execution.grid", "run", "mini", "--runs", *runs, "--results-dir",
                   str(tmp_path), "--address", "auto", timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for run_id in runs:
        result = compare_run(MINI_ROOT / "runs" / run_id, tmp_path / "runs" / run_id)
        assert result["identical"], json.dumps(result, default=str)[:3000]


@pytest.mark.e2e
def test_a_node_lost_mid_run_ends_with_the_run_complete_resumed_and_identical(tiny_random_model_dir, tmp_path):
    from saah_lab.training.run import run_training

    settings = dict(model_name=str(tiny_random_model_dir), alpha=0.5, max_steps=STEPS, save_steps=2, eval_every=8,
                    n_train=N_TRAIN, n_eval=6, max_completion_length=12, eval_max_new_tokens=12, eval_batch_size=4,
                    seed=0, learning_rate=1e-3)
    configs = [make_config("tiny", method=m, results_dir=str(tmp_path / "study"), **settings) for m in ("grpo", "sa")]
    assert configs[0].trainer.prompts_per_step * STEPS_PER_EPOCH == N_TRAIN
    reference = [run_training(make_config("tiny", method=m, results_dir=str(tmp_path / "reference"), **settings),
                              progress=False) for m in ("grpo", "sa")]
    (tmp_path / "study").mkdir()
    done = sandbox("-c", KILL_A_NODE_MID_RUN, str(tmp_path / "study"), json.dumps([c.to_dict() for c in configs]),
                   str(KILL_AFTER))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    killed = json.loads((tmp_path / "study" / "killed.json").read_text())
    assert KILL_AFTER <= killed["logged"] < STEPS, killed  # under way, past its first epoch, when its node went
    lost = RunDir(tmp_path / "study" / "runs" / killed["run"])
    resumed_from = [s["from_step"] for s in lost.read_config()["segments"]][1:]
    # the worker of a killed raylet may train on for a moment (about a second) and checkpoint once more before it
    # dies: the retry then resumes from that later checkpoint, still in a later epoch
    assert resumed_from and STEPS_PER_EPOCH <= resumed_from[-1] < STEPS, resumed_from
    for ref, cfg in zip(reference, configs):
        assert RunDir(cfg.run_dir).is_complete(STEPS)
        result = compare_run(ref, cfg.run_dir)
        assert result["identical"], json.dumps(result, default=str)[:3000]


def test_a_run_resumed_in_a_later_epoch_retraces_the_uninterrupted_one(tiny_random_model_dir, tmp_path):
    """What a retry after a lost node does, without the cluster: stop in the second epoch, resume, compare."""
    from transformers import TrainerCallback

    from saah_lab.training.run import run_training

    class StopAfter(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            control.should_training_stop = state.global_step == STEPS_PER_EPOCH + 2

    settings = dict(model_name=str(tiny_random_model_dir), method="sa", alpha=0.5, max_steps=2 * STEPS_PER_EPOCH,
                    save_steps=2, eval_every=100, n_train=N_TRAIN, n_eval=4, max_completion_length=12,
                    eval_max_new_tokens=8, eval_batch_size=4, seed=0, learning_rate=1e-3)
    reference = run_training(make_config("tiny", results_dir=str(tmp_path / "reference"), **settings), progress=False)
    resumed = make_config("tiny", results_dir=str(tmp_path / "resumed"), **settings)
    run_training(resumed, callbacks=[StopAfter()], progress=False)
    run_training(resumed, progress=False)
    assert [s["from_step"] for s in RunDir(resumed.run_dir).read_config()["segments"]] == [0, STEPS_PER_EPOCH + 2]
    result = compare_run(reference, resumed.run_dir)
    assert result["identical"], json.dumps(result, default=str)[:3000]
