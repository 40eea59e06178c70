"""The powered CPU study behind ``make extended``: the primary comparison with many seeds from two warm starts.

The mini study's three seeds cannot detect a difference of the size the paper claims, and its alpha 0.5 barely
discounts the tiny model; this study is built for the claim. Its plan (:func:`study_plan`, written before any
run): SA-AH-GRPO at the paper-matched alpha (:mod:`saah_lab.studies.matched_alpha`) against GRPO, :data:`SEEDS`
seeds from each of :data:`WARM_STARTS` warm starts (a random factor), AH-GRPO at that alpha and SA-AH-GRPO at the
main alpha beside them, and the top-K entropy runs and measurement. ``--plan`` prints it with a time estimate and
the projected minimum detectable effect. ``make extended`` reruns it into ``results/rerun/extended`` and checks it
as ``make mini`` does (:func:`rerun_and_verify`).
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path

import torch

from saah_lab.analysis.evidence import compare_arms, load_root_evidence
from saah_lab.analysis.plan import PRIMARY_QUANTITIES, Arm, StudyPlan, write_plan
from saah_lab.analysis.significance import LEVEL, projected_se_df, t_mde
from saah_lab.rundir.lock import FolderLockedError, study_lock
from saah_lab.rundir.manifest import write_manifest
from saah_lab.rundir.roots import check_study_root
from saah_lab.studies.execution.runner import (
    BASELINE_NAME,
    Plan,
    alpha_job,
    baseline_job,
    matched_run_job,
    pending,
    record_warm_start,
    run_job,
    run_plan,
    waits_for_warm_start,
    warm_start_job,
)
from saah_lab.studies.execution.timing import Timings
from saah_lab.studies.matched_alpha import read_matched_alpha
from saah_lab.studies.mini import NotARerunRoot, rerun_study, study_parser
from saah_lab.studies.topk import RESULT_FILE, TRAINING_KS, measure_topk, topk_training_configs
from saah_lab.studies.verify.bits import compare_studies
from saah_lab.studies.verify.conclusions import SAME_DESIGN, compare_conclusions
from saah_lab.studies.verify.verdict import closing_lines, committed_mkl_kernels
from saah_lib.jsonio import atomic_write_json, read_json
from saah_lib.method.methods import MAIN_ALPHA
from saah_lib.models.loading import resolve_model
from saah_lib.models.names import TINY_WARMSTART, tiny_warm_start_name, tiny_warm_start_seed
from saah_lib.models.warmstart import read_build_info
from saah_lib.numerics import cpu_numerics_record, summary
from saah_lib.paths import EXTENDED_ROOT, MINI_ROOT, RERUN_ROOT, in_repo, repo_relative, tiny_warmstart_dir
from saah_lib.rundir import layout
from saah_lib.training.config import make_config

RERUN_EXTENDED = RERUN_ROOT / "extended"  # where `make extended` reruns the study (git-ignored)
WARM_STARTS = (0, 1)
SEEDS = tuple(range(10))
#: What the committed study measured of each stage: the estimate of a new one reads it.
MEASURED_TIMINGS = EXTENDED_ROOT / layout.EXTENDED_TIMINGS_FILE


def arms(matched_alpha: float, main_alpha_sa: bool = True) -> dict[str, Arm]:
    """The study's arms by name."""
    out = {"grpo": Arm("grpo", 0.0), "sa_matched": Arm("sa", matched_alpha), "ah_matched": Arm("ah", matched_alpha)}
    if main_alpha_sa:
        out["sa_main"] = Arm("sa", MAIN_ALPHA)
    return out


def study_plan(matched_alpha: float, warm_starts=WARM_STARTS, seeds=SEEDS, main_alpha_sa: bool = True) -> StudyPlan:
    """Primary: SA-AH-GRPO vs GRPO at the paper-matched alpha; then SA vs AH and AH vs GRPO there, and SA at the
    main alpha vs GRPO (the mini study's primary, powered)."""
    a = arms(matched_alpha, main_alpha_sa)
    pairs = [(a["sa_matched"], a["grpo"]), (a["sa_matched"], a["ah_matched"]), (a["ah_matched"], a["grpo"])]
    if main_alpha_sa:
        pairs.append((a["sa_main"], a["grpo"]))
    return StudyPlan("extended", (a["sa_matched"], a["grpo"]), tuple(pairs), extra={
        "warm_starts": [tiny_warm_start_name(w) for w in warm_starts], "seeds": list(seeds),
        "paper_matched_alpha": matched_alpha})


