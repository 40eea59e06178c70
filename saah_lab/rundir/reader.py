"""Reading a results root strictly (layout and checks in full: ``docs/results_layout.md``): :func:`read_folders`.

Every problem in a run or baseline folder becomes one message naming the file (and line, for logs): an
unreadable or incomplete ``config.json``, a log line that is not a JSON object with an integer ``step``, a
metric that is not a number (``null`` is allowed in the training log), an incomplete run
(:func:`saah_lib.rundir.folder.trained_and_evaluated`), or a line that breaks what a log must *mean*:
``train_log.jsonl`` steps 1, 2, 3, ... once each, in order, values in :data:`TRAIN_LOG_RANGES`; ``eval.jsonl``
each step once, in order, on the schedule, none missing, ``pass_at_1 = n_correct / n``; each
``eval_samples/step_XXXX.jsonl`` ``n`` records with distinct ids, ``n_correct`` of them correct, each
``correct`` as its ``extracted`` answer scores against its ``gold``. A run still being written is read as one:
what the trainer's writes leave for a moment is damage only in a complete run or one damaged otherwise.

By default a problem raises :class:`DamagedResultsError` listing them all. With ``tolerate_problems=True``
a folder whose config cannot be read is *excluded*; any other run is kept with its valid lines and
*flagged*, and :attr:`RunFolder.problems` says why.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from saah_lib.jsonio import parse_jsonl, read_text, scan_jsonl
from saah_lib.method.methods import METHODS
from saah_lib.method.reward import COMPONENT_BOUNDS, MAX_TOTAL, MIN_TOTAL, answers_match
from saah_lib.models.compile_record import recorded_fallback
from saah_lib.rundir import layout
from saah_lib.rundir.folder import RunDir, trained_and_evaluated
from saah_lib.rundir.layout import EVAL_KEYS, TRAIN_LOG_KEYS
from saah_lib.tasks.scoring import pass_at_1_ci
from saah_lib.training.profiles import RECORDED_AS, settings_of_record

#: What every evaluation line must hold as a number (the others of EVAL_KEYS may be null).
EVAL_REQUIRED = ("pass_at_1", "n", "n_correct")

#: Run metadata merged into every long table.
META_COLUMNS = ("run_id", "model_label", "method", "alpha", "seed", "max_steps", "eval_every", "profile")

Lines = list[tuple[int, dict]]

#: Logged values are float32 means: a bound is kept within this (relative, at least absolute) slack.
TOLERANCE = 1e-6
#: ``pass_at_1`` and ``ci95`` are written from the same integers: they must agree to rounding only.
EVAL_TOLERANCE = 1e-9

_FRACTION = (0.0, 1.0, True)
_NOT_NEGATIVE = (0.0, math.inf, True)
_POSITIVE = (0.0, math.inf, False)
#: (lowest, highest, lowest allowed?) of each training-log value (``train_log.jsonl``; null is always allowed).
TRAIN_LOG_RANGES: dict[str, tuple[float, float, bool]] = {
    "reward_mean": (MIN_TOTAL, MAX_TOTAL, True),
    # a sample standard deviation of values in [MIN_TOTAL, MAX_TOTAL] is at most their span
    "reward_std": (0.0, MAX_TOTAL - MIN_TOTAL, True),
    **{f"reward_{name}": (lo, hi, True) for name, (lo, hi) in COMPONENT_BOUNDS.items()},
    "kl": _NOT_NEGATIVE,  # TRL's k3 estimate exp(d) - d - 1 is never negative
    "entropy_norm": _FRACTION,  # H / log V
    "weight_mean": _POSITIVE,
    "weight_neg_mean": _POSITIVE,
    "neg_frac": _FRACTION,
    "completion_length": _NOT_NEGATIVE,
    "learning_rate": _NOT_NEGATIVE,
    "grad_norm": _NOT_NEGATIVE,
    "entropy_nats": _NOT_NEGATIVE,
    "clip_frac": _FRACTION,
    "frac_groups_below_threshold": _FRACTION,
    "frac_truncated": _FRACTION,
    "step_time": _NOT_NEGATIVE,
}


class DamagedResultsError(ValueError):
    """Results that cannot be read as they are; the message lists each problem by file and line."""


@dataclass
class RunFolder:
    """One ``runs/<run_id>/`` or ``baselines/<name>/`` folder as read from disk."""

    path: Path
    config: dict | None  # flattened config.json, settings by field name; None when it cannot be read (excluded)
    evals: list[dict] = field(default_factory=list)
    train_log: list[dict] = field(default_factory=list)
    token_entropies: list[dict] = field(default_factory=list)
    damage: list[str] = field(default_factory=list)  # unreadable config, bad lines, non-numeric metrics
    incomplete: str = ""  # why the run is not complete ("" when it is)
    compile_fallback: str | None = None  # why its compiled rollout fell back to hf (compile_health.json), if it did
    # frames made of its lines, each once (saah_lab.analysis.frames): derived, so never compared or shown
    frames: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def problems(self) -> list[str]:
        return self.damage + ([self.incomplete] if self.incomplete else [])

    @property
    def excluded(self) -> bool:
        return self.config is None


def flatten_config(cfg: dict, prefix: str = "") -> dict[str, Any]:
    """Nested dicts flattened to dotted keys (``data.train_sha256``); a list becomes its length under
    ``<key>.len``, so that a run is one flat row."""
    out: dict[str, Any] = {}
    for key, value in cfg.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten_config(value, prefix=name + "."))
        elif isinstance(value, (list, tuple)):
            out[name + ".len"] = len(value)
        else:
            out[name] = value
    return out


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def checked_config(run: RunDir, required: Iterable[str] = ("method", "alpha", "max_steps")
                   ) -> tuple[dict | None, list[str]]:
    """A folder's ``config.json``, flattened, its settings by field name (:func:`settings_of_record`), or None
    and the reason it cannot be used (naming the entry as the file does)."""
    path = run.config_path
    try:
        data = run.read_config()
    except ValueError as exc:  # not JSON, or bytes that are not UTF-8: the message names file and line
        return None, [exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)]
    if data is None:
        return None, [f"{path}: missing"]
    if not isinstance(data, dict):
        return None, [f"{path}: not a JSON object"]
    flat = flatten_config(settings_of_record(data))
    if flat.get("model_label") in (None, "") and flat.get("model_name"):
        flat["model_label"] = str(flat["model_name"]).split("/")[-1]
    missing = [RECORDED_AS.get(k, k) for k in ("model_label", *required) if flat.get(k) in (None, "")]
    if missing:
        return None, [f"{path}: no {', '.join(missing)}"]
    if "alpha" in required and not _is_number(flat["alpha"]):
        return None, [f"{path}: alpha is {flat['alpha']!r}, not a number"]
    if "max_steps" in required and not _is_int(flat["max_steps"]):
        return None, [f"{path}: {RECORDED_AS['max_steps']} is {flat['max_steps']!r}, not an integer"]
    return flat, []


def read_lines(path: Path, numeric: Iterable[str], required: Iterable[str] = (),
               scanned: tuple[list, list] | None = None) -> tuple[Lines, list[str]]:
    """The valid lines of a finished log, as ``[(line number, record)]``, and one message per bad line: a valid
    line is a JSON object with an integer ``step``, its ``numeric`` keys numbers or null, its ``required`` keys
    numbers. ``scanned``: the file's :func:`~saah_lib.jsonio.scan_jsonl` already made (default: read it now)."""
    records, bad_json = scan_jsonl(path) if scanned is None else scanned
    messages = [f"{path}: line {i}: {problem}" for i, problem in bad_json]
    good = []
    for i, rec in records:
        if not isinstance(rec, dict):
            messages.append(f"{path}: line {i}: not a JSON object")
            continue
        if not _is_int(rec.get("step")):
            messages.append(f"{path}: line {i}: step is {rec.get('step')!r}, not an integer")
            continue
        bad = [k for k in numeric if k in rec and rec[k] is not None and not _is_number(rec[k])]
        bad += [k for k in required if k not in bad and not _is_number(rec.get(k))]
        if bad:
            messages.append(f"{path}: line {i}: " + ", ".join(f"{k} is {rec.get(k)!r}, not a number" for k in bad))
            continue
        good.append((i, rec))
    return good, messages


