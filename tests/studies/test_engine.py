"""The Ray engine: dependencies, the numerics pin, fake GPUs, a lost node, Ctrl-C, and nothing left running.

Cluster tests run inside tools/ray_sandbox.py: two Ray nodes on loopback in a PID and network
namespace of their own, so nothing reaches the network and every process dies with the namespace.
A test finds the Ray processes it started by their environment: every one carries the
``RAY_AUTH_TOKEN_PATH`` of the instance (a file in that instance's own temp dir).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

ray = pytest.importorskip("ray", reason="ray is not installed (pip install ray==2.60.0)")

from saah_lab.studies.execution import engine  # noqa: E402
from saah_lab.studies.execution.engine import LOOPBACK, Task, TaskFailed, check_tasks, run_tasks  # noqa: E402
from saah_lib.numerics import PINNED_CAPABILITY, PINNED_SETTINGS  # noqa: E402
from saah_lib.paths import REPO_ROOT  # noqa: E402

SANDBOX = REPO_ROOT / "tools" / "ray_sandbox.py"
ENV = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "HF_HUB_OFFLINE": "1"}
CPU_FLAGS = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""


def ray_processes(marker: str) -> list[str]:
    """Live processes whose environment or command line mentions ``marker`` (a Ray instance's temp dir)."""
    found = []
    for proc in psutil.process_iter(["pid", "name", "cmdline", "status"]):
        try:
            if proc.info["status"] == psutil.STATUS_ZOMBIE or proc.pid == os.getpid():
                continue
            text = " ".join(proc.info["cmdline"] or ()) + " " + " ".join(f"{k}={v}" for k, v in proc.environ().items())
        except psutil.Error:
            continue
        if marker in text:
            found.append(f"{proc.pid} {proc.info['name']}")
    return found


def _namespaces_permitted() -> bool:
    try:
        return subprocess.run(["unshare", "--pid", "--net", "--fork", "--mount-proc", "true"],
                              capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


needs_namespace = pytest.mark.skipif(not _namespaces_permitted(),
                                     reason="unshare --pid --net is not permitted here (needs root or user namespaces)")


# --------------------------------------------------------------------------- the task graph, no Ray needed

def _noop() -> dict:
    return {}


def test_a_task_graph_is_checked_before_anything_runs():
    with pytest.raises(ValueError, match="repeated: a"):
        check_tasks([Task("a", _noop, {}), Task("a", _noop, {})])
    with pytest.raises(ValueError, match="task b depends on zz, not among the tasks"):
        check_tasks([Task("a", _noop, {}), Task("b", _noop, {}, deps=("zz",))])
    with pytest.raises(ValueError, match="dependency circle: a -> b -> a"):
        check_tasks([Task("a", _noop, {}, deps=("b",)), Task("b", _noop, {}, deps=("a",))])
    with pytest.raises(ValueError, match="dependency circle: a -> b -> c -> a"):  # a waits for b, b for c, c for a
        check_tasks([Task("a", _noop, {}, deps=("b",)), Task("b", _noop, {}, deps=("c",)),
                     Task("c", _noop, {}, deps=("a",))])
    # the order run_tasks submits them in: each after the tasks whose ObjectRefs it takes
    graph = [Task("c", _noop, {}, deps=("a", "b")), Task("a", _noop, {}), Task("b", _noop, {}, deps=("a",))]
    assert [t.id for t in check_tasks(graph)] == ["a", "b", "c"]
    with pytest.raises(ValueError, match="max_retries"):
        run_tasks([Task("a", _noop, {})], max_retries=-1)
    assert run_tasks([]) == {}


def test_the_workers_environment_carries_the_pin_or_the_native_mode():
    assert engine.pin_env_vars({}) == {**PINNED_SETTINGS, "SAAH_CPU_NUMERICS": "pinned",
                                       "SAAH_CPU_NUMERICS_SET": ",".join(sorted(PINNED_SETTINGS))}
    assert engine.pin_env_vars({"SAAH_CPU_NUMERICS": "native"}) == {"SAAH_CPU_NUMERICS": "native"}


# --------------------------------------------------------------------------- a local instance

def _stamp(name: str, seen: list) -> dict:
    """What a worker knows: its time, CPU kernels, the environment it started with, its instance's temp dir."""
    import torch

    with open("/proc/self/environ", "rb") as f:  # the environment at exec: what Ray gave the process
        initial = dict(item.split("=", 1) for item in f.read().decode().split("\0") if "=" in item)
    return {"name": name, "seen": seen, "time": time.time(), "capability": torch.backends.cpu.get_cpu_capability(),
            "initial_aten": initial.get("ATEN_CPU_CAPABILITY"), "niceness": os.nice(0),
            "temp_dir": str(Path(os.environ["RAY_AUTH_TOKEN_PATH"]).parent)}


def _fail(reason: str) -> dict:
    raise ValueError(reason)


ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import this test module


@pytest.mark.slow
def test_a_local_instance_runs_tasks_in_dependency_order_with_the_pin_and_names_a_failure():
    """One instance: a chain runs in order, pinned, at the driver's priority; a failing task is named with its
    node and worker log, the task depending on it does not run, the independent tasks finish; nothing is left
    running."""
    finished = []
    tasks = [Task("c", _stamp, {"name": "c", "seen": ["a", "b"]}, deps=("a", "b")),
             Task("a", _stamp, {"name": "a", "seen": []}),
             Task("b", _stamp, {"name": "b", "seen": ["a"]}, deps=("a",)),
             Task("bad", _fail, {"reason": "damaged input"}, deps=("a",)),
             Task("after-after-bad", _noop, {}, deps=("after-bad",)),
             Task("after-bad", _noop, {}, deps=("bad",))]
    with pytest.raises(TaskFailed) as caught:
        run_tasks(tasks, num_cpus=1, max_retries=3,
                  on_finish=lambda task, result, node: finished.append((task.id, node)))
    failure = caught.value
    assert (failure.task_id, failure.node) == ("bad", "127.0.0.1")
    assert failure.others == ("after-bad", "after-after-bad")
    assert "ValueError: damaged input" in failure.error and "task bad failed on node 127.0.0.1" in str(failure)

    results = failure.results
    assert finished == [("a", "127.0.0.1"), ("b", "127.0.0.1"), ("c", "127.0.0.1")]
    assert results["a"]["time"] < results["b"]["time"] < results["c"]["time"]
    assert {r["capability"] for r in results.values()} == {PINNED_CAPABILITY}
    assert {r["initial_aten"] for r in results.values()} == {PINNED_SETTINGS["ATEN_CPU_CAPABILITY"]}
    # the study's workers are its main work: not niced below the driver (Ray's default niceness is 15)
    assert {r["niceness"] for r in results.values()} == {os.nice(0)}

    log = Path(failure.log_path)
    assert log.is_file() and log.name.endswith(".err"), log  # kept: the user is told to read it
    temp_dir = results["a"]["temp_dir"]
    assert str(log).startswith(temp_dir + "/")
    assert ray_processes(temp_dir) == [] and not ray.is_initialized()
    subprocess.run(["rm", "-rf", temp_dir], check=True)


TWO_SESSIONS = """
import json, os, sys
if sys.argv[1] == "ray-first":
    import ray
from saah_lab.studies.execution.engine import CLUSTER_SWITCH, Task, run_tasks
import ray

def noop():
    return {}

out = {"switch_left": os.environ.get(CLUSTER_SWITCH), "address": ray.util.get_node_ip_address()}
try:
    out["nodes"] = [list(run_tasks([Task("t", noop, {})], num_cpus=1, on_finish=lambda t, r, node:
                                   out.setdefault("seen", []).append(node))) for _ in range(2)]
except RuntimeError as error:
    out["refused"] = str(error)
out["auth_left"] = {k: os.environ.get(k) for k in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH")}
print(json.dumps(out))
"""


@pytest.mark.slow
def test_one_process_starts_two_instances_on_loopback_and_is_refused_one_where_ray_came_first():
    """Ray reads its address switch at import and keeps the first token it is given: the engine imports Ray with
    the switch off (and leaves the environment as it was), and every instance of a process gets its token."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    env.pop("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", None)

    def run(mode: str) -> dict:
        done = subprocess.run([sys.executable, "-c", TWO_SESSIONS, mode], env=env, capture_output=True, text=True,
                              timeout=300, check=True)
        return json.loads(done.stdout.splitlines()[-1])

    both = run("engine-first")
    assert both["nodes"] == [["t"], ["t"]] and both["seen"] == [LOOPBACK, LOOPBACK]
    assert both["switch_left"] is None and both["auth_left"] == {"RAY_AUTH_MODE": None, "RAY_AUTH_TOKEN_PATH": None}
    ray_first = run("ray-first")
    if ray_first["address"] == LOOPBACK:  # a host with no address beyond loopback: nothing to refuse
        assert ray_first["seen"] == [LOOPBACK, LOOPBACK]
    else:
        assert "nodes" not in ray_first and "imported before saah_lab.studies.execution.engine" in ray_first["refused"]
    assert not (Path.home() / ".ray" / "auth_token").exists()


def test_a_loopback_address_to_join_is_refused_where_ray_would_turn_it_into_the_hosts_address(monkeypatch):
    monkeypatch.setattr(ray.util, "get_node_ip_address", lambda: "192.0.2.2")  # what Ray imported first says
    for address in ("127.0.0.1:6379", "localhost:6379"):
        with pytest.raises(RuntimeError, match="would use 192.0.2.2 for this host"), engine.ray_session(address):
            pass
    assert not ray.is_initialized()


SIGNAL_DRIVER = """
import os, signal, sys, time
signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C as in a terminal, though pytest runs in background
from pathlib import Path
import saah_lib
from saah_lab.studies.execution.engine import Task, run_tasks

def noop():
    return {}

def ready(task, result, node):  # the instance's token file lies in its temp dir
    print("READY", Path(os.environ["RAY_AUTH_TOKEN_PATH"]).parent, flush=True)

def sleeper(marker):
    Path(marker).write_text(str(os.getpid()))
    time.sleep(600)

tasks = [Task("first", noop, {})]
tasks += [Task(f"sleep-{i}", sleeper, {"marker": f"{sys.argv[1]}/sleeping-{i}"}, deps=("first",), num_cpus=0.5)
          for i in range(2)]
try:
    run_tasks(tasks, num_cpus=1, on_finish=ready)
except KeyboardInterrupt:
    print("INTERRUPTED", flush=True)
    sys.exit(130)
"""


def alive(procs: list[psutil.Process], timeout: float) -> list[str]:
    """Those of ``procs`` still running (zombies excepted) after up to ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        left = []
        for proc in procs:
            try:
                if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                    left.append(f"{proc.pid} {proc.name()}")
            except psutil.Error:
                continue
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGKILL], ids=["ctrl-c", "kill-9"])
def test_ctrl_c_or_kill_9_cancels_the_tasks_stops_the_instance_and_leaves_no_process(signum, tmp_path):
    """Ctrl-C: the driver cancels, stops and says so (SIGTERM takes the same path: the next test).  SIGKILL: the
    driver can do nothing; the watchdog beside its instance kills what the kernel does not (the agents and
    workers the raylet started)."""
    driver = subprocess.Popen([sys.executable, "-c", SIGNAL_DRIVER, str(tmp_path)], env=ENV, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    try:
        line = ""
        deadline = time.monotonic() + 120
        while not line.startswith("READY") and time.monotonic() < deadline:
            line = driver.stdout.readline() or line
            assert driver.poll() is None, driver.stdout.read()
        temp_dir = line.split()[1]
        while len(list(tmp_path.glob("sleeping-*"))) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.5)  # their pids are written
        workers = [int(p.read_text()) for p in tmp_path.glob("sleeping-*")]
        assert len(workers) == 2, "the sleeping tasks did not start"
        # Every process of the instance, the agents included (they rename themselves: the marker is not visible)
        instance = psutil.Process(driver.pid).children(recursive=True)
        assert {"raylet", "gcs_server"} <= {p.name() for p in instance}
        sent = time.monotonic()
        driver.send_signal(signum)
        rest, _ = driver.communicate(timeout=30)
        took = time.monotonic() - sent
    finally:
        driver.kill()
    if signum == signal.SIGKILL:
        assert driver.returncode == -signal.SIGKILL
    else:
        assert driver.returncode == 130 and "INTERRUPTED" in rest, rest[-2000:]
        assert took < 10, f"the driver took {took:.1f} s to stop after signal {signum}"
    assert alive(instance, timeout=10) == []
    assert ray_processes(temp_dir) == []
    assert not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
                   for pid in workers), "a task's worker is still running"
    assert not Path(temp_dir).exists()


