"""Run a command beside a throwaway multi-node Ray cluster on loopback, then tear it all down.

    python tools/ray_sandbox.py --node num_cpus=1,num_gpus=1 --node num_cpus=1,num_gpus=1 -- COMMAND ...

Each ``--node`` is one Ray node on a loopback address of its own, 127.0.0.2, 127.0.0.3, ... (the first is
the head, the others join it with ``ray start --address``); ``num_gpus`` declares GPUs that need not exist,
so scheduling by GPU can be tested on a CPU machine. COMMAND runs with ``RAY_ADDRESS`` (and the cluster's
auth settings) in its environment, so ``ray.init(address="auto")`` joins the cluster, and with the raylets'
process ids for fault-injection tests (:func:`run_with_cluster`). The exit status is COMMAND's (128 + N
when a signal N ended it).

Where ``unshare`` is permitted, everything runs in a fresh PID and network namespace: nothing Ray opens can
reach another machine, ports cannot collide, and when COMMAND ends the kernel kills every process left in the
namespace (:func:`run_as_init`). Elsewhere it says so on stderr and falls back to the same addresses, each
node in a session of its own, torn down by killing exactly the processes of those sessions.
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

INNER_FLAG = "--inside-namespace"
NAMESPACE_ARGS = ["unshare", "--pid", "--net", "--fork", "--mount-proc", "--kill-child=SIGKILL"]
# Node i listens on 127.0.0.(2 + i): Ray replaces a --node-ip-address of 127.0.0.1 by a guess of the host's
# external address (opening a socket towards a public DNS server to make it), but keeps any other loopback
# address as given; one address per node also lets failures name distinct nodes.
FIRST_NODE_HOST = 2
HEAD_PORT_IN_NAMESPACE = 6379
# Ray reserves 30% of the machine's memory per node for its object store unless told; the tests pass small dicts.
DEFAULT_OBJECT_STORE_MB = 100
NODE_KEYS = {"num_cpus": int, "num_gpus": int}  # whole numbers: what `ray start` accepts
# How often a node's `ray start` is tried before the sandbox gives up.
START_ATTEMPTS = 3
# Wait this long for a node's raylet to appear after `ray start` returns.
RAYLET_WAIT_S = 30


def parse_node(text: str) -> dict:
    """``num_cpus=1,num_gpus=1`` -> ``{"num_cpus": 1, "num_gpus": 1}``; an unknown key or a bad number is an error."""
    node = {}
    for item in filter(None, text.split(",")):
        key, sep, value = item.partition("=")
        if not sep or key not in NODE_KEYS:
            raise argparse.ArgumentTypeError(f"--node {text!r}: expected KEY=VALUE pairs with KEY in "
                                             f"{', '.join(NODE_KEYS)}, got {item!r}")
        try:
            node[key] = NODE_KEYS[key](value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"--node {text!r}: {key}={value!r} is not a number") from None
        if node[key] < 0:
            raise argparse.ArgumentTypeError(f"--node {text!r}: {key} must not be negative")
    return node


def namespace_permitted() -> bool:
    """Whether this process may create PID and network namespaces (a quick trial run)."""
    if not shutil.which("unshare") or not shutil.which("ip"):
        return False
    trial = subprocess.run(NAMESPACE_ARGS + ["true"], capture_output=True, timeout=30)
    return trial.returncode == 0


def node_address(index: int) -> str:
    return f"127.0.0.{FIRST_NODE_HOST + index}"


def free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def ray_executable() -> str:
    """The ``ray`` CLI of this interpreter's environment (not whatever ``ray`` is first on PATH)."""
    beside = Path(sys.executable).with_name("ray")
    return str(beside) if beside.exists() else "ray"


def auth_environment(temp_dir: Path) -> dict[str, str]:
    """Token auth with a token of this cluster's own, kept in its temp dir: nothing is read from or
    written to ``~/.ray``, whose token would otherwise switch later clusters of this user to token auth."""
    token_path = temp_dir / "auth_token"
    token_path.write_text(secrets.token_hex(32))
    token_path.chmod(0o600)
    return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token_path)}