def _read_log(path: Path, numeric: Iterable[str], required: Iterable[str] = ()
              ) -> tuple[Lines, list[str], list[str], list]:
    """One read of a log that may be growing (every fact checked about it comes from it): :func:`read_lines`'
    lines and messages, the line being appended, and every parsed record.

    A last line without its newline that does not parse is one the writer is appending (a reader may see part
    of it): a fault only in a run that is otherwise complete, which no writer appends to.
    """
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        data = b""
    records, bad_json = parse_jsonl(data)
    appending = []
    if bad_json and bad_json[-1][0] == len(data.splitlines()) and not data.endswith((b"\n", b"\r")):
        i, problem = bad_json.pop()
        appending.append(f"{path}: line {i}: {problem}; the last line, without its newline (torn)")
    return *read_lines(path, numeric, required, scanned=(records, bad_json)), appending, records


def value_problems(record: dict, ranges: dict[str, tuple[float, float, bool]]) -> list[str]:
    """``"<key> is <value>, <why>"`` for each value of ``record`` outside its range (null is skipped)."""
    out = []
    for key, (lo, hi, lo_allowed) in ranges.items():
        value = record.get(key)
        if value is None:
            continue
        if value < lo - TOLERANCE * max(1.0, abs(lo)) or (not lo_allowed and value <= lo):
            out.append(f"{key} is {value!r}, " + (f"below {lo:g}" if lo_allowed else f"not above {lo:g}"))
        elif value > hi + TOLERANCE * max(1.0, abs(hi)):
            out.append(f"{key} is {value!r}, above {hi:g}")
    return out


