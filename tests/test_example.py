"""examples/saah_grpo.py trains as written, offline and short; the README's "Read the method" pointers
(``path.py:LINE`` ``name``) name the lines that define what they point at, so a pointer left stale by an edit fails."""

import ast
import json
import os
import re
import subprocess
import sys

import pytest

from saah_lib.paths import REPO_ROOT
from saah_lib.tasks.synthetic import synthetic_split

EXAMPLE = REPO_ROOT / "examples" / "saah_grpo.py"
README = REPO_ROOT / "README.md"
# The committed tiny warm start writes the answer format, so its rewards differ within a group and some rollouts get
# a negative advantage: the rollouts SA discounts (a random model's equal rewards would leave every weight at 1).
WARM_START = REPO_ROOT / "results" / "warm_starts" / "tiny-warmstart"
POINTER = re.compile(r"`([\w./-]+\.py):(\d+)` `([\w.]+)`")
SECTION_START = "**Read the method:**"


# --------------------------------------------------------------------------- the example

def weight_table(stdout: str) -> dict[int, dict[str, float]]:
    """The example's closing table of logged weight statistics: step -> column -> value."""
    lines = stdout.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("step ") and "saah/weight_mean" in line]
    if not starts:
        return {}
    columns = lines[starts[-1]].split()[1:]
    table = {}
    for line in lines[starts[-1] + 1:]:
        words = line.split()
        if len(words) != len(columns) + 1 or not words[0].isdigit():
            break
        table[int(words[0])] = dict(zip(columns, map(float, words[1:])))
    return table


def sa_discount_problems(table: dict[int, dict[str, float]], steps: int) -> list[str]:
    """What is wrong with an SA run's table (alpha > 0): every step logged; a weight below 1 exactly where a step has
    negative-advantage rollouts (SA leaves the others at 1); at least one such step."""
    problems = [] if sorted(table) == list(range(1, steps + 1)) else [f"steps logged {sorted(table)}, not 1..{steps}"]
    for step, row in table.items():
        negatives = row["saah/neg_frac"] > 0
        if negatives and not (0 < row["saah/weight_neg_mean"] < 1 and 0 < row["saah/weight_mean"] < 1):
            problems.append(f"step {step}: negative-advantage rollouts, yet no weight below 1: {row}")
        if not negatives and row["saah/weight_mean"] != 1:
            problems.append(f"step {step}: no negative-advantage rollout, yet a weight below 1 (not SA): {row}")
    if not any(row["saah/neg_frac"] > 0 for row in table.values()):
        problems.append("no step had a negative-advantage rollout: the discount was never exercised")
    return problems


def write_gsm8k_lines(folder, n: int = 16) -> None:
    """``train.jsonl`` in GSM8K's layout, of synthetic problems (the kind the tiny warm start learned)."""
    folder.mkdir()
    lines = [json.dumps({"question": p.question, "answer": f"{p.solution}\n#### {p.answer}"})
             for p in synthetic_split(n, 1, seed=0).train]
    (folder / "train.jsonl").write_text("\n".join(lines) + "\n")


@pytest.mark.slow  # a fresh process loads TRL (about 10 s of CPU), then two steps of 8 completions
def test_the_example_trains_the_steps_asked_and_logs_the_sa_weights(tmp_path):
    write_gsm8k_lines(tmp_path / "gsm8k")
    args = ["--model_name_or_path", str(WARM_START), "--gsm8k_dir", str(tmp_path / "gsm8k"), "--max_steps", "2",
            "--prompts_per_step", "2", "--max_completion_length", "64", "--reward_std_threshold", "0",
            "--output_dir", str(tmp_path / "out")]
    done = subprocess.run([sys.executable, str(EXAMPLE), *args], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, env={"PYTHONPATH": str(REPO_ROOT), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1",
                                            "PATH": os.environ["PATH"], "CUDA_VISIBLE_DEVICES": ""})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "16 GSM8K problems" in done.stdout
    table = weight_table(done.stdout)
    assert sa_discount_problems(table, steps=2) == [], done.stdout[-2000:]
    assert (tmp_path / "out" / "model.safetensors").is_file()  # the trained model is saved


