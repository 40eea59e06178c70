"""The notebooks run end to end under papermill, with tiny parameters, offline."""

import json
import re
import shutil
import subprocess
from pathlib import Path

import papermill
import pytest

from saah_lab.studies.execution.grid import run_ablation
from saah_lab.training.notebook_params import declared_parameters
from saah_lib.rundir.folder import RunDir
from saah_lib.training.config import LOCAL_RESULTS_DIR

REPO = Path(__file__).resolve().parents[1]
FAST = {"n_train": 16, "n_eval": 4, "max_completion_length": 12, "eval_max_new_tokens": 12,
        "eval_batch_size": 4, "save_steps": 2, "eval_every": 2}


def _outputs(nb) -> list[dict]:
    return [o for c in nb["cells"] for o in c.get("outputs", [])]


def _images(nb) -> int:
    return sum("image/png" in o.get("data", {}) for o in _outputs(nb))


def execute(name, out_dir, **parameters):
    out = out_dir / f"{name}.out.ipynb"
    papermill.execute_notebook(str(REPO / "notebooks" / f"{name}.ipynb"), str(out), parameters=parameters,
                               kernel_name="python3", cwd=str(REPO), progress_bar=False)
    return json.loads(out.read_text())


NOTEBOOKS = ["01_baseline", "02_train", "03_ablation", "04_figures"]


def _makefile_kernel() -> tuple[str, str]:
    """(name, display name) of the kernel that `make setup` installs."""
    makefile = (REPO / "Makefile").read_text()
    found = re.search(r'ipykernel install .*--name (\S+) --display-name "\$\(KERNEL_DISPLAY_NAME\)"', makefile)
    assert found, "the Makefile installs no kernel named by KERNEL_DISPLAY_NAME"
    return found.group(1), re.search(r"^KERNEL_DISPLAY_NAME := (.+)$", makefile, flags=re.M).group(1)


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebooks_are_committed_clean_with_a_parameters_cell(name):
    nb = json.loads((REPO / "notebooks" / f"{name}.ipynb").read_text())
    # the kernel `make setup` installs, by name and display name: JupyterLab marks a notebook whose
    # kernelspec differs from the running kernel's as modified the moment it is opened
    kernel = nb["metadata"]["kernelspec"]
    assert (kernel["name"], kernel["display_name"]) == _makefile_kernel()
    ids = [c["id"] for c in nb["cells"]]
    assert len(ids) == len(set(ids))  # duplicates are rewritten (and the notebook marked modified) on opening
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert not any(c.get("outputs") or c.get("execution_count") for c in code)
    assert "parameters" in code[0]["metadata"].get("tags", [])
    assert f'read_parameters("{name}", globals())' in "".join(code[1]["source"])  # checked before anything runs


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_every_parameter_is_typed_documented_and_listed_by_papermill(name):
    """papermill --help-notebook reads the parameters cell line by line; a second '=' on a line hid one."""
    declared = declared_parameters(name)
    source = "".join(json.loads((REPO / "notebooks" / f"{name}.ipynb").read_text())["cells"][1]["source"])
    assigned = [line.split(":")[0] for line in source.splitlines() if "=" in line]
    assert list(declared) == assigned
    for parameter, info in declared.items():
        assert info["inferred_type_name"] != "None", f"{parameter} has no type"
        assert info["help"], f"{parameter} has no help"
    assert "results_dir" not in declared or declared["results_dir"]["default"] == f'"{LOCAL_RESULTS_DIR}"'
    assert "seed" not in declared or declared["seed"]["default"] == "None"  # the profile's (0 tiny, 123 the paper's)


@pytest.mark.slow
def test_an_unknown_parameter_is_an_error_naming_the_known_ones(tmp_path):
    with pytest.raises(papermill.PapermillExecutionError) as raised:
        execute("04_figures", tmp_path, tolerate_problem=True)  # a typo of tolerate_problems
    assert "'tolerate_problem'" in str(raised.value) and "tolerate_problems" in str(raised.value)


@pytest.mark.slow
def test_a_kernel_name_given_as_a_parameter_does_not_switch_the_unknown_name_check_off_in_02(tmp_path):
    # -p In x replaced the history the check read, and -p bogus 1 then trained a run
    with pytest.raises(papermill.PapermillExecutionError) as raised:
        execute("02_train", tmp_path, In="x", bogus=1, results_dir=str(tmp_path / "results"))
    assert "'In', 'bogus'" in str(raised.value) and "02_train declares" in str(raised.value)
    assert not (tmp_path / "results").exists()


# The notebooks are independent tests (not one chain) so that `make test`'s workers share them.
# 02_train itself runs in tests/test_readme_commands.py, as the README's command under `papermill --stdout-file /dev/stdout`.
@pytest.mark.e2e
@pytest.mark.slow
def test_baseline_notebook(tiny_random_model_dir, tmp_path):
    results = tmp_path / "results"
    # overrides as `papermill -p overrides '{...}'` passes it: a string, parsed by the notebook
    execute("01_baseline", tmp_path, model_name=str(tiny_random_model_dir), results_dir=str(results),
            overrides=json.dumps(FAST), progress=False)
    assert [r["step"] for r in RunDir(results / "baselines" / "tiny-zero-shot").evals()] == [0]