def check_train_log(path: Path, lines: Lines, steps: int, max_completion_length: Any = None) -> tuple[Lines, list[str]]:
    """The usable lines of a training log and one message per breach (see the module docstring)."""
    ranges = dict(TRAIN_LOG_RANGES)
    if _is_int(max_completion_length) and max_completion_length > 0:
        ranges["completion_length"] = (0.0, float(max_completion_length), True)
    kept, messages, seen = [], [], {}
    expected = 1
    for i, rec in lines:
        step = rec["step"]
        problems = value_problems(rec, ranges)
        # after a gap the sequence goes on from the step found (the gap itself is reported)
        usable = not problems and expected <= step <= steps
        if step != expected:
            again = f"; step {step} is also on line {seen[step]}" if step in seen else ""
            problems.insert(0, f"step {step} where step {expected} was expected (steps run 1, 2, 3, ... "
                               f"once each, in order{again})")
        if step > steps:
            problems.append(f"step {step} is beyond the run's {steps} steps")
        if problems:
            messages.append(f"{path}: line {i}: " + "; ".join(problems))
        if usable:
            kept.append((i, rec))
            expected = step + 1
        seen.setdefault(step, i)
    return kept, messages


def eval_schedule(steps: int, eval_every: int) -> set[int]:
    """The steps a run evaluates: 0, every ``eval_every`` steps, and the last one (``PassAtOneCallback``)."""
    return {0, steps, *range(eval_every, steps + 1, eval_every)}


def eval_line_problems(rec: dict) -> list[str]:
    """What is wrong with the numbers of one evaluation line (their types are checked by the reader)."""
    p, n, k, ci = rec.get("pass_at_1"), rec.get("n"), rec.get("n_correct"), rec.get("ci95")
    if not _is_int(n) or n < 1:
        return [f"n is {n!r}, not a positive integer"]
    if not _is_int(k) or not 0 <= k <= n:
        return [f"n_correct is {k!r}, not an integer from 0 to n = {n}"]
    out = []
    if not 0.0 <= p <= 1.0:
        out.append(f"pass_at_1 is {p!r}, outside [0, 1]")
    elif abs(k / n - p) > EVAL_TOLERANCE:
        out.append(f"pass_at_1 is {p!r}, but n_correct / n = {k}/{n} = {k / n!r}")
    elif ci is not None and abs(ci - pass_at_1_ci(p, n)) > EVAL_TOLERANCE:
        out.append(f"ci95 is {ci!r}, but 1.96 * sqrt(p * (1 - p) / n) = {pass_at_1_ci(p, n)!r}")
    return out


