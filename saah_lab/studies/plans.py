"""The plans of the studies the grid runs: ``mini``, ``extended``, ``paper`` and ``ablation``.

``paper``: both models' baselines, then per seed grpo, ah and sa on both and AH-GRPO's alpha sweep on the 1.5B
one, one GPU each. ``ablation``: one method at several alphas (notebook 03), any profile.
"""

from __future__ import annotations

from pathlib import Path

from saah_lab.studies import confirm, extended, mini
from saah_lab.studies.execution.runner import Plan, baseline_job, run_job, waits_for_warm_start, warm_start_job
from saah_lib.method.methods import MAIN_ALPHAS, SWEEP_ALPHAS
from saah_lib.models.names import tiny_warm_start_seed
from saah_lib.paths import EXTENDED_ROOT, LOCAL_RESULTS, MINI_ROOT, RESULTS
from saah_lib.training.config import check_overrides, make_config
from saah_lib.training.profiles import fields_with

PAPER_PROFILES = ("qwen2.5-1.5b", "qwen2.5-3b")
PAPER_SWEEP_PROFILE = "qwen2.5-1.5b"
PAPER_SWEEP_METHOD = "ah"
PAPER_SEED = 123  # the paper's own seed ("All runs use a fixed random seed (123)")
PAPER_ROOT = RESULTS / "paper"
#: the config fields an ablation sets from its own arguments
ABLATION_FIELDS = fields_with("ablation")
CPUS_PER_GPU_RUN = 2.0


def paper_plan(root: Path = PAPER_ROOT, seeds=(0,), cpus_per_run: float = CPUS_PER_GPU_RUN,
               overrides: dict | None = None, steps: int | None = None) -> Plan:
    """The paper's grid; ``steps`` sets every run's (a smoke test of the grid: the run ids say ``-steps2``)."""
    root = Path(root)
    overrides = check_overrides(overrides)
    jobs = [baseline_job(make_config(p, results_dir=str(root), **overrides), f"{p}-zero-shot") for p in PAPER_PROFILES]
    for seed in seeds:
        settings = [(p, m, a) for p in PAPER_PROFILES for m, a in MAIN_ALPHAS.items()]
        settings += [(PAPER_SWEEP_PROFILE, PAPER_SWEEP_METHOD, a) for a in SWEEP_ALPHAS
                     if a not in (MAIN_ALPHAS["grpo"], MAIN_ALPHAS[PAPER_SWEEP_METHOD])]
        jobs += [run_job(make_config(p, method=m, alpha=a, seed=seed, max_steps=steps, results_dir=str(root),
                                     **overrides), gpu=True, cpus_per_gpu_run=cpus_per_run) for p, m, a in settings]
    return Plan("paper", root, jobs, PAPER_PROFILES[0])


def ablation_plan(alphas, *, profile: str = "tiny", method: str = "ah", seed: int = 0, steps: int | None = None,
                  results_dir: str | Path = LOCAL_RESULTS, overrides: dict | None = None,
                  cpus_per_run: float = CPUS_PER_GPU_RUN) -> Plan:
    """One run per alpha; tiny runs on CPU (waiting for their warm start), the others on one GPU each."""
    overrides = check_overrides(overrides)  # a list here would otherwise fail inside a worker
    swept = sorted(set(overrides) & set(ABLATION_FIELDS))
    if swept:
        raise ValueError(f"overrides sets {', '.join(map(repr, swept))}, which the ablation sets itself "
                         f"(from its own arguments {', '.join(ABLATION_FIELDS)})")
    root = Path(results_dir)
    # every config is validated before anything starts
    configs = [make_config(profile, method=method, alpha=a, seed=seed, max_steps=steps, results_dir=str(root),
                           **overrides) for a in alphas]
    jobs, deps = [], ()
    warm_seed = tiny_warm_start_seed(configs[0].model_name) if configs and profile == "tiny" else None
    if warm_seed is not None:
        jobs.append(warm_start_job(root, warm_seed))
        deps = waits_for_warm_start(jobs[0], warm_seed)
    jobs += [run_job(c, deps, gpu=profile != "tiny", cpus_per_gpu_run=cpus_per_run) for c in configs]
    return Plan("ablation", root, jobs, profile)


def study_plan(study: str, *, root: Path | None = None, seeds=None, steps: int | None = None, **options) -> Plan:
    """The plan of a study by name, in ``root`` (default: the study's own results root)."""
    if study == "mini":
        return mini.make_plan(Path(root or MINI_ROOT), tuple(seeds or mini.SEEDS), steps)
    if study == "extended":
        return extended.make_plan(Path(root or EXTENDED_ROOT), seeds=tuple(seeds or extended.SEEDS), steps=steps)
    if study == "paper":
        return paper_plan(Path(root or PAPER_ROOT), tuple(seeds if seeds is not None else (0,)), steps=steps,
                          **options)
    if study == "confirm":
        return confirm.make_plan(Path(root or confirm.CONFIRM_ROOT), tuple(seeds or confirm.SEEDS), steps)
    if study == "ablation":
        return ablation_plan(options.pop("alphas", SWEEP_ALPHAS), seed=(seeds or (0,))[0], steps=steps,
                             results_dir=Path(root or LOCAL_RESULTS), **options)
    raise ValueError(f"unknown study {study!r}: expected one of {', '.join(STUDIES)}")


STUDIES = ("mini", "extended", "paper", "ablation", "confirm")
