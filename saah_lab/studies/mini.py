"""The CPU mini study behind ``make mini``: the whole paper pipeline at toy scale.

The runs (:func:`planned_runs`): grpo / ah / sa at the main alpha over :data:`SEEDS`, the alpha sweep of ah and
sa and both at the paper-matched alpha (:mod:`saah_lab.studies.matched_alpha`) at the first seed. The primary
comparison, fixed before any run in ``<root>/study_plan.json``: SA-AH-GRPO at the main alpha against GRPO; three
seeds cannot power it, the extended study does. The plan (:func:`make_plan`): the warm start, its baseline and the
alpha, then the runs, the answer kinds, the manifest, tables and figures; stage times go to ``timings.json``.
``make mini`` reruns it all into a fresh root and compares (:func:`rerun_and_verify`); ``make mini-promote`` makes
a finished rerun the committed study.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

from saah_lab.analysis.plan import StudyPlan, default_plan, write_plan
from saah_lab.report.render import render_report
from saah_lab.rundir.lock import FolderLockedError, study_lock
from saah_lab.rundir.manifest import write_manifest
from saah_lab.rundir.roots import (  # noqa: F401 (NotARerunRoot: extended and tests import it from here)
    NotARerunRoot,
    Refused,
    check_promotable,
    check_study_root,
    refuse_committed,
    refuse_damaged,
    replace_folder,
)
from saah_lab.studies.execution.runner import (
    BASELINE_NAME,
    Plan,
    alpha_job,
    baseline_job,
    matched_run_job,
    record_warm_start,
    run_job,
    run_plan,
    waits_for_warm_start,
    warm_start_job,
)
from saah_lab.studies.execution.timing import Timings
from saah_lab.studies.matched_alpha import read_matched_alpha
from saah_lab.studies.verify.bits import compare_studies, write_report
from saah_lab.studies.verify.conclusions import SAME_DESIGN, compare_conclusions
from saah_lab.studies.verify.verdict import closing_lines, committed_mkl_kernels, judge  # noqa: F401 (judge: mini's name for tests and users)
from saah_lib.jsonio import atomic_write_json, read_json, read_jsonl
from saah_lib.method.methods import MAIN_ALPHAS, SWEEP_ALPHAS
from saah_lib.models.names import TINY_WARMSTART
from saah_lib.models.warmstart import build_warm_start
from saah_lib.numerics import cpu_numerics_record, summary
from saah_lib.paths import MINI_ROOT, PAPER_TABLES, RERUN_ROOT, in_repo, repo_relative
from saah_lib.rundir import layout
from saah_lib.rundir.folder import RunDir
from saah_lib.tasks.synthetic import count_answer_kinds
from saah_lib.training.config import make_config
from saah_lib.training.profiles import settings_of_record

SEEDS = (0, 1, 2)
SWEEP_METHODS = ("ah", "sa")  # both swept at the same alphas and seed
COMMITTED_ROOT = MINI_ROOT
RERUN_MINI = RERUN_ROOT / "mini"
PROMOTED_FOLDERS = (layout.RUNS, layout.BASELINES)
#: written into a rerun root by the rerun: only a root holding it (or nothing) is ever cleared
RERUN_MARKER = ".rerun-of-study.json"
PROMOTED_FILES = (layout.WARMSTART_RECORD_FILE, layout.ANSWER_KINDS_FILE, layout.TIMINGS_FILE,
                  layout.MATCHED_ALPHA_FILE, layout.STUDY_PLAN_FILE)


def planned_runs(seeds: tuple[int, ...] = SEEDS, matched_alpha: float | None = None) -> list[tuple[str, float, int]]:
    """(method, alpha, seed) of every run: the main comparison, the sweeps at the first seed, then (once measured)
    ah and sa at the paper-matched alpha. A sweep's alpha 0 is the grpo run (every weight is 1 there) and its main
    alpha the main comparison's run."""
    runs = [(method, alpha, seed) for seed in seeds for method, alpha in MAIN_ALPHAS.items()]
    for method in SWEEP_METHODS:  # the sweep's other alphas are runs of the main comparison
        runs += [(method, alpha, seeds[0]) for alpha in SWEEP_ALPHAS if alpha not in (0.0, MAIN_ALPHAS[method])]
    if matched_alpha is not None:
        runs += [(method, matched_alpha, seeds[0]) for method in SWEEP_METHODS
                 if (method, matched_alpha, seeds[0]) not in runs]
    return runs