def check_evals(path: Path, lines: Lines, schedule: set[int] | None, trained_to: int | None = None,
                named: Iterable = ()) -> tuple[Lines, list[str]]:
    """The usable lines of ``eval.jsonl`` and one message per breach. ``schedule``: the steps that may be
    evaluated (None: not checked), each up to ``trained_to`` (the last step trained) evaluated, unless a line
    already reported as unreadable names it (``named``)."""
    kept, messages, seen = [], [], {}
    for i, rec in lines:
        step = rec["step"]
        problems = eval_line_problems(rec)
        if step in seen:
            problems.insert(0, f"step {step} evaluated again (line {seen[step]} has it); each step is "
                               "evaluated once")
        elif kept and step < kept[-1][1]["step"]:
            problems.insert(0, f"step {step} after step {kept[-1][1]['step']} (evaluations are in step order)")
        if schedule is not None and step not in schedule:
            problems.append(f"step {step} is not on the evaluation schedule ({_describe(schedule)})")
        seen.setdefault(step, i)
        if problems:
            messages.append(f"{path}: line {i}: " + "; ".join(problems))
        else:
            kept.append((i, rec))
    if schedule is not None and trained_to is not None:
        missing = sorted(s for s in schedule if s <= trained_to and s not in seen and s not in set(named))
        if missing:
            messages.append(f"{path}: no evaluation at step {', '.join(map(str, missing))} (scheduled: "
                            f"{_describe(schedule)}; training reached step {trained_to})")
    return kept, messages


def _describe(schedule: set[int]) -> str:
    steps = sorted(schedule)
    return ", ".join(map(str, steps)) if len(steps) <= 8 else f"{', '.join(map(str, steps[:6]))}, ..., {steps[-1]}"


def rescoring_problems(record: dict) -> list[str]:
    """Whether a per-problem record's ``correct`` is what its ``extracted`` answer scores against its ``gold``
    (:func:`~saah_lib.method.reward.answers_match`, the evaluation's own rule)."""
    gold, extracted = record.get("gold"), record.get("extracted")
    if not isinstance(gold, str) or not (extracted is None or isinstance(extracted, str)):
        return [f"gold is {gold!r} and extracted is {extracted!r}: a gold answer and an extracted answer "
                "(or null) are text"]
    scored = answers_match(extracted, gold)
    if record["correct"] != scored:
        return [f"correct is {record['correct']}, but the extracted answer {extracted!r} scored against the gold "
                f"answer {gold!r} is {'right' if scored else 'wrong'}"]
    return []


def sample_file_problems(path: Path, line_ref: str, n: int, n_correct: int) -> list[str]:
    """What is wrong with one per-problem file, compared with its evaluation line (``line_ref`` names it)."""
    if not path.is_file():
        return [f"{path}: missing ({line_ref} evaluated this step)"]
    records, bad = scan_jsonl(path)
    messages = [f"{path}: line {i}: {problem}" for i, problem in bad]
    ids: dict[str | int, int] = {}
    correct = 0
    for i, rec in records:
        if not isinstance(rec, dict) or not isinstance(rec.get("correct"), bool):
            got = rec.get("correct") if isinstance(rec, dict) else rec
            messages.append(f"{path}: line {i}: correct is {got!r}, not true or false")
            continue
        if "gold" in rec or "extracted" in rec:
            messages += [f"{path}: line {i}: {m}" for m in rescoring_problems(rec)]
        problem_id = rec.get("id")
        if not isinstance(problem_id, (str, int)) or isinstance(problem_id, bool):
            messages.append(f"{path}: line {i}: problem id is {problem_id!r}, not a string")
        elif problem_id in ids:
            messages.append(f"{path}: line {i}: problem id {problem_id!r} is also on line {ids[problem_id]}")
        else:
            ids[problem_id] = i
        correct += rec["correct"]
    if len(records) + len(bad) != n:
        messages.append(f"{path}: {len(records) + len(bad)} records, but {line_ref} says n = {n}")
    elif not messages and correct != n_correct:
        messages.append(f"{path}: {correct} correct, but {line_ref} says n_correct = {n_correct}")
    return messages


