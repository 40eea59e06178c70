"""Tests for saah_lib.tasks.gsm8k: parsing, loading, the split, prompts, tagged references."""

import collections
import json
import random
import re

import datasets
import pytest

from saah_lib.method.reward import (
    SOLUTION_CLOSE,
    SOLUTION_OPEN,
    TAGS,
    WORKING_CLOSE,
    WORKING_OPEN,
    r_correct,
    r_format,
    r_present,
    r_steps,
    reward_components,
)
from saah_lib.tasks import gsm8k as data
from saah_lib.tasks.gsm8k import (
    GSM8K_DIR_ENV,
    check_gsm8k_dir,
    load_gsm8k,
    paper_split,
    parse_gold_answer,
    sample_split,
    tagged_solution,
)
from saah_lib.tasks.problems import Problem, records_sha256
from saah_lib.tasks.prompts import SYSTEM_PROMPT, make_prompt, to_trl_dataset

TRAIN_ROWS = [
    {"question": "Tom has 3 apples and buys 4 more. How many?", "answer": "3 + 4 = <<3+4=7>>7\n#### 7"},
    {"question": "A car costs $1,234 more than 1000. Price?", "answer": "1000+1234=<<1000+1234=2234>>2234\n#### 2,234"},
    {"question": "It is 2 degrees and drops 5. Temperature?", "answer": "2 - 5 = <<2-5=-3>>-3\n#### -3"},
]
TEST_ROWS = [
    {"question": "Half of 48?", "answer": "48 / 2 = <<48/2=24>>24\n#### 24"},
    {"question": "Twice 9?", "answer": "9 * 2 = 18\n#### 18"},
]


def _write_jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")


@pytest.fixture
def jsonl_dir(tmp_path):
    _write_jsonl(tmp_path / "train.jsonl", TRAIN_ROWS)
    _write_jsonl(tmp_path / "test.jsonl", TEST_ROWS)
    return tmp_path


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv(GSM8K_DIR_ENV, raising=False)


def _pool(split, n):
    return [Problem(f"{split}-{i:05d}", f"question {i}?", str(i), f"{i} = {i}") for i in range(n)]


# --------------------------------------------------------------------------
# parse_gold_answer
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        ("She makes 9 * 2 = $18.\n#### 18", "18"),
        ("#### 1,234", "1234"),
        ("#### 1,000,000", "1000000"),
        ("#### -3", "-3"),
        ("#### 2.50", "2.5"),
        ("#### $5", "5"),
        ("####7", "7"),
        ("#### 18 ", "18"),
    ],
)
def test_parse_gold_answer(text, expected):
    assert parse_gold_answer(text) == expected


@pytest.mark.parametrize("text", ["no marker here 18", "", "#### eighteen", "####"])
def test_parse_gold_answer_rejects_bad_input(text):
    with pytest.raises(ValueError, match="####|not a number"):
        parse_gold_answer(text)


# --------------------------------------------------------------------------
# loading
# --------------------------------------------------------------------------


def test_load_from_data_dir(jsonl_dir):
    train = load_gsm8k("train", jsonl_dir)
    assert [p.id for p in train] == ["train-00000", "train-00001", "train-00002"]
    assert [p.answer for p in train] == ["7", "2234", "-3"]
    assert train[0] == Problem(
        id="train-00000",
        question="Tom has 3 apples and buys 4 more. How many?",
        answer="7",
        solution="3 + 4 = <<3+4=7>>7",
    )
    test = load_gsm8k("test", str(jsonl_dir))
    assert [p.id for p in test] == ["test-00000", "test-00001"]


def test_load_from_environment_variable(jsonl_dir, monkeypatch):
    monkeypatch.setenv(GSM8K_DIR_ENV, str(jsonl_dir))
    assert [p.answer for p in load_gsm8k("test")] == ["24", "18"]


