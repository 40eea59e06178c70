"""Synthetic GSM8K-like word problems for CPU-sized experiments.

Each problem is a short story ("Mia buys 3 pens for 4 dollars each ...") whose answer takes a few integer operations
(+, -, *, exact /). Six templates (shopping, boxes, travel, ages, wages, a gain/loss chain) vary names, items and
numbers. Difficulty knobs: ``min_steps``/``max_steps`` (operations per problem; above 3 only the chain template
applies), ``max_value`` (numbers a story starts from) and ``max_result`` (cap on every intermediate result). The
defaults (2-3 operations, numbers up to 9, results up to 20) are sized for a two-layer model that learns them on a
CPU: with larger results the warm start's arithmetic slips would bury any gain GRPO made elsewhere.

A reference solution (:func:`tagged_solution`) lists the numbers given in the question, then one calculation per line,
in the project's tagged format; with ``min_steps >= 2`` every reference earns the maximum reward. Train and evaluation
problems never share a question: every question text falls, by its hash, into exactly one of the two partitions
(:func:`partition_of`), whatever the seed; ``held_out_by="chain"`` hashes the calculations instead, held out by
content (:mod:`saah_lib.tasks.held_out`).
"""

from __future__ import annotations

import hashlib
import random
import re
from dataclasses import dataclass
from typing import Callable

from saah_lib.method.reward import (
    SOLUTION_CLOSE,
    SOLUTION_OPEN,
    WORKING_CLOSE,
    WORKING_OPEN,
    answers_match,
    extract_answer,
)
from saah_lib.tasks.problems import DataSplit, Problem

GENERATOR_VERSION = "synthetic-v1"
PARTITIONS = ("train", "eval")
#: what a partition is a hash of: the question's text (the committed studies) or its calculation chain
HELD_OUT_BY = ("question", "chain")
# One question in EVAL_BUCKETS is reserved for evaluation.
EVAL_BUCKETS = 4
DEFAULT_MIN_STEPS = 2
DEFAULT_MAX_STEPS = 3
DEFAULT_MAX_VALUE = 9
DEFAULT_MAX_RESULT = 20
_TRIES_PER_TEMPLATE = 200

NAMES = {
    "Mia": "She", "Ava": "She", "Lily": "She", "Emma": "She", "Zoe": "She", "Nora": "She",
    "Sara": "She", "Lena": "She", "Tom": "He", "Sam": "He", "Ben": "He", "Leo": "He",
    "Max": "He", "Jack": "He", "Omar": "He", "Ryan": "He",
}
ITEMS = ["apples", "pens", "books", "cards", "stickers", "marbles", "cookies", "shells",
         "stamps", "candies", "toys", "eggs"]
THINGS = ["bag", "hat", "ball", "lamp", "cup", "game"]
VEHICLES = ["car", "bus", "train", "truck", "bike", "boat"]
GAINS = ["buys {x} more", "finds {x} more", "gets {x} more from {other}"]
LOSSES = ["gives {x} to {other}", "loses {x}", "sells {x}"]


@dataclass(frozen=True)
class Calc:
    """One integer operation ``left op right``; division is always exact."""

    left: int
    op: str
    right: int

    @property
    def result(self) -> int:
        if self.op == "+":
            return self.left + self.right
        if self.op == "-":
            return self.left - self.right
        if self.op == "*":
            return self.left * self.right
        quotient, remainder = divmod(self.left, self.right)
        assert remainder == 0, "divisions are generated exact"
        return quotient

    def text(self) -> str:
        return f"{self.left} {self.op} {self.right} = {self.result}"


@dataclass(frozen=True)
class Draft:
    """A problem before it gets an id: question, given numbers, and the calculations."""

    question: str
    facts: tuple[tuple[int, str], ...]  # (number, short label) in question order
    calcs: tuple[Calc, ...]

    @property
    def answer(self) -> int:
        return self.calcs[-1].result

    def is_valid(self, max_result: int) -> bool:
        """Every intermediate result is a positive integer no larger than ``max_result``."""
        return all(0 < calc.result <= max_result for calc in self.calcs)


