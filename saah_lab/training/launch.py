"""Command-line entry point for one training run, for ``accelerate launch`` on several GPUs.

    accelerate launch --num_processes 8 -m saah_lab.training.launch --profile qwen2.5-1.5b --method sa
    python -m saah_lab.training.launch --profile tiny --method sa --max-steps 2     # one process
    python -m saah_lab.training.launch --config run.yaml --seed 1                   # flags over the file

Every process builds the same config; ``saah_lib.training.distributed`` splits each step's completions between
them, and only the main process evaluates and logs. TRL's ``TrlParser`` makes a flag of every config field (one
dataclass, :func:`config_flags`); ``--config`` is bounded like a notebook parameter (:func:`safe_yaml`).
"""

from __future__ import annotations

# A run of this command is comparable with the studies' runs bit for bit: pin the CPU numerics
# before anything below loads torch (saah_lib.numerics).
from saah_lib.numerics import apply_once

apply_once()

import argparse  # noqa: E402
import dataclasses
import json
import sys
import time

import yaml
from trl import TrlParser

from saah_lab.rundir.lock import FolderLockedError  # light: no torch
from saah_lab.training.notebook_params import MAX_VALUE_CHARS, ParameterError, safe_yaml
from saah_lib.method.methods import METHODS
from saah_lib.models.backends import BACKENDS
from saah_lib.rundir.folder import RunFolderError
from saah_lib.training.config import DATASETS, DTYPES, PROFILE_STEPS, PROFILES, RunConfig, SAAHGRPOConfig, make_config
from saah_lib.training.distributed import is_main_process

CHOICES = {"profile": list(PROFILES), "method": list(METHODS), "generation_backend": list(BACKENDS),
           "dtype": list(DTYPES), "dataset": list(DATASETS)}
ALIASES = {"max_steps": ["--steps"]}
#: A config flag's value when it was not typed (None is what ``null`` gives).
NOT_TYPED = object()


def json_or_text(value: str):
    """A command-line value read as JSON, else kept as a plain string."""
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        return value


def parse_overrides(pairs: list[str]) -> dict:
    """``["name=value", ...]`` as a dict (the benches' ``--set``); a value is JSON, else a plain string."""
    out = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise ValueError(f"--set expects name=value, got {pair!r}")
        if name in out:
            raise ValueError(f"--set {name}= is given twice ({out[name]!r} and {value!r}); give it once")
        out[name] = json_or_text(value)
    return out


def text_or_null(value: str) -> str | None:
    """A TEXT flag's value: the text as typed, but ``null`` is None (as in the YAML file)."""
    return None if value == "null" else value


def _default_text(name: str) -> str:
    """A field's default as help shows it: one value, or each profile's."""
    if name == "max_steps":
        return "the profile's for grpo/ah/sa: " + ", ".join(f"{p} {'/'.join(map(str, s.values()))}"
                                                             for p, s in PROFILE_STEPS.items())
    default = RunConfig.defaults()[name]
    shown = {p: PROFILES[p].get(name, default) for p in PROFILES}
    text = {p: v if isinstance(v, str) else "None" if v is None else json.dumps(v) for p, v in shown.items()}
    if len(set(text.values())) == 1:
        return text[next(iter(text))]
    return "the profile's: " + ", ".join(f"{p} {v}" for p, v in text.items())


def config_flags() -> type:
    """Every config field as a field of one dataclass, for HfArgumentParser to make ``--name`` and ``--name-with-
    dashes`` of: a field's type reads its flag's value (one of its choices; a ``str`` field's text as typed; else
    JSON, else text), its metadata are the rest of add_argument's, and its default :data:`NOT_TYPED`."""
    fields = {f.name: f.type for f in [*dataclasses.fields(RunConfig), *dataclasses.fields(SAAHGRPOConfig)]}
    flags = []
    for name, help_text in RunConfig.help().items():
        text = str(fields[name]).replace("<class 'str'>", "str") in ("str", "str | None")
        reading, metavar = (str, None) if name in CHOICES else (text_or_null, "TEXT") if text else (json_or_text,
                                                                                                   "VALUE")
        metadata = {"choices": CHOICES.get(name), "metavar": metavar, "aliases": ALIASES.get(name, []),
                    "help": f"{help_text} (default: {_default_text(name)})".replace("%", "%%")}
        flags.append((name, reading, dataclasses.field(default=NOT_TYPED, metadata=metadata)))
    return dataclasses.make_dataclass("ConfigFields", flags, namespace={"_argument_group_name": "config fields"})