def test_data_dir_argument_wins_over_environment(jsonl_dir, tmp_path_factory, monkeypatch):
    other = tmp_path_factory.mktemp("other")
    _write_jsonl(other / "test.jsonl", TEST_ROWS[:1])
    monkeypatch.setenv(GSM8K_DIR_ENV, str(jsonl_dir))
    assert len(load_gsm8k("test", other)) == 1


def test_missing_split_file_names_the_path(tmp_path):
    _write_jsonl(tmp_path / "train.jsonl", TRAIN_ROWS)
    with pytest.raises(FileNotFoundError, match="test.jsonl"):
        load_gsm8k("test", tmp_path)


def test_unknown_split_is_rejected(jsonl_dir):
    with pytest.raises(ValueError, match="split"):
        load_gsm8k("validation", jsonl_dir)


def test_bad_json_line_names_file_and_line(tmp_path):
    (tmp_path / "test.jsonl").write_text(json.dumps(TEST_ROWS[0]) + "\n{oops\n")
    with pytest.raises(ValueError, match=r"test.jsonl: line 2"):
        load_gsm8k("test", tmp_path)


@pytest.mark.parametrize("bad_line, message", [
    ('{"answer": "2 + 2 = 4\\n#### 4"}', 'line 2: no "question"'),
    ('{"question": "How many?"}', 'line 2: no "answer"'),
    ('["How many?", "#### 4"]', "line 2: a GSM8K record is a JSON object"),
    ('{"question": 7, "answer": "#### 4"}', 'line 2: "question" is a int, not text'),
    ('{"question": "How many?", "answer": "it is 4"}', "line 2: GSM8K answer has no '####' marker"),
    ('{"question": "How many?", "answer": "#### four"}', "line 2: GSM8K gold answer is not a number"),
    (b'{"question": "caf\xe9", "answer": "#### 4"}', "line 2: not UTF-8 text"),
])
def test_a_bad_record_is_an_error_naming_file_and_line(tmp_path, bad_line, message):
    good = json.dumps(TEST_ROWS[0]).encode() + b"\n"
    bad = bad_line if isinstance(bad_line, bytes) else bad_line.encode()
    (tmp_path / "test.jsonl").write_bytes(good + bad + b"\n" + good)
    with pytest.raises(ValueError) as error:
        load_gsm8k("test", tmp_path)
    assert f"{tmp_path / 'test.jsonl'}: {message}" in str(error.value)


def test_no_local_data_and_no_hub_gives_a_clear_error(monkeypatch):
    def unreachable(*args, **kwargs):
        raise ConnectionError("hub is offline")

    monkeypatch.setattr(datasets, "load_dataset", unreachable)
    with pytest.raises((FileNotFoundError, RuntimeError)) as caught:
        load_gsm8k("train")
    message = str(caught.value)
    assert "data_dir" in message and GSM8K_DIR_ENV in message  # the local option
    assert "train.jsonl" in message and "test.jsonl" in message
    assert "hub" in message and "openai/gsm8k" in message  # the hub option
    assert "hub is offline" in message  # the underlying reason


def test_hub_rows_are_used_when_available(monkeypatch):
    calls = []

    def fake_hub(name, config, split):
        calls.append((name, config, split))
        return TEST_ROWS

    monkeypatch.setattr(datasets, "load_dataset", fake_hub)
    problems = load_gsm8k("test")
    assert calls == [("openai/gsm8k", "main", "test")]
    assert [p.answer for p in problems] == ["24", "18"]
    assert data.describe_source() == "hub:openai/gsm8k/main"


# --------------------------------------------------------------------------
# sampling
# --------------------------------------------------------------------------


def test_sample_split_is_deterministic_and_independent_of_global_random():
    train_pool, eval_pool = _pool("train", 50), _pool("test", 40)
    first = sample_split(train_pool, eval_pool, n_train=10, n_eval=5, seed=7)
    random.seed(999)
    random.random()
    second = sample_split(train_pool, eval_pool, n_train=10, n_eval=5, seed=7)
    assert first.info == second.info
    assert first.train == second.train and first.eval == second.eval