def planned_configs(root: Path, seeds: tuple[int, ...] = SEEDS, steps: int | None = None):
    """The configs of :func:`planned_runs`; the paper-matched runs only once ``root`` records that alpha."""
    matched = read_matched_alpha(Path(root))
    return [make_config("tiny", method=m, alpha=a, seed=sd, max_steps=steps, results_dir=str(root))
            for m, a, sd in planned_runs(seeds, matched)]


def study_plan(seeds: tuple[int, ...] = SEEDS, matched_alpha: float | None = None) -> StudyPlan:
    """The mini study's plan as the evidence reads it: primary SA-AH-GRPO (main alpha) vs GRPO."""
    plan = default_plan("mini")
    return StudyPlan("mini", plan.primary, plan.pairs, extra={
        "seeds": list(seeds), "warm_starts": [TINY_WARMSTART], "paper_matched_alpha": matched_alpha,
        "runs": [f"{m}@{a:g}/s{sd}" for m, a, sd in planned_runs(seeds, matched_alpha)]})


def make_plan(root: Path, seeds: tuple[int, ...] = SEEDS, steps: int | None = None) -> Plan:
    """The warm start, baseline, paper-matched alpha and every run (the matched ones wait for the alpha)."""
    root = Path(root)
    warm = warm_start_job(root, 0)
    loads_warm = waits_for_warm_start(warm, 0)
    base = baseline_job(make_config("tiny", results_dir=str(root)), BASELINE_NAME, loads_warm)
    alpha = alpha_job(root, (), loads_warm)
    matched = read_matched_alpha(root)
    runs = [run_job(cfg, loads_warm) for cfg in planned_configs(root, seeds, steps)]
    if matched is None:
        ids = tuple(j.name for j in runs)
        runs += [matched_run_job(root, m, seeds[0], f"tiny-{m}-a<matched>-s{seeds[0]}", (*loads_warm, alpha.id), ids,
                                 max_steps=steps) for m in SWEEP_METHODS]

    def record_alpha(result):
        if result is None and (root / layout.STUDY_PLAN_FILE).is_file():
            return  # measured earlier: the plan written then stands
        write_plan(root, study_plan(seeds, read_matched_alpha(root)))

    return Plan("mini", root, [warm, base, alpha, *runs], "tiny",
                record={warm.id: record_warm_start(root, 0), alpha.id: record_alpha})


def two_warm_start_scores(root: Path) -> str:
    """One sentence on the warm start's two Pass@1 figures: its build's held-out problems and the study's."""
    build = read_json(Path(root) / layout.WARMSTART_RECORD_FILE, default={}) or {}
    baseline_log = layout.baseline_dir(root, BASELINE_NAME) / layout.EVAL_FILE
    evals = read_jsonl(baseline_log, strict=False) if baseline_log.is_file() else []
    if build.get("heldout_pass_at_1") is None or not evals:
        return "warm start: its build's held-out Pass@1 and the baseline score different problems"
    return (f"warm start: Pass@1 {build['heldout_pass_at_1']:.3f} on the {build.get('heldout_n', '')} held-out "
            f"problems of its build, {evals[0]['pass_at_1']:.3f} on the study's {evals[0].get('n', '')} evaluation "
            "problems (the baseline, and every run's step 0): two problem sets, two numbers")


def _run_mini(root, seeds, steps, figures, out, rebuild_warm_start, address, max_retries, runs=None) -> dict:
    """Every stage of the study into ``root``; its tables and figures into ``out`` (default: the committed
    folders); ``runs``: only these runs."""
    timings = Timings(root / layout.TIMINGS_FILE)
    if rebuild_warm_start:
        with timings.stage("warm start rebuilt"):
            build_warm_start(force=True)
    plan = make_plan(root, seeds, steps)
    if runs:  # a partial check leaves the warm start's rebuild to a whole one, unless its runs wait for the build
        partial = plan.only(runs)
        needed = {dep for job in partial.jobs for dep in job.deps}
        plan = Plan(partial.study, root, [j for j in partial.jobs if j.kind != "warmstart" or j.id in needed],
                    partial.profile, partial.record)
    run_plan(plan, timings, address=address, max_retries=max_retries)
    print(two_warm_start_scores(root), flush=True)
    write_answer_kinds(root)
    write_manifest(root)  # the figures check the results against it
    if figures:
        with timings.stage("tables and figures"):
            if out is None:
                render_report(mini_root=root)
            else:  # a rerun's: only the mini study's, into its own folders (nothing committed is touched)
                render_report(sources={"mini": root}, tables_dir=out[0], figures_dir=out[1])
        write_manifest(root)  # again: timings.json gained the figures stage
    return timings.record