def _sleep_noting_pid(path: str) -> dict:
    Path(path).write_text(str(os.getpid()))
    time.sleep(600)
    return {}


@pytest.mark.slow
def test_sigterm_ends_run_tasks_as_ctrl_c_does_though_ray_handles_sigterm_itself(tmp_path):
    """In this process: SIGTERM while run_tasks waits raises KeyboardInterrupt (Ray's own handler, installed by
    ray.init, would exit at once), the task in flight is killed, the instance stopped, the handler restored."""
    pid_file = tmp_path / "sleeper.pid"
    seen = {}

    def terminate_once_the_sleeper_runs(task, result, node):
        seen.update(result)
        deadline = time.monotonic() + 60
        while not pid_file.is_file() and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler raises here

    before = signal.getsignal(signal.SIGTERM)
    tasks = [Task("sleeper", _sleep_noting_pid, {"path": str(pid_file)}),
             Task("stamp", _stamp, {"name": "s", "seen": []})]
    with pytest.raises(KeyboardInterrupt, match=f"signal {int(signal.SIGTERM)}"):
        run_tasks(tasks, num_cpus=2, on_finish=terminate_once_the_sleeper_runs)
    assert signal.getsignal(signal.SIGTERM) is before and not ray.is_initialized()
    try:
        sleeper = [psutil.Process(int(pid_file.read_text()))]
    except psutil.NoSuchProcess:
        sleeper = []  # gone already
    assert alive(sleeper, timeout=10) == []
    assert ray_processes(seen["temp_dir"]) == [] and not Path(seen["temp_dir"]).exists()