def test_sample_split_seed_changes_the_draw():
    train_pool, eval_pool = _pool("train", 50), _pool("test", 40)
    a = sample_split(train_pool, eval_pool, n_train=10, n_eval=5, seed=1)
    b = sample_split(train_pool, eval_pool, n_train=10, n_eval=5, seed=2)
    assert a.info["train_ids"] != b.info["train_ids"]
    assert a.info["eval_ids"] != b.info["eval_ids"]
    assert a.info["train_sha256"] != b.info["train_sha256"]


def test_sample_split_sizes_info_and_no_duplicates():
    train_pool, eval_pool = _pool("train", 50), _pool("test", 40)
    split = sample_split(train_pool, eval_pool, n_train=20, n_eval=40, seed=3, source="unit")
    assert (len(split.train), len(split.eval)) == (20, 40)
    assert len(set(split.info["train_ids"])) == 20
    assert sorted(split.info["eval_ids"]) == [p.id for p in eval_pool]  # whole pool, no repeats
    assert set(split.info["train_ids"]) <= {p.id for p in train_pool}
    assert split.info["train_ids"] == [p.id for p in split.train]
    assert split.info["source"] == "unit" and split.info["seed"] == 3
    assert (split.info["n_train"], split.info["n_eval"]) == (20, 40)
    assert len(split.info["train_sha256"]) == 64


def test_eval_draw_does_not_depend_on_n_train():
    train_pool, eval_pool = _pool("train", 50), _pool("test", 40)
    small = sample_split(train_pool, eval_pool, n_train=5, n_eval=10)
    large = sample_split(train_pool, eval_pool, n_train=30, n_eval=10)
    assert small.info["eval_ids"] == large.info["eval_ids"]


def test_sample_split_hash_is_a_fixed_function_of_the_records():
    pool = [Problem("train-00000", "q?", "1")]
    split = sample_split(pool, pool, n_train=1, n_eval=1)
    # sha256 of the line '["train-00000", "q?", "1"]\n', computed with sha256sum and pinned.
    expected = "ff33ef4649beebb6afa4018997b32e07127a7a613df61ba8ef97616707e9a60c"
    assert records_sha256(pool) == split.info["train_sha256"] == split.info["eval_sha256"]
    assert split.info["train_sha256"] == expected


def test_sample_split_refuses_more_than_the_pool():
    with pytest.raises(ValueError, match="cannot sample 11"):
        sample_split(_pool("train", 10), _pool("test", 10), n_train=11, n_eval=1)
    with pytest.raises(ValueError, match="cannot sample 11"):
        sample_split(_pool("train", 10), _pool("test", 10), n_train=1, n_eval=11)


def test_paper_split_on_small_folder(jsonl_dir):
    split = paper_split(jsonl_dir, n_train=2, n_eval=2, seed=5)
    assert split.info["source"] == f"local:{jsonl_dir}"
    assert {p.id for p in split.eval} == {"test-00000", "test-00001"}


# --------------------------------------------------------------------------
# prompts and TRL dataset
# --------------------------------------------------------------------------


class ChatTokenizerStub:
    chat_template = "{% for m in messages %}...{% endfor %}"

    def __init__(self):
        self.calls = []

    def apply_chat_template(self, messages, tokenize=True, add_generation_prompt=False):
        self.calls.append((messages, tokenize, add_generation_prompt))
        return "".join(f"<|{m['role']}|>{m['content']}\n" for m in messages) + "<|assistant|>"


class PlainTokenizerStub:
    chat_template = None


def test_system_prompt_names_all_tags():
    assert all(tag in SYSTEM_PROMPT for tag in TAGS)


