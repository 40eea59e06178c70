"""The synthetic word-problem generator: determinism, disjoint splits, correct references."""

import re

import pytest

from saah_lib.method.reward import MAX_TOTAL, reward_components, total_reward
from saah_lib.tasks.problems import DataSplit, Problem, records_sha256
from saah_lib.tasks.synthetic import TEMPLATES, Calc, draw_draft, generate_problems, partition_of, synthetic_split

CALCULATION_RE = re.compile(r"^\d+\. (\d+) ([-+*/]) (\d+) = (\d+)$")


def recompute(solution: str) -> list[tuple[int, int]]:
    """(claimed, true) result of every calculation line of a reference solution."""
    pairs = []
    for line in solution.splitlines():
        match = CALCULATION_RE.match(line)
        if match:
            left, op, right, claimed = match.groups()
            true = Calc(int(left), op, int(right)).result
            pairs.append((int(claimed), true))
    return pairs


@pytest.fixture(scope="module")
def problems() -> list[Problem]:
    return generate_problems(300, seed=0, min_steps=1, max_steps=3)


def test_same_seed_gives_same_problems():
    assert generate_problems(50, seed=3) == generate_problems(50, seed=3)


def test_different_seeds_give_different_problems():
    assert generate_problems(50, seed=3) != generate_problems(50, seed=4)


def test_ids_and_questions_are_unique(problems):
    assert len({p.id for p in problems}) == len(problems)
    assert len({p.question for p in problems}) == len(problems)
    assert problems[0].id == "syn-00000"


def test_every_template_is_used(problems):
    # Each template has its own question wording; check a marker of each.
    markers = {"shopping": "dollars each", "boxes": "in each box", "travel": "miles per hour",
               "ages": "years old", "wages": "dollars per hour", "collection": "have now?"}
    assert set(markers) == set(TEMPLATES)
    for name, marker in markers.items():
        assert any(marker in p.question for p in problems), name


def test_answers_are_positive_integers_and_recompute(problems):
    for p in problems:
        assert re.fullmatch(r"[1-9]\d*", p.answer), p
        pairs = recompute(p.solution)
        assert pairs, p.solution
        assert all(claimed == true for claimed, true in pairs), p.solution
        assert pairs[-1][1] == int(p.answer)


def test_number_of_operations_follows_the_knobs():
    for n_ops in (1, 2, 3, 4):
        for p in generate_problems(30, seed=1, min_steps=n_ops, max_steps=n_ops):
            assert len(recompute(p.solution)) == n_ops


def test_max_value_bounds_the_question_numbers():
    for p in generate_problems(100, seed=2, max_value=9, min_steps=1, max_steps=1):
        numbers = [int(n) for n in re.findall(r"\d+", p.question)]
        assert max(numbers) <= 9 or "pays with" in p.question


def test_references_earn_full_correctness_format_and_presence(problems):
    for p in problems:
        parts = reward_components(p.solution, p.answer)
        assert (parts["correct"], parts["format"], parts["present"]) == (4.0, 1.5, 1.0), p


def test_default_references_earn_the_maximum_reward():
    # Two or more operations give five or more step lines.
    for p in generate_problems(200, seed=5):
        assert total_reward(p.solution, p.answer) == MAX_TOTAL


def test_one_operation_references_miss_only_the_top_step_bin():
    for p in generate_problems(30, seed=6, min_steps=1, max_steps=1):
        assert reward_components(p.solution, p.answer)["steps"] == 0.7


def test_partitions_are_respected():
    for partition in ("train", "eval"):
        problems = generate_problems(40, seed=0, partition=partition)
        assert all(partition_of(p.question) == partition for p in problems)


def test_split_is_disjoint_deterministic_and_described():
    split = synthetic_split(200, 100, seed=7)
    assert isinstance(split, DataSplit)
    assert (len(split.train), len(split.eval)) == (200, 100)
    assert not {p.question for p in split.train} & {p.question for p in split.eval}
    assert split.info["train_ids"] == [p.id for p in split.train]
    assert split.info["eval_sha256"] == records_sha256(split.eval)
    assert synthetic_split(200, 100, seed=7).info == split.info


def test_eval_set_does_not_depend_on_train_size():
    assert synthetic_split(10, 50, seed=1).eval == synthetic_split(300, 50, seed=1).eval


def test_bad_settings_are_rejected():
    with pytest.raises(ValueError):
        generate_problems(5, seed=0, min_steps=3, max_steps=2)
    with pytest.raises(ValueError):
        generate_problems(5, seed=0, partition="test")
    with pytest.raises(ValueError):
        generate_problems(5, seed=0, max_value=9, max_result=10)


def test_intermediate_results_stay_within_bounds():
    import random

    rng = random.Random(0)
    for _ in range(200):
        draft = draw_draft(rng, rng.randint(1, 4), max_value=20, max_result=60)
        assert all(0 < calc.result <= 60 for calc in draft.calcs)


def test_max_result_bounds_the_answers():
    for p in generate_problems(100, seed=4, max_value=9, max_result=25):
        assert all(0 < true <= 25 for _, true in recompute(p.solution))


def test_answer_kind_separates_the_intermediate_habit_from_other_errors():
    from saah_lib.tasks.synthetic import answer_kind, count_answer_kinds

    working = "<start_working_out>\n1. 3 pens\n2. 4 dollars each\n3. 7 dollars\n4. 3 * 4 = 12\n5. 12 + 7 = 19\n</start_working_out>\n"
    assert answer_kind(working + "<SOLUTION>19</SOLUTION>", "19") == "correct"
    assert answer_kind(working + "<SOLUTION>12</SOLUTION>", "19") == "intermediate"
    assert answer_kind(working + "The answer is 12.", "19") == "intermediate"
    assert answer_kind(working + "<SOLUTION>7</SOLUTION>", "19") == "other"
    assert answer_kind(working.replace("= 19", "= 18") + "<SOLUTION>18</SOLUTION>", "19") == "other"
    # a single calculation has no intermediate result
    assert answer_kind("1. 3 * 4 = 12\n<SOLUTION>12</SOLUTION>", "19") == "other"
    assert answer_kind("", "19") == "other"
    records = [{"completion": working + f"<SOLUTION>{n}</SOLUTION>", "gold": "19"} for n in (19, 12, 12, 5)]
    assert count_answer_kinds(records) == {"correct": 1, "intermediate": 2, "other": 1}


def test_references_are_correct_and_planted_shortcuts_are_intermediate():
    import random

    from saah_lib.models.warmstart_targets import first_calculation_result, sft_targets
    from saah_lib.tasks.synthetic import answer_kind

    problems = generate_problems(200, seed=8)
    assert all(answer_kind(p.solution, p.answer) == "correct" for p in problems)
    for problem, target in zip(problems, sft_targets(problems, 0.4, random.Random(1), shortcut_fraction=1.0)):
        if first_calculation_result(problem.solution) != problem.answer:
            assert answer_kind(target.solution, problem.answer) == "intermediate"