TABLE = """\
step               reward    saah/entropy_norm     saah/weight_mean saah/weight_neg_mean        saah/neg_frac
   1               1.1500               0.0086               1.0000                  nan               0.0000
   2               3.1875               0.0146               {w:.4f}               {neg:.4f}               0.3750
"""


def test_the_table_check_passes_a_discounted_run_and_fails_where_the_weights_or_steps_are_wrong():
    assert sa_discount_problems(weight_table("training...\n" + TABLE.format(w=0.9462, neg=0.8624)), steps=2) == []
    assert sa_discount_problems(weight_table(TABLE.format(w=1.0, neg=1.0)), steps=2)  # alpha never reached the loss
    assert sa_discount_problems(weight_table(TABLE.format(w=0.9462, neg=0.8624)), steps=3)  # a step short
    every_rollout = TABLE.format(w=0.9462, neg=0.8624).replace("1.0000                  nan", "0.9000       nan")
    assert sa_discount_problems(weight_table(every_rollout), steps=2)  # AH's weights, not SA's
    assert weight_table("no table\n") == {}


def test_the_example_is_at_most_150_lines():
    assert len(EXAMPLE.read_text().splitlines()) <= 150


# --------------------------------------------------------------------------- the README's pointers

def definitions(source: str) -> dict[str, int]:
    """The line of each class and function of a module, by qualified name (``Class.method``)."""
    found = {}

    def visit(node, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                found[prefix + child.name] = child.lineno
                visit(child, f"{prefix}{child.name}.")

    visit(ast.parse(source), "")
    return found


def read_the_method(readme: str) -> str:
    """The README's "Read the method" section: from its bold start to the paragraph's end."""
    start = readme.index(SECTION_START)
    end = readme.find("\n\n", start)
    return readme[start:] if end < 0 else readme[start:end]


def pointer_problems(section: str) -> list[str]:
    """Each ``path.py:LINE`` ``name`` pointer whose file is missing or whose line does not define the name."""
    problems = []
    for path, line, name in POINTER.findall(section):
        file = REPO_ROOT / path
        if not file.is_file():
            problems.append(f"`{path}:{line}` `{name}`: no such file")
            continue
        defined_at = definitions(file.read_text()).get(name)
        if defined_at != int(line):
            where = f"at line {defined_at}" if defined_at else "nowhere in the file"
            problems.append(f"`{path}:{line}` `{name}`: {name} is defined {where}")
    return problems


def test_the_readme_opens_with_pointers_to_the_lines_that_define_the_method():
    readme = README.read_text()
    assert readme.index(SECTION_START) < readme.index("\n## ")  # before the first section
    section = read_the_method(readme)
    assert len(POINTER.findall(section)) >= 2  # the weights and where they enter TRL's loss
    assert pointer_problems(section) == []
    assert "`examples/saah_grpo.py`" in section and EXAMPLE.is_file()


def test_the_pointer_check_fails_on_a_stale_line_a_wrong_name_and_a_missing_file():
    section = read_the_method(README.read_text())
    pointers = POINTER.findall(section)
    stale = POINTER.sub(lambda m: f"`{m[1]}:{int(m[2]) + 1}` `{m[3]}`", section)
    assert len(pointer_problems(stale)) == len(pointers)
    path, line, name = pointers[0]
    assert pointer_problems(f"`{path}:{line}` `{name}_gone`") == [f"`{path}:{line}` `{name}_gone`: {name}_gone is "
                                                                  "defined nowhere in the file"]
    assert pointer_problems(f"`saah_lib/gone.py:{line}` `{name}`") == [f"`saah_lib/gone.py:{line}` `{name}`: no such "
                                                                      "file"]