def _read_evals(files: RunDir, schedule: set[int] | None,
                trained_to: int | None) -> tuple[list[dict], list[str], list[str]]:
    """The usable evaluation lines of a folder, every problem with them and their per-problem files, and the
    problems that are a moment of a run being written.

    The writer writes a step's per-problem file, then its line (``RunDir.log_eval``): the files are listed
    first and ``eval.jsonl`` read once after, so every line read names a file already listed. A file newer
    than every line is one whose line is being written: a fault only in a complete run.
    """
    wrong = []
    try:
        on_disk = files.sample_files()
    except ValueError as error:  # two names for one step's file
        on_disk = {}
        wrong.append(str(error))
    path = files.eval_path
    lines, messages, appending, records = _read_log(path, EVAL_KEYS[1:], required=EVAL_REQUIRED)
    # every step some line names, even a line left out above: that step is reported, not also missing
    named = [r.get("step") for _, r in records if isinstance(r, dict)]
    lines, checked = check_evals(path, lines, schedule, trained_to, named)
    messages += wrong + checked
    for i, rec in lines:
        messages += sample_file_problems(files.samples_path(rec["step"]), f"{path} line {i}", rec["n"],
                                         rec["n_correct"])
    # a file is an orphan only when no line names its step, even one left out above
    orphans = {s: f"{p}: no line of {path.name} evaluates step {s}" for s, p in on_disk.items() if s not in set(named)}
    newest = [s for s in on_disk if s > max((s for s in named if isinstance(s, int)), default=-1)][-1:]
    messages += [m for s, m in orphans.items() if s not in newest]
    unfinished = appending + [orphans[s] for s in newest if s in orphans]
    return [rec for _, rec in lines], messages, unfinished


#: A run id made by ``saah_lib.training.config.default_run_id``: ``<profile>-<method>-a<alpha>-s<seed>[-w<N>]``.
_DEFAULT_RUN_ID = re.compile(rf"(?P<profile>.+)-(?P<method>{'|'.join(METHODS)})-a(?P<alpha>[-+.0-9e]+)"
                             r"-s(?P<seed>\d+)(?:-w\d+)?(?:-[A-Za-z0-9_.+=-]+)?")  # then a variant's suffix


def identity_problems(run_dir: Path, cfg: dict) -> list[str]:
    """Where a run's config contradicts its folder's name (its run id) or a run id in the default form (which
    names the method, alpha and seed; a custom run id names nothing to compare)."""
    config_path = run_dir / layout.CONFIG_FILE
    messages = []
    if cfg.get("run_id") != run_dir.name:
        messages.append(f"{run_dir}: the folder's name is not its config's run id {cfg.get('run_id')!r} "
                        f"({config_path}); a run folder is named after its run")
    alpha = cfg.get("alpha")
    has = {"method": str(cfg.get("method")), "alpha": f"{alpha:g}" if _is_number(alpha) else str(alpha),
           "seed": str(cfg.get("seed"))}
    for what, name in (("run id", cfg.get("run_id")), ("folder name", run_dir.name)):
        m = _DEFAULT_RUN_ID.fullmatch(str(name))
        wrong = [f"{k} {has[k]} (the {what} says {m[k]})" for k in has if m and has[k] != m[k]]
        if wrong:
            messages.append(f"{run_dir}: {config_path.name} contradicts the {what} {name!r}: " + ", ".join(wrong))
    return messages


def duplicate_runs(folders: list[RunFolder]) -> list[str]:
    """One message per folder that holds the same run (the same config run id) as another folder."""
    by_id: dict[str, list[Path]] = {}
    for folder in folders:
        if folder.config is not None:
            by_id.setdefault(folder.config["run_id"], []).append(folder.path)
    return [f"{path}: holds run {run_id!r}, as does {', '.join(str(p) for p in paths if p != path)}; a run is "
            "in one folder" for run_id, paths in by_id.items() if len(paths) > 1 for path in paths]


def _compile_fallback(path: Path) -> tuple[str | None, list[str]]:
    """The fallback line of a run's ``compile_health.json`` (:func:`recorded_fallback`), or the problem."""
    if not path.is_file():
        return None, []
    try:
        return recorded_fallback(json.loads(read_text(path))), []
    except (ValueError, TypeError, AttributeError) as err:
        return None, [f"{path}: not a compile-health record ({err})"]


