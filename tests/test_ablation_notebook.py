"""Notebook 03 under papermill: each run's progress lines reach the notebook although the runs train in Ray
workers, and the table and plot hold the sweep's own runs only, beside a longer run of another method."""

import json
import re
from pathlib import Path

import papermill
import pytest

from saah_lib.training.config import make_config

REPO = Path(__file__).resolve().parents[1]
FAST = {"n_train": 16, "n_eval": 4, "max_completion_length": 12, "eval_max_new_tokens": 12,
        "eval_batch_size": 4, "save_steps": 2, "eval_every": 2}


@pytest.mark.e2e
@pytest.mark.slow
def test_the_ablation_notebook_streams_progress_and_shows_only_its_runs(tiny_random_model_dir, tmp_path, run_maker):
    results = tmp_path / "results"
    model = make_config("tiny", model_name=str(tiny_random_model_dir)).model_label
    for method, alpha in (("sa", 0.5), ("ah", 0.1)):  # runs of the same model, not of this sweep: 6 steps
        run_maker(results, f"tiny-{method}-a{alpha:g}-s0", model, method, alpha, 0, steps=6, eval_every=2)
    out = tmp_path / "03.out.ipynb"
    papermill.execute_notebook(str(REPO / "notebooks" / "03_ablation.ipynb"), str(out), kernel_name="python3",
                               cwd=str(REPO), progress_bar=False,
                               parameters={"alphas": "[0.0, 0.25]", "steps": 2, "seed": 0, "results_dir": str(results),
                                           "overrides": dict(FAST, model_name=str(tiny_random_model_dir))})
    cells = json.loads(out.read_text())["cells"]
    streamed = "".join("".join(o["text"]) for c in cells for o in c.get("outputs", []) if o["output_type"] == "stream")
    # the sweep's runs: variants of the profile (2 steps, small data), their ids say so after the usual prefix
    runs = sorted(set(re.findall(r"training (tiny-ah-a0(?:\.25)?-s0-\S+): 0/2 steps", streamed)))
    assert [r.split("-s0-")[0] for r in runs] == ["tiny-ah-a0", "tiny-ah-a0.25"], streamed
    for run in runs:
        assert f"training {run}: 2/2 steps (100%)" in streamed, streamed
    table = next("".join(o["data"]["text/plain"]) for c in cells for o in c.get("outputs", [])
                 if "text/plain" in o.get("data", {}) and "peak_pass_at_1" in "".join(o["data"]["text/plain"]))
    # (method, alpha, steps) of each row: the 6-step runs are left out
    rows = re.findall(r"^\d+ +.+? +(ah|sa|grpo) +([-\d.]+) +(?:[A-Z]\S* +)?([\d.]+) ", table, flags=re.M)
    assert rows == [("ah", "0.00", "2.0"), ("ah", "0.25", "2.0")], table
    assert sum("image/png" in o.get("data", {}) for c in cells for o in c.get("outputs", [])) == 1