@pytest.mark.e2e
@pytest.mark.slow
def test_ablation_notebook_trains_each_alpha_once(tiny_random_model_dir, tmp_path):
    results = tmp_path / "results"
    overrides = dict(FAST, model_name=str(tiny_random_model_dir))
    nb = execute("03_ablation", tmp_path, alphas="[0.0, 0.25]", steps=2, seed=0, results_dir=str(results),
                 overrides=overrides)  # alphas as `-p alphas '[0.0, 0.25]'` passes it
    assert _images(nb) == 1
    # 2 steps and the FAST settings differ from the profile's in more than two settings: ids end in a short hash
    run_dirs = sorted((results / "runs").iterdir())
    assert [re.sub(r"-v[0-9a-f]{6}$", "-v*", d.name) for d in run_dirs] == ["tiny-ah-a0-s0-v*", "tiny-ah-a0.25-s0-v*"]
    assert run_dirs[0].name[-7:] == run_dirs[1].name[-7:]  # the same settings: the same hash
    for run_dir in run_dirs:
        assert RunDir(run_dir).is_complete(2)
    # a second ablation finds both runs complete and trains nothing
    before = (run_dirs[1] / "train_log.jsonl").read_text()
    again = run_ablation([0.0, 0.25], method="ah", seed=0, steps=2, results_dir=str(results), overrides=overrides)
    assert [o["status"] for o in again] == ["already complete"] * 2
    assert (run_dirs[1] / "train_log.jsonl").read_text() == before


@pytest.mark.e2e
@pytest.mark.slow
def test_figures_notebook_and_the_pdf_from_a_users_runs(tmp_path, run_maker, baseline_maker):
    results = tmp_path / "results"  # what 01-03 write, in the committed format
    baseline_maker(results, "tiny-zero-shot", "tiny", 100, 30)
    for method, alpha in (("ah", 0.0), ("ah", 0.25), ("sa", 0.5)):  # as 02 and 03 above write them
        run_maker(results, f"tiny-{method}-a{alpha:g}-s0", "tiny", method, alpha, 0, steps=4, eval_every=2)
    # the figures notebook into a copy of the paper tree, then the PDF as `make paper` builds it
    paper, figures = tmp_path / "paper", tmp_path / "figures"
    paper.mkdir()
    for name in ("main.tex", "local.tex", "preamble.tex"):
        shutil.copy(REPO / "paper" / name, paper / name)
    nb = execute("04_figures", tmp_path, results_root=str(results), mini_root="",
                 figures_dir=str(figures), tables_dir=str(paper / "generated"))
    assert _images(nb) >= 3
    assert (paper / "generated" / "ours_main.tex").is_file() and (paper / "generated" / "reported_main.tex").is_file()
    assert (figures / "ours_pass_at_1.png").is_file() and (figures / "ours_alpha_ablation.pdf").is_file()
    if not shutil.which("latexmk"):
        pytest.skip("latexmk not installed (tools/install_latex.sh installs it)")
    for tex in ("main.tex", "local.tex"):  # the studies' report, and your runs' own
        subprocess.run(["latexmk", "-pdf", "-interaction=nonstopmode", "-halt-on-error", tex], cwd=paper,
                       check=True, capture_output=True, timeout=300)
        pdf = (paper / tex.replace(".tex", ".pdf")).read_bytes()
        assert pdf.startswith(b"%PDF") and b"%%EOF" in pdf[-1024:] and len(pdf) > 50_000
    if shutil.which("pdftotext"):
        text = {tex: subprocess.run(["pdftotext", str(paper / f"{tex}.pdf"), "-"], capture_output=True, text=True,
                                    check=True).stdout for tex in ("main", "local")}
        assert "tiny-sa-a0.5-s0" in text["local"] and "Your own runs" in text["local"]
        assert "tiny-sa-a0.5-s0" not in text["main"]  # the committed report never shows your runs


@pytest.mark.slow
def test_a_failed_render_says_why_without_the_librarys_stack(tmp_path, run_maker):
    results = tmp_path / "results"
    original = run_maker(results, "tiny-sa-a0.5-s0", "tiny", "sa", 0.5, 0, steps=4, eval_every=2)
    shutil.copytree(original, results / "runs" / "tiny-sa-a0.5-s0 copy")  # the same run twice
    with pytest.raises(papermill.PapermillExecutionError) as raised:
        execute("04_figures", tmp_path, results_root=str(results), mini_root="", extended_root="",
                confirm_root="", real_study_root="", paper_reported_dir="", figures_dir=str(tmp_path / "f"),
                tables_dir=str(tmp_path / "t"))
    message = str(raised.value)
    assert "RuntimeError: the report stopped:" in message and "tiny-sa-a0.5-s0 copy" in message
    assert "saah_lab/rundir/reader.py" not in message and "saah_lab/report/render.py" not in message