def test_make_prompt_uses_the_chat_template():
    tokenizer = ChatTokenizerStub()
    prompt = make_prompt("What is 2+2?", tokenizer)
    assert prompt == f"<|system|>{SYSTEM_PROMPT}\n<|user|>What is 2+2?\n<|assistant|>"
    messages, tokenize, add_generation_prompt = tokenizer.calls[0]
    assert messages == [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": "What is 2+2?"},
    ]
    assert tokenize is False and add_generation_prompt is True


@pytest.mark.parametrize("tokenizer", [None, PlainTokenizerStub()])
def test_make_prompt_plain_text_without_template(tokenizer):
    assert make_prompt("What is 2+2?", tokenizer) == f"{SYSTEM_PROMPT}\n\nQuestion: What is 2+2?\nAnswer:\n"


def test_to_trl_dataset_columns(jsonl_dir):
    problems = load_gsm8k("train", jsonl_dir)
    dataset = to_trl_dataset(problems, ChatTokenizerStub())
    assert isinstance(dataset, datasets.Dataset)
    assert set(dataset.column_names) == {"prompt", "answer", "id", "question"}
    assert dataset["answer"] == ["7", "2234", "-3"]
    assert dataset["id"] == ["train-00000", "train-00001", "train-00002"]
    assert dataset[0]["prompt"].endswith("<|assistant|>")
    assert dataset[1]["question"] == TRAIN_ROWS[1]["question"]


# --------------------------------------------------------------------------
# tagged references
# --------------------------------------------------------------------------


# GSM8K references carry calculator annotations such as "<<48/2=24>>": tooling
# of the dataset's authors, not text a model is meant to write.
CALCULATOR_ANNOTATION = re.compile(r"<<[^<>]*>>")


def reference_to_tagged(problem: Problem) -> str:
    """A reference solution written as a completion in the tagged format (to score references).

    Every reasoning line is prefixed "Step i:", so each counts as a step even
    when it holds no "a = b" calculation; without a reference solution, one
    line states the answer.
    """
    cleaned = CALCULATOR_ANNOTATION.sub("", problem.solution)
    lines = [line.strip() for line in cleaned.splitlines() if line.strip()] or [f"The answer is {problem.answer}."]
    steps = "\n".join(f"Step {i}: {line}" for i, line in enumerate(lines, start=1))
    return f"{WORKING_OPEN}\n{steps}\n{WORKING_CLOSE}\n{SOLUTION_OPEN}{problem.answer}{SOLUTION_CLOSE}"


def test_reference_to_tagged_strips_calculator_annotations():
    problem = Problem("test-00000", "q", "18", "16 - 3 - 4 = <<16-3-4=9>>9 eggs.\n\n9 * 2 = $<<9*2=18>>18.")
    assert reference_to_tagged(problem) == (
        "<start_working_out>\n"
        "Step 1: 16 - 3 - 4 = 9 eggs.\n"
        "Step 2: 9 * 2 = $18.\n"
        "</start_working_out>\n"
        "<SOLUTION>18</SOLUTION>"
    )


def test_reference_to_tagged_scores_full_marks_except_steps():
    problem = Problem("test-00000", "q", "-3", "It drops below zero.")
    assert reward_components(reference_to_tagged(problem), "-3") == {
        "correct": 4.0,
        "format": 1.5,
        "present": 1.0,
        "steps": 0.4,  # one numbered line
    }
    empty = Problem("test-00001", "q", "5")
    assert r_format(reference_to_tagged(empty)) == 1.5


def test_a_tagged_solution_keeps_the_reasoning_lines_without_calculator_annotations():
    problem = Problem("train-00000", "q", "18", "16 - 3 - 4 = <<16-3-4=9>>9 eggs.\n\n9 * 2 = $<<9*2=18>>18.")
    tagged = tagged_solution(problem)
    assert tagged.solution == ("<start_working_out>\n16 - 3 - 4 = 9 eggs.\n9 * 2 = $18.\n</start_working_out>\n"
                               "<SOLUTION>18</SOLUTION>")
    assert (tagged.id, tagged.question, tagged.answer) == ("train-00000", "q", "18")


