"""What the tiny model's supervised warm start is taught: reference solutions with two planted habits.

The warm start (:mod:`saah_lib.models.tiny`) is fine-tuned on these targets. Each habit costs reward and is
followed about half the time, so GRPO has something it can unlearn within a CPU-sized run:

* an intermediate result stated as the final answer (:func:`sft_targets`, ``shortcut_fraction``), which loses
  the correctness reward;
* a looser layout without some of the format's tags (:data:`LOOSE_LAYOUTS`, :func:`relayout`), which loses
  format reward.
"""

from __future__ import annotations

import random
from dataclasses import replace

from saah_lib.method.reward import SOLUTION_CLOSE, SOLUTION_OPEN, WORKING_CLOSE, WORKING_OPEN
from saah_lib.tasks.problems import Problem
from saah_lib.tasks.synthetic import calculation_results

# Layouts that keep the reasoning and the answer but drop tags, so a warm model sometimes answers the way an
# instruct model that half-follows the system prompt does.  Total reward of a correct answer in each layout: tagged
# 7.5, no working tags 6.5, no solution tags 5.5, plain 5.0.
LOOSE_LAYOUTS = ("no_working_tags", "no_solution_tags", "plain")
PLAIN_ANSWER = "The answer is {answer}."


def relayout(solution: str, answer: str, layout: str) -> str:
    """A tagged reference solution rewritten in one of LOOSE_LAYOUTS (or "tagged")."""
    if layout == "tagged":
        return solution
    working = solution.split(WORKING_OPEN, 1)[1].split(WORKING_CLOSE, 1)[0].strip("\n")
    tagged_answer = f"{SOLUTION_OPEN}{answer}{SOLUTION_CLOSE}"
    plain_answer = PLAIN_ANSWER.format(answer=answer)
    if layout == "no_working_tags":
        return f"{working}\n{tagged_answer}"
    if layout == "no_solution_tags":
        return f"{WORKING_OPEN}\n{working}\n{WORKING_CLOSE}\n{plain_answer}"
    if layout == "plain":
        return f"{working}\n{plain_answer}"
    raise ValueError(f"unknown layout {layout!r}")


def first_calculation_result(solution: str) -> str:
    """The result of the first calculation line of a tagged reference (an intermediate quantity)."""
    return calculation_results(solution)[0]


def sft_targets(problems: list[Problem], loose_fraction: float, rng: random.Random,
                shortcut_fraction: float = 0.0) -> list[Problem]:
    """The SFT targets: references with two habits planted at the given rates (``Problem.answer`` stays gold).

    ``shortcut_fraction``: complete, correct working, but the stated answer is the first calculation's result
    (a common GSM8K slip: answering a sub-question); it loses the correctness reward. ``loose_fraction``: one of
    LOOSE_LAYOUTS, as an instruct model that half-follows the format writes; it loses format reward.

    Why: trained on clean references alone, the warm start left GRPO only arithmetic slips to fix, which a
    minute of CPU training did not (Pass@1 flat over 60 steps, reward up through format alone). A habit followed
    about half the time gives groups a difference the reward ranks at one decision, which GRPO learns in tens
    of steps, and leaves the warm start's Pass@1 well below what its arithmetic allows.
    """
    targets = []
    for problem in problems:
        solution, stated = problem.solution, problem.answer
        if rng.random() < shortcut_fraction:
            stated = first_calculation_result(solution)
            solution = solution.replace(f"{SOLUTION_OPEN}{problem.answer}{SOLUTION_CLOSE}",
                                        f"{SOLUTION_OPEN}{stated}{SOLUTION_CLOSE}")
        layout = rng.choice(LOOSE_LAYOUTS) if rng.random() < loose_fraction else "tagged"
        targets.append(replace(problem, solution=relayout(solution, stated, layout)))
    return targets
