"""Every process a study starts runs the pinned CPU numerics: spawned training workers and notebook kernels.

Each test first removes the pin from the environment the child inherits, so that the child
must pin itself (a worker by importing saah_lab.studies before torch, a kernel through the pinned kernelspec).
"""

import json
import shutil

import nbformat
import papermill
import pytest

from saah_lab.studies.execution.runner import Plan, run_job, run_plan
from saah_lab.studies.execution.timing import Timings
from saah_lib.numerics import (
    MODE_VARIABLE,
    PINNED_CAPABILITY,
    PINNED_SETTINGS,
    RECORD_KEY,
    SET_BY_PIN_VARIABLE,
    cpu_description,
    pin_obstacle,
)
from saah_lib.numerics.__main__ import pin_kernelspec
from saah_lib.paths import REPO_ROOT
from saah_lib.rundir.folder import RunDir
from saah_lib.training.config import make_config

CPU = cpu_description()
pytestmark = pytest.mark.skipif(pin_obstacle(CPU) is not None, reason=f"{pin_obstacle(CPU)}")
CAPABILITY_CELL = "import torch\ncapability = torch.backends.cpu.get_cpu_capability()\nprint(capability)"


@pytest.fixture
def unpinned_parent(monkeypatch):
    """The environment a child inherits, as if this process had never been pinned."""
    for name in (*PINNED_SETTINGS, SET_BY_PIN_VARIABLE, MODE_VARIABLE):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PYTHONPATH", str(REPO_ROOT))  # the children import this tree's saah_lib


@pytest.mark.slow
def test_an_engine_worker_pins_itself_and_records_it(unpinned_parent, tiny_random_model_dir, tmp_path):
    cfg = make_config("tiny", model_name=str(tiny_random_model_dir), method="sa", alpha=0.5, seed=0, max_steps=1,
                      n_train=8, n_eval=2, max_completion_length=8, eval_max_new_tokens=8, eval_batch_size=2,
                      eval_every=1, save_steps=1, results_dir=str(tmp_path))
    plan = Plan("one", tmp_path, [run_job(cfg)])  # a Ray worker of a local instance, one torch thread
    [entry] = run_plan(plan, Timings(tmp_path / "timings.json"))
    assert (entry["cpu_capability"], entry["torch_threads"]) == (PINNED_CAPABILITY, 1)
    recorded = RunDir(cfg.run_dir).read_config()[RECORD_KEY]
    assert recorded["capability"] == PINNED_CAPABILITY and recorded["pin_holds"] is True
    assert recorded["torch_threads"] == 1 and recorded["cpu_model"] == CPU["cpu_model"]


def _notebook_capability(tmp_path, first_cell: str, kernel: str = "python3") -> str:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(first_cell),
                                         nbformat.v4.new_code_cell(CAPABILITY_CELL)])
    path = tmp_path / f"probe-{kernel}.ipynb"
    nbformat.write(nb, path)
    out = papermill.execute_notebook(str(path), str(path), kernel_name=kernel, cwd=str(tmp_path), progress_bar=False)
    return "".join(o.get("text", "") for o in out.cells[-1].outputs).strip()


def test_a_papermill_kernel_of_a_study_notebook_pins_itself(unpinned_parent, tmp_path):
    # the kernel `make setup` installs, which papermill starts for notebooks/01-04 (and studies/sweep.py)
    installed = REPO_ROOT / ".venv" / "share" / "jupyter" / "kernels" / "python3" / "kernel.json"
    if not installed.is_file() or "saah_lib.numerics" not in installed.read_text():
        pytest.skip(f"no pinned kernelspec at {installed} (make setup installs it)")
    assert _notebook_capability(tmp_path, "import torch") == PINNED_CAPABILITY


@pytest.mark.slow
def test_the_pinned_kernelspec_pins_a_notebook_that_imports_torch_first(unpinned_parent, tmp_path, monkeypatch):
    installed = REPO_ROOT / ".venv" / "share" / "jupyter" / "kernels" / "python3"
    if not (installed / "kernel.json").is_file():
        pytest.skip(f"no kernelspec installed at {installed} (make setup installs it)")
    kernel_dir = tmp_path / "jupyter" / "kernels" / "saah-pinned-test"
    shutil.copytree(installed, kernel_dir)
    pin_kernelspec(kernel_dir)
    assert json.loads((kernel_dir / "kernel.json").read_text())["argv"][-4:-2] == ["saah_lib.numerics", "kernel"]
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    assert _notebook_capability(tmp_path, "x = 1", kernel="saah-pinned-test") == PINNED_CAPABILITY
    monkeypatch.setenv(MODE_VARIABLE, "native")  # the switch still works through the kernelspec
    native = _notebook_capability(tmp_path, "x = 1", kernel="saah-pinned-test")
    has_avx512 = {"avx512vl", "avx512bw", "avx512dq"} <= set(CPU["cpu_flags"])
    assert native == ("AVX512" if has_avx512 else PINNED_CAPABILITY)
