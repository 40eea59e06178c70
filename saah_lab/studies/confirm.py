"""The confirmatory study: its pre-registration, written before any of its runs, and the grid's jobs for it.

The extended study could not establish its primary comparison, and two warm starts cannot generalise over warm
starts. This plan (:func:`confirm_plan`) fixes before the runs the units (new warm starts x seeds, the warm start
a random factor), arms, primary comparison, evaluation problems, test and health rules; :func:`make_plan` is the
grid's jobs (``python -m saah_lab.studies.execution.grid run confirm``).
"""

from __future__ import annotations

import math
from pathlib import Path

from saah_lab.analysis.health import RULES
from saah_lab.analysis.plan import Arm, StudyPlan, write_plan
from saah_lab.analysis.resultset import matched_alpha
from saah_lab.analysis.significance import LEVEL, POWER, t_mde
from saah_lab.studies.execution.runner import (
    Plan,
    baseline_job,
    record_warm_start,
    run_job,
    waits_for_warm_start,
    warm_start_job,
)
from saah_lab.studies.verify.conclusions import SAME_DESIGN, compare_conclusions
from saah_lib.jsonio import atomic_write_text
from saah_lib.method.methods import MAIN_ALPHA
from saah_lib.models.names import tiny_warm_start_name
from saah_lib.paths import CONFIRM_ROOT, EXTENDED_ROOT, repo_relative
from saah_lib.rundir import layout
from saah_lib.training.config import make_config

STUDY = "confirm"
WARM_STARTS = tuple(range(2, 8))  # build seeds; 0 and 1 are the extended study's
SEEDS = tuple(range(5))
N_EVAL = 1000
DATA_SEED = 2026  # the committed studies split with 123
#: As pre-registered in results/confirm/study_plan.json, whose bytes stay: the test's module is
#: saah_lab.analysis.significance since the lab became its own package.
TEST = ("saah_lib.analysis.significance.crossed_test: mean paired difference over seeds crossed with the "
        "evaluation problems; warm starts a random factor (6 >= 3), Satterthwaite df capped at warm starts - 1; "
        "two-sided, level 0.05, 95% interval (the primary family has one test); established = p below 0.05")


def recorded_alpha(root: Path) -> float:
    """The paper-matched alpha recorded in ``root``; an error naming the files where there is none."""
    alpha = matched_alpha(root)
    if alpha is None:
        raise ValueError(f"{repo_relative(Path(root))} records no paper-matched alpha (neither "
                         f"{layout.MATCHED_ALPHA_FILE} nor {layout.STUDY_PLAN_FILE} with paper_matched_alpha)")
    return alpha


def study_conclusions(committed_root: Path, rerun_root: Path) -> dict:
    """Level 2 for a rerun of this study: every run against its committed twin, and the primary comparison."""
    primary = (Arm("sa", recorded_alpha(CONFIRM_ROOT)), Arm("grpo", 0.0))
    return compare_conclusions(committed_root, rerun_root, primary=primary,
                               study=STUDY, spread_from=SAME_DESIGN[STUDY])


def confirm_plan(alpha: float | None = None) -> StudyPlan:
    """The pre-registered plan: :data:`WARM_STARTS` new warm starts (a random factor) x :data:`SEEDS`; SA-AH-GRPO
    at the extended study's matched alpha, GRPO and SA-AH-GRPO at 0.5; primary SA-AH-GRPO (matched) vs GRPO on final
    Pass@1 alone, at :data:`LEVEL`; :data:`N_EVAL` problems drawn with a data seed no committed study used; the
    crossed test; the health rules unchanged, flagged runs kept in the primary test (the text says it all)."""
    alpha = recorded_alpha(EXTENDED_ROOT) if alpha is None else alpha
    sa, sa_main, grpo = Arm("sa", alpha), Arm("sa", MAIN_ALPHA), Arm("grpo", 0.0)
    return StudyPlan(STUDY, (sa, grpo), ((sa, grpo), (sa_main, grpo)), quantities=("final",), extra={
        "warm_starts": [tiny_warm_start_name(w) for w in WARM_STARTS], "seeds": list(SEEDS),
        "paper_matched_alpha": alpha,
        "evaluation": {"n_eval": N_EVAL, "data_seed": DATA_SEED, "partition": "eval",
                       "same_problems_for_every_run": True},
        "test": TEST, "level": LEVEL, "power": POWER,
        "health_rules": RULES, "flagged_runs": "kept in the primary test; the test without them is reported beside it",
        "secondary": "SA-AH-GRPO (alpha 0.5) vs GRPO and every other quantity: exploratory, Bonferroni within "
                     "each quantity",
        "training": "the tiny profile's defaults (60 steps, 4 prompts x 4 completions per step), data_seed as in "
                    "evaluation; warm starts built by saah_lib.models.warmstart with the seeds named",
        "provenance": "this file is committed alone before any run; every run records a clean commit (no -dirty) "
                      "at or after it; the plan is not changed after the first run; the result is reported "
                      "whatever it shows, beside the extended study",
    })


