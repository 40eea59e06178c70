"""A task's problems: one question with its gold answer, and a train/evaluation split with its provenance."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    """One GSM8K problem: ``answer`` is the normalised gold number string and
    ``solution`` the reference reasoning (the text before ``####``)."""

    id: str
    question: str
    answer: str
    solution: str = ""


@dataclass
class DataSplit:
    """Sampled training and evaluation problems plus provenance (``info``)."""

    train: list[Problem]
    eval: list[Problem]
    info: dict

    @classmethod
    def with_provenance(cls, train: list[Problem], evaluation: list[Problem], *, source: str, seed: int) -> "DataSplit":
        """A split whose ``info`` records the source, seed, chosen ids and their hashes."""
        info = {
            "source": source,
            "seed": seed,
            "n_train": len(train),
            "n_eval": len(evaluation),
            "train_ids": [p.id for p in train],
            "eval_ids": [p.id for p in evaluation],
            "train_sha256": records_sha256(train),
            "eval_sha256": records_sha256(evaluation),
        }
        return cls(train=train, eval=evaluation, info=info)


def records_sha256(problems: list[Problem]) -> str:
    """Fingerprint of an ordered list of problems (id, question, answer).

    Each record is JSON-encoded so field boundaries are unambiguous.
    """
    digest = hashlib.sha256()
    for problem in problems:
        record = json.dumps([problem.id, problem.question, problem.answer], ensure_ascii=False)
        digest.update(record.encode("utf-8") + b"\n")
    return digest.hexdigest()
