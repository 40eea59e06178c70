"""SA-AH-GRPO, the library: entropy-adaptive horizon weights for GRPO on TRL.

Its folders follow the data, each importing only from those before it (tests/test_layout.py)::

    paths, jsonio            where things live; JSON
    numerics, progress       the pinned CPU numerics; progress lines and bars
    method/, tasks/          loss, token weights, reward; problems, GSM8K, the synthetic CPU task
    models/, rundir/         names, loading, greedy evaluation, the opt-in compiled rollout; the run folder's layout
    training/                SAAHGRPOConfig (no run folders), the run config, SAAHGRPOTrainer, callbacks, sampler

The paper's lab (studies, analysis, report, one whole run, the notebooks' parameters) is the package
:mod:`saah_lab`, built on this one and never imported by it. ``from saah_lib import SAAHGRPOTrainer`` imports
only what that name needs (torch and TRL load on first use).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys

#: Every ``python -m`` command of the library (``python -m saah_lab`` lists the lab's too).
COMMANDS = {
    "saah_lib": "list these commands",
    "saah_lib.tasks.gsm8k": "prepare: GSM8K's train.jsonl and test.jsonl from the hub, for offline machines",
    "saah_lib.numerics": "the pinned CPU numerics: env, kernelspec, kernel (docs/reproducibility.md)",
}

_PUBLIC = {
    "SAAHGRPOConfig": "saah_lib.training.grpo_config",
    "SAAHGRPOTrainer": "saah_lib.training.trainer",
    "RunConfig": "saah_lib.training.config",
    "make_config": "saah_lib.training.config",
    "RunDir": "saah_lib.rundir.folder",
    "read_jsonl": "saah_lib.jsonio",
}
__all__ = sorted(_PUBLIC)


def __getattr__(name: str):
    if name not in _PUBLIC:
        raise AttributeError(f"module 'saah_lib' has no attribute {name!r}")
    value = getattr(importlib.import_module(_PUBLIC[name]), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(list(globals()) + __all__)


def refuse_a_module_that_is_no_command(package: str, commands: dict[str, str]) -> None:
    """``python -m <package>.<module>`` of a module without a command would run nothing and exit 0, even with
    ``--help``; name the commands instead and exit 2 (a name no module has: Python's own error).

    While ``-m`` locates its module (the package is imported on the way), ``sys.argv[0]`` is ``"-m"`` and
    ``sys.orig_argv`` holds the module's name.
    """
    argv = getattr(sys, "orig_argv", [])
    if not sys.argv or sys.argv[0] != "-m" or "-m" not in argv[:-1]:
        return
    target = argv[argv.index("-m") + 1]
    if target.split(".")[0] != package or target in commands or target.endswith(".__main__"):
        return
    try:
        if importlib.util.find_spec(target) is None:
            return
    except ImportError:  # no such module: Python's own error says so
        return
    lines = "\n".join(f"  python -m {name:28s} {text}" for name, text in commands.items())
    sys.stderr.write(f"{target} is a module, not a command. The commands are:\n{lines}\n")
    raise SystemExit(2)


refuse_a_module_that_is_no_command(__name__, COMMANDS)