def build_parser() -> TrlParser:
    """The command line: :func:`config_flags` and the options. A config flag that was not typed is
    :data:`NOT_TYPED` and leaves the file's or the profile's value; one typed ``null`` is None."""
    p = TrlParser(dataclass_types=[config_flags()], prog="python -m saah_lab.training.launch",
                  allow_abbrev=False, formatter_class=argparse.RawDescriptionHelpFormatter,
                  usage="%(prog)s [--config FILE.yaml] [--FIELD VALUE ...] [--print-config] [--no-progress]",
                  description="One SA-AH-GRPO training run (also under accelerate launch).\n"
                              "Each config field has a flag of its name; not given: the profile's value.\n"
                              "Config flags beat --config's file, which beats the profile's defaults.\n"
                              "TEXT is taken as typed; VALUE is read as JSON (2, 0.5, true, [\"a\"]), else as text;\n"
                              "null is None (a field that cannot be None says so).")
    p.add_argument("--config", metavar="FILE.yaml", help="a YAML mapping of config fields (default: none)")
    p.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bars or lines")
    p.add_argument("--print-config", action="store_true",
                   help="print the resolved config as JSON and exit without training")
    return p


def parse_command_line(parser: TrlParser, argv: list[str]) -> tuple[argparse.Namespace, RunConfig]:
    """The options (``--config``, ``--no-progress``, ``--print-config``) and the run's config: the typed config
    fields over ``--config``'s over the profile's defaults (a None among them, from ``null``, is None: make_config's
    ``overrides``). An unknown flag or a bad value: the parser's error, naming it (exit status 2)."""
    flags, options, unknown = parser.parse_args_into_dataclasses(argv, return_remaining_strings=True,
                                                                 look_for_args_file=False)
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    typed = {name: value for name, value in vars(flags).items() if value is not NOT_TYPED}
    try:
        fields = {**(read_config_file(options.config) if options.config else {}), **typed}
        return options, make_config(fields.pop("profile", "tiny"), overrides=fields)
    except ValueError as err:
        parser.error(str(err))  # usage and the message on stderr


def read_config_file(path: str) -> dict:
    """``--config``'s YAML mapping of config fields, bounded as a notebook parameter (:func:`safe_yaml`)."""
    try:
        with open(path, encoding="utf-8") as f:
            fields = safe_yaml(path, f.read(MAX_VALUE_CHARS + 1))
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(f"--config {path}: cannot read it ({err})") from None
    except ParameterError:
        raise ValueError(f"--config {path}: more than {MAX_VALUE_CHARS:,} characters; a config file holds "
                         "settings, not data") from None
    except yaml.YAMLError as err:
        reason = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise ValueError(f"--config {path}: not YAML within bounds ({reason})") from None
    if not isinstance(fields, dict) or not all(isinstance(name, str) for name in fields):
        raise ValueError(f"--config {path}: must hold a YAML mapping of config fields (name: value), "
                         f"got {type(fields).__name__}")
    if "env" in fields:  # TRL's scripts set them: here they would change the run unrecorded
        raise ValueError(f"--config {path}: 'env' is not read (environment variables would change the run "
                         "unrecorded); set them in the shell")
    return fields


def main(argv=None):
    parser = build_parser()
    options, cfg = parse_command_line(parser, sys.argv[1:] if argv is None else list(argv))
    if options.print_config:
        print(json.dumps(cfg.to_dict(), indent=1))
        return cfg
    from saah_lab.training.run import run_summary, run_training

    start = time.perf_counter()
    try:
        run_dir = run_training(cfg, progress=options.progress)
    # another process trains this run, or its folder holds another run: say so, without a traceback
    except (FolderLockedError, RunFolderError) as err:
        parser.exit(1, f"error: {err}\n")
    if is_main_process():
        print(run_summary(run_dir, time.perf_counter() - start))
    return run_dir


if __name__ == "__main__":
    main()
