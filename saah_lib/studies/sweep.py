"""The alpha ablation as a series of papermill jobs of ``notebooks/02_train.ipynb``.

Each run's executed notebook is kept beside its logs
(``<results>/runs/<run_id>/02_train.ipynb``); runs already complete are skipped,
and an interrupted one resumes from its last checkpoint.
"""

from __future__ import annotations

from pathlib import Path

import papermill

from saah_lib.paths import NOTEBOOKS, REPO_ROOT
from saah_lib.rundir.folder import RunDir
from saah_lib.training.config import check_overrides, make_config

TRAIN_NOTEBOOK = NOTEBOOKS / "02_train.ipynb"


def run_alpha_sweep(alphas, *, profile: str = "tiny", method: str = "ah", seed: int = 123,
                    steps: int | None = None, results_dir: str = "results", overrides: dict | None = None,
                    notebook: Path = TRAIN_NOTEBOOK, kernel: str = "python3") -> list[dict]:
    """Train one run per alpha (skipping complete ones); returns what happened to each."""
    overrides = check_overrides(overrides)  # a list here would otherwise fail inside the notebook
    # every config is validated before the first run starts
    configs = [make_config(profile, method=method, alpha=a, seed=seed, steps=steps, results_dir=results_dir,
                           **overrides) for a in alphas]
    outcome = []
    for cfg in configs:
        if RunDir(cfg.run_dir).is_complete(cfg.steps):
            outcome.append({"run_id": cfg.run_id, "alpha": cfg.alpha, "status": "already complete"})
            continue
        cfg.run_dir.mkdir(parents=True, exist_ok=True)
        papermill.execute_notebook(
            str(notebook), str(cfg.run_dir / "02_train.ipynb"), kernel_name=kernel, cwd=str(REPO_ROOT),
            parameters=dict(profile=profile, method=method, alpha=cfg.alpha, seed=seed, steps=cfg.steps,
                            run_id=cfg.run_id, results_dir=str(results_dir), overrides=overrides),
        )
        outcome.append({"run_id": cfg.run_id, "alpha": cfg.alpha, "status": "trained"})
    return outcome