def projected_mde(s2_warm_start: float, s2_seed: float, s2_problem: float, s2_interaction: float,
                  n_warm_starts: int = len(WARM_STARTS), seeds_per_warm_start: int = len(SEEDS),
                  n_problems: int = N_EVAL, level: float = LEVEL) -> float:
    """The primary test's minimum detectable effect (80% power) given variance components: Var(mean) = s2_ws/W +
    s2_seed/(W n) + s2_problem/P + s2_interaction/(W n P), on W - 1 df."""
    n = n_warm_starts * seeds_per_warm_start
    var = (s2_warm_start / n_warm_starts + s2_seed / n + s2_problem / n_problems
           + s2_interaction / (n * n_problems))
    return t_mde(math.sqrt(var), n_warm_starts - 1, level=level)


def write_confirm_plan(root: str | Path, alpha: float | None = None) -> Path:
    """Write the plan as ``<root>/study_plan.json`` (before any run); returns the path."""
    return write_plan(root, confirm_plan(alpha))


def carry_plan(root: str | Path) -> Path:
    """``<root>/study_plan.json``: the committed pre-registration's bytes, copied into a rerun root without one."""
    committed = CONFIRM_ROOT / layout.STUDY_PLAN_FILE
    target = Path(root) / layout.STUDY_PLAN_FILE
    if target.resolve() == committed.resolve():
        return target
    if target.exists():
        if target.read_bytes() != committed.read_bytes():
            raise ValueError(f"{target} is not the committed plan {repo_relative(committed)}: another study's root?")
        return target
    atomic_write_text(target, committed.read_text(encoding="utf-8"))
    return target


def run_config(root: Path, method: str, alpha: float, seed: int, warm_start: int, steps: int | None = None):
    """One run: the tiny profile, a new warm start, the plan's problems; ``steps`` only to try the machinery."""
    return make_config("tiny", method=method, alpha=alpha, seed=seed, model_name=tiny_warm_start_name(warm_start),
                       n_eval=N_EVAL, data_seed=DATA_SEED, results_dir=str(root),
                       run_id=f"confirm-{method}-a{alpha:g}-s{seed}-w{warm_start}",
                       **({} if steps is None else {"max_steps": steps}))


def make_plan(root: Path = CONFIRM_ROOT, seeds=SEEDS, steps: int | None = None) -> Plan:
    """Each warm start and its baseline on the plan's problems, then every arm at every seed."""
    root = Path(root)
    warm = {ws: warm_start_job(root, ws) for ws in WARM_STARTS}
    loads = {ws: waits_for_warm_start(job, ws) for ws, job in warm.items()}
    bases = [baseline_job(make_config("tiny", model_name=tiny_warm_start_name(ws), n_eval=N_EVAL,
                                      data_seed=DATA_SEED, results_dir=str(root)),
                          tiny_warm_start_name(ws), loads[ws]) for ws in WARM_STARTS]
    arms = [("sa", recorded_alpha(CONFIRM_ROOT)), ("grpo", 0.0), ("sa", MAIN_ALPHA)]
    runs = [run_job(run_config(root, method, alpha, seed, ws, steps), loads[ws])
            for ws in WARM_STARTS for seed in seeds for method, alpha in arms]
    record = {j.id: record_warm_start(root, ws, layout.WARMSTART_RECORDS_FILE) for ws, j in warm.items()}
    return Plan(STUDY, root, [*warm.values(), *bases, *runs], "tiny", record)

