"""GSM8K: loading (a local folder or the hub) and the paper's 800/500 split.

Where the data comes from, first match wins: the ``data_dir`` argument, the ``SAAH_GSM8K_DIR`` environment
variable, then the Hugging Face hub (``openai/gsm8k``, config ``main``).

A local folder holds ``train.jsonl`` and ``test.jsonl`` in the official GSM8K layout: one JSON object per line
with ``question`` and ``answer``, the answer ending in ``#### <number>``. Row order is the official file order,
and ids (``train-00042``) are positions in that order, so the same folder or the hub give the same ids.

Such a folder, for machines without the hub, is written once where the hub is reachable (:func:`prepare`)::

    python -m saah_lib.tasks.gsm8k prepare --out DIR    # then SAAH_GSM8K_DIR=DIR on the offline machine
"""

from __future__ import annotations

import argparse
import os
import random
import re
import sys
from dataclasses import replace
from pathlib import Path

from saah_lib.jsonio import scan_jsonl, write_jsonl
from saah_lib.method.reward import SOLUTION_CLOSE, SOLUTION_OPEN, WORKING_CLOSE, WORKING_OPEN, normalize_number
from saah_lib.paths import in_repo, repo_relative
from saah_lib.tasks.problems import DataSplit, Problem

GSM8K_DIR_ENV = "SAAH_GSM8K_DIR"
HUB_DATASET = ("openai/gsm8k", "main")
SPLITS = ("train", "test")
GOLD_MARKER = "####"


def parse_gold_answer(answer_text: str) -> str:
    """The normalised number after ``####`` in a GSM8K answer ("#### 1,234" -> "1234")."""
    if not isinstance(answer_text, str) or GOLD_MARKER not in answer_text:
        raise ValueError(f"GSM8K answer has no '{GOLD_MARKER}' marker: {answer_text!r:.200}")
    raw = answer_text.rsplit(GOLD_MARKER, 1)[1]
    gold = normalize_number(raw)
    if gold is None:
        raise ValueError(f"GSM8K gold answer is not a number: {raw.strip()!r}")
    return gold


def gsm8k_reasoning(answer_text: str) -> str:
    """The reasoning part of a GSM8K answer (everything before ``####``), stripped."""
    return answer_text.rsplit(GOLD_MARKER, 1)[0].strip()


def tagged_solution(problem: Problem) -> Problem:
    """The problem with its GSM8K solution in the project's answer format: the reasoning's lines without the
    ``<<48/2=24>>`` calculator annotations between the working tags, then the gold answer between the solution
    tags."""
    lines = [re.sub(r"<<[^>]*>>", "", line).strip() for line in problem.solution.splitlines()]
    working = "\n".join(line for line in lines if line)
    answer = f"{SOLUTION_OPEN}{problem.answer}{SOLUTION_CLOSE}"
    return replace(problem, solution=f"{WORKING_OPEN}\n{working}\n{WORKING_CLOSE}\n{answer}")


def _problem(split: str, index: int, record, where: str) -> Problem:
    """One GSM8K record as a Problem; ``where`` (file and line, or hub row) names it in every error."""
    if not isinstance(record, dict):
        raise ValueError(f"{where}: a GSM8K record is a JSON object with \"question\" and \"answer\", "
                         f"got a {type(record).__name__}")
    for key in ("question", "answer"):
        if key not in record:
            raise ValueError(f"{where}: no \"{key}\" (a GSM8K record holds \"question\" and \"answer\")")
        if not isinstance(record[key], str):
            raise ValueError(f"{where}: \"{key}\" is a {type(record[key]).__name__}, not text")
    try:
        answer = parse_gold_answer(record["answer"])
    except ValueError as error:
        raise ValueError(f"{where}: {error}") from None
    return Problem(id=f"{split}-{index:05d}", question=record["question"], answer=answer,
                   solution=gsm8k_reasoning(record["answer"]))


def _read_gsm8k_file(path: Path) -> list[tuple[str, object]]:
    """``[(where, record)]`` of a local split file, ``where`` being ``<file>: line N``."""
    if not path.is_file():
        raise FileNotFoundError(
            f"GSM8K file not found: {path} (the folder must hold train.jsonl and test.jsonl)"
        )
    records, problems = scan_jsonl(path)
    if problems:
        line, problem = problems[0]
        more = f" ({len(problems) - 1} more bad lines)" if len(problems) > 1 else ""
        raise ValueError(f"{path}: line {line}: {problem}{more}")
    if not records:
        raise ValueError(f"{path}: holds no GSM8K record (an empty split file; the official {path.name} holds "
                         "thousands, one JSON object per line)")
    return [(f"{path}: line {line}", record) for line, record in records]