def raylet_pids(sessions: set[int] | None) -> set[int]:
    """Raylets now alive: all of this PID namespace's, or (loopback mode) only those of the given sessions."""
    found = set()
    for proc in psutil.process_iter(["name", "pid"]):
        if proc.info["name"] != "raylet":
            continue
        try:
            if sessions is None or os.getsid(proc.info["pid"]) in sessions:
                found.add(proc.info["pid"])
        except OSError:
            continue
    return found


def start_node(node: dict, ip: str, head_address: str | None, port: int, node_dir: Path, env: dict,
               object_store_mb: int) -> int:
    """``ray start`` one node on loopback (the head when ``head_address`` is None); returns the session id
    its daemons keep: ``ray start`` runs as the leader of a session of its own."""
    args = [ray_executable(), "start", "--node-ip-address", ip, "--temp-dir", str(node_dir),
            "--object-store-memory", str(object_store_mb * 2**20), "--disable-usage-stats",
            "--num-cpus", str(node.get("num_cpus", 1)), "--num-gpus", str(node.get("num_gpus", 0))]
    if head_address is None:
        args += ["--head", "--port", str(port), "--include-dashboard", "false"]
    else:
        args += ["--address", head_address]
    proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    output, _ = proc.communicate(timeout=120)
    if proc.returncode != 0:
        raise RuntimeError(f"ray start failed ({proc.returncode}):\n{output}")
    return proc.pid


def wait_for_new_raylet(before: set[int], sessions: set[int] | None, index: int) -> int:
    deadline = time.monotonic() + RAYLET_WAIT_S
    while time.monotonic() < deadline:
        new = raylet_pids(sessions) - before
        if new:
            return min(new)
        time.sleep(0.1)
    raise RuntimeError(f"node {index}: no raylet appeared within {RAYLET_WAIT_S} s of `ray start`")


def start_cluster(nodes: list[dict], temp_dir: Path, namespace: bool, object_store_mb: int,
                  sessions: set[int]) -> dict:
    """Start the nodes, adding each node's session id to ``sessions`` as it starts (for the teardown, even
    when a later node fails); returns the environment for COMMAND."""
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_TOKEN")}
    env.update(auth_environment(temp_dir), RAY_USAGE_STATS_ENABLED="0")
    port = HEAD_PORT_IN_NAMESPACE if namespace else free_port(node_address(0))
    address = f"{node_address(0)}:{port}"
    raylets = []
    for index, node in enumerate(nodes):
        before = raylet_pids(None if namespace else sessions)
        for attempt in range(1, START_ATTEMPTS + 1):
            node_dir = temp_dir / f"node{index}-{attempt}"
            try:
                sessions.add(start_node(node, node_address(index), None if index == 0 else address, port, node_dir,
                                        env, object_store_mb))
                break
            except RuntimeError as error:
                # Ray gives a node 30 s to register (fixed in its code): on an overloaded machine it may need
                # longer. Remove what the failed start left, then start it afresh.
                kill_processes_of(node_dir)
                if attempt == START_ATTEMPTS:
                    raise RuntimeError(f"node {index}: {error}") from None
                sys.stderr.write(f"ray_sandbox: node {index} did not start (attempt {attempt}), trying again\n")
        raylets.append(wait_for_new_raylet(before, None if namespace else sessions, index))
    env.update(RAY_ADDRESS=address, SAAH_SANDBOX_RAYLET_PIDS=",".join(map(str, raylets)),
               SAAH_SANDBOX_WORKER_RAYLET_PID=str(raylets[-1]), SAAH_SANDBOX_TEMP_DIR=str(temp_dir),
               SAAH_SANDBOX_ISOLATION="namespace" if namespace else "loopback")
    return env


def kill_processes_of(node_dir: Path) -> None:
    """SIGKILL the processes whose command line names ``node_dir`` (a node's daemons) and their children."""
    victims = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        try:
            if any(str(node_dir) in part for part in proc.info["cmdline"] or ()):
                victims += [proc, *proc.children(recursive=True)]
        except psutil.Error:
            continue
    kill_and_wait(victims)


def kill_and_wait(procs, timeout: float = 5) -> None:
    """SIGKILL each process (gone already is fine) and reap them."""
    for proc in procs:
        try:
            proc.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(procs, timeout=timeout)


