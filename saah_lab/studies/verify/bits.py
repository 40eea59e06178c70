"""Level 1 of the check: is every run of the rerun the committed run, bit for bit?

``compare_studies``: every logged metric, evaluation and completion; each metric's largest difference and one
verdict line. Timings and CPU numerics describe the machine: not compared, printed where they differ.
"""

from __future__ import annotations

import math
from pathlib import Path

from saah_lab.report.latex import tex_path
from saah_lab.studies.verify.conclusions import compare_conclusions
from saah_lib.jsonio import atomic_write_json, atomic_write_text, read_json, read_jsonl
from saah_lib.models.names import canonical_model_name
from saah_lib.numerics import RECORD_KEY, summary
from saah_lib.paths import repo_relative
from saah_lib.rundir import layout
from saah_lib.rundir.folder import RunDir
from saah_lib.rundir.layout import ANSWER_KINDS_FILE, TIMINGS_FILE, WARMSTART_RECORD_FILE

# Fields that describe where, when or along which code path a run happened, not what it computed (what a
# generation backend decodes is compared itself: the logged numbers and the evaluation completions).
NOT_COMPARED_CONFIG = {"results_dir", "resolved_model", "git_commit", "git_dirty", "versions", RECORD_KEY, "segments",
                       "generation_backend"}
NOT_COMPARED_METRICS = {"step_time"}
WARM_START_FIGURES = ("parameters", "vocab_size", "sft_steps", "final_sft_loss", "heldout_pass_at_1", "heldout_n",
                      "weights_sha256")


def _difference(a, b) -> float:
    """|a - b| for numbers (0 when both are missing), inf when only one is a number."""
    if a is None and b is None:
        return 0.0
    if isinstance(a, bool) or isinstance(b, bool) or not isinstance(a, (int, float)) or not isinstance(b, (int, float)):
        return 0.0 if a == b else math.inf
    return abs(float(a) - float(b))


def format_difference(difference: float) -> str:
    """A difference for a report; ``inf`` (a value logged on one side only) in words."""
    return "logged on one side only" if math.isinf(difference) else f"{difference:.3g}"


def _compare_step_logs(committed: list[dict], rerun: list[dict], skip=NOT_COMPARED_METRICS) -> dict:
    """Largest difference of each metric over the steps both logs hold, plus steps only one holds."""
    a, b = ({r["step"]: r for r in log} for log in (committed, rerun))
    largest: dict[str, dict] = {}
    for step in sorted(a.keys() & b.keys()):
        for key in (a[step].keys() | b[step].keys()) - skip - {"step"}:
            diff = _difference(a[step].get(key), b[step].get(key))
            if key not in largest or diff > largest[key]["difference"]:
                largest[key] = {"difference": diff, "step": step}
    return {"largest": largest, "missing_steps": sorted(a.keys() - b.keys()),
            "extra_steps": sorted(b.keys() - a.keys())}


def _compare_samples(committed: dict[int, Path], rerun: dict[int, Path]) -> dict:
    """Per evaluated step: problems whose correctness, or whose completion text, differs."""
    out = {"missing_steps": sorted(committed.keys() - rerun.keys()), "correctness_differs": {},
           "completion_differs": {}}
    for step in sorted(committed.keys() & rerun.keys()):
        a = {r["id"]: r for r in read_jsonl(committed[step])}
        b = {r["id"]: r for r in read_jsonl(rerun[step])}
        if a.keys() != b.keys():
            out["correctness_differs"][step] = sorted(a.keys() ^ b.keys())
            continue
        correctness = sorted(i for i in a if a[i].get("correct") != b[i].get("correct"))
        completions = sorted(i for i in a if a[i].get("completion") != b[i].get("completion"))
        if correctness:
            out["correctness_differs"][step] = correctness
        if completions:
            out["completion_differs"][step] = len(completions)
    return out


def _meaning(config: dict | None) -> dict:
    meaning = {k: v for k, v in (config or {}).items() if k not in NOT_COMPARED_CONFIG}
    if isinstance(meaning.get("model_name"), str):
        meaning["model_name"] = canonical_model_name(meaning["model_name"])  # older runs named a folder
    return meaning


