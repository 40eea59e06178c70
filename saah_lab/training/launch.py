"""Command-line entry point for one training run, for ``accelerate launch`` on several GPUs.

    accelerate launch --num_processes 8 -m saah_lab.training.launch --profile qwen2.5-1.5b --method sa
    python -m saah_lab.training.launch --profile tiny --method sa --max-steps 2     # one process

Every process builds the same config; ``saah_lib.training.distributed`` splits each
step's completions between them, and only the main process evaluates and logs.

Each flag of the "config fields" group sets the field of its name; any other field goes through
``--set name=value`` (a JSON value, else a plain string).  A field may be given once, either way:
``--seed 1 --set seed=2`` is an error naming the field, so there is no precedence rule to remember.
A field given neither way keeps the profile's value.
"""

from __future__ import annotations

# A run of this command is comparable with the studies' runs bit for bit: pin the CPU numerics
# before anything below loads torch (saah_lib.numerics).
from saah_lib.numerics import apply_once

apply_once()

import argparse  # noqa: E402
import json
import sys
import time

from saah_lab.rundir.lock import FolderLockedError  # light: no torch
from saah_lib.method.methods import MAIN_ALPHA, METHODS
from saah_lib.models.backends import BACKENDS
from saah_lib.rundir.folder import RunFolderError
from saah_lib.training.config import PROFILE_STEPS, PROFILES, RunConfig, make_config
from saah_lib.training.distributed import is_main_process


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
    """The config flags typed on the command line and the ``--set`` fields as one dict; a field given both
    ways is an error."""
    both = sorted(set(flags) & set(overrides))
    if both:
        name = both[0]
        raise ValueError(f"config field {name!r} is given twice: --{name.replace('_', '-')} {flags[name]!r} and "
                         f"--set {name}={overrides[name]!r}; give it once")
    return {**flags, **overrides}


def _profile_values(name: str) -> str:
    """Each profile's value of a field, e.g. ``tiny 0, qwen2.5-1.5b 123, qwen2.5-3b 123``."""
    default = RunConfig.defaults()[name]
    return ", ".join(f"{p} {PROFILES[p].get(name, default)!r}" for p in PROFILES)


def _fields_epilog() -> str:
    lines = ["config fields for --set NAME=VALUE (defaults: the tiny profile; other profiles change some):"]
    defaults = RunConfig.defaults()
    for name, text in RunConfig.help().items():
        lines.append(f"  {name} = {defaults[name]!r}: {text}")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    """The command line. Config flags default to None: a flag that was not typed leaves the profile's value."""
    p = argparse.ArgumentParser(prog="python -m saah_lab.training.launch",
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                description="One SA-AH-GRPO training run (also under accelerate launch).\n"
                                            "A flag and --set of the same field together are an error.",
                                epilog=_fields_epilog())
    g = p.add_argument_group("config fields", "each sets the config field of its name; not given: the profile's value")
    fields = []  # the config flags' field names

    def flag(*names, **kwargs):
        fields.append(g.add_argument(*names, **kwargs).dest)

    flag("--profile", choices=list(PROFILES), help="named profile of the other defaults (default: tiny)")
    flag("--method", choices=list(METHODS), help="grpo: alpha 0; ah: every rollout; sa: negative-advantage "
                                                 "rollouts (default: sa)")
    flag("--alpha", type=float, help=f"discount strength (default: {MAIN_ALPHA}; 0 for grpo)")
    flag("--max-steps", "--steps", dest="max_steps", type=int,
         help="optimiser steps (default: the profile's for the method: "
              + ", ".join(f"{p} {'/'.join(map(str, PROFILE_STEPS[p].values()))}" for p in PROFILES)
              + " for grpo/ah/sa)")
    flag("--seed", type=int, help=f"default: the profile's ({_profile_values('seed')})")
    flag("--run-id", help="run folder name (default: <profile>-<method>-a<alpha>-s<seed>, then what differs from "
                          "the profile's defaults, e.g. -steps2)")
    flag("--results-dir", help=f"results root (default: {RunConfig.defaults()['results_dir']}, git-ignored)")
    flag("--model-name", help="hub id or model folder (default: the profile's: "
                              f"{_profile_values('model_name')})")
    flag("--generation-backend", choices=list(BACKENDS), help="default: auto (compiled on CUDA, hf elsewhere)")
    flag("--report-to", help="TRL/transformers integrations to log to (tensorboard, wandb, trackio, ...); "
                             "default: none")
    p.set_defaults(config_fields=tuple(fields))  # config_from_args reads the typed ones
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="NAME=VALUE",
                   help="any config field (listed below); repeatable")
    p.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bars or lines")
    p.add_argument("--print-config", action="store_true",
                   help="print the resolved config as JSON and exit without training")
    return p


def config_from_args(args: argparse.Namespace) -> RunConfig:
    """The run's config: the typed config flags and ``--set`` fields over the profile's defaults."""
    typed = {name: getattr(args, name) for name in args.config_fields if getattr(args, name) is not None}
    fields = merge_fields(typed, parse_overrides(args.overrides))
    return make_config(fields.pop("profile", "tiny"), **fields)


def config_from_argv(argv: list[str]) -> RunConfig:
    return config_from_args(build_parser().parse_args(argv))


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(sys.argv[1:] if argv is None else list(argv))
    try:
        cfg = config_from_args(args)
    except ValueError as err:
        parser.error(str(err))  # usage and the message on stderr, exit status 2
    if args.print_config:
        print(json.dumps(cfg.to_dict(), indent=1))
        return cfg
    from saah_lab.training.run import run_summary, run_training

    start = time.perf_counter()
    try:
        run_dir = run_training(cfg, progress=args.progress)
    # another process trains this run, or its folder holds another run: say so, without a traceback
    except (FolderLockedError, RunFolderError) as err:
        parser.exit(1, f"error: {err}\n")
    if is_main_process():
        print(run_summary(run_dir, time.perf_counter() - start))
    return run_dir


if __name__ == "__main__":
    main()
