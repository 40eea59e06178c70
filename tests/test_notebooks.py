"""The notebooks run end to end under papermill, with tiny parameters, offline."""

import json
import shutil
import subprocess
from pathlib import Path

import papermill
import pytest

from saah_lib.rundir.folder import RunDir
from saah_lib.studies.sweep import run_alpha_sweep

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[1]
FAST = {"n_train": 16, "n_eval": 4, "max_completion_length": 12, "eval_max_new_tokens": 12,
        "eval_batch_size": 4, "save_every": 2, "eval_every": 2}


def execute(name, out_dir, **parameters):
    out = out_dir / f"{name}.out.ipynb"
    papermill.execute_notebook(str(REPO / "notebooks" / f"{name}.ipynb"), str(out), parameters=parameters,
                               kernel_name="python3", cwd=str(REPO), progress_bar=False)
    return json.loads(out.read_text())


@pytest.mark.parametrize("name", ["01_baseline", "02_train", "03_ablation", "04_figures"])
def test_notebooks_are_committed_clean_with_a_parameters_cell(name):
    nb = json.loads((REPO / "notebooks" / f"{name}.ipynb").read_text())
    assert nb["metadata"]["kernelspec"]["name"] == "python3"
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert not any(c.get("outputs") or c.get("execution_count") for c in code)
    assert "parameters" in code[0]["metadata"].get("tags", [])


def test_baseline_train_and_ablation_notebooks(tiny_random_model_dir, tmp_path):
    results = tmp_path / "results"
    model = str(tiny_random_model_dir)

    execute("01_baseline", tmp_path, model_name=model, results_dir=str(results), overrides=FAST, progress=False)
    assert [r["step"] for r in RunDir(results / "baselines" / "tiny-zero-shot").evals()] == [0]

    nb = execute("02_train", tmp_path, method="sa", alpha=0.5, steps=2, seed=0, results_dir=str(results),
                 model_name=model, overrides=FAST, progress=False)
    run = RunDir(results / "runs" / "tiny-sa-a0.5-s0")
    assert [r["step"] for r in run.train_log()] == [1, 2] and run.evaluated_steps() == {0, 2}
    assert any(o.get("output_type") == "display_data" for c in nb["cells"] for o in c.get("outputs", []))

    overrides = dict(FAST, model_name=model)
    execute("03_ablation", tmp_path, alphas=[0.0, 0.25], steps=2, seed=0, results_dir=str(results),
            overrides=overrides)
    for alpha in ("0", "0.25"):
        run_dir = results / "runs" / f"tiny-ah-a{alpha}-s0"
        assert RunDir(run_dir).is_complete(2)
        assert (run_dir / "02_train.ipynb").is_file()  # the executed job is kept beside its logs
    # a second sweep finds both runs complete and trains nothing
    before = (results / "runs" / "tiny-ah-a0.25-s0" / "train_log.jsonl").read_text()
    again = run_alpha_sweep([0.0, 0.25], method="ah", seed=0, steps=2, results_dir=str(results), overrides=overrides)
    assert [o["status"] for o in again] == ["already complete"] * 2
    assert (results / "runs" / "tiny-ah-a0.25-s0" / "train_log.jsonl").read_text() == before

    # the figures notebook into a copy of the paper tree, then the PDF as `make paper` builds it
    paper, figures = tmp_path / "paper", tmp_path / "figures"
    paper.mkdir()
    shutil.copy(REPO / "paper" / "main.tex", paper / "main.tex")
    execute("04_figures", tmp_path, results_root=str(results), mini_root=str(tmp_path / "none"),
            figures_dir=str(figures), tables_dir=str(paper / "generated"))
    assert (paper / "generated" / "ours_main.tex").is_file() and (paper / "generated" / "reported_main.tex").is_file()
    assert (figures / "ours_pass_at_1.png").is_file() and (figures / "ours_alpha_ablation.pdf").is_file()
    if not shutil.which("latexmk"):
        pytest.skip("latexmk not installed (tools/install_latex.sh installs it)")
    subprocess.run(["latexmk", "-pdf", "-interaction=nonstopmode", "-halt-on-error", "main.tex"], cwd=paper,
                   check=True, capture_output=True, timeout=300)
    pdf = (paper / "main.pdf").read_bytes()
    assert pdf.startswith(b"%PDF") and b"%%EOF" in pdf[-1024:] and len(pdf) > 50_000