# --------------------------------------------------------------------------- a two-node cluster on loopback

CLUSTER_DRIVER = """
import json, os, signal, sys, threading, time
from pathlib import Path
import ray
import saah_lib
from saah_lab.studies.execution.engine import Task, run_tasks

SHARED = Path(sys.argv[1])
report = {"temp_dir": os.environ["SAAH_SANDBOX_TEMP_DIR"], "isolation": os.environ["SAAH_SANDBOX_ISOLATION"],
          "address": os.environ["RAY_ADDRESS"]}

def capability():
    import torch
    return torch.backends.cpu.get_cpu_capability()

# Without run_tasks: the nodes were started without the pin, and a worker runs the CPU's widest kernels.
ray.init(address="auto", logging_level="ERROR", log_to_driver=False)
report["unpinned_capability"] = ray.get(ray.remote(capability).remote())
ray.shutdown()

def on_gpu(name, peers):
    import torch
    (SHARED / f"gpu-{name}").touch()
    deadline = time.time() + 60  # every GPU task waits for the others: they run at the same time
    while len(list(SHARED.glob("gpu-*"))) < peers and time.time() < deadline:
        time.sleep(0.05)
    return {"cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "node": ray.get_runtime_context().get_node_id(),
            "node_ip": ray.util.get_node_ip_address(),
            "together": len(list(SHARED.glob("gpu-*"))), "capability": torch.backends.cpu.get_cpu_capability()}

gpu_tasks = [Task(f"gpu-{i}", on_gpu, {"name": i, "peers": 4}, num_cpus=0.5, num_gpus=1) for i in range(4)]
report["gpu"] = run_tasks(gpu_tasks, address="auto")

def long_task(name):
    attempts = SHARED / f"attempts-{name}"
    with attempts.open("a") as f:
        f.write(f"{os.getppid()}\\n")  # the worker's parent: its node's raylet
    time.sleep(6)
    return {"raylet": os.getppid(), "attempts": attempts.read_text().split()}

worker_raylet = int(os.environ["SAAH_SANDBOX_WORKER_RAYLET_PID"])

def kill_worker_node():
    deadline = time.time() + 60
    while time.time() < deadline:
        started = [p.read_text().split() for p in SHARED.glob("attempts-*")]
        if len(started) == 2:
            os.kill(worker_raylet, signal.SIGKILL)
            report["killed"] = worker_raylet
            return
        time.sleep(0.05)

threading.Thread(target=kill_worker_node, daemon=True).start()
report["kill"] = run_tasks([Task(f"long-{i}", long_task, {"name": i}) for i in range(2)], address="auto", max_retries=1)
print("REPORT " + json.dumps(report), flush=True)
sys.exit(7)  # the sandbox's own exit status is this one
"""