def planned_configs(root: Path, warm_starts=WARM_STARTS, seeds=SEEDS, steps: int | None = None,
                    topk_ks=TRAINING_KS, topk_seeds=(0,), main_alpha_sa: bool = True,
                    matched_alpha: float | None = None) -> list:
    """Every run, seed by seed (an interrupted study has balanced seed pairs), then the top-K runs; warm start 0's
    are the mini study's configurations. The paper-matched runs only with ``matched_alpha`` or one recorded in
    ``root``."""
    root = Path(root)
    alpha = matched_alpha if matched_alpha is not None else read_matched_alpha(root)
    configs = []
    for seed in seeds:
        for ws in warm_starts:
            name = tiny_warm_start_name(ws)
            settings = [("grpo", 0.0)] + ([("sa", alpha), ("ah", alpha)] if alpha is not None else [])
            settings += [("sa", MAIN_ALPHA)] if main_alpha_sa else []
            configs += [make_config("tiny", method=m, alpha=a, seed=seed, max_steps=steps, model_name=name,
                                    results_dir=str(root)) for m, a in settings]
    configs += topk_training_configs(topk_ks, topk_seeds, results_dir=str(root), steps=steps)
    ids = [c.run_id for c in configs]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise ValueError(f"two planned runs share a run id: {', '.join(duplicates)}")
    return configs


