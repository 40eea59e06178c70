"""Command-line entry point for one training run, for ``accelerate launch`` on several GPUs.

    accelerate launch --num_processes 8 -m saah_lib.training.launch --profile qwen2.5-1.5b --method sa
    python -m saah_lib.training.launch --profile tiny --method sa --steps 2     # one process

Every process builds the same config; ``saah_lib.training.distributed`` splits each
step's completions between them, and only the main process evaluates and logs.

The flags are shortcuts for config fields; any other SAAHConfig field goes through
``--set name=value`` (a JSON value, else a plain string).  Flags and ``--set`` are
merged into one set of fields, and each field may be given once: ``--seed 1 --set
seed=2`` (or ``--set seed=1 --set seed=2``) is an error naming the field, so there is
no precedence rule to remember.  A field given neither way keeps the profile's value.
"""

from __future__ import annotations

import argparse
import json
import sys

from saah_lib.method.methods import MAIN_ALPHA, METHODS
from saah_lib.models.backends import BACKENDS
from saah_lib.paths import LOCAL_RESULTS, repo_relative
from saah_lib.training.config import PROFILES, SAAHConfig, make_config

#: flag destination -> the config field it sets
FLAG_FIELDS = {"profile": "profile", "method": "method", "alpha": "alpha", "steps": "steps", "seed": "seed",
               "run_id": "run_id", "results_dir": "results_dir", "generation_backend": "generation_backend",
               "report_to": "report_to"}

from saah_lib.rundir.lock import FolderLockedError  # light: no torch


def parse_overrides(pairs: list[str]) -> dict:
    """``["name=value", ...]`` as a dict; a value is read as JSON, else kept as a plain string."""
    out = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise ValueError(f"--set expects name=value, got {pair!r}")
        if name in out:
            raise ValueError(f"--set {name}= is given twice ({out[name]!r} and {value!r}); give it once")
        try:
            out[name] = json.loads(value)
        except json.JSONDecodeError:
            out[name] = value  # a bare string
    return out


def merge_fields(flags: dict, overrides: dict) -> dict:
    """The flags given on the command line and the ``--set`` fields as one dict; a field given both ways
    is an error.  ``flags`` holds only flags that were typed (a default is not a choice)."""
    given = {FLAG_FIELDS[dest]: value for dest, value in flags.items()}
    both = sorted(set(given) & set(overrides))
    if both:
        name = both[0]
        raise ValueError(f"config field {name!r} is given twice: --{name.replace('_', '-')} {given[name]!r} and "
                         f"--set {name}={overrides[name]!r}; give it once")
    return {**given, **overrides}


def _fields_epilog() -> str:
    defaults = SAAHConfig.__dataclass_fields__
    lines = ["config fields for --set NAME=VALUE (defaults: the tiny profile; other profiles change some):"]
    for name, text in SAAHConfig.help().items():
        default = defaults[name].default
        lines.append(f"  {name} = {default!r}: {text}")
    return "\n".join(lines)


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Defaults after every option that takes a value, and the description and field list kept as written."""

    def _get_help_string(self, action):
        if action.nargs == 0:  # a switch: "(default: True)" after --no-progress would only confuse
            return action.help
        return super()._get_help_string(action)


def build_parser(defaults: bool = True) -> argparse.ArgumentParser:
    """The command line; ``defaults=False`` gives every config flag the default None (see :func:`typed_flags`)."""
    p = argparse.ArgumentParser(prog="python -m saah_lib.training.launch", formatter_class=_HelpFormatter,
                                description="One SA-AH-GRPO training run (also under accelerate launch).\n"
                                            "A flag and --set of the same field together are an error.",
                                epilog=_fields_epilog())
    p.add_argument("--profile", default="tiny", choices=list(PROFILES), help="named profile of the other defaults")
    p.add_argument("--method", default="sa", choices=list(METHODS), help="grpo: alpha 0; ah: every rollout; "
                                                                         "sa: negative-advantage rollouts")
    p.add_argument("--alpha", type=float, default=None, help=f"discount strength; None: {MAIN_ALPHA} (0 for grpo)")
    p.add_argument("--steps", type=int, default=None, help="optimiser steps; None: the profile's for the method")
    p.add_argument("--seed", type=int, default=None, help="None: the config's default (0)")
    p.add_argument("--run-id", default=None, help="run folder name; None: <profile>-<method>-a<alpha>-s<seed>")
    p.add_argument("--results-dir", default=None,
                   help=f"results root; None: {repo_relative(LOCAL_RESULTS)} (git-ignored)")
    p.add_argument("--generation-backend", default=None, choices=list(BACKENDS),
                   help="None: auto (compiled on CUDA, hf elsewhere)")
    p.add_argument("--report-to", default=None,
                   help="TRL/transformers integrations to log to (tensorboard, wandb, trackio, ...); None: none")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="NAME=VALUE",
                   help="any config field (listed below); repeatable")
    p.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bars or lines")
    p.add_argument("--print-config", action="store_true",
                   help="print the resolved config as JSON and exit without training")
    if not defaults:
        p.set_defaults(**{dest: None for dest in FLAG_FIELDS})
    return p


def typed_flags(argv: list[str]) -> dict:
    """The config flags that ``argv`` types (parsed again without defaults: a flag's value is never None)."""
    args = vars(build_parser(defaults=False).parse_args(argv))
    return {dest: args[dest] for dest in FLAG_FIELDS if args[dest] is not None}


def config_from_argv(argv: list[str]):
    """The run's config: the typed flags and ``--set`` fields over the profile's defaults."""
    args = build_parser().parse_args(argv)
    fields = merge_fields(typed_flags(argv), parse_overrides(args.overrides))
    return make_config(fields.pop("profile", "tiny"), **fields)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        cfg = config_from_argv(argv)
    except ValueError as err:
        parser.error(str(err))  # usage and the message on stderr, exit status 2
    if args.print_config:
        print(json.dumps(cfg.to_dict(), indent=1))
        return cfg
    # torch and TRL load only now, so --help and --print-config answer at once
    from saah_lib.training.run import run_training

    try:
        return run_training(cfg, progress=args.progress)
    except FolderLockedError as err:  # another process trains this run: say so, without a traceback
        parser.exit(1, f"error: {err}\n")


if __name__ == "__main__":
    main()
