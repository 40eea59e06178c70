"""What a finished log must *mean*, beyond being valid JSON: the checks behind :mod:`saah_lab.rundir.reader`.

Each check takes the parsed lines of one file as ``[(line number, record)]`` and gives back the lines that may
be used (a line out of range or out of sequence never reaches a table) and one message per breach, naming the
file and line. ``train_log.jsonl``: steps 1, 2, 3, ... once each, in order, values in :data:`TRAIN_LOG_RANGES`.
``eval.jsonl``: each step once, in order, on the schedule, none missing, ``pass_at_1 = n_correct / n``.
``eval_samples/step_XXXX.jsonl``: ``n`` records with distinct ids, ``n_correct`` of them correct, each
``correct`` as its ``extracted`` answer scores against its ``gold``. In full: docs/results_layout.md.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from saah_lib.jsonio import scan_jsonl
from saah_lib.method.reward import COMPONENT_BOUNDS, MAX_TOTAL, MIN_TOTAL, answers_match
from saah_lib.rundir.layout import samples_file
from saah_lib.tasks.scoring import pass_at_1_ci

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


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


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


def check_samples(samples_dir: Path, eval_path: Path, lines: Lines, on_disk: Iterable[int],
                  evaluated: Iterable[int]) -> list[str]:
    """One message per breach between the evaluation lines and their per-problem files (``on_disk``: the steps
    with a file; a file is an orphan only when no line of ``eval.jsonl`` names its step: ``evaluated``)."""
    messages = []
    for i, rec in lines:
        path = samples_dir / samples_file(rec["step"])
        messages += sample_file_problems(path, f"{eval_path} line {i}", rec["n"], rec["n_correct"])
    named = set(evaluated)
    for step in sorted(set(on_disk) - named):
        messages.append(f"{samples_dir / samples_file(step)}: no line of {eval_path.name} evaluates step {step}")
    return messages
