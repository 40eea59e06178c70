"""Every ``python -m saah_lib...``/``saah_lab...`` command answers --help with its choices and defaults; a module
that is not a command says so instead of exiting 0 in silence, a name no module has fails as Python says;
``make help`` lists every make target."""

import importlib
import os
import re
import subprocess
import sys

import pytest

import bench
import saah_lab
import saah_lib
from saah_lib.paths import REPO_ROOT

ENV = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "HF_HUB_OFFLINE": "1"}


def _python_m(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", *args], cwd=REPO_ROOT, env=ENV, capture_output=True, text=True,
                          timeout=timeout)


def _modules_with_a_main(*packages: str) -> set[str]:
    found = set()
    for path in [p for package in packages or ("saah_lib", "saah_lab") for p in (REPO_ROOT / package).rglob("*.py")]:
        if 'if __name__ == "__main__":' in path.read_text():
            parts = path.relative_to(REPO_ROOT).with_suffix("").parts
            found.add(".".join(parts[:-1] if parts[-1] == "__main__" else parts))
    return found


#: Modules with a main that the package starts itself, never a user: not listed as commands.
INTERNAL = {"saah_lab.studies.execution.watchdog": "started by the Ray engine beside the local instance it watches"}


def test_the_command_list_is_every_module_with_a_main():
    assert set(saah_lab.ALL_COMMANDS) == _modules_with_a_main() - set(INTERNAL)


def test_the_bench_command_list_is_every_bench_module_with_a_main():
    assert set(bench.COMMANDS) == _modules_with_a_main("bench")


@pytest.mark.slow
@pytest.mark.parametrize("command", sorted(set(bench.COMMANDS) - {"bench"}))
def test_every_bench_command_prints_help(command, command_help):
    code, stdout, stderr = command_help(command)
    assert code == 0, stderr[-2000:]
    assert stdout.startswith(f"usage: python -m {command}")


def test_python_m_bench_lists_its_commands_and_refuses_a_module_that_is_none():
    done = _python_m("bench")
    assert done.returncode == 0
    assert all(f"python -m {name}" in done.stdout for name in bench.COMMANDS)
    done = _python_m("bench.files", "--help")
    assert (done.returncode, done.stdout) == (2, "")
    assert "bench.files is a module, not a command" in done.stderr and "python -m bench.step" in done.stderr


@pytest.mark.slow
@pytest.mark.parametrize("command", sorted(set(saah_lab.ALL_COMMANDS) - {"saah_lib", "saah_lab"}))
def test_every_command_prints_help_with_defaults(command, command_help):
    code, stdout, stderr = command_help(command)
    assert code == 0, stderr[-2000:]
    assert stdout.startswith(f"usage: python -m {command}")
    # positional arguments and subcommands only: no default to show
    assert "(default:" in stdout or command in ("saah_lab.rundir.manifest", "saah_lib.numerics",
                                                "saah_lab.studies.execution.timing", "saah_lib.tasks.gsm8k",
                                                "saah_lab.studies.verify", "saah_lab.analysis.crossed_simulation",
                                                "saah_lab.report.paper_inputs")
    assert str(REPO_ROOT) not in stdout  # defaults are shown relative to the repository, as they are meant


def test_python_m_lists_the_commands():
    done = _python_m("saah_lib")
    assert done.returncode == 0
    assert all(f"python -m {name}" in done.stdout for name in saah_lib.COMMANDS)
    done = _python_m("saah_lab")
    assert done.returncode == 0
    assert all(f"python -m {name}" in done.stdout for name in saah_lab.ALL_COMMANDS)


@pytest.mark.parametrize("module", ["saah_lab.studies.plans", "saah_lab.studies.verify.bits", "saah_lab.training.run"])
def test_a_library_module_run_as_a_command_says_so(module):
    done = _python_m(module, "--help")
    assert done.returncode == 2 and done.stdout == ""
    assert f"{module} is a module, not a command" in done.stderr
    assert "python -m saah_lab.training.launch" in done.stderr


def test_an_old_module_name_fails_as_python_says_and_importing_adds_no_hook():
    assert not [f for f in sys.meta_path if type(f).__module__.startswith(("saah_lib", "saah_lab"))]
    with pytest.raises(ModuleNotFoundError, match="^No module named 'saah_lib.studies'$"):
        importlib.import_module("saah_lib.studies.mini")
    done = _python_m("saah_lib.studies.mini", "--help", timeout=120)
    assert (done.returncode, done.stdout) == (1, "")
    assert "ModuleNotFoundError: No module named 'saah_lib.studies'" in done.stderr
    with pytest.raises(AttributeError, match="has no attribute 'run_training'"):
        saah_lib.run_training


def _phony_targets() -> list[str]:
    makefile = (REPO_ROOT / "Makefile").read_text()
    return re.search(r"^\.PHONY: (.+)$", makefile, flags=re.M).group(1).split()


def test_make_help_has_one_line_per_target():
    done = subprocess.run(["make", "--no-print-directory", "help"], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    listed = [line.split()[1] for line in done.stdout.splitlines()]
    assert sorted(listed) == sorted(_phony_targets())
    assert all(len(line.split(maxsplit=2)) == 3 for line in done.stdout.splitlines())  # each with its text


def test_make_alone_prints_the_help():
    done = subprocess.run(["make", "--no-print-directory"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert done.stdout.splitlines()[0].split()[:2] == ["make", "help"]
