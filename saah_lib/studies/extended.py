"""The extended CPU study: more seeds, the SA alpha sweep and the top-K ablation, on the tiny profile.

``python -m saah_lib.studies.extended`` (``make extended``) writes its own results
root, ``results/extended/``, apart from the mini study, so that ``make mini``
stays short and its committed tables stay exactly what its rerun reproduces.
Runs already complete there are skipped. It holds:

0. the warm start's build record and baseline evaluation (as in the mini study);
1. five seeds (0-4) of the three main methods, grpo / ah(0.5) / sa(0.5);
2. the alpha sweep of SA-AH-GRPO at the AH sweep's alphas and seed
   (:data:`saah_lib.method.methods.SWEEP_ALPHAS`, first seed), beside the AH sweep itself;
3. the top-K training runs: sa(0.5) with the entropy from the top K logits
   (:func:`saah_lib.studies.topk.topk_training_configs`, run ids ``tiny-sa-a0.5-k<K>-s<seed>``);
4. the top-K error measurement on rollouts of the warm-started model
   (``<root>/topk_entropy_error.json``).

Wall time and peak memory per stage go to ``<root>/extended_timings.json``.
``--plan`` prints the runs still to do and the time estimate, and trains nothing.
Tables and figures come from ``make figures`` (:func:`saah_lib.report.render.render_report`).
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import torch

from saah_lib.jsonio import atomic_write_json
from saah_lib.paths import EXTENDED_ROOT, TINY_WARMSTART_DIR, in_repo, repo_relative
from saah_lib.rundir.lock import FolderLockedError, study_lock
from saah_lib.rundir.manifest import write_manifest
from saah_lib.studies.mini import planned_configs as mini_planned_configs
from saah_lib.studies.runner import pending, run_study
from saah_lib.studies.topk import RESULT_FILE, TRAINING_KS, measure_topk, topk_training_configs

EXTENDED_SEEDS = (0, 1, 2, 3, 4)
SECONDS_PER_RUN = 72  # one 60-step tiny run on one thread (results/mini/timings.json: 69-75 s)
MEASURE_SECONDS = 20  # the top-K measurement (256 rollouts)


def planned_configs(root: Path, seeds=EXTENDED_SEEDS, steps: int | None = None, topk_ks=TRAINING_KS,
                    topk_seeds=(0,)) -> list:
    """Every run of the extended study, in training order: the mini study's plan (main comparison,
    both sweeps) over more seeds, then the top-K runs."""
    configs = mini_planned_configs(root, tuple(seeds), steps)
    configs += topk_training_configs(topk_ks, topk_seeds, results_dir=str(root), steps=steps)
    ids = [c.run_id for c in configs]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise ValueError(f"two planned runs share a run id: {', '.join(duplicates)}")
    return configs


def estimate_seconds(n_runs: int, jobs: int, steps: int = 60, measure: bool = True) -> float:
    """Wall time: rounds of ``jobs`` parallel runs, each scaled from the 60-step run time, plus the measurement."""
    rounds = math.ceil(n_runs / max(jobs, 1))
    return rounds * SECONDS_PER_RUN * steps / 60 + (MEASURE_SECONDS if measure else 0)


def describe_plan(configs, todo, jobs: int, measure: bool) -> str:
    steps = todo[0].steps if todo else 60
    est = estimate_seconds(len(todo), jobs, steps, measure)
    lines = [f"{len(configs)} runs planned, {len(configs) - len(todo)} already complete, {len(todo)} to train "
             f"({jobs} at a time, one thread each):"]
    lines += [f"  {c.run_id}  (method={c.method}, alpha={c.alpha:g}, seed={c.seed}, "
              f"entropy_top_k={c.entropy_top_k}, steps={c.steps})" for c in todo]
    lines.append(f"estimated wall time: {est / 60:.1f} min (about {SECONDS_PER_RUN} s per 60-step run)")
    return "\n".join(lines)


def run_extended_study(root: Path, seeds=EXTENDED_SEEDS, steps: int | None = None, jobs: int = 2,
                       topk_ks=TRAINING_KS, topk_seeds=(0,), measure: bool = True,
                       measure_prompts: int = 64) -> dict:
    root = Path(root)
    configs = planned_configs(root, seeds, steps, topk_ks, topk_seeds)
    print(describe_plan(configs, pending(configs), jobs, measure), flush=True)
    with study_lock(root):  # one study process per root, to the manifest
        timings = run_study(root, configs, jobs=jobs, timings_file="extended_timings.json")
        if measure:
            with timings.stage("top-K entropy error") as info:
                result = measure_topk(TINY_WARMSTART_DIR, n_prompts=measure_prompts)
                atomic_write_json(root / RESULT_FILE, result)
                info["n_tokens"] = result["n_tokens"]
        write_manifest(root)  # the results root changed: its integrity manifest follows
    return timings.record


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m saah_lib.studies.extended", description=__doc__.splitlines()[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--root", type=in_repo, default=repo_relative(EXTENDED_ROOT), help="the study's results root")
    parser.add_argument("--seeds", type=int, nargs="+", default=list(EXTENDED_SEEDS), help="seeds of the main comparison")
    parser.add_argument("--steps", type=int, default=None, help="override the tiny profile's steps")
    parser.add_argument("--jobs", type=int, default=2, help="training runs in parallel (one thread each)")
    parser.add_argument("--topk-ks", type=int, nargs="+", default=list(TRAINING_KS), help="K of the top-K training runs")
    parser.add_argument("--topk-seeds", type=int, nargs="+", default=[0], help="seeds of the top-K training runs")
    parser.add_argument("--measure-prompts", type=int, default=64, help="prompts for the top-K measurement (x4 rollouts)")
    parser.add_argument("--no-measure", action="store_true", help="skip the top-K error measurement")
    parser.add_argument("--plan", action="store_true", help="print the runs still to do and the estimate, then exit")
    args = parser.parse_args(argv)
    if args.plan:
        configs = planned_configs(args.root, tuple(args.seeds), args.steps, tuple(args.topk_ks), tuple(args.topk_seeds))
        print(describe_plan(configs, pending(configs), args.jobs, not args.no_measure))
        return
    torch.set_num_threads(1)
    try:
        record = run_extended_study(args.root, tuple(args.seeds), args.steps, args.jobs, tuple(args.topk_ks),
                                    tuple(args.topk_seeds), measure=not args.no_measure,
                                    measure_prompts=args.measure_prompts)
    except FolderLockedError as err:
        parser.exit(1, f"error: {err}\n")
    print(f"\nextended study done in {record['total_wall_s'] / 60:.1f} min; "
          f"timings in {args.root / 'extended_timings.json'}")


if __name__ == "__main__":
    main()
