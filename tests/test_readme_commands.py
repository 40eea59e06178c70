"""Every shell command in the README and docs/ runs as written on a fresh clone, in a dry or tiny form.

Commands are read from the Markdown itself: every line of a ```bash block and every inline code span
that starts with a command word.  Each is checked in a form that runs in seconds and offline: ``make -n``,
``--help`` (with every flag the command uses present in it), ``--print-config`` for a training run,
``papermill --help-notebook`` plus each ``-p`` parameter and value checked the way the notebook checks it.
A command this file does not know how to check fails the test: add its dry form here.
One command, the README's CPU training run, is run for real (one step, a tiny model) under
``papermill --stdout-file /dev/stdout`` to see its progress lines arrive.

A fresh copy of the repository (its files as a new git repository) then runs the commands of the README and
docs/notebooks.md that write: the cheap ones as written (that training run with a tiny random model, the report,
the plans, the timings) and ``make -n`` of the make targets; afterwards ``git status --porcelain`` must be empty
there: whatever a documented command writes is git-ignored or identical to what is committed.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import tomllib
from functools import lru_cache
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version
from papermill.cli import _resolve_type

import saah_lab
from saah_lab.training.notebook_params import checked_value, declared_parameters
from saah_lib.paths import REPO_ROOT
from saah_lib.rundir.folder import RunDir
from tests.test_environment import read_lock

DOCUMENTS = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
COMMAND_WORDS = {"make", "python", "papermill", "accelerate", "trl", "pip", "jupyter", "tensorboard", "bash",
                 "source", "conda", "git", "time", "hf"}
NOT_RUN = {"git"}  # `git clone`, `git status`: git's own commands, nothing of ours to check
BIN = Path(sys.executable).parent


def _env(root: Path) -> dict:
    return {**os.environ, "PYTHONPATH": str(root), "HF_HUB_OFFLINE": "1", "PATH": f"{BIN}:{os.environ['PATH']}"}


#: Where the commands run: this checkout, or (test_documented_commands_leave_a_fresh_copy_clean) a fresh copy.
WORKDIR = REPO_ROOT
ENV = _env(REPO_ROOT)
PLACEHOLDER = re.compile(r"<[^>]+>|\.\.\.")


# --------------------------------------------------------------------------- reading the commands

def _without_comment(command: str) -> str:
    """The command with a trailing shell comment (`# ...` outside quotes) removed."""
    return shlex.join(shlex.split(command, comments=True))


def commands_in(markdown: str) -> list[str]:
    """Shell commands of a Markdown text: ```bash lines (continuations joined, && split) and inline spans."""
    found = []
    for block in re.findall(r"```bash\n(.*?)```", markdown, flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            found += [_without_comment(part) for part in line.split("&&") if _without_comment(part)]
    for span in re.findall(r"`([^`]+)`", re.sub(r"```.*?```", "", markdown, flags=re.S)):
        span = " ".join(span.split())
        words = span.split()
        if len(words) > 1 and (words[0] in COMMAND_WORDS or re.fullmatch(r"[A-Z_]+=\S+", words[0])):
            found.append(span)
    return list(dict.fromkeys(found))


def all_commands() -> list[tuple[str, str]]:
    return [(doc.relative_to(REPO_ROOT).as_posix(), cmd) for doc in DOCUMENTS for cmd in commands_in(doc.read_text())]


def _words(command: str) -> list[str]:
    words = shlex.split(command)
    while words and (re.fullmatch(r"[A-Z_]+=\S*", words[0]) or words[0] == "time"):
        words = words[1:]  # CUDA_VISIBLE_DEVICES=1 ..., CI=true ..., time ...
    return words


def _run(args: list[str], timeout: int = 300) -> subprocess.CompletedProcess:
    args = [sys.executable if a == "python" else a for a in args]
    return subprocess.run(args, cwd=WORKDIR, env=ENV, capture_output=True, text=True, timeout=timeout)


#: Answers of the documented ``python`` commands' dry forms, run beforehand in one process
#: (:func:`python_dry_forms`), by ``json.dumps(argv)``; filled by the dry-form test's fixture.
ANSWERS: dict[str, list] = {}
LAUNCH = "saah_lab.training.launch"


def _python(*argv: str) -> tuple[int, str, str]:
    """``(exit status, stdout, stderr)`` of ``python -m MODULE ARGS`` (``argv``: MODULE ARGS) or of
    ``python SCRIPT.py ARGS``: from :data:`ANSWERS` when it ran there, else in a process of its own."""
    key = json.dumps(list(argv))
    if key in ANSWERS and WORKDIR == REPO_ROOT:
        return tuple(ANSWERS[key])
    done = _run(["python", *([] if argv[0].endswith(".py") else ["-m"]), *argv])
    return done.returncode, done.stdout, done.stderr


def _python_help(*argv: str) -> str:
    code, stdout, stderr = _python(*argv, "--help")
    assert code == 0, f"python {' '.join(argv)} --help failed: {stderr[-1500:]}"
    return stdout + stderr


def python_dry_forms() -> list[list[str]]:
    """Every ``python`` invocation the dry forms of the documented commands make (as :func:`check_python_m`
    makes them: a script's or module's --help, a subcommand's, launch's --print-config)."""
    found = []
    for _, command in all_commands():
        words = _words(command)
        if words[0] == "accelerate" and "-m" in words:
            words = ["python", *words[words.index("-m"):]]
        if words[0] != "python" or len(words) < 2:
            continue
        if words[1].endswith(".py"):
            found.append([words[1], "--help"])
            continue
        module, rest = words[2], words[3:]
        if module in ("saah_lib", "saah_lab"):
            found.append([module])
            continue
        found.append([module, "--help"])
        if rest and not rest[0].startswith("-"):  # a subcommand, or a positional argument (then the same help)
            found.append([module, rest[0], "--help"])
        if module == LAUNCH and not PLACEHOLDER.search(" ".join(rest)) and "--help" not in rest:
            found.append([module, *rest, "--print-config"])
    return [json.loads(key) for key in dict.fromkeys(json.dumps(argv) for argv in found)]


@lru_cache(maxsize=None)
def _help(*prefix: str) -> str:
    done = _run([*prefix, "--help"])
    assert done.returncode == 0, f"{' '.join(prefix)} --help failed: {done.stderr[-1500:]}"
    return done.stdout + done.stderr


def _flags_in_help(args: list[str], help_text: str, what: str) -> None:
    for flag in (a.split("=")[0] for a in args if a.startswith("--")):
        assert re.search(rf"{re.escape(flag)}\b", help_text), f"{what} has no option {flag}"


# --------------------------------------------------------------------------- the dry form of each kind

def check_make(args: list[str]) -> None:
    done = subprocess.run(["make", "-n", "--no-print-directory", *args], cwd=WORKDIR, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr


#: Scripts beside the package that the documents name: the measurement tools and the TRL suite's driver.
def documented_script(path: str) -> bool:
    return path.endswith(".py") and (path.startswith("tools/") or path == "tests/trl_suite/suite.py")


def check_python_m(args: list[str], command_help=None) -> None:
    if documented_script(args[0]):
        _flags_in_help(args[1:], _python_help(args[0]), args[0])
        return
    assert args[0] == "-m", (f"only `python -m saah_lib...`, `python -m saah_lab...`, `python tools/<script>.py` and `python "
                             f"tests/trl_suite/suite.py` are documented, got {args}")
    module, rest = args[1], args[2:]
    if module in ("saah_lib", "saah_lab"):
        assert _python(module)[0] == 0
        return
    if command_help is not None and module in saah_lab.ALL_COMMANDS:
        code, stdout, stderr = command_help(module)
        assert code == 0, f"python -m {module} --help failed: {stderr[-1500:]}"
        help_text = stdout + stderr
    else:
        help_text = _python_help(module)
    if rest and re.search(rf"\{{[\w,-]*\b{re.escape(rest[0])}\b[\w,-]*\}}", help_text.split("\n\n")[0]):
        help_text = _python_help(module, rest[0])  # a subcommand: its own options
    _flags_in_help(rest, help_text, module)
    if module == LAUNCH and not PLACEHOLDER.search(" ".join(rest)) and "--help" not in rest:
        code, stdout, stderr = _python(module, *rest, "--print-config")
        assert code == 0, stderr[-1500:]
        json.loads(stdout)


def check_accelerate(args: list[str], command_help=None) -> None:
    assert args[0] == "launch"
    split = args.index("-m") if "-m" in args else len(args)
    if len(args) > 1:
        _flags_in_help(args[1:split], _help("accelerate", "launch"), "accelerate launch")
    if split < len(args):
        check_python_m(args[split:], command_help)


def check_papermill(args: list[str]) -> None:
    if args[0] == "--help-notebook":
        if len(args) > 1:
            assert _run(["papermill", "--help-notebook", args[1]]).returncode == 0
        return
    if args[0].startswith("--"):
        _flags_in_help(args[:1], _help("papermill"), "papermill")
        return
    notebook, options = args[0], args[2:]
    declared = declared_parameters(REPO_ROOT / notebook)
    _flags_in_help([o for o in options if o.startswith("--")], _help("papermill"), "papermill")
    i = 0
    while i < len(options):
        if options[i] == "-k":
            assert options[i + 1] == "python3", "the notebooks' kernel is python3"
            i += 2
        elif options[i] == "-p":
            name, value = options[i + 1], _resolve_type(options[i + 2])  # as papermill's command line reads it
            assert name in declared, f"{notebook} has no parameter {name}"
            checked_value(name, value, declared[name]["inferred_type_name"])
            i += 3
        else:
            i += 1


def check_trl(args: list[str]) -> None:
    assert args[0] == "vllm-serve"
    _flags_in_help(args[1:], _help("trl", "vllm-serve"), "trl vllm-serve")


def check_pip(args: list[str]) -> None:
    """``pip list``, or ``pip install`` of this package (with one of its extras) or of packages at versions that
    its ranges admit, that the lock pins, or that make setup installs."""
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    if args == ["list"]:
        return
    assert args[0] == "install", f"pip {args}: only pip install and pip list are documented"
    ranges = {canonicalize_name(Requirement(r).name): Requirement(r).specifier for r in project["dependencies"]}
    smollm2 = re.findall(r"^SMOLLM2_PACKAGE := (\S+)$", (REPO_ROOT / "Makefile").read_text(), re.M)
    locked = read_lock("\n".join([(REPO_ROOT / "requirements.lock").read_text(), *smollm2]))
    rest = args[1:]
    while rest:
        item, rest = rest[0], rest[1:]
        if item in ("-e", "-q", "--no-deps"):
            continue
        if item == "--target":
            rest = rest[1:]
            continue
        package = re.fullmatch(r"\.(?:\[(\w+)\])?", item)
        if package:
            assert package.group(1) in (None, *project["optional-dependencies"]), f"pip {args}: not an extra of ours"
            continue
        if item.startswith(f"{project['name']} @ "):
            continue  # the package from elsewhere (a placeholder for a git URL): its name is the check
        requirement = Requirement(item)
        name, version = canonicalize_name(requirement.name), str(requirement.specifier).removeprefix("==")
        assert locked.get(name) == Version(version) or (name in ranges and ranges[name].contains(version)), (
            f"pip {args}: {item} is neither the locked version nor within the library's range")


def check_hf(args: list[str]) -> None:
    assert args[0] == "download" and re.fullmatch(r"[\w.-]+/[\w.-]+", args[1]), f"hf {args}: a model download"
    _flags_in_help(args[2:], _help("hf", "download"), "hf download")


def check_jupyter(args: list[str]) -> None:
    assert args[0] == "lab" and all((REPO_ROOT / a).exists() for a in args[1:] if not a.startswith("-"))
    assert (BIN / "jupyter-lab").exists()


def check_tensorboard(args: list[str]) -> None:
    _flags_in_help(args, _help("tensorboard"), "tensorboard")


def check_bash(args: list[str]) -> None:
    assert _run(["bash", "-n", args[0]]).returncode == 0


def check_source(args: list[str]) -> None:
    assert args == [".venv/bin/activate"] and (BIN / "activate").exists()


def check_conda(args: list[str]) -> None:
    assert args[:2] == ["env", "create"] and (REPO_ROOT / args[args.index("-f") + 1]).is_file()


CHECKS = {"make": check_make, "python": check_python_m, "accelerate": check_accelerate, "papermill": check_papermill,
          "trl": check_trl, "pip": check_pip, "jupyter": check_jupyter, "tensorboard": check_tensorboard,
          "bash": check_bash, "source": check_source, "conda": check_conda, "hf": check_hf}


# --------------------------------------------------------------------------- the tests

def test_the_readme_documents_commands_and_each_has_a_dry_form():
    commands = all_commands()
    readme = [c for d, c in commands if d == "README.md"]
    assert "make mini" in readme and "make test" in readme
    assert any(c.startswith("accelerate launch") for c in readme) and any("vllm_mode server" in c for c in readme)
    unknown = [c for _, c in commands if _words(c)[0] not in CHECKS and _words(c)[0] not in NOT_RUN]
    assert unknown == [], f"commands without a dry form in this test: {unknown}"


def test_the_gpu_instructions_come_right_after_the_two_commands():
    headings = re.findall(r"^## (.+)$", (REPO_ROOT / "README.md").read_text(), flags=re.M)
    assert headings[:2] == ["Two commands", "Run the paper on your GPU"]
    text = (REPO_ROOT / "README.md").read_text()
    assert text.index("## Run the paper on your GPU") < text.index("## Results") < text.index("## Design")
    assert len(text.splitlines()) < 300 and "issue" not in text.lower()


def test_every_file_the_documents_name_exists():
    missing = []
    for doc in DOCUMENTS:
        for path in re.findall(r"`((?:saah_lib|tests|notebooks|tools|docs)/[\w./-]+\.(?:py|ipynb|sh|md))`",
                               doc.read_text()):
            if not (REPO_ROOT / path).exists():
                missing.append(f"{doc.name}: {path}")
    assert missing == []


@pytest.fixture(scope="module")
def python_answers(answers_from_one_process):
    """:data:`ANSWERS` filled from one process for the tests of this module (several seconds of torch and TRL
    loading per command otherwise), and emptied after them."""
    ANSWERS.update(answers_from_one_process("documented_python_dry_forms", python_dry_forms()))
    yield
    ANSWERS.clear()


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.parametrize("document,command", all_commands())
def test_command_runs_in_its_dry_form(document, command, command_help, python_answers):
    words = _words(command)
    if words[0] in NOT_RUN:
        return
    if words[0] in ("python", "accelerate"):  # the package's commands: their --help from one shared process
        CHECKS[words[0]](words[1:], command_help)
    else:
        CHECKS[words[0]](words[1:])


@pytest.mark.e2e
@pytest.mark.slow
def test_the_readme_cpu_run_streams_its_progress_lines_as_printed(tiny_random_model_dir, tmp_path):
    (command,) = {c for d, c in all_commands() if d == "README.md" and c.startswith("papermill notebooks/02_train")
                  and "profile" not in c}
    fast = {"n_train": 16, "n_eval": 4, "max_completion_length": 12, "eval_max_new_tokens": 12,
            "eval_batch_size": 4, "eval_every": 100}
    words = _words(command)
    words[2] = str(tmp_path / "out.ipynb")
    words += ["-p", "max_steps", "1", "-p", "results_dir", str(tmp_path), "-p", "model_name", str(tiny_random_model_dir),
              "-p", "overrides", json.dumps(fast)]
    started = time.monotonic()
    process = subprocess.Popen([str(BIN / "papermill"), *words[1:]], cwd=REPO_ROOT, env=ENV, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    first_line_s = None
    output = []
    for line in process.stdout:
        output.append(line)
        if first_line_s is None and "parameters checked; loading torch and TRL" in line:
            first_line_s = time.monotonic() - started
    assert process.wait(timeout=600) == 0, "".join(output)[-3000:]
    text = "".join(output)
    assert first_line_s is not None, text[-3000:]
    (run_id,) = [p.name for p in (tmp_path / "runs").iterdir()]  # a variant of the profile: its id says so
    assert run_id.startswith("tiny-sa-a0.5-s0-")
    assert f"run {run_id}: sa, alpha 0.5, 1 steps" in text and f"training {run_id}: 0/1 steps" in text
    assert "step 1: Pass@1" in text
    # as the kernel printed them: no blank line after each (what papermill's --log-output adds)
    assert not [a for a, b in zip(output, output[1:]) if a.startswith("training ") and not b.strip()], text[-3000:]
    assert "Pass@1 final" in text and "baseline (step 0)" in text and "logs in" in text  # the end-of-run summary
    # what the run wrote, and what the executed notebook shows: plot_run's figure as a PNG, no per-step dicts
    run = RunDir(tmp_path / "runs" / run_id)
    assert [r["step"] for r in run.train_log()] == [1] and run.evaluated_steps() == {0, 1}
    outputs = [o for c in json.loads((tmp_path / "out.ipynb").read_text())["cells"] for o in c.get("outputs", [])]
    assert sum("image/png" in o.get("data", {}) for o in outputs) == 1
    streamed = "".join("".join(o["text"]) for o in outputs if o.get("output_type") == "stream")
    assert f"training {run_id}: 0/1 steps" in streamed and "'reward'" not in streamed and "\r" not in streamed
    size = (tmp_path / "out.ipynb").stat().st_size
    (Path(os.environ.get("SAAH_KEEP_NOTEBOOK", tmp_path)) / "out.ipynb").write_bytes((tmp_path / "out.ipynb").read_bytes())
    assert size < 150_000  # no per-step lines, no bar redrawn line by line
    print(f"first progress line {first_line_s:.1f} s after papermill started, {len(output)} lines in all, "
          f"executed notebook {size / 1000:.0f} KB")


# --------------------------------------------------------------------------- a fresh copy stays clean

#: Commands cheap enough to run as written (seconds to a minute, offline, nothing trained).
RUN_AS_WRITTEN = {"make help", "python -m saah_lib", "python -m saah_lab.report.render",
                  "python -m saah_lab.studies.execution.grid plan paper --seeds 123",
                  "python -m saah_lab.studies.execution.timing results/extended",
                  "python -m saah_lab.training.launch --method ah --alpha 0.25 --print-config"}
#: Where documented commands write, each of which must be git-ignored (one file inside each, as a command names it).
DOCUMENTED_OUTPUTS = ["out.ipynb", "results/local/runs/tiny-sa-a0.5-s0/train_log.jsonl",
                      "results/local/bench/cpu-tiny.json", "results/rerun/mini/reproduction.md",
                      "results/rerun/extended/reproduction.md", "data/gsm8k/train.jsonl",
                      "results/04_figures.out.ipynb", "figures/ours_pass_at_1.png"]
FAST = {"n_train": 16, "n_eval": 4, "max_completion_length": 12, "eval_max_new_tokens": 12, "eval_batch_size": 4,
        "eval_every": 100}


def fresh_copy(target: Path) -> Path:
    """This checkout's files (tracked, and untracked but not ignored) as a new git repository with one commit,
    beside this checkout's .venv and cache (both git-ignored), as a fresh clone of the working tree."""
    listed = subprocess.run(["git", "ls-files", "-z", "-co", "--exclude-standard"], cwd=REPO_ROOT, capture_output=True,
                            check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = REPO_ROOT / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    for linked in (".venv", "cache"):
        if (REPO_ROOT / linked).exists():
            (target / linked).symlink_to((REPO_ROOT / linked).resolve())
    git = ["git", "-c", "user.name=test", "-c", "user.email=test@example.org"]
    for command in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "fresh copy"]):
        subprocess.run([*git, *command], cwd=target, check=True, capture_output=True)
    return target


def _git_status(root: Path) -> str:
    return subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=root, capture_output=True,
                          text=True, check=True).stdout


def test_documented_outputs_are_git_ignored():
    done = subprocess.run(["git", "check-ignore", "--no-index", *DOCUMENTED_OUTPUTS], cwd=REPO_ROOT,
                          capture_output=True, text=True)
    assert sorted(done.stdout.split()) == sorted(DOCUMENTED_OUTPUTS)


def test_the_cpu_commands_start_by_activating_the_environment():
    readme = (REPO_ROOT / "README.md").read_text()
    cpu = re.search(r"## Your own runs on CPU\n\n```bash\n(.*?)```", readme, flags=re.S).group(1)
    assert cpu.splitlines()[0].startswith("source .venv/bin/activate")


@pytest.mark.e2e
@pytest.mark.slow
def test_documented_commands_leave_a_fresh_copy_clean(tiny_random_model_dir, tmp_path, monkeypatch):
    copy = fresh_copy(tmp_path / "copy")
    assert _git_status(copy) == ""
    monkeypatch.setattr(sys.modules[__name__], "WORKDIR", copy)
    monkeypatch.setattr(sys.modules[__name__], "ENV", _env(copy))
    commands = [c for d, c in all_commands() if d in ("README.md", "docs/notebooks.md")]
    cpu_run = next(c for c in commands if c.startswith("papermill notebooks/02_train") and "profile" not in c)
    for command in dict.fromkeys(commands):
        words = _words(command)
        if command in RUN_AS_WRITTEN:
            done = _run(words)
            assert done.returncode == 0, f"{command}: {done.stderr[-1500:]}"
        elif command == cpu_run:  # as written, one step of a tiny random model: out.ipynb and results/local
            fast = ["-p", "max_steps", "1", "-p", "model_name", str(tiny_random_model_dir),
                    "-p", "overrides", json.dumps(FAST)]
            done = _run([str(BIN / "papermill"), *words[1:], *fast], timeout=600)
            assert done.returncode == 0, done.stderr[-3000:]
        elif words[0] == "make":  # make -n: the recipes it would run, in the copy's own Makefile
            check_make(words[1:])
        # The other dry forms (--help, --print-config, --help-notebook) write nothing: they are checked in this
        # checkout by test_command_runs_in_its_dry_form; running them again here would only double their process
        # starts (a minute and more on two cores).
    assert (copy / "out.ipynb").is_file()
    assert [p.name for p in (copy / "results" / "local" / "runs").glob("tiny-sa-a0.5-s0*")]
    assert _git_status(copy) == "", "documented commands changed committed files or left files git does not ignore"