def read_run_folder(run_dir: Path) -> RunFolder:
    """Everything in one run folder, with every problem recorded (never raises on bad content)."""
    run = RunDir(run_dir)
    cfg, damage = checked_config(run)
    folder = RunFolder(run.dir, None, damage=damage)
    if cfg is None:
        return folder
    cfg["run_id"] = cfg.get("run_id") or run_dir.name
    for key in META_COLUMNS:
        cfg.setdefault(key, None)
    folder.config = cfg
    folder.damage += identity_problems(run.dir, cfg)
    steps, every = cfg["max_steps"], cfg.get("eval_every")
    train, bad_steps, unfinished, _ = _read_log(run.train_log_path, TRAIN_LOG_KEYS[1:])
    train, wrong_steps = check_train_log(run.train_log_path, train, steps, cfg.get("max_completion_length"))
    folder.train_log = [rec for _, rec in train]
    logged = [r["step"] for r in folder.train_log]
    schedule = None
    if _is_int(every) and every >= 1:
        schedule = eval_schedule(steps, every)
    else:
        folder.damage.append(f"{run.config_path}: eval_every is {every!r}, not a positive integer, so the "
                             "evaluations cannot be checked against their schedule")
    # the training log read before the evaluations: the trainer writes a step's evaluation before its log line
    folder.evals, bad_evals, unfinished_evals = _read_evals(run, schedule, max(logged, default=None))
    entropies, bad_h, unfinished_h, _ = _read_log(run.token_entropy_path, (), required=("advantage",))
    for _, rec in entropies:
        h = rec.get("entropy_norm")
        if isinstance(h, list) and h and all(_is_number(x) for x in h):
            folder.token_entropies.append(rec)
        else:
            bad_h.append(f"{run.token_entropy_path}: step {rec['step']}: entropy_norm is not a list of numbers")
    folder.compile_fallback, bad_health = _compile_fallback(run.compile_health_path)
    folder.damage += bad_evals + bad_steps + wrong_steps + bad_h + bad_health
    evaluated = [r["step"] for r in folder.evals]
    complete = trained_and_evaluated(logged, evaluated, steps)
    if complete or folder.damage:  # nothing writes to a complete run, and a damaged one is no healthy moment
        folder.damage += unfinished_evals + unfinished + unfinished_h
    if not complete:
        reached = f"trained to step {max(logged)}" if logged else "no training step logged"
        evaluated_last = "evaluated" if steps in evaluated else "not evaluated"
        folder.incomplete = f"{run.dir}: incomplete: {reached} of {steps}, {evaluated_last} at step {steps}"
    return folder


def read_baseline_folder(folder_dir: Path) -> RunFolder:
    """A ``baselines/<name>/`` folder: its config and its one evaluation (step 0), with every problem recorded."""
    files = RunDir(folder_dir)
    cfg, damage = checked_config(files, required=())
    folder = RunFolder(files.dir, cfg, damage=damage)
    if cfg is not None:
        folder.evals, bad, unfinished = _read_evals(files, {0}, 0)
        folder.damage += bad + unfinished  # a baseline is read once written
    return folder


def _read_real_folder(reader, root: str | Path, kind: str, folder: Path) -> RunFolder:
    """``reader(folder)``, with every symbolic link in it as damage; a linked folder is excluded (it is
    another folder's content, which the manifest does not cover)."""
    for linked in (folder.parent, folder):
        if linked.is_symlink():
            return RunFolder(folder, None, damage=[layout.link_problem(linked)])
    read = reader(folder)
    read.damage += [layout.link_problem(link) for link in layout.symlinks(root, Path(kind) / folder.name)]
    return read


def read_folders(root: str | Path, kind: str = layout.RUNS,
                 tolerate_problems: bool = False) -> tuple[list[RunFolder], list[str]]:
    """The folders under ``<root>/runs`` (``kind="runs"``) or ``<root>/baselines``, and every problem.

    Raises :class:`DamagedResultsError` listing every problem, unless ``tolerate_problems``: then the usable
    folders (flagged where damaged or incomplete) come back with one message per problem, excluded ones too.
    """
    reader = read_run_folder if kind == layout.RUNS else read_baseline_folder
    everything = [_read_real_folder(reader, root, kind, p) for p in layout.folders(root, kind)]
    duplicates = duplicate_runs(everything) if kind == layout.RUNS else []
    for folder in everything:
        folder.damage += [m for m in duplicates if m.startswith(f"{folder.path}: ")]
    problems = [m for f in everything for m in f.problems]
    if problems and not tolerate_problems:
        listing = "\n".join(f"  - {m}" for m in problems)
        raise DamagedResultsError(
            f"{len(problems)} problem(s) in the {kind} under {root} (tolerate_problems=True reads them anyway: "
            f"damaged and incomplete runs flagged in every output, runs without a usable config left out):"
            f"\n{listing}")
    excluded = [f"{f.path}: excluded ({'; '.join(f.damage)})" for f in everything if f.excluded]
    flagged = [m for f in everything if not f.excluded for m in f.problems]
    return [f for f in everything if not f.excluded], flagged + excluded
