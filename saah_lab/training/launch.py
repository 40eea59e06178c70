"""Command-line entry point for one training run, for ``accelerate launch`` on several GPUs.

    accelerate launch --num_processes 8 -m saah_lab.training.launch --profile qwen2.5-1.5b --method sa
    python -m saah_lab.training.launch --profile tiny --method sa --max-steps 2     # one process
    python -m saah_lab.training.launch --config run.yaml --seed 1                   # flags over the file

Every process builds the same config; ``saah_lib.training.distributed`` splits each
step's completions between them, and only the main process evaluates and logs.

The parser is TRL's ``TrlParser``, one flag per config field (``--max-steps`` or ``--max_steps``);
``--config FILE.yaml`` is a mapping of fields, as TRL's scripts take it, read within the notebook
parameters' bounds. A field given neither way keeps the profile's value; ``null``, typed or in the file, is None.
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
from saah_lab.training.notebook_params import MAX_VALUE_CHARS, safe_yaml
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


def _text_fields() -> set[str]:
    """The fields typed ``str`` (or ``str | None``): their flags take the text as typed, never as JSON."""
    fields = [*dataclasses.fields(RunConfig), *dataclasses.fields(SAAHGRPOConfig)]
    return {f.name for f in fields if str(f.type).replace("<class 'str'>", "str") in ("str", "str | None")}


def text_or_null(value: str) -> str | None:
    """A TEXT flag's value: the text as typed, but ``null`` is None (as in the YAML file)."""
    return None if value == "null" else value


def _value_reading(name: str, text_fields: set[str]) -> dict:
    """How a field's flag reads its value: one of its choices, the text as typed, or JSON else text."""
    if name in CHOICES:
        return {"choices": CHOICES[name]}
    if name in text_fields:
        return {"metavar": "TEXT", "type": text_or_null}
    return {"metavar": "VALUE", "type": json_or_text}


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


def build_parser() -> TrlParser:
    """The command line. A config flag that was not typed is :data:`NOT_TYPED` and leaves the file's or the
    profile's value; one typed ``null`` is None."""
    p = TrlParser(dataclass_types=[], prog="python -m saah_lab.training.launch", allow_abbrev=False,
                  usage="%(prog)s [--config FILE.yaml] [--FIELD VALUE ...] [--print-config] [--no-progress]",
                  formatter_class=argparse.RawDescriptionHelpFormatter,
                  description="One SA-AH-GRPO training run (also under accelerate launch).\n"
                              "Config flags beat --config's file, which beats the profile's defaults.\n"
                              "TEXT is taken as typed; VALUE is read as JSON (2, 0.5, true, [\"a\"]), else as text;\n"
                              "null is None (a field that cannot be None says so).")
    p.add_argument("--config", metavar="FILE.yaml", help="a YAML mapping of config fields (default: none)")
    p.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bars or lines")
    p.add_argument("--print-config", action="store_true",
                   help="print the resolved config as JSON and exit without training")
    g = p.add_argument_group("config fields", "each sets the config field of its name; not given: the profile's")
    text = _text_fields()
    for name, help_text in RunConfig.help().items():
        names = dict.fromkeys([f"--{name.replace('_', '-')}", f"--{name}", *ALIASES.get(name, [])])
        g.add_argument(*names, dest=name, default=NOT_TYPED, **_value_reading(name, text),
                       help=f"{help_text} (default: {_default_text(name)})".replace("%", "%%"))
    return p


def read_config_file(path: str) -> dict:
    """``--config``'s YAML mapping of config fields, within a notebook parameter's bounds (size, aliases, nodes)."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read(MAX_VALUE_CHARS + 1)
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(f"--config {path}: cannot read it ({err})") from None
    if len(text) > MAX_VALUE_CHARS:
        raise ValueError(f"--config {path}: more than {MAX_VALUE_CHARS:,} characters; a config file holds "
                         "settings, not data")
    try:
        fields = safe_yaml(path, text)
    except yaml.YAMLError as err:
        reason = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise ValueError(f"--config {path}: not YAML within bounds ({reason})") from None
    if not isinstance(fields, dict) or not all(isinstance(name, str) for name in fields):
        raise ValueError(f"--config {path}: must hold a YAML mapping of config fields (name: value), "
                         f"got {type(fields).__name__}")
    if "env" in fields:
        raise ValueError(f"--config {path}: 'env' is not read (environment variables would change the run "
                         "unrecorded); set them in the shell")
    return fields


def config_from_args(args: argparse.Namespace) -> RunConfig:
    """The run's config: the typed config flags over ``--config``'s fields over the profile's defaults
    (a None among them, from ``null``, is None: make_config's ``overrides``)."""
    typed = {name: getattr(args, name) for name in RunConfig.help() if getattr(args, name) is not NOT_TYPED}
    fields = {**(read_config_file(args.config) if args.config else {}), **typed}
    return make_config(fields.pop("profile", "tiny"), overrides=fields)


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