def numerics_difference(committed: dict | None, rerun: dict | None) -> dict | None:
    """Both sides' CPU numerics records, summed up, where they differ (a side without one: "not recorded")."""
    committed, rerun = committed or {}, rerun or {}
    fields = sorted(k for k in committed.keys() | rerun.keys() if committed.get(k) != rerun.get(k))
    if not fields:
        return None
    return {"committed": summary(committed), "rerun": summary(rerun), "fields": fields}


def compare_run(committed_dir: Path, rerun_dir: Path) -> dict:
    """Everything that differs between two folders of the same run."""
    a, b = RunDir(committed_dir), RunDir(rerun_dir)
    if not a.dir.is_dir() or not b.dir.is_dir():
        return {"identical": False, "results_identical": False, "missing": True,
                "missing_from": "committed" if not a.dir.is_dir() else "rerun"}
    config_a, config_b = a.read_config() or {}, b.read_config() or {}
    settings_a, settings_b = _meaning(config_a), _meaning(config_b)
    config_differs = sorted(k for k in settings_a.keys() | settings_b.keys() if settings_a.get(k) != settings_b.get(k))
    train = _compare_step_logs(a.train_log(), b.train_log())
    evals = _compare_step_logs(a.evals(), b.evals())
    entropies = _compare_step_logs(_flatten_entropies(a), _flatten_entropies(b))
    samples = _compare_samples(a.sample_files(), b.sample_files())
    results_identical = _identical((train, evals, entropies), samples)  # whatever the configs say
    return {"identical": results_identical and not config_differs, "results_identical": results_identical,
            "missing": False, "config_differs": config_differs, "train_log": train,
            "eval": evals, "token_entropies": entropies, "eval_samples": samples,
            "cpu_numerics": numerics_difference(config_a.get(RECORD_KEY), config_b.get(RECORD_KEY))}


def compare_run_start(committed_dir: Path, rerun_dir: Path, steps: int) -> dict:
    """A rerun of a run's first ``steps`` steps against the committed run, bit for bit; where bits differ, only
    the step-0 Pass@1 (the same model, greedy) must agree within its 95% interval (later rollouts may differ)."""
    a, b = RunDir(committed_dir), RunDir(rerun_dir)
    early = lambda records: [r for r in records if r["step"] <= steps]  # noqa: E731
    entropies = [[e for e in _flatten_entropies(r) if e["logged_step"] <= steps] for r in (a, b)]
    logs = {"train_log": (early(a.train_log()), b.train_log()), "eval": (early(a.evals()), b.evals()),
            "token_entropies": tuple(entropies)}
    compared = {name: _compare_step_logs(*pair) for name, pair in logs.items()}
    samples = _compare_samples({k: v for k, v in a.sample_files().items() if k <= steps}, b.sample_files())
    identical = _identical(compared.values(), samples)
    first = [side[0] if side and side[0]["step"] == 0 else None for side in logs["eval"]]
    gap = abs(first[0]["pass_at_1"] - first[1]["pass_at_1"]) if all(first) else None
    close = gap is not None and gap <= first[0]["ci95"]
    verdict = ("identical: every number of the first {n} steps and every step-0 completion, bit for bit" if identical
               else f"not bit-identical; step-0 Pass@1 differs by {gap if gap is not None else 'an unknown amount'}"
                    f" ({'within' if close else 'outside'} its 95% interval)")
    return {"identical": identical, "close": identical or close, "verdict": verdict.format(n=steps),
            **compared, "eval_samples": samples,
            "cpu_numerics": numerics_difference((a.read_config() or {}).get(RECORD_KEY),
                                                (b.read_config() or {}).get(RECORD_KEY))}


def _identical(logs, samples: dict) -> bool:
    """Every step on both sides, every number equal, every evaluation completion the same."""
    logs = list(logs)
    return (all(not log["missing_steps"] and not log["extra_steps"] for log in logs)
            and all(m["difference"] == 0 for log in logs for m in log["largest"].values())
            and not any(samples[k] for k in ("missing_steps", "correctness_differs", "completion_differs")))


def _flatten_entropies(log: RunDir) -> list[dict]:
    """token_entropies.jsonl holds several records per step; index them as one pseudo-step each."""
    records = read_jsonl(log.token_entropy_path)
    out = []
    for i, r in enumerate(records):
        values = r.get("entropy_norm") or []
        out.append({"step": i, "logged_step": r.get("step"), "advantage": r.get("advantage"),
                    "n_tokens": len(values), "entropy_sum": math.fsum(values)})
    return out


