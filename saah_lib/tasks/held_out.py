"""Evaluation problems held out by content, not only by text.

The synthetic generator's hash partition (:func:`saah_lib.tasks.synthetic.partition_of`) keeps question
texts apart, but the same story with the same numbers and other names is another text, and so is another
story with the same calculations. Two keys of a problem catch both:

* :func:`content_key`, its template and numbers: the question with every name, pronoun, item, thing and
  vehicle of the generator's vocabulary masked. It is read from the question, not from the reference, because
  the question is all every problem carries unchanged (warm-up targets rewrite the reference's layout).
* its calculation chain (:func:`saah_lib.tasks.synthetic.calculation_chain` of the reference): the
  ``a op b = r`` lines in order, which the warm-up's rewrites keep. A problem without one (a reference in
  another format) is compared by its content key only.

:func:`check_held_out_by_content` refuses an evaluation set sharing either key with any other set.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from saah_lib.tasks.problems import Problem
from saah_lib.tasks.synthetic import ITEMS, NAMES, THINGS, VEHICLES, calculation_chain

TEMPLATE_AND_NUMBERS = "template and numbers"
CALCULATION_CHAIN = "calculation chain"
SHOWN = 5  # overlaps an error names

_MASKS = {**dict.fromkeys(NAMES, "<name>"), **dict.fromkeys(("He", "She", "he", "she"), "<pronoun>"),
          **dict.fromkeys(ITEMS, "<items>"), **dict.fromkeys(THINGS, "<thing>"),
          **dict.fromkeys(VEHICLES, "<vehicle>")}
_MASKED_WORDS = re.compile(r"\b(" + "|".join(sorted(_MASKS, key=len, reverse=True)) + r")\b")


class NotHeldOutError(ValueError):
    """An evaluation problem shares its template and numbers, or its calculation chain, with another set."""


@dataclass(frozen=True)
class Overlap:
    evaluation: Problem
    other_set: str
    other: Problem
    shared: str  # TEMPLATE_AND_NUMBERS or CALCULATION_CHAIN
    key: str

    def __str__(self) -> str:
        return (f"{self.evaluation.id} has the {self.shared} of {self.other_set} problem {self.other.id} "
                f"({self.key!r})")


def content_key(problem: Problem) -> str:
    """The question with names, pronouns, items, things and vehicles masked: its template and numbers."""
    return _MASKED_WORDS.sub(lambda match: _MASKS[match.group(1)], problem.question)


def _keys(problem: Problem) -> dict[str, str]:
    keys = {TEMPLATE_AND_NUMBERS: content_key(problem), CALCULATION_CHAIN: calculation_chain(problem.solution)}
    return {kind: key for kind, key in keys.items() if key}


def content_overlaps(evaluation: list[Problem], **others: list[Problem]) -> list[Overlap]:
    """Every (evaluation problem, other set, kind of key) where the problem shares that key with a problem
    of that set (the first one of the set, as its overlap). One with the same template and numbers has the
    same chain too, so it counts under both kinds."""
    overlaps = []
    for name, problems in others.items():
        index: dict[tuple[str, str], Problem] = {}
        for problem in problems:
            for kind, key in _keys(problem).items():
                index.setdefault((kind, key), problem)
        for problem in evaluation:
            overlaps += [Overlap(problem, name, index[kind, key], kind, key)
                         for kind, key in _keys(problem).items() if (kind, key) in index]
    return overlaps


def overlap_counts(overlaps: list[Overlap]) -> dict[str, dict[str, int]]:
    """Evaluation problems overlapping each set, by kind of key: {set: {kind: count}}."""
    counts: dict[str, dict[str, int]] = {}
    for overlap in overlaps:
        by_kind = counts.setdefault(overlap.other_set, dict.fromkeys((TEMPLATE_AND_NUMBERS, CALCULATION_CHAIN), 0))
        by_kind[overlap.shared] += 1
    return counts


def check_held_out_by_content(evaluation: list[Problem], **others: list[Problem]) -> dict[str, int]:
    """The number of problems compared in each set when no evaluation problem shares its template and numbers
    or its calculation chain with a problem of ``others`` (named sets, e.g. ``warm_up=..., train=...``);
    else :class:`NotHeldOutError` naming the counts and the first overlaps."""
    overlaps = content_overlaps(evaluation, **others)
    if overlaps:
        offending = len({overlap.evaluation.id for overlap in overlaps})
        counts = "; ".join(f"{name}: {', '.join(f'{n} by {kind}' for kind, n in by_kind.items())}"
                           for name, by_kind in overlap_counts(overlaps).items())
        shown = "\n  ".join(str(overlap) for overlap in overlaps[:SHOWN])
        raise NotHeldOutError(f"{offending} of {len(evaluation)} evaluation problems are not held out by content "
                              f"({counts}); the first {min(SHOWN, len(overlaps))} of {len(overlaps)}:\n  {shown}")
    return {"evaluation": len(evaluation), **{name: len(problems) for name, problems in others.items()}}