@pytest.mark.slow
@needs_namespace
def test_a_two_node_cluster_gpus_pin_and_a_lost_node(tmp_path):
    """Fake GPUs are handed out one per task; the pin reaches workers of nodes started without it; a task
    whose node's raylet is killed mid-run runs again on the other node and finishes; nothing is left."""
    env = {k: v for k, v in ENV.items() if k not in PINNED_SETTINGS and not k.startswith("SAAH_CPU_NUMERICS")}
    home_token = Path.home() / ".ray" / "auth_token"
    token_before = home_token.exists()
    done = subprocess.run([sys.executable, str(SANDBOX), "--node", "num_cpus=1,num_gpus=2", "--node",
                           "num_cpus=1,num_gpus=2", "--", sys.executable, "-c", CLUSTER_DRIVER, str(tmp_path)],
                          env=env, capture_output=True, text=True, timeout=240)
    lines = [line for line in done.stdout.splitlines() if line.startswith("REPORT ")]
    assert done.returncode == 7 and lines, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(lines[0].removeprefix("REPORT "))
    assert (report["isolation"], report["address"]) == ("namespace", "127.0.0.2:6379")

    gpu = report["gpu"].values()
    assert all(r["together"] == 4 for r in gpu), "the four GPU tasks did not run at the same time"
    assert sorted((r["node"], r["cuda_visible_devices"]) for r in gpu) == sorted(
        (node, device) for node in {r["node"] for r in gpu} for device in ("0", "1"))
    assert len({r["node"] for r in gpu}) == 2
    assert {r["node_ip"] for r in gpu} == {"127.0.0.2", "127.0.0.3"}  # as given: no address was guessed
    assert {r["capability"] for r in gpu} == {PINNED_CAPABILITY}
    if "avx512f" in CPU_FLAGS:  # the control: without the pin this CPU runs other kernels
        assert report["unpinned_capability"] != PINNED_CAPABILITY

    killed = report["killed"]
    runs = report["kill"].values()
    rerun = [r for r in runs if str(killed) in r["attempts"]]
    assert len(rerun) == 1, runs
    assert rerun[0]["attempts"][0] == str(killed) and len(rerun[0]["attempts"]) == 2
    assert rerun[0]["raylet"] != killed  # finished on the other node

    assert ray_processes(report["temp_dir"]) == [] and not Path(report["temp_dir"]).exists()
    assert home_token.exists() == token_before, "a Ray auth token was written to ~/.ray"


@pytest.mark.e2e
@pytest.mark.slow
def test_the_slurm_template_runs_on_a_one_node_slurm_here():
    """tools/slurm/ray_grid.sbatch under a SLURM started on loopback (tools/slurm/check_local_slurm.sh), with the
    cluster smoke test in place of the grid: the job ends, every task ran pinned. Skipped without slurm-wlm."""
    done = subprocess.run(["bash", str(REPO_ROOT / "tools" / "slurm" / "check_local_slurm.sh")], env=ENV,
                          capture_output=True, text=True, timeout=400)
    if done.returncode == 77:
        pytest.skip(done.stderr.strip())
    assert done.returncode == 0 and "cluster ok" in done.stdout, done.stdout[-3000:] + done.stderr[-3000:]
    assert "task 1: node 127.0.0.1" in done.stdout