# --------------------------------------------------------------------------
# the real GSM8K files
# --------------------------------------------------------------------------


def test_real_gsm8k_loads_every_row(gsm8k_dir):
    train, test = load_gsm8k("train", gsm8k_dir), load_gsm8k("test", gsm8k_dir)
    assert (len(train), len(test)) == (7473, 1319)
    assert train[-1].id == "train-07472" and test[-1].id == "test-01318"
    assert test[0].answer == "18"  # Janet's ducks
    # every gold is a plain integer after normalisation (14 test golds had commas)
    assert all(re.fullmatch(r"-?[0-9]+", p.answer) for p in train + test)
    assert all(p.solution and "####" not in p.solution for p in train + test)


def test_real_paper_split(gsm8k_dir):
    split = paper_split(gsm8k_dir)
    assert (len(split.train), len(split.eval)) == (800, 500)
    assert all(i.startswith("train-") for i in split.info["train_ids"])
    assert all(i.startswith("test-") for i in split.info["eval_ids"])
    assert len(set(split.info["train_ids"])) == 800 and len(set(split.info["eval_ids"])) == 500
    assert paper_split(gsm8k_dir).info == split.info


def test_every_real_test_reference_scores_full_marks_when_tagged(gsm8k_dir):
    steps = collections.Counter()
    failures = []
    for problem in load_gsm8k("test", gsm8k_dir):
        completion = reference_to_tagged(problem)
        scores = (r_correct(completion, problem.answer), r_format(completion), r_present(completion))
        step_score = r_steps(completion)
        steps[step_score] += 1
        if scores != (4.0, 1.5, 1.0) or step_score < 0.4:
            failures.append((problem.id, scores, step_score))
    assert failures == []
    # Every reference line is numbered, so steps follow the line count:
    # 1-2 lines 0.4, 3-4 lines 0.7, 5+ lines 1.0.
    assert dict(steps) == {0.4: 326, 0.7: 668, 1.0: 325}


def test_every_real_training_solution_tagged_is_correct_and_well_formed(gsm8k_dir):
    train = load_gsm8k("train", gsm8k_dir)
    scores = [(r_correct(s, p.answer), r_format(s), r_present(s)) for p in train for s in [tagged_solution(p).solution]]
    assert scores == [(4.0, 1.5, 1.0)] * len(train)
    assert not any(CALCULATOR_ANNOTATION.search(tagged_solution(p).solution) for p in train)


def test_every_real_gold_parses_to_the_integer_written_after_the_marker(gsm8k_dir):
    # independent reference: Python's int() of the text after "####" with its commas removed
    for split in ("train", "test"):
        lines = (gsm8k_dir / f"{split}.jsonl").read_text().splitlines()
        raws = [json.loads(line)["answer"].rsplit("####", 1)[1].strip() for line in lines if line.strip()]
        assert [parse_gold_answer("#### " + raw) for raw in raws] == [str(int(raw.replace(",", ""))) for raw in raws]
        # and the written form, as a model would copy it, scores full marks against the parsed gold
        assert all(r_correct(f"<SOLUTION>{raw}</SOLUTION>", parse_gold_answer("#### " + raw)) == 4.0 for raw in raws)


# --------------------------------------------------------------------------- prepare: a local folder


