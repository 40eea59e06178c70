"""One run against the matching committed run: ``python -m saah_lab.studies.verify compare RUN_DIR``.

Is a run folder (say notebook 02's) the committed run of the same name in ``--against``, bit for bit?
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from saah_lab.rundir.reader import checked_config, read_lines
from saah_lab.studies.verify.bits import compare_run, format_difference
from saah_lib.jsonio import scan_jsonl
from saah_lib.paths import EXTENDED_ROOT, MINI_ROOT, in_repo, repo_relative
from saah_lib.rundir import layout
from saah_lib.rundir.folder import RunDir

COMMITTED_STUDIES = (MINI_ROOT, EXTENDED_ROOT)


def matching_committed_run(run_dir: Path, roots=COMMITTED_STUDIES) -> Path | None:
    """The folder of the same name as ``run_dir`` in the first of ``roots`` that has one (a run, else a baseline)."""
    for root in roots:
        for folder in (layout.run_dir(root, run_dir.name), layout.baseline_dir(root, run_dir.name)):
            if folder.is_dir() and folder.resolve() != run_dir.resolve():
                return folder
    return None


def _largest(log: dict, prefix: str = "") -> list[str]:
    """``metric difference (step N)`` for every metric that differs, the largest first."""
    differing = [(k, m) for k, m in log["largest"].items() if m["difference"] > 0]
    return [f"{prefix}{k} {format_difference(m['difference'])} (step {m['step']})"
            for k, m in sorted(differing, key=lambda km: -km[1]["difference"])]


def difference_lines(result: dict) -> list[str]:
    """What :func:`~saah_lab.studies.verify.bits.compare_run` found, as lines for a person."""
    if result.get("missing"):
        return [f"no run folder on the {result['missing_from']} side"]
    if result["identical"]:
        return ["identical: every setting, logged number, evaluation and completion"]
    lines = []
    if result["config_differs"]:
        lines.append("settings differ: " + ", ".join(result["config_differs"]))
    for name, key in (("train log", "train_log"), ("evaluation", "eval"), ("token entropies", "token_entropies")):
        log = result[key]
        if log["missing_steps"]:
            lines.append(f"{name}: steps only the committed run has: {_steps(log['missing_steps'])}")
        if log["extra_steps"]:
            lines.append(f"{name}: steps only this run has: {_steps(log['extra_steps'])}")
        differing = _largest(log)
        if differing:
            lines.append(f"{name}, largest differences: " + ", ".join(differing))
    samples = result["eval_samples"]
    for step, ids in samples["correctness_differs"].items():
        lines.append(f"evaluation at step {step}: {len(ids)} problems scored differently ({', '.join(ids[:5])}"
                     f"{', ...' if len(ids) > 5 else ''})")
    for step, n in samples["completion_differs"].items():
        lines.append(f"evaluation at step {step}: {n} completions differ in their text")
    if result.get("cpu_numerics"):
        n = result["cpu_numerics"]
        lines.append(f"CPU numerics (recorded, not compared; they explain differing bits): committed {n['committed']}; "
                     f"this run {n['rerun']}")
    return lines


def _steps(steps: list[int]) -> str:
    return ", ".join(map(str, steps[:8])) + (f" and {len(steps) - 8} more" if len(steps) > 8 else "")


def unreadable(folder: Path, baseline: bool = False) -> list[str]:
    """Why ``folder`` cannot be read as a finished run (or baseline), one message per file and line; [] when it
    can: its config must place the run and every line of its logs and samples parse, the last too (a torn one is
    an interrupted write)."""
    files = RunDir(folder)
    _, problems = checked_config(files, required=() if baseline else ("method", "alpha", "max_steps"))
    for log in (files.train_log_path, files.eval_path, files.token_entropy_path):
        problems += read_lines(log, numeric=())[1]
    for samples in sorted(files.samples_dir.glob("step_*.jsonl")):
        problems += [f"{samples}: line {i}: {problem}" for i, problem in scan_jsonl(samples)[1]]
    return problems


def compare_one(run_dir: Path, against: Path | None = None) -> tuple[int, str]:
    """The exit status (0 identical, 1 differs, 2 unreadable or nothing to compare with) and the text to print."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return 2, f"error: {run_dir} is no run folder"
    committed = matching_committed_run(run_dir, [against] if against is not None else COMMITTED_STUDIES)
    if committed is None:
        where = repo_relative(against) if against is not None else " or ".join(map(repo_relative, COMMITTED_STUDIES))
        return 2, (f"error: {where} holds no run named {run_dir.name} (under {layout.RUNS}/ or {layout.BASELINES}/) "
                   f"other than {repo_relative(run_dir)} itself")
    baseline = committed.parent.name == layout.BASELINES
    problems = [*unreadable(run_dir, baseline), *unreadable(committed, baseline)]
    if problems:
        return 2, "\n".join([f"error: cannot compare {repo_relative(run_dir)} with {repo_relative(committed)}:",
                              *(f"  {problem}" for problem in problems)])
    try:
        result = compare_run(committed, run_dir)
    except ValueError as error:  # e.g. two files for one step's samples
        return 2, f"error: cannot compare {repo_relative(run_dir)} with {repo_relative(committed)}: {error}"
    head = f"{repo_relative(run_dir)} against the committed {repo_relative(committed)}:"
    return (0 if result["identical"] else 1), "\n".join([head, *(f"  {line}" for line in difference_lines(result))])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m saah_lab.studies.verify",
                                     description="compare one run with the matching committed run")
    commands = parser.add_subparsers(dest="command", required=True)
    compare = commands.add_parser("compare", help="one run folder against the committed run of the same name",
                                  description=__doc__.splitlines()[0] + " Exit status: 0 identical, 1 differs, "
                                              "2 unreadable or nothing to compare with.")
    compare.add_argument("run_dir", type=in_repo, help="a run folder (e.g. results/local/runs/tiny-sa-a0.5-s0)")
    compare.add_argument("--against", type=in_repo, default=None,
                         help="the committed study root (default: the first of "
                              f"{', '.join(map(repo_relative, COMMITTED_STUDIES))} that holds the run)")
    args = parser.parse_args(argv)
    status, text = compare_one(args.run_dir, args.against)
    print(text, file=sys.stdout if status < 2 else sys.stderr)
    return status