def kill_sessions(sessions: set[int]) -> None:
    """SIGKILL every process of these sessions (loopback mode's teardown: exactly what the nodes started)."""
    for _ in range(3):
        victims = []
        for proc in psutil.process_iter(["pid"]):
            try:
                if os.getsid(proc.info["pid"]) in sessions and proc.info["pid"] != os.getpid():
                    victims.append(proc)
            except OSError:
                continue
        if not victims:
            return
        kill_and_wait(victims)


def run_as_init(command: list[str], env: dict) -> int:
    """Run COMMAND and wait for it while reaping every orphan the Ray daemons leave (we are PID 1 here).

    In the namespace only the loopback device exists, and when COMMAND ends this script (the namespace's init)
    exits and the kernel kills every process left in the namespace, including the ``log_monitor`` a killed raylet
    leaves behind.
    """
    child = subprocess.Popen(command, env=env)
    # A SIGTERM sent to this process is meant for COMMAND; Ctrl-C reaches COMMAND by itself (same process group).
    signal.signal(signal.SIGTERM, lambda *_: child.send_signal(signal.SIGTERM))
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            return 1
        if pid == child.pid:
            child.returncode = 0  # reaped here; keep Popen from waiting on it again
            return os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)


def run_with_cluster(nodes: list[dict], command: list[str], namespace: bool, object_store_mb: int) -> int:
    """Start the nodes, run COMMAND beside them, tear them down; COMMAND's exit status.

    For fault-injection tests COMMAND also gets ``SAAH_SANDBOX_RAYLET_PIDS`` (the raylet of each node, head first,
    comma-separated), ``SAAH_SANDBOX_WORKER_RAYLET_PID`` (the last node's raylet: kill it to lose that node
    mid-run), ``SAAH_SANDBOX_ISOLATION`` (``namespace`` or ``loopback``) and ``SAAH_SANDBOX_TEMP_DIR`` (the nodes'
    temp dirs live under it; removed at the end).
    """
    if namespace:
        subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    # Short path: Ray's Unix socket paths under it must stay within 107 bytes.
    temp_dir = Path(tempfile.mkdtemp(prefix="saah-sbx-", dir="/tmp"))
    sessions: set[int] = set()
    try:
        env = start_cluster(nodes, temp_dir, namespace, object_store_mb, sessions)
        if namespace:
            return run_as_init(command, env)
        try:
            code = subprocess.run(command, env=env).returncode
        except KeyboardInterrupt:
            return 130
        return 128 - code if code < 0 else code
    finally:
        if not namespace:
            kill_sessions(sessions)
        shutil.rmtree(temp_dir, ignore_errors=True)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    split = argv.index("--") if "--" in argv else len(argv)
    own, command = argv[:split], argv[split + 1:]
    parser = argparse.ArgumentParser(prog="ray_sandbox.py", description=__doc__.splitlines()[0],
                                     usage="%(prog)s --node SPEC [--node SPEC ...] -- COMMAND ...")
    parser.add_argument("--node", type=parse_node, action="append", required=True,
                        help="one Ray node: num_cpus=N,num_gpus=M (the first is the head)")
    parser.add_argument("--object-store-mb", type=int, default=DEFAULT_OBJECT_STORE_MB,
                        help=f"object store per node in MiB (default {DEFAULT_OBJECT_STORE_MB})")
    parser.add_argument("--no-namespace", action="store_true",
                        help="do not try unshare: explicit loopback address and a free port only")
    parser.add_argument(INNER_FLAG, action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(own)
    if not command:
        parser.error("no COMMAND: give it after --")
    if args.inside_namespace:
        return run_with_cluster(args.node, command, True, args.object_store_mb)
    if not args.no_namespace and namespace_permitted():
        # exec: unshare takes this process's place, so a signal to it (or its death) ends the namespace's init.
        os.execvp(NAMESPACE_ARGS[0], NAMESPACE_ARGS + [sys.executable, os.path.abspath(__file__), INNER_FLAG,
                                                       *own, "--", *command])
    if not args.no_namespace:
        sys.stderr.write("ray_sandbox: unshare is not permitted here; running on loopback addresses with a free port, "
                         "without network or PID isolation\n")
    return run_with_cluster(args.node, command, False, args.object_store_mb)


if __name__ == "__main__":
    sys.exit(main())
