"""Evaluation problems held out by content: the check, its planted duplicates, and the partition by chain."""

import random
import re
from dataclasses import replace

import pytest

from saah_lib.tasks.held_out import (
    CALCULATION_CHAIN,
    TEMPLATE_AND_NUMBERS,
    NotHeldOutError,
    check_held_out_by_content,
    content_key,
    content_overlaps,
)
from saah_lib.tasks.synthetic import (
    ITEMS,
    NAMES,
    calculation_chain,
    draft_chain,
    draw_draft,
    generate_problems,
    partition_of,
    synthetic_split,
    tagged_solution,
)

_NAMES, _ITEMS = sorted(NAMES), sorted(ITEMS)


def renamed(question: str) -> str:
    """The same story and numbers with every name and item swapped for another one."""
    swap = {**{n: _NAMES[(i + 1) % len(_NAMES)] for i, n in enumerate(_NAMES)},
            **{w: _ITEMS[(i + 1) % len(_ITEMS)] for i, w in enumerate(_ITEMS)}}
    return re.sub(r"\b(" + "|".join(swap) + r")\b", lambda m: swap[m.group(1)], question)


@pytest.fixture(scope="module")
def split():
    """Realistic sizes, held out by chain: a warm-up of 480, 2,000 training and 500 evaluation problems."""
    return (synthetic_split(2000, 500, seed=123, held_out_by="chain"),
            generate_problems(480, 10_000, partition="train", id_prefix="sft", held_out_by="chain"))


def test_sets_held_out_by_chain_share_no_content_at_realistic_sizes(split):
    data, warm_up = split
    assert check_held_out_by_content(data.eval, warm_up=warm_up, train=data.train) == {
        "evaluation": 500, "warm_up": 480, "train": 2000}
    assert content_overlaps(data.eval, warm_up=warm_up, train=data.train) == []  # no false alarm
    assert data.info["source"].endswith(",held_out_by=chain")


def test_a_planted_duplicate_with_other_names_is_caught(split):
    data, warm_up = split
    original = next(p for p in data.train if re.search(r"\b(" + "|".join(NAMES) + r")\b", p.question))
    planted = replace(original, id="planted", question=renamed(original.question))
    assert planted.question != original.question and content_key(planted) == content_key(original)
    with pytest.raises(NotHeldOutError) as error:
        check_held_out_by_content([*data.eval, planted], warm_up=warm_up, train=data.train)
    message = str(error.value)
    assert message.startswith("1 of 501 evaluation problems are not held out by content")
    assert f"planted has the {TEMPLATE_AND_NUMBERS} of train problem {original.id}" in message
    assert f"planted has the {CALCULATION_CHAIN} of train problem" in message


def test_a_planted_duplicate_sharing_only_the_calculation_chain_is_caught(split):
    data, warm_up = split
    planted = replace(data.eval[0], id="planted", solution=warm_up[0].solution)
    with pytest.raises(NotHeldOutError, match=r"warm_up: 0 by template and numbers, 1 by calculation chain") as error:
        check_held_out_by_content([*data.eval, planted], warm_up=warm_up, train=data.train)
    assert f"planted has the {CALCULATION_CHAIN} of warm_up problem {warm_up[0].id}" in str(error.value)


def test_the_error_names_only_the_first_overlaps():
    problems = generate_problems(20, seed=1)
    with pytest.raises(NotHeldOutError, match=r"^20 of 20 .*the first 5 of 40:\n(  .*\n){4}  [^\n]*$"):
        check_held_out_by_content(problems, train=problems)


def test_a_problem_without_a_chain_is_compared_by_its_content_key_only():
    bare = generate_problems(3, seed=2, partition="eval")
    without = [replace(p, solution="") for p in bare]
    assert content_overlaps(without, train=[replace(p, question=renamed(p.question)) for p in bare]) != []
    assert content_overlaps(without, train=[replace(p, question="other") for p in bare]) == []


def test_the_chain_partition_reads_the_same_chain_from_a_draft_and_from_its_reference():
    rng = random.Random(0)
    for _ in range(200):
        draft = draw_draft(rng, rng.randint(1, 5), 12, 60)
        assert draft_chain(draft) == calculation_chain(tagged_solution(draft)) != ""
    for partition in ("train", "eval"):
        problems = generate_problems(40, seed=0, partition=partition, held_out_by="chain")
        assert all(partition_of(calculation_chain(p.solution)) == partition for p in problems)


def test_an_unknown_held_out_by_is_refused():
    with pytest.raises(ValueError, match="held_out_by must be one of"):
        generate_problems(1, seed=0, partition="eval", held_out_by="names")