def compare_warm_start(committed_root: Path, rerun_root: Path) -> dict:
    a = read_json(committed_root / WARMSTART_RECORD_FILE, default={})
    b = read_json(rerun_root / WARMSTART_RECORD_FILE, default={})
    figures = {k: {"committed": a.get(k), "rerun": b.get(k)} for k in WARM_START_FIGURES if k in a and k in b}
    differs = sorted(k for k, v in figures.items() if v["committed"] != v["rerun"])
    not_recorded = sorted(k for k in WARM_START_FIGURES if (k in a) != (k in b))
    return {"identical": not differs and bool(figures), "differs": differs, "figures": figures,
            "recorded_on_one_side_only": not_recorded,
            "cpu_numerics": numerics_difference(a.get(RECORD_KEY), b.get(RECORD_KEY))}


def compare_study_numerics(committed_root: Path, rerun_root: Path, runs: dict, baselines: dict,
                           warm_start: dict) -> list[dict]:
    """Where the two studies' CPU numerics differ, grouped: each distinct (committed, rerun) pair and where it is."""
    timings = [read_json(root / TIMINGS_FILE, default={}).get("machine", {}).get(RECORD_KEY)
               for root in (committed_root, rerun_root)]
    found = {"warm start build": warm_start.get("cpu_numerics"), "study process": numerics_difference(*timings),
             **{f"baseline {k}": v.get("cpu_numerics") for k, v in baselines.items()},
             **{k: v.get("cpu_numerics") for k, v in runs.items()}}
    groups: dict[tuple[str, str], list[str]] = {}
    for where, diff in found.items():
        if diff:
            groups.setdefault((diff["committed"], diff["rerun"]), []).append(where)
    return [{"committed": c, "rerun": r, "where": where} for (c, r), where in groups.items()]


def compare_files(pairs: dict[str, tuple[Path, Path]], renamed: tuple[str, str] | None = None) -> dict[str, bool]:
    """Name -> whether the two files exist and hold the same bytes; ``renamed = (rerun_name, committed_name)``:
    the rerun's folder, named in the tables (also as LaTeX text), is read as the committed one."""
    forms = [(tex_path(renamed[0]), tex_path(renamed[1])), renamed] if renamed else []

    def rerun_bytes(path: Path) -> bytes:
        data = path.read_bytes()
        for rerun_name, committed_name in forms:
            data = data.replace(rerun_name.encode(), committed_name.encode())
        return data

    return {name: a.is_file() and b.is_file() and a.read_bytes() == rerun_bytes(b) for name, (a, b) in pairs.items()}


def compare_studies(committed_root: Path, rerun_root: Path, tables: dict[str, tuple[Path, Path]] | None = None,
                    run_ids: list[str] | None = None, conclusions=compare_conclusions,
                    study_files: tuple[str, ...] = (ANSWER_KINDS_FILE,)) -> dict:
    """Compare ``run_ids`` (default: every committed run) and ``study_files`` of two roots; level 2,
    ``conclusions(committed_root, rerun_root)`` (``reproduced`` True, False or None, and ``line``), is asked
    whenever a run differs."""
    committed_root, rerun_root = Path(committed_root), Path(rerun_root)
    committed_ids = [d.name for d in layout.folders(committed_root, layout.RUNS)]
    run_ids = committed_ids if run_ids is None else sorted(run_ids)
    runs = {run_id: compare_run(layout.run_dir(committed_root, run_id), layout.run_dir(rerun_root, run_id))
            for run_id in run_ids}
    baselines = {d.name: compare_run(d, layout.baseline_dir(rerun_root, d.name))
                 for d in layout.folders(committed_root, layout.BASELINES)}
    files = compare_files({name: (committed_root / name, rerun_root / name) for name in study_files})
    files.update(compare_files(tables or {}, renamed=(repo_relative(rerun_root), repo_relative(committed_root))))
    largest: dict[str, dict] = {}
    for run_id, result in runs.items():
        for section in ("train_log", "eval"):
            for metric, m in result.get(section, {}).get("largest", {}).items():
                name = metric if section == "train_log" else f"eval/{metric}"
                if name not in largest or m["difference"] > largest[name]["difference"]:
                    largest[name] = {**m, "run": run_id}
    identical = sum(r["identical"] for r in runs.values())
    warm_start = compare_warm_start(committed_root, rerun_root)
    others = [name for name, ok in (("warm start", warm_start["identical"]),
                                    *((f"baseline {k}", v["identical"]) for k, v in baselines.items()),
                                    *files.items()) if not ok]
    level2 = conclusions(committed_root, rerun_root) if identical < len(runs) else None
    return {"verdict": verdict_line(identical, len(runs), others, level2),
            "outcome": outcome(identical, len(runs), others, level2),
            "committed_root": repo_relative(committed_root), "rerun_root": repo_relative(rerun_root),
            "runs_compared": len(runs), "runs_identical": identical,
            "committed_runs_not_compared": sorted(set(committed_ids) - set(run_ids)), "largest_difference": largest,
            "conclusions": level2,
            "cpu_numerics": compare_study_numerics(committed_root, rerun_root, runs, baselines, warm_start),
            "warm_start": warm_start, "baselines": baselines, "files_identical": files, "runs": runs}


