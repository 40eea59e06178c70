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
from saah_lib.training.notebook_params import declared_parameters
from saah_lib.training.config import LOCAL_RESULTS_DIR, check_overrides, make_config

TRAIN_NOTEBOOK = NOTEBOOKS / "02_train.ipynb"
#: the config fields each run of the sweep gets from the sweep's own arguments
SWEEP_FIELDS = ("profile", "method", "alpha", "seed", "max_steps", "run_id", "results_dir")


def run_alpha_sweep(alphas, *, profile: str = "tiny", method: str = "ah", seed: int | None = None,
                    steps: int | None = None, results_dir: str = LOCAL_RESULTS_DIR, overrides: dict | None = None,
                    notebook: Path = TRAIN_NOTEBOOK, kernel: str = "python3") -> list[dict]:
    """Train one run per alpha (skipping complete ones); returns what happened to each.

    ``overrides`` holds other config fields; those that ``notebook`` takes as parameters of
    their own (e.g. ``model_name``) are passed to it as such, the rest as its ``overrides``.
    """
    overrides = check_overrides(overrides)  # a list here would otherwise fail inside the notebook
    swept = sorted(set(overrides) & set(SWEEP_FIELDS))
    if swept:
        raise ValueError(f"overrides sets {', '.join(map(repr, swept))}, which the sweep sets itself "
                         f"(from its own arguments {', '.join(SWEEP_FIELDS)})")
    # every config is validated before the first run starts
    configs = [make_config(profile, method=method, alpha=a, seed=seed, max_steps=steps, results_dir=results_dir,
                           **overrides) for a in alphas]
    declared = declared_parameters(notebook)
    as_parameters = {k: v for k, v in overrides.items() if k in declared}
    rest = {k: v for k, v in overrides.items() if k not in declared}
    outcome = []
    for cfg in configs:
        if RunDir(cfg.run_dir).is_complete(cfg.trainer.max_steps):
            outcome.append({"run_id": cfg.run_id, "alpha": cfg.trainer.alpha, "status": "already complete"})
            continue
        cfg.run_dir.mkdir(parents=True, exist_ok=True)
        papermill.execute_notebook(
            str(notebook), str(cfg.run_dir / "02_train.ipynb"), kernel_name=kernel, cwd=str(REPO_ROOT),
            parameters=dict(profile=profile, method=method, alpha=cfg.trainer.alpha, seed=cfg.trainer.seed,
                            max_steps=cfg.trainer.max_steps,
                            run_id=cfg.run_id, results_dir=str(results_dir), **as_parameters, overrides=rest),
        )
        outcome.append({"run_id": cfg.run_id, "alpha": cfg.trainer.alpha, "status": "trained"})
    return outcome