def test_prepare_writes_the_folder_that_load_gsm8k_reads(tmp_path):
    extra = {"extra": "dropped"}
    fake = datasets.DatasetDict({"train": datasets.Dataset.from_list([{**r, **extra} for r in TRAIN_ROWS]),
                                 "test": datasets.Dataset.from_list(TEST_ROWS)})  # in memory: no hub
    counts = data.prepare(tmp_path / "gsm8k", fake)
    assert counts == {"train": 3, "test": 2}
    lines = (tmp_path / "gsm8k" / "train.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line) for line in lines] == TRAIN_ROWS  # official order, question and answer only
    assert [p.answer for p in load_gsm8k("train", tmp_path / "gsm8k")] == ["7", "2234", "-3"]
    assert [(p.id, p.answer) for p in load_gsm8k("test", tmp_path / "gsm8k")] == [("test-00000", "24"),
                                                                                 ("test-00001", "18")]


def test_prepare_writes_nothing_when_a_row_is_bad(tmp_path):
    fake = {"train": TRAIN_ROWS, "test": [*TEST_ROWS, {"question": "no marker", "answer": "42"}]}
    with pytest.raises(ValueError, match=r"GSM8K test: row 2: .*####"):
        data.prepare(tmp_path / "gsm8k", fake)
    assert not (tmp_path / "gsm8k").exists()


def test_prepare_command_offline_says_where_to_run_it(tmp_path, monkeypatch):
    def offline(split=None):
        raise ConnectionError("offline")

    monkeypatch.setattr(data, "_hub_dataset", offline)
    with pytest.raises(SystemExit) as stop:
        data.main(["prepare", "--out", str(tmp_path / "gsm8k")])
    assert stop.value.code == 1 and not (tmp_path / "gsm8k").exists()


# --------------------------------------------------------------------------- never overwrite, name the real cause
# (issue 39, items 4 and 16)


def _never_asked(split=None):
    raise AssertionError("the hub was asked")


def test_prepare_refuses_a_folder_that_holds_files_and_leaves_them(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(data, "_hub_dataset", _never_asked)
    out = tmp_path / "mine"
    out.mkdir()
    (out / "train.jsonl").write_text("my own\n")
    (out / "notes.txt").write_text("mine")
    with pytest.raises(SystemExit) as stop:
        data.main(["prepare", "--out", str(out)])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert f"--out {out} is not empty (it holds notes.txt, train.jsonl)" in err and "--force" in err
    assert "hub" not in err
    assert (out / "train.jsonl").read_text() == "my own\n" and sorted(p.name for p in out.iterdir()) == [
        "notes.txt", "train.jsonl"]


def test_prepare_with_force_replaces_the_split_files_only(tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "train.jsonl").write_text("my own\n")
    (out / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="not empty"):
        data.prepare(out, {"train": TRAIN_ROWS, "test": TEST_ROWS})
    assert data.prepare(out, {"train": TRAIN_ROWS, "test": TEST_ROWS}, force=True) == {"train": 3, "test": 2}
    assert (out / "notes.txt").read_text() == "mine" and len(load_gsm8k("train", out)) == 3


def test_prepare_into_a_file_says_so_not_a_hub_error(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(data, "_hub_dataset", _never_asked)
    out = tmp_path / "a-file"
    out.write_text("mine")
    with pytest.raises(SystemExit) as stop:
        data.main(["prepare", "--out", str(out)])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert f"--out {out} is a file, not a folder" in err and "hub" not in err
    assert out.read_text() == "mine"


def test_an_empty_split_file_is_an_error_naming_it(jsonl_dir):
    (jsonl_dir / "test.jsonl").write_bytes(b"")
    with pytest.raises(ValueError, match=f"GSM8K file {jsonl_dir / 'test.jsonl'} .* is empty"):
        check_gsm8k_dir(jsonl_dir)
    with pytest.raises(ValueError, match=f"{jsonl_dir / 'test.jsonl'}: holds no GSM8K record"):
        paper_split(jsonl_dir, n_train=2, n_eval=1)


def test_a_split_smaller_than_asked_is_an_error_naming_the_file(jsonl_dir):
    with pytest.raises(ValueError, match=f"{jsonl_dir / 'train.jsonl'} holds 3 problems, fewer than the 5 asked "
                                         r"for \(n_train=5\)"):
        paper_split(jsonl_dir, n_train=5, n_eval=1)
