"""The grid on a two-node Ray cluster on loopback (tools/ray_sandbox.py: its own PID and network namespace where
permitted): runs spread over the nodes give the bits one machine gives, and a node lost mid-run costs nothing but
time (the run is retried on the other node and resumes from its checkpoint)."""

import json
import os
import subprocess
import sys

import pytest

from saah_lib.numerics import cpu_numerics_record
from saah_lib.paths import MINI_ROOT, REPO_ROOT
from saah_lib.rundir.folder import RunDir
from saah_lib.studies.verify.bits import compare_run
from saah_lib.training.config import make_config

SANDBOX = REPO_ROOT / "tools" / "ray_sandbox.py"
TWO_NODES = ["--node", "num_cpus=1", "--node", "num_cpus=1"]
STEPS = 24  # long enough that both runs are under way at once, though their workers start seconds apart
pytestmark = [pytest.mark.slow, pytest.mark.skipif(not SANDBOX.is_file(), reason="tools/ray_sandbox.py absent")]

# Inside the sandbox: the study's driver in a thread, the worker node's raylet killed once a run is under way.
KILL_A_NODE_MID_RUN = """
import json, os, signal, sys, threading, time
from pathlib import Path
from saah_lib.rundir.folder import RunDir
from saah_lib.studies.grid import run_study
from saah_lib.studies.runner import Plan, run_job
from saah_lib.training.config import RunConfig
root = Path(sys.argv[1])
configs = [RunConfig.from_dict(d) for d in json.loads(sys.argv[2])]
runs = [RunDir(c.run_dir) for c in configs]
def kill_worker_node():
    while not all(r.dir.is_dir() and len(r.train_log()) >= 2 for r in runs):  # both under way, one per node
        time.sleep(0.05)
    partial = [len(r.train_log()) for r in runs]
    os.kill(int(os.environ["SAAH_SANDBOX_WORKER_RAYLET_PID"]), signal.SIGKILL)
    (root / "killed.json").write_text(json.dumps(partial))
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
def test_two_mini_runs_on_two_nodes_reproduce_the_committed_bits(tmp_path):
    runs = ["tiny-grpo-a0-s0", "tiny-sa-a0.5-s0"]
    done = sandbox("-m", "saah_lib.studies.grid", "run", "mini", "--runs", *runs, "--results-dir", str(tmp_path),
                   "--address", "auto", timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for run_id in runs:
        result = compare_run(MINI_ROOT / "runs" / run_id, tmp_path / "runs" / run_id)
        assert result["identical"], json.dumps(result, default=str)[:3000]


def test_a_node_lost_mid_run_ends_with_the_run_complete_resumed_and_identical(tiny_random_model_dir, tmp_path):
    from saah_lib.training.run import run_training

    settings = dict(model_name=str(tiny_random_model_dir), alpha=0.5, max_steps=STEPS, save_steps=2, eval_every=8,
                    n_train=32, n_eval=6, max_completion_length=12, eval_max_new_tokens=12, eval_batch_size=4,
                    seed=0, learning_rate=1e-3)
    configs = [make_config("tiny", method=m, results_dir=str(tmp_path / "study"), **settings) for m in ("grpo", "sa")]
    reference = [run_training(make_config("tiny", method=m, results_dir=str(tmp_path / "reference"), **settings),
                              progress=False) for m in ("grpo", "sa")]
    (tmp_path / "study").mkdir()
    done = sandbox("-c", KILL_A_NODE_MID_RUN, str(tmp_path / "study"), json.dumps([c.to_dict() for c in configs]))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    partial = json.loads((tmp_path / "study" / "killed.json").read_text())
    assert all(2 <= n < STEPS for n in partial), partial  # both runs were under way when the node went
    for ref, cfg in zip(reference, configs):
        assert RunDir(cfg.run_dir).is_complete(STEPS)
        result = compare_run(ref, cfg.run_dir)
        assert result["identical"], json.dumps(result, default=str)[:3000]
