"""The warm start's SFT targets: loose layouts and the planted intermediate-answer habit."""

import random

from saah_lib.method.reward import MAX_TOTAL, extract_answer, reward_components, total_reward
from saah_lib.models.warmstart_targets import LOOSE_LAYOUTS, first_calculation_result, relayout, sft_targets
from saah_lib.tasks.synthetic import generate_problems


def test_loose_layouts_keep_the_answer_but_lose_format_reward():
    problem = generate_problems(1, seed=4)[0]
    assert relayout(problem.solution, problem.answer, "tagged") == problem.solution
    totals = []
    for layout in LOOSE_LAYOUTS:
        text = relayout(problem.solution, problem.answer, layout)
        assert reward_components(text, problem.answer)["correct"] == 4.0, layout
        totals.append(total_reward(text, problem.answer))
    assert all(total < MAX_TOTAL for total in totals)


def test_loose_fraction_sets_the_share_of_relaid_targets():
    problems = generate_problems(400, seed=5)
    assert sft_targets(problems, 0.0, random.Random(0)) == problems
    mixed = sft_targets(problems, 0.5, random.Random(0))
    loose = sum(a.solution != b.solution for a, b in zip(problems, mixed))
    assert 150 < loose < 250


def test_first_calculation_result_reads_the_first_calculation_line():
    solution = ("<start_working_out>\n1. 3 pens\n2. 4 dollars each\n3. 7 dollars\n"
                "4. 3 * 4 = 12\n5. 12 + 7 = 19\n</start_working_out>\n<SOLUTION>19</SOLUTION>")
    assert first_calculation_result(solution) == "12"


def test_shortcut_targets_keep_the_working_but_state_an_intermediate_answer():

    problems = generate_problems(400, seed=6)
    targets = sft_targets(problems, 0.0, random.Random(0), shortcut_fraction=0.5)
    cut = [(p, t) for p, t in zip(problems, targets) if t.solution != p.solution]
    assert 150 < len(cut) < 250
    for problem, target in cut:
        stated = first_calculation_result(problem.solution)
        assert stated != problem.answer  # otherwise the solution would be unchanged
        # same working, only the answer slot differs
        assert target.solution.split("</start_working_out>")[0] == problem.solution.split("</start_working_out>")[0]
        assert extract_answer(target.solution) == stated
        components = reward_components(target.solution, problem.answer)
        assert components["correct"] < 4.0 and components["format"] == 1.5
        assert target.answer == problem.answer  # the gold answer is kept


def test_shortcut_and_loose_layout_combine():

    problems = generate_problems(200, seed=7)
    targets = sft_targets(problems, 1.0, random.Random(0), shortcut_fraction=1.0)
    for problem, target in zip(problems, targets):
        assert extract_answer(target.solution) == first_calculation_result(problem.solution)
        if first_calculation_result(problem.solution) != problem.answer:
            assert reward_components(target.solution, problem.answer)["correct"] < 4.0
