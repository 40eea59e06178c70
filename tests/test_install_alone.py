"""The library installs alone: a fresh venv (no system site packages), torch (:data:`TORCH`), then saah_lib
with pip resolving ``[project].dependencies`` for real; it trains two steps on a tiny model built offline, and
none of the artifact's packages came with it (the package saah_lib is the library, saah_lab the lab).

Three sets of versions: the lock's (requirements.lock), the newest releases the ranges admit (pip's choice without
constraints), and the oldest they admit (every dependency at its lower bound, as ``uv pip install --resolution
lowest-direct`` would pick). pip's cache (its default folder) is kept between runs: only the first downloads.
"""

import json
import os
import shutil
import subprocess
import sys
import tomllib

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from saah_lib.paths import REPO_ROOT

PYPROJECT = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
#: torch first and pinned (an unpinned torch would pull several GB of CUDA wheels): the lock's and the range's lowest
#: for "lock" and "oldest", the newest release the range admits that pip installs on these machines for "newest"
#: (x86-64's wheel of it is the CUDA build; it trains on the CPU all the same)
TORCH = {"lock": "torch==2.13.0", "oldest": "torch==2.13.0", "newest": "torch==2.14.1"}
#: Distributions of the artifact that must not arrive with the library. pandas, PyYAML and psutil are left out:
#: TRL 1.16 itself requires them (and datasets pandas), so they come with any install of TRL.
ARTIFACT_DISTRIBUTIONS = ("ray", "papermill", "jupyterlab", "notebook", "ipykernel", "ipywidgets", "matplotlib",
                          "scipy", "nbformat", "nbclient")

# Runs in the venv, from a folder outside the repository: the installed saah_lib, not the checkout.
TRAIN_TWO_STEPS = r"""
import sys
import torch
from datasets import Dataset
import saah_lib
from saah_lib import SAAHGRPOConfig, SAAHGRPOTrainer
from saah_lib.models.tiny import build_tokenizer, init_tiny_model
from saah_lib.models.warmstart import WarmStartSettings, tokenizer_corpus

assert "site-packages" in saah_lib.__file__, saah_lib.__file__
torch.manual_seed(0)
settings = WarmStartSettings(hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=1, intermediate_size=64,
                             tokenizer_problems=300)
tokenizer = build_tokenizer(tokenizer_corpus(settings, seed=0))
model = init_tiny_model(tokenizer, settings)
model.save_pretrained("model")
tokenizer.save_pretrained("model")
dataset = Dataset.from_dict({"prompt": [f"What is {a} + {b}?" for a, b in [(2, 3), (7, 5), (4, 4), (9, 1)]]})
args = SAAHGRPOConfig(output_dir="out", method="sa", alpha=0.5, max_steps=2, per_device_train_batch_size=4,
                      num_generations=4, max_completion_length=8, save_strategy="no", report_to="none",
                      use_cpu=True)
trainer = SAAHGRPOTrainer(model="model", reward_funcs=lambda completions, **kw: [float(len(c)) for c in completions],
                          args=args, train_dataset=dataset)
trainer.train()
print("steps", trainer.state.global_step, "method", trainer.args.method)
"""


def _lower_bound(requirement: Requirement) -> str:
    (low,) = [s.version for s in requirement.specifier if s.operator == ">="]
    return low


def constraints(versions: str) -> list[str]:
    """The pins that choose one set of the library's dependencies: the lock's, none (the newest) or the lower
    bounds (the oldest admitted)."""
    if versions == "newest":
        return []
    if versions == "oldest":
        return [f"{Requirement(r).name}=={_lower_bound(Requirement(r))}" for r in PYPROJECT["dependencies"]]
    names = {canonicalize_name(Requirement(r).name) for r in PYPROJECT["dependencies"]}
    lines = (line.split("#")[0].strip() for line in (REPO_ROOT / "requirements.lock").read_text().splitlines())
    return [line for line in lines if line and canonicalize_name(line.split("==")[0]) in names]


def test_the_oldest_constraints_are_every_dependency_at_its_lower_bound():
    oldest = dict(c.split("==") for c in constraints("oldest"))
    assert oldest["transformers"] == "5.23.0" and oldest["torch"] == "2.13.0" and len(oldest) == len(
        PYPROJECT["dependencies"])
    locked = dict(c.split("==") for c in constraints("lock"))
    assert set(locked) == {Requirement(r).name for r in PYPROJECT["dependencies"]} and locked["trl"] == "1.16.0"


def _run(cmd, **kwargs):
    done = subprocess.run(cmd, capture_output=True, text=True, check=False, **kwargs)
    assert done.returncode == 0, f"{' '.join(map(str, cmd))}\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
    return done.stdout


@pytest.mark.e2e  # minutes: a venv, a resolution and an install of about 60 packages (from pip's cache after the first)
@pytest.mark.parametrize("versions", ["lock", "newest", "oldest"])
def test_the_library_installs_alone_and_trains_two_steps(versions, tmp_path):
    venv = tmp_path / "venv"
    _run([getattr(sys, "_base_executable", sys.executable), "-m", "venv", str(venv)])
    python = str(venv / "bin" / "python")
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV")}
    pip = [python, "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    _run(pip + [TORCH[versions]], env=env)
    pins = tmp_path / "constraints.txt"
    pins.write_text("\n".join(constraints(versions)) + "\n")
    # a real resolution of the library's ranges (no --no-deps), from a copy of the package: pip builds in the
    # source folder, and the checkout stays untouched (tests may run side by side)
    source = tmp_path / "source"
    shutil.copytree(REPO_ROOT / "saah_lib", source / "saah_lib", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO_ROOT / "pyproject.toml", source)
    _run(pip + ["-c", str(pins), str(source)], env=env, cwd=tmp_path)
    installed = {canonicalize_name(p["name"]): p["version"]
                 for p in json.loads(_run([python, "-m", "pip", "list", "--format=json"], env=env))}
    print(versions, {Requirement(r).name: installed[canonicalize_name(Requirement(r).name)]
                     for r in PYPROJECT["dependencies"]})
    assert [name for name in ARTIFACT_DISTRIBUTIONS if name in installed] == []
    for line in constraints(versions):
        name, version = line.split("==")
        assert installed[canonicalize_name(name)].split("+")[0] == version, (name, installed[canonicalize_name(name)])
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    out = _run([python, "-c", TRAIN_TWO_STEPS], cwd=run_dir, timeout=600,
               env=env | {"HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""})
    assert "steps 2 method sa" in out