def _hub_dataset(split: str | None = None):
    """``datasets.load_dataset`` of GSM8K: one split, or (``split=None``) the ``DatasetDict`` of both."""
    import datasets  # imported lazily: slow to import and not needed for local data

    name, config = HUB_DATASET
    return datasets.load_dataset(name, config, split=split)


def _load_from_hub(split: str) -> list[dict]:
    name, config = HUB_DATASET
    try:
        rows = _hub_dataset(split)
    except Exception as error:  # offline, missing cache, auth... all mean "not available"
        raise RuntimeError(
            f"Could not load GSM8K split {split!r}. Either pass data_dir= or set "
            f"{GSM8K_DIR_ENV} to a folder holding train.jsonl and test.jsonl, or make the "
            f"Hugging Face hub ({name}, config {config!r}) reachable. "
            f"Hub error: {type(error).__name__}: {error}"
        ) from error
    return [{"question": row["question"], "answer": row["answer"]} for row in rows]


def resolve_gsm8k_dir(data_dir: str | os.PathLike | None = None) -> Path | None:
    """The local GSM8K folder to use (argument, then environment), or None for the hub."""
    if data_dir is not None:
        return in_repo(data_dir)
    from_env = os.environ.get(GSM8K_DIR_ENV, "").strip()
    return in_repo(from_env) if from_env else None


def check_gsm8k_dir(data_dir: str | os.PathLike | None = None) -> Path | None:
    """The local GSM8K folder that will be read, checked to hold both split files (None: the hub).

    Meant to run before anything slow or anything written, so a wrong
    ``data_dir`` or ``$SAAH_GSM8K_DIR`` is reported by name straight away.
    """
    folder = resolve_gsm8k_dir(data_dir)
    if folder is None:
        return None
    origin = "data_dir" if data_dir is not None else f"${GSM8K_DIR_ENV}"
    if not folder.is_dir():
        raise FileNotFoundError(f"GSM8K folder {str(folder)!r} (from {origin}) does not exist")
    missing = [f"{split}.jsonl" for split in SPLITS if not (folder / f"{split}.jsonl").is_file()]
    if missing:
        raise FileNotFoundError(
            f"GSM8K folder {str(folder)!r} (from {origin}) has no {' or '.join(missing)}; "
            "it must hold the official train.jsonl and test.jsonl"
        )
    empty = [folder / f"{split}.jsonl" for split in SPLITS if (folder / f"{split}.jsonl").stat().st_size == 0]
    if empty:
        raise ValueError(f"GSM8K file {empty[0]} (from {origin}) is empty: it holds no GSM8K record")
    return folder


def describe_source(data_dir: str | os.PathLike | None = None) -> str:
    """Short provenance string: "local:<folder>" or "hub:openai/gsm8k/main"."""
    folder = resolve_gsm8k_dir(data_dir)
    return f"local:{repo_relative(folder)}" if folder is not None else "hub:{}/{}".format(*HUB_DATASET)


def load_gsm8k(split: str, data_dir: str | os.PathLike | None = None) -> list[Problem]:
    """All problems of one official split ("train" or "test"), in file order."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    folder = resolve_gsm8k_dir(data_dir)
    if folder is not None:
        records = _read_gsm8k_file(folder / f"{split}.jsonl")
    else:
        records = [(f"GSM8K {split} from the hub: row {i}", r) for i, r in enumerate(_load_from_hub(split))]
    return [_problem(split, index, record, where) for index, (where, record) in enumerate(records)]


def _sample(pool: list[Problem], n: int, seed: int, name: str) -> list[Problem]:
    if not 0 <= n <= len(pool):
        raise ValueError(f"cannot sample {n} {name} problems from a pool of {len(pool)}")
    # A private generator: the result depends on the seed only, never on
    # whatever else has consumed the global random state.
    indices = random.Random(seed).sample(range(len(pool)), n)
    return [pool[i] for i in indices]


def sample_split(train_pool: list[Problem], eval_pool: list[Problem], n_train: int = 800, n_eval: int = 500,
                 seed: int = 123, source: str = "") -> DataSplit:
    """Draw n_train and n_eval problems without replacement, deterministically.

    Each pool gets its own generator seeded with ``seed``, so the evaluation set does not change when only
    n_train changes.  Problems keep the order in which they were drawn.
    """
    train = _sample(list(train_pool), n_train, seed, "train")
    evaluation = _sample(list(eval_pool), n_eval, seed, "eval")
    return DataSplit.with_provenance(train, evaluation, source=source, seed=seed)


def _check_pool_size(pool: list[Problem], n: int, split: str, field: str, data_dir) -> None:
    """A split must hold the problems asked of it; the error names the file (or the hub) they would come from."""
    if n > len(pool):
        folder = resolve_gsm8k_dir(data_dir)
        source = folder / f"{split}.jsonl" if folder is not None else f"GSM8K {split} from the hub"
        raise ValueError(f"{source} holds {len(pool)} problems, fewer than the {n} asked for ({field}={n})")


def paper_split(data_dir: str | os.PathLike | None = None, n_train: int = 800, n_eval: int = 500,
                seed: int = 123) -> DataSplit:
    """The paper's split: n_train from the official train split, n_eval from test."""
    train, test = load_gsm8k("train", data_dir), load_gsm8k("test", data_dir)
    _check_pool_size(train, n_train, "train", "n_train", data_dir)
    _check_pool_size(test, n_eval, "test", "n_eval", data_dir)
    return sample_split(train, test, n_train=n_train, n_eval=n_eval, seed=seed, source=describe_source(data_dir))


