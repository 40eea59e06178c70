"""The pin for processes that do not start in Python code of ours (light: no torch).

    python -m saah_lib.numerics env                 NAME=value lines of the pinned settings (the Makefile exports them)
    python -m saah_lib.numerics kernelspec DIR      make the Jupyter kernel in DIR start through ``kernel`` below
    python -m saah_lib.numerics kernel -f FILE      start an IPython kernel under the pin (what that kernelspec runs)

``env`` prints :func:`saah_lib.numerics.pin_environment`; ``kernel`` applies the pin to its own
environment and hands it to the kernel it becomes.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from saah_lib.jsonio import atomic_write_json, read_json
from saah_lib.numerics import apply_once, pin_environment

KERNEL_LAUNCHER = ["-m", "ipykernel_launcher"]
PINNED_LAUNCHER = ["-m", "saah_lib.numerics", "kernel"]


def pin_kernelspec(kernel_dir: Path) -> Path:
    """Rewrite ``kernel_dir/kernel.json`` so the kernel starts through ``python -m saah_lib.numerics kernel``.

    Not a fixed ``env`` in the kernelspec: that would override ``SAAH_CPU_NUMERICS=native`` too. The
    wrapper applies the pin before the kernel starts, so a notebook that imports torch first is
    pinned and the switch still works. Rewriting an already pinned kernelspec changes nothing.
    """
    path = Path(kernel_dir) / "kernel.json"
    spec = read_json(path)
    argv = list(spec.get("argv") or [])
    for i in range(len(argv) - 1):
        if argv[i:i + 3] == PINNED_LAUNCHER:
            return path
        if argv[i:i + 2] == KERNEL_LAUNCHER:
            spec["argv"] = argv[:i] + PINNED_LAUNCHER + argv[i + 2:]
            atomic_write_json(path, spec)
            return path
    raise ValueError(f"{path}: argv {argv} does not start '-m ipykernel_launcher'; cannot pin this kernel")


def launch_kernel(args: list[str]) -> None:
    """Become ``python -m ipykernel_launcher ARGS`` (same process id, which Jupyter watches) under the pin."""
    apply_once()
    # The kernel app's own log only (not the notebook's output): papermill's kernel listens on loopback, and its
    # warning about unencrypted TCP at every start is noise in every notebook run's log.
    quiet = [] if any(a.startswith("--IPKernelApp.log_level") for a in args) else ["--IPKernelApp.log_level=ERROR"]
    os.execv(sys.executable, [sys.executable, *KERNEL_LAUNCHER, *quiet, *args])


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m saah_lib.numerics", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("env", help="print NAME=value of each pinned setting")
    spec = sub.add_parser("kernelspec", help="start the kernel in DIR through the pin")
    spec.add_argument("kernel_dir", type=Path)
    sub.add_parser("kernel", help="start an IPython kernel under the pin (arguments go to ipykernel)")
    args, rest = parser.parse_known_args(argv)
    if args.command == "kernel":
        launch_kernel(rest)
    elif rest:
        parser.error(f"unrecognised arguments: {' '.join(rest)}")
    elif args.command == "env":
        print("\n".join(f"{k}={v}" for k, v in pin_environment().items()))
    else:
        print(f"pinned {pin_kernelspec(args.kernel_dir)}")


if __name__ == "__main__":
    main()