def study_conclusions(committed_root: Path, rerun_root: Path) -> dict:
    """Level 2: every run against its committed twin, the yardstick pooled with the extended study's."""
    return compare_conclusions(committed_root, rerun_root, study="mini", spread_from=SAME_DESIGN["mini"])


def rerun_and_verify(committed: Path = COMMITTED_ROOT, rerun: Path = RERUN_MINI, *, resume: bool = False,
                     progress: bool = True, rebuild_warm_start: bool = False, address: str | None = None,
                     max_retries: int = 1, runs: list[str] | None = None) -> dict:
    """``make mini``: rerun the study into ``rerun`` (:func:`rerun_study`), its tables and figures there, and
    return the comparison with the committed study; ``runs``: only these runs (no tables or figures)."""
    tables_dir, figures_dir = Path(rerun) / "generated", Path(rerun) / "figures"

    def train(root: Path) -> None:
        _run_mini(root, SEEDS, None, not runs, (tables_dir, figures_dir), rebuild_warm_start, address, max_retries,
                  runs)

    def compare(root: Path) -> dict:
        tables = {} if runs else {f"paper/generated/{p.name}": (p, tables_dir / p.name)
                                  for p in sorted(PAPER_TABLES.glob("mini_*.tex"))}
        return compare_studies(committed, root, tables=tables, run_ids=runs or [c.run_id for c in planned_configs(root)],
                               conclusions=study_conclusions)

    return rerun_study("mini", committed, rerun, resume=resume, train=train, compare=compare)


def rerun_study(study: str, committed: Path, rerun: Path, *, resume: bool, train, compare) -> dict:
    """``make mini`` and ``make extended``: hold ``rerun`` (never ``committed`` or a folder holding it), clear it
    unless ``resume`` (only an earlier rerun of ``study``), mark it, ``train(rerun)``, then write, print and return
    ``compare(rerun)`` as ``<rerun>/reproduction.{json,md}``."""
    committed, rerun = Path(committed), Path(rerun)
    refuse_committed(rerun)  # before the lock, whose file would be written there
    if rerun.resolve() == committed.resolve() or committed.resolve().is_relative_to(rerun.resolve()):
        raise NotARerunRoot(f"the rerun root {rerun} is or holds the committed study {committed}; choose another "
                            "folder")
    check_study_root(committed, study)  # what the rerun is compared with, before hours of training
    with study_lock(rerun):
        check_rerun_root(rerun, study)  # --resume too: never write into a folder that is no rerun of ours
        if not resume:
            clear_rerun_root(rerun, study)
        atomic_write_json(rerun / RERUN_MARKER, {"study": study, "committed": repo_relative(committed)})
        train(rerun)
        report = compare(rerun)
        json_path, md_path = write_report(report, rerun)
    print(f"\n{md_path.read_text()}\nreport: {json_path} and {md_path}\n{report['verdict']}", flush=True)
    return report


def check_rerun_root(root: Path, study: str = "mini") -> None:
    """Raise :class:`NotARerunRoot` unless ``root`` is absent, empty or marked by an earlier rerun of ``study``."""
    root = Path(root)
    if not root.exists():
        return
    if not root.is_dir():
        raise NotARerunRoot(f"the rerun root {root} is a file, not a folder; choose another --rerun-root")
    entries = sorted(p.name for p in root.iterdir() if p.name != layout.STUDY_LOCK_FILE)
    if not entries:
        return
    marker = root / RERUN_MARKER
    if marker.is_file() and read_json(marker, default={}).get("study") == study:
        return
    shown = ", ".join(entries[:8]) + (f" and {len(entries) - 8} more" if len(entries) > 8 else "")
    raise NotARerunRoot(f"the rerun root {root} holds {shown}, which no earlier rerun of the {study} study wrote "
                        f"(it has no {RERUN_MARKER} naming it); nothing was deleted. Choose an empty or new "
                        "--rerun-root, or remove those files yourself")