class OutFolderError(ValueError):
    """``prepare``'s ``out`` cannot be written without overwriting or replacing something of the user's."""


def check_out_folder(folder: Path, force: bool = False) -> None:
    """``folder`` may receive the split files: it is no file, and (unless ``force``) it is missing or empty,
    so that no file of the user's (their own ``train.jsonl``, say) is overwritten."""
    if folder.exists() and not folder.is_dir():
        raise OutFolderError(f"--out {folder} is a file, not a folder: name a folder to write train.jsonl and "
                             "test.jsonl into")
    for parent in folder.parents:
        if parent.exists():
            if not parent.is_dir():
                raise OutFolderError(f"--out {folder}: {parent} is a file, not a folder")
            break
    present = sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []
    if present and not force:
        listing = ", ".join(present[:5]) + (f" and {len(present) - 5} more" if len(present) > 5 else "")
        raise OutFolderError(f"--out {folder} is not empty (it holds {listing}); nothing was written. Name an "
                             "empty or new folder, or give --force to replace its train.jsonl and test.jsonl "
                             "(its other files are left as they are)")


def prepare(out: str | os.PathLike, dataset=None, force: bool = False) -> dict[str, int]:
    """Write ``train.jsonl`` and ``test.jsonl`` (the folder layout of the module docstring) into ``out``
    from ``dataset`` (a mapping of split name to rows with ``question`` and ``answer``, such as the hub's
    ``DatasetDict``; default: loaded from the hub); returns the rows written per split.

    ``out`` must be a new or empty folder unless ``force`` (:func:`check_out_folder`, checked before the
    hub is asked).  Every row is checked as :func:`load_gsm8k` will read it, before anything is written, so
    a folder is written whole or not at all; other columns are dropped.
    """
    check_out_folder(in_repo(out), force)
    dataset = _hub_dataset() if dataset is None else dataset
    rows = {split: [{"question": r["question"], "answer": r["answer"]} for r in dataset[split]] for split in SPLITS}
    for split, records in rows.items():
        for index, record in enumerate(records):
            _problem(split, index, record, f"GSM8K {split}: row {index}")
    folder = in_repo(out)
    folder.mkdir(parents=True, exist_ok=True)
    for split, records in rows.items():
        write_jsonl(folder / f"{split}.jsonl", records)
    return {split: len(records) for split, records in rows.items()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m saah_lib.tasks.gsm8k",
                                     description="GSM8K as a local folder, for machines without the hub")
    commands = parser.add_subparsers(dest="command", required=True)
    prep = commands.add_parser("prepare", help="write train.jsonl and test.jsonl from the hub (openai/gsm8k, main)",
                               description="Write train.jsonl and test.jsonl (one JSON object per line: question, "
                                           "answer ending in '#### <number>'; the official order) from the hub's "
                                           f"{HUB_DATASET[0]} ({HUB_DATASET[1]}). Needs the hub: run it without "
                                           f"HF_HUB_OFFLINE=1, then point {GSM8K_DIR_ENV} at the folder.")
    prep.add_argument("--out", required=True, help="the folder to write, new or empty (default: none; relative to "
                                                    "the repository)")
    prep.add_argument("--force", action="store_true",
                      help="write into a folder that holds files, replacing its train.jsonl and test.jsonl")
    args = parser.parse_args(argv)
    try:
        counts = prepare(args.out, force=args.force)
    except OutFolderError as error:  # checked before the hub is asked: said as such, not as a hub error
        parser.exit(2, f"error: {error}\n")
    except Exception as error:  # noqa: BLE001  (offline, no datasets cache: say what to do, without a traceback)
        parser.exit(1, f"error: could not load {HUB_DATASET[0]} ({HUB_DATASET[1]}) from the hub: "
                       f"{type(error).__name__}: {error}\n(run it where the hub is reachable, without HF_HUB_OFFLINE=1)\n")
    folder = in_repo(args.out)
    print(f"wrote {', '.join(f'{split}.jsonl ({n} problems)' for split, n in counts.items())} to {folder}; "
          f"use it with {GSM8K_DIR_ENV}={folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