class _Story:
    """Random choices shared by all templates (names, pronouns, numbers)."""

    def __init__(self, rng: random.Random, max_value: int):
        self.rng = rng
        self.max_value = max_value
        self.name, self.other = rng.sample(sorted(NAMES), 2)
        self.pronoun = NAMES[self.name]

    def number(self, low: int = 2, high: int | None = None) -> int:
        return self.rng.randint(low, max(low, high or self.max_value))

    def factor(self) -> int:
        """A small multiplier or divisor: the tiny model can learn its tables."""
        return self.rng.randint(2, 9)

    def pick(self, options):
        return self.rng.choice(options)


def _shopping(story: _Story, n_ops: int) -> Draft | None:
    """quantity * price (+ extra item) (bill - total)."""
    items, thing = story.pick(ITEMS), story.pick(THINGS)
    quantity, price = story.factor(), story.number()
    he = story.pronoun
    sentences = [f"{story.name} buys {quantity} {items} for {price} dollars each."]
    facts = [(quantity, items), (price, "dollars each")]
    calcs = [Calc(quantity, "*", price)]
    if n_ops >= 2:
        extra = story.number(1)
        sentences.append(f"{he} also buys a {thing} for {extra} dollars.")
        facts.append((extra, "dollars"))
        calcs.append(Calc(calcs[-1].result, "+", extra))
    if n_ops >= 3:
        bill = (calcs[-1].result // 10 + 1) * 10 + 10 * story.rng.randint(0, 2)
        sentences.append(f"{he} pays with {bill} dollars. How much change does {he.lower()} get?")
        facts.append((bill, "dollars paid"))
        calcs.append(Calc(bill, "-", calcs[-1].result))
    else:
        sentences.append(f"How much does {he.lower()} spend in dollars?")
    return Draft(" ".join(sentences), tuple(facts), tuple(calcs))


def _boxes(story: _Story, n_ops: int) -> Draft | None:
    """boxes * per box (+ found) (/ friends)."""
    items, he = story.pick(ITEMS), story.pronoun
    boxes, per_box = story.factor(), story.number()
    sentences = [f"{story.name} has {boxes} boxes with {per_box} {items} in each box."]
    facts = [(boxes, "boxes"), (per_box, f"{items} each")]
    calcs = [Calc(boxes, "*", per_box)]
    # With two operations, either add found items or share; with three, both.
    add_found = n_ops == 3 or (n_ops == 2 and story.rng.random() < 0.5)
    share = n_ops == 3 or (n_ops == 2 and not add_found)
    friends = story.factor()
    if add_found:
        # Choose the found count so that the later division comes out exact.
        candidates = [x for x in range(1, story.max_value + 1)
                      if not share or (calcs[-1].result + x) % friends == 0]
        found = story.pick(candidates) if candidates else None
        if found is None:
            return None
        sentences.append(f"{he} finds {found} more {items}.")
        facts.append((found, items))
        calcs.append(Calc(calcs[-1].result, "+", found))
    if share:
        if calcs[-1].result % friends:
            return None
        sentences.append(f"{he} shares them equally among {friends} friends. "
                         f"How many {items} does each friend get?")
        facts.append((friends, "friends"))
        calcs.append(Calc(calcs[-1].result, "/", friends))
    else:
        sentences.append(f"How many {items} does {he.lower()} have?")
    return Draft(" ".join(sentences), tuple(facts), tuple(calcs))


def _travel(story: _Story, n_ops: int) -> Draft | None:
    """speed * hours, then either (+ more miles) or (+ speed2 * hours2)."""
    vehicle = story.pick(VEHICLES)
    speed, hours = story.number(), story.factor()
    sentences = [f"A {vehicle} goes {speed} miles per hour for {hours} hours."]
    facts = [(speed, "miles per hour"), (hours, "hours")]
    calcs = [Calc(speed, "*", hours)]
    if n_ops == 2:
        more = story.number(1)
        sentences.append(f"Then it goes {more} more miles.")
        facts.append((more, "miles"))
        calcs.append(Calc(calcs[-1].result, "+", more))
    if n_ops == 3:
        speed2, hours2 = story.number(), story.factor()
        sentences.append(f"Then it goes {speed2} miles per hour for {hours2} hours.")
        facts += [(speed2, "miles per hour"), (hours2, "hours")]
        first = calcs[-1].result
        calcs.append(Calc(speed2, "*", hours2))
        calcs.append(Calc(first, "+", calcs[-1].result))
    sentences.append("How many miles does it go in total?")
    return Draft(" ".join(sentences), tuple(facts), tuple(calcs))


def _ages(story: _Story, n_ops: int) -> Draft | None:
    """age +/- gap (* factor) (+ years later)."""
    third = story.pick([n for n in sorted(NAMES) if n not in (story.name, story.other)])
    age, gap = story.number(), story.number(1)
    older = story.rng.random() < 0.5 or gap >= age
    relation = "older" if older else "younger"
    sentences = [f"{story.name} is {age} years old. {story.other} is {gap} years {relation} "
                 f"than {story.name}."]
    facts = [(age, "years old"), (gap, f"years {relation}")]
    calcs = [Calc(age, "+" if older else "-", gap)]
    subject = story.other
    if n_ops >= 2:
        times = story.factor()
        sentences.append(f"{third} is {times} times as old as {story.other}.")
        facts.append((times, "times"))
        calcs.append(Calc(calcs[-1].result, "*", times))
        subject = third
    if n_ops >= 3:
        later = story.number(1)
        sentences.append(f"How old will {subject} be in {later} years?")
        facts.append((later, "years"))
        calcs.append(Calc(calcs[-1].result, "+", later))
    else:
        sentences.append(f"How old is {subject}?")
    return Draft(" ".join(sentences), tuple(facts), tuple(calcs))


def _wages(story: _Story, n_ops: int) -> Draft | None:
    """(hours + hours2) * rate (- spent)."""
    he, rate = story.pronoun, story.number()
    sentences = [f"{story.name} earns {rate} dollars per hour."]
    facts = [(rate, "dollars per hour")]
    hours = story.factor()
    if n_ops == 1:
        sentences.append(f"{he} works {hours} hours.")
        facts.append((hours, "hours"))
        calcs = [Calc(hours, "*", rate)]
    else:
        hours2 = story.factor()
        sentences.append(f"{he} works {hours} hours on Monday and {hours2} hours on Tuesday.")
        facts += [(hours, "hours"), (hours2, "hours")]
        calcs = [Calc(hours, "+", hours2), Calc(hours + hours2, "*", rate)]
    if n_ops == 3:
        thing = story.pick(THINGS)
        spent = story.number(1, calcs[-1].result - 1)
        sentences.append(f"{he} spends {spent} dollars on a {thing}. "
                         f"How much money does {he.lower()} have left?")
        facts.append((spent, "dollars"))
        calcs.append(Calc(calcs[-1].result, "-", spent))
    else:
        sentences.append(f"How much does {he.lower()} earn in dollars?")
    return Draft(" ".join(sentences), tuple(facts), tuple(calcs))


def _collection(story: _Story, n_ops: int) -> Draft:
    """start, then n_ops gains and losses; works for any number of operations."""
    items, he = story.pick(ITEMS), story.pronoun
    count = story.number()
    sentences = [f"{story.name} has {count} {items}."]
    facts = [(count, items)]
    calcs = []
    for _ in range(n_ops):
        gain = count < 2 or story.rng.random() < 0.5
        amount = story.number(1) if gain else story.number(1, count - 1)
        event = story.pick(GAINS if gain else LOSSES).format(x=amount, other=story.other)
        sentences.append(f"{he} {event}.")
        facts.append((amount, items))
        calcs.append(Calc(count, "+" if gain else "-", amount))
        count = calcs[-1].result
    sentences.append(f"How many {items} does {story.name} have now?")
    return Draft(" ".join(sentences), tuple(facts), tuple(calcs))


#: Each template makes a Draft with exactly n_ops calculations, or None when its numbers do not fit; only the
#: gain/loss chain (``collection``) makes more than 3 (:data:`CHAIN_TEMPLATE`).
TEMPLATES: dict[str, Callable[[_Story, int], Draft | None]] = {
    "shopping": _shopping,
    "boxes": _boxes,
    "travel": _travel,
    "ages": _ages,
    "wages": _wages,
    "collection": _collection,
}
CHAIN_TEMPLATE = "collection"


def tagged_solution(draft: Draft) -> str:
    """The tagged completion that solves ``draft``: given numbers, then calculations::

        <start_working_out>
        1. 3 pens
        2. 4 dollars each
        3. 7 dollars
        4. 3 * 4 = 12
        5. 12 + 7 = 19
        </start_working_out>
        <SOLUTION>19</SOLUTION>

    Listing the given numbers is what makes a 2-operation problem reach the five step lines that earn
    the full step reward, so with ``min_steps >= 2`` every reference scores the maximum 7.5 and padding
    with extra lines earns nothing (a 1-operation reference has three step lines and scores 7.2).
    """
    lines = [f"{value} {label}" for value, label in draft.facts]
    lines += [calc.text() for calc in draft.calcs]
    # "1." enumerators: each line counts as a step, at two tokens a line.
    steps = "\n".join(f"{i}. {line}" for i, line in enumerate(lines, start=1))
    return (f"{WORKING_OPEN}\n{steps}\n{WORKING_CLOSE}\n"
            f"{SOLUTION_OPEN}{draft.answer}{SOLUTION_CLOSE}")


def partition_of(question: str) -> str:
    """"eval" for one question in EVAL_BUCKETS (by hash of its text), else "train"."""
    bucket = hashlib.sha256(question.encode("utf-8")).digest()[0] % EVAL_BUCKETS
    return "eval" if bucket == 0 else "train"


def draft_chain(draft: Draft) -> str:
    """The calculation chain of ``draft``, as :func:`calculation_chain` reads it from its reference."""
    return "; ".join(calc.text() for calc in draft.calcs)


def draw_draft(rng: random.Random, n_ops: int, max_value: int, max_result: int) -> Draft:
    """One valid random problem with exactly n_ops operations.

    The template is drawn first and then retried until its numbers fit, so
    templates whose numbers rarely fit are not crowded out by easier ones.
    """
    names = sorted(TEMPLATES)
    rng.shuffle(names)
    for name in names:
        for _ in range(_TRIES_PER_TEMPLATE):
            story = _Story(rng, max_value)  # drawn even for a template that cannot make n_ops: the committed draws
            draft = TEMPLATES[name](story, n_ops) if n_ops <= 3 or name == CHAIN_TEMPLATE else None
            if draft is None:
                break  # this template cannot make n_ops operations
            if draft.is_valid(max_result):
                return draft
    raise ValueError(f"no template fits {n_ops} operations with max_value={max_value}, "
                     f"max_result={max_result}")


def _check_settings(min_steps: int, max_steps: int, max_value: int, max_result: int) -> None:
    if not 1 <= min_steps <= max_steps:
        raise ValueError(f"need 1 <= min_steps <= max_steps, got {min_steps}, {max_steps}")
    if max_value < 5:
        raise ValueError(f"max_value must be at least 5, got {max_value}")
    if max_result < 2 * max_value:
        raise ValueError(f"max_result must be at least 2 * max_value, got {max_result}")


def generate_problems(n: int, seed: int, *, min_steps: int = DEFAULT_MIN_STEPS, max_steps: int = DEFAULT_MAX_STEPS,
                      max_value: int = DEFAULT_MAX_VALUE, max_result: int = DEFAULT_MAX_RESULT, id_prefix: str = "syn",
                      partition: str | None = None, held_out_by: str = "question") -> list[Problem]:
    """``n`` distinct problems, the same list for the same arguments.

    ``min_steps``/``max_steps`` bound the number of operations per problem. ``max_value`` bounds the numbers a
    story starts from (multipliers and divisors stay in 2..9 whatever it is); numbers derived from earlier ones,
    such as a bill or an amount given away, may be larger.  ``max_result`` bounds every intermediate result and
    so the answer.  ``partition`` ("train" or "eval") keeps only problems of that hash partition; None keeps
    all.  ``held_out_by`` says what the partition hashes: the question (:func:`partition_of`, what the committed
    studies drew) or the calculation chain (:func:`partition_of` of :func:`draft_chain`, held out by content).
    Ids are ``{id_prefix}-00000``, ``{id_prefix}-00001``, ...
    """
    _check_settings(min_steps, max_steps, max_value, max_result)
    if partition not in (None, *PARTITIONS):
        raise ValueError(f"partition must be None or one of {PARTITIONS}, got {partition!r}")
    if held_out_by not in HELD_OUT_BY:
        raise ValueError(f"held_out_by must be one of {HELD_OUT_BY}, got {held_out_by!r}")
    # A string seed names an independent stream per partition.
    rng = random.Random(f"{GENERATOR_VERSION}:{seed}:{partition}")
    key = (lambda draft: partition_of(draft.question)) if held_out_by == "question" else \
        (lambda draft: partition_of(draft_chain(draft)))
    problems: list[Problem] = []
    seen: set[str] = set()
    while len(problems) < n:
        draft = draw_draft(rng, rng.randint(min_steps, max_steps), max_value, max_result)
        if draft.question in seen:
            continue
        if partition is not None and key(draft) != partition:
            continue
        seen.add(draft.question)
        problems.append(Problem(id=f"{id_prefix}-{len(problems):05d}", question=draft.question,
                                answer=str(draft.answer), solution=tagged_solution(draft)))
    return problems


def synthetic_split(n_train: int, n_eval: int, seed: int = 0, *, min_steps: int = DEFAULT_MIN_STEPS,
                    max_steps: int = DEFAULT_MAX_STEPS, max_value: int = DEFAULT_MAX_VALUE,
                    max_result: int = DEFAULT_MAX_RESULT, held_out_by: str = "question") -> DataSplit:
    """Train and eval problems from disjoint hash partitions (of ``held_out_by``), with provenance in ``info``."""
    settings = dict(min_steps=min_steps, max_steps=max_steps, max_value=max_value,
                    max_result=max_result, held_out_by=held_out_by)
    train = generate_problems(n_train, seed, id_prefix="syn-train", partition="train", **settings)
    evaluation = generate_problems(n_eval, seed, id_prefix="syn-eval", partition="eval", **settings)
    source = (f"{GENERATOR_VERSION}:min_steps={min_steps},max_steps={max_steps},"
              f"max_value={max_value},max_result={max_result}")
    # The committed studies' source string stays as it was; a split by chain says so.
    source += "" if held_out_by == "question" else f",held_out_by={held_out_by}"
    return DataSplit.with_provenance(train, evaluation, source=source, seed=seed)


_CALCULATION = re.compile(r"(-?\d+) ([-+*/]) (-?\d+) = (-?\d+)")
ANSWER_KINDS = ("correct", "intermediate", "other")


def calculation_results(text: str) -> list[str]:
    """The results of the ``a op b = r`` calculations in ``text``, in order."""
    return [match.group(4) for match in _CALCULATION.finditer(text)]


def calculation_chain(text: str) -> str:
    """The ``a op b = r`` calculations in ``text``, in order, joined by "; " ("" when none): a reference's
    chain, which the warm-up's layouts and shortcut answers leave as it was."""
    return "; ".join(match.group(0) for match in _CALCULATION.finditer(text))


def answer_kind(completion: str, gold: str) -> str:
    """One of ANSWER_KINDS for a completion.

    "intermediate": the stated answer is wrong and equals the completion's own first calculation result rather than
    its last (the habit the tiny warm start is taught, see ``saah_lib.models.warmstart_targets.sft_targets``);
    "other": any other wrong or missing answer (arithmetic slips, wrong plan, no number).
    """
    stated = extract_answer(completion)
    if answers_match(stated, gold):
        return "correct"
    results = calculation_results(completion)
    if len(results) >= 2 and results[0] != results[-1] and answers_match(stated, results[0]):
        return "intermediate"
    return "other"


def count_answer_kinds(records: list[dict]) -> dict[str, int]:
    """Counts of ``answer_kind`` over evaluation records (``completion`` and ``gold`` keys)."""
    counts = dict.fromkeys(ANSWER_KINDS, 0)
    for record in records:
        counts[answer_kind(record["completion"], record["gold"])] += 1
    return counts