def measured_seconds(path: Path = MEASURED_TIMINGS) -> dict[str, float]:
    """Seconds per stage in a timings file: the median 60-step run, the longest build, baseline, alpha and top-K."""
    try:
        stages = read_json(path)["stages"]
        runs = sorted(r["wall_s"] for s in stages for r in s.get("runs", []))
        longest = {name: max(s.get("build_seconds") or s["wall_s"] for s in stages if s["stage"].startswith(name))
                   for name in ("warm start", "baseline", "paper-matched alpha", "top-K")}
        return {"run": runs[len(runs) // 2], "build": longest["warm start"], "baseline": longest["baseline"],
                "alpha": longest["paper-matched alpha"], "measure": longest["top-K"]}
    except (TypeError, KeyError, ValueError, IndexError) as error:
        raise ValueError(f"{repo_relative(path)}: no stage times to estimate from ({error!r})") from error


def estimate_seconds(n_runs: int, jobs: int, steps: int = 60, *, builds: int = 0, warm_starts: int = 1,
                     alpha_measured: bool = True, measure: bool = True, timings_file: Path = MEASURED_TIMINGS) -> float:
    """Wall time from the committed stage times: builds, baselines, alpha, rounds of ``jobs`` runs, top-K."""
    t = measured_seconds(timings_file)
    rounds = math.ceil(n_runs / max(jobs, 1))
    return (builds * t["build"] + warm_starts * t["baseline"] + (0 if alpha_measured else t["alpha"])
            + rounds * t["run"] * steps / 60 + (t["measure"] if measure else 0))


def projected_mde(n_units: int, pilot_root: Path | None) -> tuple[float, float, str] | None:
    """(MDE, se, source) of final Pass@1 over ``n_units`` seed pairs at the primary family's per-test level, with
    the variances of SA-AH-GRPO (main alpha) vs GRPO in ``pilot_root`` (healthy runs); None without a pilot."""
    if pilot_root is None or not (Path(pilot_root) / layout.RUNS).is_dir():
        return None
    runs = [r for r in load_root_evidence(pilot_root) if not r.flagged]
    try:
        row = next(r for r in compare_arms(Arm("sa", MAIN_ALPHA), Arm("grpo", 0.0), runs)
                   if r.key == "final")
    except ValueError:
        return None
    if row.n_units < 3 or not row.crossed.components:
        return None
    se, df = projected_se_df(row.crossed, n_units)
    return t_mde(se, df, level=LEVEL / len(PRIMARY_QUANTITIES)), se, f"{row.n_units} healthy seed pairs of " \
        f"{repo_relative(pilot_root)}"


def plan_summary(root: Path, configs, todo, jobs: int, warm_starts, seeds, measure: bool,
                 pilot_root: Path | None = None) -> tuple[list[str], list[str]]:
    """(lines before the list of runs, lines after it): the comparison, alpha, warm starts and counts; the wall
    time, run folders the plan does not hold and the projected MDE (``--plan``, ``grid plan extended``)."""
    alpha = read_matched_alpha(root)
    missing = 0 if alpha is not None else 2 * len(warm_starts) * len(seeds)
    steps = todo[0].trainer.max_steps if todo else 60
    builds = sum((read_build_info(tiny_warmstart_dir(w)) or {}).get("seed") != w for w in warm_starts)
    est = estimate_seconds(len(todo) + missing, jobs, steps, builds=builds, warm_starts=len(warm_starts),
                           alpha_measured=alpha is not None, measure=measure)
    n_units = len(warm_starts) * len(seeds)
    projection = projected_mde(n_units, pilot_root)
    head = [f"primary comparison (fixed in advance): SA-AH-GRPO at the paper-matched alpha vs GRPO, final Pass@1 "
            f"and training-reward variance, over {n_units} seed pairs ({len(seeds)} seeds x {len(warm_starts)} "
            "warm starts)",
            f"paper-matched alpha: {alpha:g} (recorded in {layout.MATCHED_ALPHA_FILE})" if alpha is not None else
            "paper-matched alpha: not measured yet (measured first; its runs are listed as a<matched>)",
            f"warm starts: {', '.join(tiny_warm_start_name(w) for w in warm_starts)} ({builds} to build)",
            f"{len(configs) + missing} runs planned, {len(configs) - len(todo)} already complete, "
            f"{len(todo) + missing} to train ({jobs} at a time, one thread each)"]
    t = measured_seconds()
    tail = [f"estimated wall time of the whole study: {est / 60:.1f} min (about {t['run']:.0f} s per 60-step run "
            f"on one core, {t['build']:.0f} s per warm-start build, baselines, the alpha and the top-K "
            f"measurement included; measured: {repo_relative(MEASURED_TIMINGS)})"]
    planned = {c.run_id for c in configs}
    # a root without the recorded alpha holds no paper-matched run yet: every unplanned folder is a stranger
    strangers = sorted(p.name for p in layout.folders(root, layout.RUNS) if p.name not in planned)
    if strangers:
        tail.append(f"note: {len(strangers)} run folder(s) in {repo_relative(root)} are not in this plan and would "
                    f"appear in its tables ({', '.join(strangers[:6])}{', ...' if len(strangers) > 6 else ''}); "
                    "give the study a fresh --root")
    if projection is not None:
        mde, se, source = projection
        tail.append(f"projected minimum detectable final Pass@1 difference (80% power, two-sided "
                    f"{LEVEL / len(PRIMARY_QUANTITIES):g}, the primary family's per-test level): {mde:.3f} with "
                    f"{n_units} seed pairs, if the seed and problem variances are those of {source} "
                    f"(standard error {se:.4f})")
    return head, tail


def describe_plan(root: Path, configs, todo, jobs: int, warm_starts, seeds, measure: bool,
                  pilot_root: Path | None = None) -> str:
    head, tail = plan_summary(root, configs, todo, jobs, warm_starts, seeds, measure, pilot_root)
    lines = [*head[:-1], head[-1] + ":"]
    lines += [f"  {c.run_id}  (method={c.trainer.method}, alpha={c.trainer.alpha:g}, seed={c.trainer.seed}, "
              f"warm start={c.model_name}, entropy_top_k={c.trainer.entropy_top_k}, steps={c.trainer.max_steps})"
              for c in todo]
    if read_matched_alpha(root) is None:
        lines += [f"  tiny-{m}-a<matched>-s{sd}{'' if w == 0 else f'-w{w}'}" for sd in seeds for w in warm_starts
                  for m in ("sa", "ah")]
    return "\n".join(lines + tail)


def make_plan(root: Path, warm_starts=WARM_STARTS, seeds=SEEDS, steps: int | None = None, topk_ks=TRAINING_KS,
              topk_seeds=(0,), main_alpha_sa: bool = True) -> Plan:
    """Every warm start and baseline, the alpha (after all builds), then every run, each when its inputs exist."""
    root = Path(root)
    if 0 not in warm_starts:
        raise ValueError("the warm starts must include seed 0 (tiny-warmstart): the alpha is measured on it")
    warm = {ws: warm_start_job(root, ws) for ws in warm_starts}
    loads = {ws: waits_for_warm_start(job, ws) for ws, job in warm.items()}
    bases = [baseline_job(make_config("tiny", model_name=tiny_warm_start_name(ws), results_dir=str(root)),
                          BASELINE_NAME if ws == 0 else tiny_warm_start_name(ws), loads[ws]) for ws in warm_starts]
    others = tuple(tiny_warm_start_name(w) for w in warm_starts if w != 0)
    alpha = alpha_job(root, others, tuple(dep for deps in loads.values() for dep in deps))
    configs = planned_configs(root, warm_starts, seeds, steps, topk_ks, topk_seeds, main_alpha_sa)
    runs = [run_job(c, loads[tiny_warm_start_seed(c.model_name)]) for c in configs]
    if read_matched_alpha(root) is None:
        ids = tuple(j.name for j in runs)
        for seed in seeds:
            for ws in warm_starts:
                suffix = "" if ws == 0 else f"-w{ws}"
                runs += [matched_run_job(root, m, seed, f"tiny-{m}-a<matched>-s{seed}{suffix}", (*loads[ws], alpha.id),
                                         ids, max_steps=steps, model_name=tiny_warm_start_name(ws)) for m in ("sa", "ah")]

    def record_alpha(result):
        if result is None and (root / layout.STUDY_PLAN_FILE).is_file():
            return  # measured earlier: the plan written then stands
        write_plan(root, study_plan(read_matched_alpha(root), warm_starts, seeds, main_alpha_sa))

    record = {j.id: record_warm_start(root, ws, layout.WARMSTART_RECORDS_FILE) for ws, j in warm.items()}
    record_first, record[alpha.id] = record[warm[0].id], record_alpha
    # warm start 0 also has the single-record file every study has
    record[warm[0].id] = lambda result: (record_warm_start(root, 0)(result), record_first(result))
    return Plan("extended", root, [*warm.values(), *bases, alpha, *runs], "tiny", record)


def run_extended_study(root: Path, warm_starts=WARM_STARTS, seeds=SEEDS, steps: int | None = None,
                       topk_ks=TRAINING_KS, topk_seeds=(0,), measure: bool = True, measure_prompts: int = 64,
                       main_alpha_sa: bool = True, address: str | None = None, max_retries: int = 1) -> dict:
    root = check_study_root(root, "extended", new=True)
    plan = make_plan(root, warm_starts, seeds, steps, topk_ks, topk_seeds, main_alpha_sa)
    with study_lock(root):  # one study process per root, from the warm starts to the manifest
        timings = Timings(root / layout.EXTENDED_TIMINGS_FILE)
        run_plan(plan, timings, address=address, max_retries=max_retries, step_seconds=measured_seconds()["run"] / 60)
        if measure:
            with timings.stage("top-K entropy error") as info:
                result = measure_topk(Path(resolve_model(TINY_WARMSTART, progress=False)), n_prompts=measure_prompts)
                atomic_write_json(root / RESULT_FILE, result)
                info["n_tokens"] = result["n_tokens"]
        write_manifest(root)  # the results root changed: its integrity manifest follows
    return timings.record


def study_conclusions(committed_root: Path, rerun_root: Path) -> dict:
    """Level 2: every run against its committed twin, and the primary comparison at the committed alpha."""
    alpha = read_matched_alpha(Path(committed_root))
    if alpha is None:
        return {"reproduced": None, "line": f"conclusions not checked: {committed_root} records no paper-matched alpha"}
    by_name = arms(alpha, main_alpha_sa=True)
    return compare_conclusions(committed_root, rerun_root, primary=(by_name["sa_matched"], by_name["grpo"]),
                               study="extended", spread_from=SAME_DESIGN["extended"])


def rerun_and_verify(committed: Path = EXTENDED_ROOT, rerun: Path = RERUN_EXTENDED, *, resume: bool = False,
                     conclusions=study_conclusions, **study) -> dict:
    """``make extended``: :func:`saah_lab.studies.mini.rerun_study` with this study's runs and options."""
    options = {k: study[k] for k in ("warm_starts", "seeds", "steps", "topk_ks", "topk_seeds", "main_alpha_sa")
               if k in study}

    def compare(root: Path) -> dict:
        run_ids = [c.run_id for c in planned_configs(root, **options)]
        return compare_studies(committed, root, run_ids=run_ids, conclusions=conclusions, study_files=())

    return rerun_study("extended", committed, rerun, resume=resume,
                       train=lambda root: run_extended_study(root, **study), compare=compare)


def main(argv=None):
    parser = study_parser("saah_lab.studies.extended", __doc__, EXTENDED_ROOT, RERUN_EXTENDED)
    parser.add_argument("--verify", action="store_true",
                        help="(make extended) rerun the whole study into --rerun-root and compare it with --root, "
                             "bits first, then conclusions; exit status 1 unless it reproduces")
    parser.add_argument("--warm-starts", type=int, nargs="+", default=list(WARM_STARTS),
                        help="warm-start build seeds (0 = tiny-warmstart, N = tiny-warmstart-sN)")
    parser.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS), help="training seeds per warm start")
    parser.add_argument("--steps", type=int, default=None, help="override the tiny profile's steps")
    parser.add_argument("--jobs", type=int, default=2, help="--plan: runs at a time in the time estimate")
    parser.add_argument("--topk-ks", type=int, nargs="*", default=list(TRAINING_KS), help="K of the top-K training runs")
    parser.add_argument("--topk-seeds", type=int, nargs="*", default=[0], help="seeds of the top-K training runs")
    parser.add_argument("--no-main-alpha", action="store_true", help="leave out SA-AH-GRPO at the main alpha")
    parser.add_argument("--measure-prompts", type=int, default=64, help="prompts for the top-K measurement (x4 rollouts)")
    parser.add_argument("--no-measure", action="store_true", help="skip the top-K error measurement")
    parser.add_argument("--pilot", type=in_repo, default=repo_relative(MINI_ROOT),
                        help="a finished root whose SA-vs-GRPO spread the --plan projection uses")
    parser.add_argument("--plan", action="store_true", help="print the plan and the time estimate, then exit")
    args = parser.parse_args(argv)
    if args.plan:
        configs = planned_configs(args.root, args.warm_starts, args.seeds, args.steps, args.topk_ks, args.topk_seeds,
                                  not args.no_main_alpha)
        print(describe_plan(args.root, configs, pending(configs), args.jobs, args.warm_starts, args.seeds,
                            not args.no_measure, args.pilot))
        return 0
    torch.set_num_threads(1)
    study = dict(warm_starts=tuple(args.warm_starts), seeds=tuple(args.seeds), steps=args.steps,
                 topk_ks=tuple(args.topk_ks), topk_seeds=tuple(args.topk_seeds), measure=not args.no_measure,
                 measure_prompts=args.measure_prompts, main_alpha_sa=not args.no_main_alpha, address=args.address,
                 max_retries=args.max_retries)
    started = time.perf_counter()
    try:
        if args.verify:
            report = rerun_and_verify(args.root, args.rerun_root, resume=args.resume, **study)
            status, closing = closing_lines(report, cpu_numerics_record(), committed_mkl_kernels(args.root))
            print("\n".join(closing), flush=True)
        else:
            status = 0
            run_extended_study(args.root, **study)
    except (FolderLockedError, NotARerunRoot, ValueError) as err:
        parser.exit(1, f"error: {err}\n")
    except KeyboardInterrupt:
        parser.exit(130, "\ninterrupted: the finished runs are kept; the same command"
                         f"{' with --resume' if args.verify else ''} continues\n")
    root = args.rerun_root if args.verify else args.root
    print(f"\nextended study done in {(time.perf_counter() - started) / 60:.1f} min; timings in "
          f"{repo_relative(root / layout.EXTENDED_TIMINGS_FILE)} (CPU numerics: {summary(cpu_numerics_record())})")
    return status


if __name__ == "__main__":
    sys.exit(main())
