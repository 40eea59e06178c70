"""Scoring greedy completions: Pass@1, its 95% interval, and one record per problem.

A completion is correct when the number it states (:func:`saah_lib.method.reward.extract_answer`)
equals the gold answer exactly, the correctness reward's full-credit rule.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from saah_lib.method.reward import answers_match, extract_answer
from saah_lib.tasks.problems import Problem


def pass_at_1_ci(p, n):
    """Half-width of the 95% normal-approximation binomial interval.

    ``CI95 = 1.96 * sqrt(p * (1 - p) / n)`` (the paper's evaluation protocol).
    Works on scalars and arrays; ``n <= 0`` or missing values give NaN.
    """
    p_arr = np.asarray(p, dtype=float)
    n_arr = np.asarray(n, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        ci = 1.96 * np.sqrt(p_arr * (1.0 - p_arr) / n_arr)
    ci = np.where(n_arr > 0, ci, np.nan)
    return float(ci) if np.ndim(ci) == 0 else ci


@dataclass
class EvalResult:
    pass_at_1: float
    ci95: float
    n: int
    n_correct: int
    records: list[dict] = field(repr=False, default_factory=list)

    def summary(self, step: int) -> dict:
        return {"step": step, "pass_at_1": self.pass_at_1, "ci95": self.ci95, "n": self.n, "n_correct": self.n_correct}


def score_completions(problems: list[Problem], completions: list[str]) -> EvalResult:
    records = []
    for problem, completion in zip(problems, completions, strict=True):
        extracted = extract_answer(completion)
        records.append({
            "id": problem.id, "question": problem.question, "gold": problem.answer,
            "completion": completion, "extracted": extracted,
            "correct": answers_match(extracted, problem.answer),
        })
    n_correct = sum(r["correct"] for r in records)
    n = len(records)
    p = n_correct / n if n else float("nan")
    return EvalResult(p, pass_at_1_ci(p, n), n, n_correct, records)