def clear_rerun_root(root: Path, study: str = "mini") -> None:
    """Delete an earlier rerun but the study lock the caller holds (else another process could lock anew)."""
    check_rerun_root(root, study)
    for entry in sorted(Path(root).iterdir()):
        if entry.name == layout.STUDY_LOCK_FILE:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


def promote(rerun: Path = RERUN_MINI, committed: Path = COMMITTED_ROOT, figures: bool = True) -> None:
    """Make a finished rerun the committed study (:func:`promote_rerun`); committed runs ``make mini`` does not
    rerun are kept."""
    committed = promote_rerun("mini", rerun, committed, planned_configs, PROMOTED_FOLDERS, PROMOTED_FILES,
                              keep=True, needs_report=True)
    print(f"promoted {rerun} to {committed}")
    write_manifest(committed)
    if figures:
        render_report(mini_root=committed)


def promote_rerun(study: str, rerun: Path, committed: Path, configs, folders, files, *, keep: bool = False,
                  needs_report: bool = False) -> Path:
    """Replace ``committed`` by the ``folders`` and ``files`` of a finished rerun (every run of ``configs(rerun)``
    complete, with ``needs_report`` its reproduction.json too), no checkpoints, by renames
    (:func:`saah_lab.rundir.roots.replace_folder`) once every JSON file of the rerun reads; ``keep``: the committed
    runs the rerun lacks stay. Returns ``committed``."""
    rerun, committed = check_promotable(rerun), Path(committed)
    with study_lock(rerun):  # not while a study still writes the rerun
        check_study_root(rerun, study)
        check_study_root(committed, study, new=True)
        unfinished = [cfg.run_id for cfg in configs(rerun)
                      if not RunDir(layout.run_dir(rerun, cfg.run_id)).is_complete(cfg.trainer.max_steps)]
        report = (rerun / "reproduction.json").is_file()
        if unfinished or (needs_report and not report):
            raise Refused(f"{rerun} is not a finished rerun (unfinished runs: {', '.join(unfinished) or 'none'}"
                          + (f"; reproduction.json present: {report}); run `make mini` first" if needs_report else ")"))
        refuse_damaged(rerun, folders + files)
        replace_folder(committed, lambda staging: copy_results(rerun, staging, folders, files,
                                                               keep_from=committed if keep else None))
    return committed


def copy_results(rerun: Path, staging: Path, folders, files, keep_from: Path | None = None) -> None:
    """``folders`` and ``files`` of ``rerun`` into ``staging``, no checkpoints, locks or temporary files; with
    ``keep_from`` its runs the rerun lacks and its other JSON files (not the manifest) too."""
    not_results = shutil.ignore_patterns(layout.CHECKPOINTS_DIR, ".*")
    for name in folders:
        shutil.copytree(rerun / name, staging / name, ignore=not_results)
        for kept in sorted((keep_from / name).glob("*")) if keep_from else ():
            if not (staging / name / kept.name).exists():
                shutil.copytree(kept, staging / name / kept.name, ignore=not_results)
                print(f"kept {kept} (not rerun by make mini)")
    for kept in sorted(keep_from.glob("*.json")) if keep_from else ():
        if kept.name not in files + (layout.MANIFEST_FILE,):
            shutil.copy2(kept, staging / kept.name)
    for name in files:
        shutil.copy2(rerun / name, staging / name)


