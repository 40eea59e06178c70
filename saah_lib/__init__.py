"""SA-AH-GRPO, the library: entropy-adaptive horizon weights for GRPO on TRL.

Its folders follow the data, each importing only from those before it (tests/test_layout.py)::

    paths, jsonio            where things live; JSON
    numerics, progress       the pinned CPU numerics; progress lines and bars
    method/, tasks/          loss, token weights, reward; problems, GSM8K, the synthetic CPU task
    models/, rundir/         names, loading, greedy evaluation, the opt-in compiled rollout; the run folder's layout
    training/                SAAHGRPOConfig and the run config, SAAHGRPOTrainer, its callbacks and sampler

The paper's lab (studies, analysis, report, one whole run, the notebooks' parameters) is the package
:mod:`saah_lab`, built on this one and never imported by it. ``from saah_lib import SAAHGRPOTrainer`` imports
only what that name needs (torch and TRL load on first use). Importing the package adds one import hook: a
module that moved to the lab, imported by its old name, fails naming its new one.
"""

from __future__ import annotations

import importlib
import importlib.abc
import sys

#: Every ``python -m`` command of the library (``python -m saah_lab`` lists the lab's too).
COMMANDS = {
    "saah_lib": "list these commands",
    "saah_lib.tasks.gsm8k": "prepare: GSM8K's train.jsonl and test.jsonl from the hub, for offline machines",
    "saah_lib.numerics": "the pinned CPU numerics: env, kernelspec, kernel (docs/reproducibility.md)",
}

_PUBLIC = {
    "SAAHGRPOConfig": "saah_lib.training.config",
    "SAAHGRPOTrainer": "saah_lib.training.trainer",
    "RunConfig": "saah_lib.training.config",
    "make_config": "saah_lib.training.config",
    "RunDir": "saah_lib.rundir.folder",
    "read_jsonl": "saah_lib.jsonio",
}
__all__ = sorted(_PUBLIC)
#: Names this package gave before the lab became its own package.
_LAB_NAMES = ("run_training", "baseline_for", "ResultSet", "read_paper_reported", "plot_run", "plot_alpha_ablation",
              "render_report", "run_ablation")
#: Modules that moved to :mod:`saah_lab` (a name stands for its submodules too).
MOVED_TO_LAB = ("saah_lib.studies", "saah_lib.analysis", "saah_lib.report",
                *(f"saah_lib.rundir.{name}" for name in ("checkpoints", "checks", "lock", "manifest", "provenance",
                                                         "read_cache", "reader")),
                *(f"saah_lib.training.{name}" for name in ("launch", "notebook_params", "papermill_bounds", "run",
                                                           "study_trainer")))


def lab_name(module: str) -> str | None:
    """The lab's name for a module that moved there (``saah_lib.studies.mini`` -> ``saah_lab.studies.mini``)."""
    if any(module == old or module.startswith(old + ".") for old in MOVED_TO_LAB):
        return "saah_lab" + module.removeprefix("saah_lib")
    return None


class _MovedToLab(importlib.abc.MetaPathFinder):
    """Last on ``sys.meta_path``: asked only for a name no module has, it names the lab module if one moved."""

    def find_spec(self, fullname, path=None, target=None):
        new = lab_name(fullname)
        if new is not None:
            raise ModuleNotFoundError(f"{fullname} moved to the lab package: import {new}", name=fullname)
        return None


if not any(type(finder).__name__ == _MovedToLab.__name__ for finder in sys.meta_path):
    sys.meta_path.append(_MovedToLab())


def __getattr__(name: str):
    if name in _LAB_NAMES:
        raise AttributeError(f"saah_lib.{name} moved to the lab package: from saah_lab import {name}")
    if name not in _PUBLIC:
        raise AttributeError(f"module 'saah_lib' has no attribute {name!r}")
    value = getattr(importlib.import_module(_PUBLIC[name]), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(list(globals()) + __all__)


def refuse_a_module_that_is_no_command(package: str, commands: dict[str, str]) -> None:
    """``python -m <package>.<module>`` of a module without a command would run nothing and exit 0, even with
    ``--help``; name the commands instead and exit 2 (a module that moved to the lab: its new name).

    While ``-m`` locates its module (the package is imported on the way), ``sys.argv[0]`` is ``"-m"`` and
    ``sys.orig_argv`` holds the module's name.
    """
    argv = getattr(sys, "orig_argv", [])
    if not sys.argv or sys.argv[0] != "-m" or "-m" not in argv[:-1]:
        return
    target = argv[argv.index("-m") + 1]
    if target.split(".")[0] != package or target in commands or target.endswith(".__main__"):
        return
    if lab_name(target) is not None:
        sys.stderr.write(f"{target} moved to the lab package: python -m {lab_name(target)}\n")
        raise SystemExit(2)
    lines = "\n".join(f"  python -m {name:28s} {text}" for name, text in commands.items())
    sys.stderr.write(f"{target} is a module, not a command. The commands are:\n{lines}\n")
    raise SystemExit(2)


refuse_a_module_that_is_no_command(__name__, COMMANDS)
