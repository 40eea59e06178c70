"""The prompt a model sees for a question (the project's answer format), and prompts as a TRL dataset."""

from __future__ import annotations

from saah_lib.method.reward import SOLUTION_CLOSE, SOLUTION_OPEN, WORKING_CLOSE, WORKING_OPEN
from saah_lib.tasks.problems import Problem

SYSTEM_PROMPT = (
    "You solve grade-school math word problems. "
    f"First think it through one step per line between {WORKING_OPEN} and {WORKING_CLOSE}, "
    "writing out each calculation (for example 3 * 4 = 12). "
    f"Then write only the final number, without units or words, between "
    f"{SOLUTION_OPEN} and {SOLUTION_CLOSE}."
)


def make_prompt(question: str, tokenizer=None) -> str:
    """The prompt text for one question.

    With a tokenizer that has a chat template: the system prompt and the question rendered by that template,
    ending with the assistant turn opener. Otherwise (no tokenizer, or a base model without a template) a
    plain-text prompt: the system prompt, a blank line, "Question: ...", then "Answer:".
    """
    if getattr(tokenizer, "chat_template", None):
        messages = [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": question},
        ]
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return f"{SYSTEM_PROMPT}\n\nQuestion: {question}\nAnswer:\n"


def to_trl_dataset(problems: list[Problem], tokenizer=None):
    """A ``datasets.Dataset`` with columns prompt, answer, id, question.

    ``prompt`` is already rendered text, so TRL uses it as is; ``answer``
    reaches the reward functions as their ``answer`` keyword.
    """
    import datasets

    problems = list(problems)
    return datasets.Dataset.from_dict(
        {
            "prompt": [make_prompt(p.question, tokenizer) for p in problems],
            "answer": [p.answer for p in problems],
            "id": [p.id for p in problems],
            "question": [p.question for p in problems],
        }
    )