def verdict_line(identical: int, compared: int, others: list[str], level2: dict | None) -> str:
    """Level 1 alone when every run is identical; otherwise how many differ, then level 2's clause."""
    if identical == compared:
        return f"{identical}/{compared} runs reproduced exactly; " + (
            f"differs: {', '.join(others)}" if others else "warm start, baseline, answer kinds and tables identical")
    line = f"bits differ on {compared - identical}/{compared} runs"
    if others:
        line += f" (and {', '.join(others)})"
    return f"{line}; {level2['line']}"


#: What a reproduction can find.
BITS_REPRODUCED, FILES_DIFFER = "bits reproduced", "study files differ"
CONCLUSIONS = {True: "conclusions reproduced", None: "conclusions not checked", False: "conclusions changed"}


def outcome(identical: int, compared: int, others: list[str], level2: dict | None) -> str:
    """``bits reproduced``; ``study files differ`` (every run identical, yet the warm start, a baseline
    or a table is not); or, when a run differs, level 2's ``conclusions reproduced / not checked / changed``."""
    if identical == compared:
        return FILES_DIFFER if others else BITS_REPRODUCED
    return CONCLUSIONS[level2["reproduced"]]


def report_markdown(report: dict) -> str:
    lines = ["# Reproduction report\n", f"**{report['verdict']}**\n",
             f"Committed study `{report['committed_root']}`, rerun `{report['rerun_root']}`.\n",
             *numerics_markdown(report.get("cpu_numerics") or []),
             "| run | identical | train-log metrics that differ (largest) | Pass@1 largest difference | "
             "problems whose correctness differs | completions that differ |",
             "| --- | --- | --- | --- | --- | --- |"]
    for run_id, r in {**{f"baseline {k}": v for k, v in report["baselines"].items()}, **report["runs"]}.items():
        if r.get("missing"):
            lines.append(f"| {run_id} | no (not in the {r['missing_from']} study) | | | | |")
            continue
        differing = {k: m["difference"] for k, m in r["train_log"]["largest"].items() if m["difference"] > 0}
        worst = ", ".join(f"{k} {format_difference(v)}" for k, v in sorted(differing.items(),
                                                                        key=lambda kv: -kv[1])[:3]) or "none"
        pass_diff = r["eval"]["largest"].get("pass_at_1", {}).get("difference", 0.0)
        flips = sum(len(v) for v in r["eval_samples"]["correctness_differs"].values())
        texts = sum(r["eval_samples"]["completion_differs"].values())
        settings = f" (settings differ: {', '.join(r['config_differs'])})" if r.get("config_differs") else ""
        lines.append(f"| {run_id} | {'yes' if r['identical'] else 'no' + settings} | {worst} | {pass_diff:.3g} | "
                     f"{flips} | {texts} |")
    ws = report["warm_start"]
    lines += ["", "Warm start: " + ("identical" if ws["identical"] else "differs in " + ", ".join(
        f"{k} ({ws['figures'][k]['committed']} -> {ws['figures'][k]['rerun']})" for k in ws["differs"]))
        + (f" (recorded by one side only, not compared: {', '.join(ws['recorded_on_one_side_only'])})"
           if ws.get("recorded_on_one_side_only") else "")]
    if report.get("committed_runs_not_compared"):
        lines += ["", f"Committed runs outside this study's plan, not compared "
                      f"({len(report['committed_runs_not_compared'])}): "
                      + ", ".join(report["committed_runs_not_compared"])]
    lines += ["", "Files: " + ", ".join(f"{k} {'identical' if v else 'DIFFERS'}" for k, v in report["files_identical"].items())]
    if report.get("conclusions"):
        lines += ["", *conclusions_markdown(report["conclusions"])]
    if report["largest_difference"]:
        lines += ["", "Largest difference per metric over all runs:", "", "| metric | difference | run | step |",
                  "| --- | --- | --- | --- |"]
        lines += [f"| {k} | {format_difference(m['difference'])} | {m['run']} | {m['step']} |"
                  for k, m in sorted(report["largest_difference"].items())]
    return "\n".join(lines) + "\n"