def write_answer_kinds(root: Path) -> dict:
    """Per run: the evaluation answers correct, of the planted intermediate-answer habit, or otherwise wrong, at
    step 0 and the run's last step, into ``answer_kinds.json``: what training removed. A missing file is a
    :class:`Refused` naming it, and nothing is written (another step's counts would pass for them)."""
    summary, missing = {}, []
    for run_dir in layout.folders(root, layout.RUNS):
        run = RunDir(run_dir)
        steps = settings_of_record(run.read_config() or {}).get("max_steps")
        if not isinstance(steps, int):
            missing.append(f"{run.config_path} (the run's steps)")
            continue
        paths = {str(step): run.samples_path(step) for step in (0, steps)}
        lacking = [str(p) for p in paths.values() if not p.is_file()]
        missing += lacking
        if not lacking:
            summary[run_dir.name] = {step: count_answer_kinds(read_jsonl(path)) for step, path in paths.items()}
    if missing:
        raise Refused(f"the answer kinds of {root} need the first and last evaluation of every run; missing: "
                      f"{', '.join(missing)}; nothing was written")
    atomic_write_json(root / layout.ANSWER_KINDS_FILE, summary)
    return summary


def study_parser(module: str, doc: str, root: Path, rerun: Path) -> argparse.ArgumentParser:
    """The command line ``make mini`` and ``make extended`` share: the committed and rerun roots, Ray's."""
    parser = argparse.ArgumentParser(prog=f"python -m {module}", description=doc.splitlines()[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--root", type=in_repo, default=repo_relative(root), help="the committed study")
    parser.add_argument("--rerun-root", type=in_repo, default=repo_relative(rerun),
                        help="where the check reruns: a new or empty folder, or an earlier rerun (nothing else is "
                             "ever deleted)")
    parser.add_argument("--resume", action="store_true", help="continue an interrupted rerun instead of starting fresh")
    parser.add_argument("--address", default=None,
                        help="a Ray cluster to run on (auto or host:port); default: a local Ray instance")
    parser.add_argument("--max-retries", type=int, default=1, help="retries of a run whose worker or node died")
    return parser


def main(argv=None) -> int:
    parser = study_parser("saah_lab.studies.mini", __doc__, COMMITTED_ROOT, RERUN_MINI)
    parser.add_argument("command", nargs="?", default="verify", choices=("verify", "promote", "run", "answer-kinds"),
                        help="verify (default, `make mini`): rerun into --rerun-root and compare with --root; "
                             "promote: make a finished rerun the committed study; "
                             "run: run the study directly into --root; answer-kinds: rewrite <root>/answer_kinds.json")
    parser.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS), help="`run` only")
    parser.add_argument("--steps", type=int, default=None, help="`run` only: override the tiny profile's steps")
    parser.add_argument("--no-figures", action="store_true", help="`run` and `promote`: skip the tables and figures")
    parser.add_argument("--runs", nargs="+", default=None, metavar="RUN_ID",
                        help="verify: only these runs of the plan, against their committed twins (a partial check: "
                             "no tables or figures)")
    parser.add_argument("--rebuild-warm-start", action="store_true",
                        help="build the warm start even if cached (to time what a fresh clone does)")
    args = parser.parse_args(argv)
    try:
        return _run_command(args)
    except (FolderLockedError, Refused) as err:
        parser.exit(1, f"error: {err}\n")
    except KeyboardInterrupt:
        parser.exit(130, "\ninterrupted: the finished runs are kept; the same command with --resume continues\n")


def _run_command(args) -> int:
    started = time.perf_counter()
    status, closing = 0, []
    if args.command == "answer-kinds":
        write_answer_kinds(check_study_root(args.root, "mini"))
        print(f"wrote {args.root / 'answer_kinds.json'}")
    elif args.command == "promote":
        promote(args.rerun_root, args.root, figures=not args.no_figures)
    elif args.command == "run":
        root = check_study_root(args.root, "mini", new=True)
        with study_lock(root):
            _run_mini(root, tuple(args.seeds), args.steps, not args.no_figures, None, args.rebuild_warm_start,
                      args.address, args.max_retries)
    else:
        report = rerun_and_verify(args.root, args.rerun_root, resume=args.resume,
                                  rebuild_warm_start=args.rebuild_warm_start, address=args.address,
                                  max_retries=args.max_retries, runs=args.runs)
        status, closing = closing_lines(report, cpu_numerics_record(), committed_mkl_kernels(args.root))
    print(f"\n{args.command} done in {(time.perf_counter() - started) / 60:.1f} min", flush=True)
    # the verdict last, where a user looks
    print("\n".join(closing or [f"CPU numerics: {summary(cpu_numerics_record())}"]), flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