def numerics_markdown(groups: list[dict]) -> list[str]:
    """The CPU numerics of both sides where they differ (recorded, not compared)."""
    if not groups:
        return []
    lines = ["CPU numerics (recorded, not compared; they explain differing bits):", ""]
    for g in groups:
        where = g["where"] if len(g["where"]) <= 4 else g["where"][:3] + [f"{len(g['where']) - 3} more"]
        lines += [f"- {', '.join(where)}: committed: {g['committed']}; rerun: {g['rerun']}"]
    return lines + [""]


def conclusions_markdown(level2: dict) -> list[str]:
    """Level 2: each shift test with its limit, the primary comparison on both sides, the rebuilt warm starts."""
    lines = ["Conclusions (level 2, because bits differ): " + level2["line"]]
    if not level2.get("tests"):  # not checked, or another level 2 than compare_conclusions: its line says it all
        return lines
    heterogeneity = level2.get("heterogeneity")
    lines += ["", f"Rule: {level2['rule']}.", "",
              f"Yardstick: sigma {level2['sigma']:.4f} = pooled per-seed standard deviation {level2['pooled']:.4f} "
              f"({level2['df']} df)" + (f" x {heterogeneity:.2f}, the largest ratio of a well-measured arm's"
                                        if heterogeneity else "") + ".", "",
              "| runs tested | n | mean shift (rerun - committed) | t | limit | detectable (80% power) | flagged |",
              "| --- | --- | --- | --- | --- | --- | --- |"]
    lines += [f"| {t['group']} | {t['runs']} | {t['shift']:+.4f} | {t['t']:+.2f} | ±{t['critical']:.2f} | "
              f"{t['detectable']:.3f} | {'YES' if t['flagged'] else 'no'} |" for t in level2["tests"]]
    p = level2["primary"]
    lines.append("")
    for side in ("committed", "rerun"):
        if side in p:
            s = p[side]
            lines.append(f"Primary comparison, {side}: {p['a']} - {p['b']} = {s['mean_difference']:+.3f} over "
                         f"{len(p['units'])} units (sign-flip p = {s['p_value']:.3g}, smallest possible "
                         f"{s['min_p']:.3g}).")
    lines.append(f"Primary comparison: {p['why']}.")
    for w in level2.get("warm_starts", []):
        lines.append(f"Rebuilt warm start {w['warm_start']}: held-out Pass@1 {w['rerun']} against {w['committed']}"
                     + (f", limit ±{w['limit']:.3f}: {'FLAGGED' if w['flagged'] else 'within'}" if w["checked"]
                        else ": not checkable (no spread of shipped builds, or a Pass@1 not recorded)") + ".")
    if level2.get("runs_on_one_side"):
        lines.append(f"Runs on one side only, not compared: {', '.join(level2['runs_on_one_side'])}.")
    return lines


def write_report(report: dict, out_dir: Path) -> tuple[Path, Path]:
    out_dir = Path(out_dir)
    json_path, md_path = out_dir / "reproduction.json", out_dir / "reproduction.md"
    atomic_write_json(json_path, report)
    atomic_write_text(md_path, report_markdown(report))
    return json_path, md_path
