"""The report's texts: the evidence's paragraphs for LaTeX, the paper-matched alpha in words, the texts that read
several studies at once (which runs they share, the mini study's pointer to the powered study, the headline, the
closing note, the confirmatory study's provenance and its verdict on the earlier claims), the real-model
paragraph, and the switches that tell ``paper/main.tex`` which outputs exist.

Every number comes from the evidence summaries (:func:`saah_lab.analysis.evidence.evidence_summary`), the study
roots and their records; nothing is typed in. The words are in ``templates/report.txt``: each function computes
the values and picks the template for its case (:mod:`saah_lab.analysis.wording`), returning "" when there is
nothing to say; :mod:`saah_lab.report.render` writes them.
"""

from __future__ import annotations

import itertools
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd

from saah_lab.analysis.groups import method_label
from saah_lab.analysis.overlap import shared_runs
from saah_lab.analysis.plan import PAPER_CLAIM
from saah_lab.analysis.sentences import ci, num, seeds
from saah_lab.analysis.significance import established
from saah_lab.analysis.wording import Templates
from saah_lab.report.latex import tex_escape
from saah_lib.jsonio import read_json, read_jsonl
from saah_lib.method.methods import ALPHA_RANGE, MAIN_ALPHA
from saah_lib.paths import PAPER_REPORTED, repo_relative
from saah_lib.rundir import layout
from saah_lib.rundir.folder import RunDir
from saah_lib.rundir.layout import MATCHED_ALPHA_FILE, WARMSTART_RECORD_FILE, WARMSTART_RECORDS_FILE

# the digest of report.txt's template names and placeholder counts (saah_lab.analysis.wording): a damaged file is
# refused; a template or placeholder added or removed on purpose gives its new value here
say = Templates(Path(__file__).with_name("templates") / "report.txt", structure="86fd92e9f38b017f")


# ---------------------------------------------------------------------------
# one study's evidence in words
# ---------------------------------------------------------------------------

def tex_text(s: str) -> str:
    """Free text (labels, the generated sentence) for LaTeX: escaped, with alpha and 2^n in math mode."""
    out = tex_escape(s).replace("α", r"$\alpha$").replace("<", "$<$").replace(">", "$>$")
    return re.sub(r"2/2\\textasciicircum\{\}(\d+)", r"$2/2^{\1}$", out)


def left_out_warning(summary: dict) -> str:
    """What a tolerant reading left out of the comparisons ("" when nothing): runs, then whole pairs."""
    runs, pairs = summary.get("left_out"), summary.get("pairs_left_out")
    return " ".join(text for text in (
        say("left_out_runs", n=len(runs), runs=", ".join(runs)) if runs else "",
        say("left_out_pairs", n=len(pairs), pairs="; ".join(pairs)) if pairs else "") if text)


#: The paper's logged levels, by the key of ``alpha_range``, and the template naming each.
LEVELS = {"1.5b_low": "level_low", "1.5b_mean": "level_mean", "1.5b_high": "level_high", "3b_mean": "level_3b"}


def matched_alpha_text(record: dict) -> str:
    """The paper-matched alpha of a study root in words: rule, target, measurement, choice ("" without one),
    the other warm starts at that alpha and, when the measurement recorded ``alpha_range``, the alphas matching
    the paper's other levels."""
    if not record:
        return ""
    t, w = record["target"], record["weight_neg_mean"]
    parts = [say("matched_alpha", file=tex_escape(t["file"]), target=f"{t['target']:.3f}",
                 column=tex_escape(t["column"]), n_steps=len(t["steps"]), first=t["steps"][0], last=t["steps"][-1],
                 n_rollouts=record["n_rollouts"], warm_start=tex_escape(record["warm_start"]),
                 n_prompts=record["n_prompts"], per_prompt=record["per_prompt"], n_negative=record["n_negative"],
                 length=f"{record['mean_completion_length']:.1f}", at_main=f"{w['at_main_alpha']:.3f}",
                 main_alpha=f"{MAIN_ALPHA:g}", solved=f"{record['solved_alpha']:.3f}", alpha=f"{record['alpha']:g}",
                 at_alpha=f"{w['at_alpha']:.3f}")]
    if record.get("other_warm_starts"):
        parts.append(say("matched_alpha_others", items="; ".join(
            say("matched_alpha_other", warm_start=tex_escape(name), weight=f"{o['weight_neg_mean']['at_alpha']:.3f}")
            for name, o in record["other_warm_starts"].items())))
    if record.get("alpha_range"):
        parts.append(say("alpha_range", items=", ".join(
            say("alpha_range_item", level=say(LEVELS[k]), target=f"{m['target']:.3f}", alpha=f"{m['alpha']:.1f}")
            if m.get("alpha") is not None else
            say("alpha_range_item_none", level=say(LEVELS[k]), target=f"{m['target']:.3f}",
                max_alpha=f"{ALPHA_RANGE[1]:g}") for k, m in record["alpha_range"]["alphas"].items())))
    return " ".join(parts) + "\n"


def _sentence_file(text: str) -> str:
    return tex_text(text) + "\n" if text else ""


def primary_sentence(summary: dict) -> str:
    """The primary comparison with its run health: the paragraph that leads a study's results."""
    if not summary["rows"]:
        return ""
    parts = summary.get("paragraphs", {})
    return _sentence_file(" ".join(p for p in (parts.get("primary", ""), parts.get("health", "")) if p))


def secondary_sentence(summary: dict) -> str:
    """The secondary comparisons, what McNemar can say, the sign-flip floors and any warning."""
    if not summary["rows"]:
        return ""
    parts = summary.get("paragraphs", {})
    return _sentence_file(" ".join(parts[k] for k in ("secondary", "mcnemar", "floors", "warning") if parts.get(k)))


def whole_sentence(summary: dict) -> str:
    """Every paragraph of a summary without a primary comparison (the top-K runs)."""
    return _sentence_file(summary["sentence"]) if summary["rows"] else ""


# ---------------------------------------------------------------------------
# several studies at once
# ---------------------------------------------------------------------------

STUDY_NAMES = {"mini": "study_mini", "extended": "study_extended", "confirm": "study_confirm"}


def _tt(path) -> str:
    return f"\\texttt{{{tex_escape(repo_relative(path))}}}"


def overlap_text(roots: dict[str, Path]) -> str:
    """One sentence per pair of study roots that share runs ("" when none share any)."""
    names = [k for k in ("mini", "extended") if k in roots and Path(roots[k]).is_dir()]
    parts = []
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            shared = shared_runs(roots[a], roots[b])
            if shared["shared"]:
                ids = ", ".join(f"\\texttt{{{tex_escape(r)}}}" for r in shared["shared"])
                values = {"total": shared["n_b"], "a": _tt(roots[a]), "b": _tt(roots[b]), "ids": ids}
                parts.append(say("overlap_one", **values) if len(shared["shared"]) == 1
                             else say("overlap", n=len(shared["shared"]), **values))
    return " ".join(parts) + ("\n" if parts else "")


def _primary(summary: dict | None, key: str) -> dict | None:
    if not summary:
        return None
    return next((r for r in summary["rows"] if r["primary"] and r["key"] == key), None)


def _same_pair(summary: dict, row: dict, key: str) -> dict | None:
    """The row comparing ``row``'s two arms on quantity ``key`` (None when the evidence has none)."""
    return next((r for r in summary["rows"] if r["key"] == key and r["a"] == row["a"] and r["b"] == row["b"]), None)


def defer_text(mini: dict | None, extended: dict | None) -> str:
    """The mini study's primary comparison points to the powered one (numbers from both summaries)."""
    m, e = _primary(mini, "final"), _primary(extended, "final")
    if m is None or e is None:
        return ""
    return say("mini_defers", n=m["n_units"], mde=num(m["mde"], "final"), n_extended=e["n_units"],
               mde_extended=num(e["mde"], "final")) + "\n"


def _ci(row: dict) -> str:
    return tex_text(ci(row["confidence"], row["ci_low"], row["ci_high"], row["key"]))


def _verdict(row: dict, level: float) -> str:
    """The final Pass@1 result against the paper's claim."""
    claim, observed = PAPER_CLAIM["final"], "higher" if row["diff"] > 0 else "lower"
    tested = say("adjusted_p", p=f"{row['p_adjusted']:.3f}") if math.isfinite(row["p_adjusted"]) else say("no_test")
    if not established(row["p_adjusted"], row["ci_low"], row["ci_high"], level):
        return say("not_established", tested=tested, claim=claim, mde=num(row["mde"], "final"))
    if observed == claim:
        return say("as_claimed", observed=observed, tested=tested)
    return say("against_claim", observed=observed, claim=claim, tested=tested)


def _discount_clause(summary: dict, root: Path, a_label: str, train_logs=None) -> str:
    """At which discount the primary arm ran: its runs' logged mean weight on negative-advantage rollouts over
    training (per warm start), beside the paper's, where ``root`` measured the paper-matched alpha it ran."""
    record = read_json(Path(root) / MATCHED_ALPHA_FILE, default={}) or {}
    arm = summary["plan"]["primary"]["a"]
    if not (record and math.isclose(arm["alpha"], record.get("alpha", math.nan))) or train_logs is None:
        return say("discount_alpha", alpha=f"{arm['alpha']:g}")
    runs = train_logs[(train_logs["method"] == arm["method"]) & np.isclose(train_logs["alpha"], arm["alpha"])]
    per_warm_start = runs.groupby("model_label")["weight_neg_mean"].mean()
    low, high = f"{per_warm_start.min():.2f}", f"{per_warm_start.max():.2f}"
    logged = (say("logged_weight_range", low=low, high=high, n=len(per_warm_start)) if len(per_warm_start) > 1
              else low)
    return say("discount_matched", a=a_label, logged=logged, target=f"{record['target']['target']:.2f}")


def _headline_study(summaries: dict[str, dict]) -> str | None:
    """The study whose primary comparison leads: the confirmatory one, else the largest with a primary row."""
    return next((k for k in ("confirm", "extended", "mini") if _primary(summaries.get(k), "final")), None)


def _design(row: dict, warm_starts: str) -> str:
    """The primary row's seed pairs, warm starts and, where counted, evaluation problems."""
    n_ws = row["n_warm_starts"]
    values = {"seeds": seeds(row["n_units"]), "warm_starts": say(warm_starts, n=n_ws) if n_ws > 1 else
                  say("one_warm_start")}
    if row.get("n_problems"):
        return say("design_problems", **values, problems=f"{row['n_problems']:,}")
    return say("design", **values)


def closing_text(summaries: dict[str, dict], roots: dict[str, Path], train_logs: dict | None = None) -> str:
    """Two sentences: what the leading study's primary comparison on final Pass@1 supports, and what it cannot
    (``train_logs``: each study's logged training steps, by prefix, for the discount its runs ran at)."""
    study = _headline_study(summaries)
    if study is None:
        return ""
    summary = summaries[study]
    final = _primary(summary, "final")
    a_label = tex_text(final["a"])
    build = read_json(Path(roots[study]) / WARMSTART_RECORD_FILE, default={}) or {}
    builds = read_json(Path(roots[study]) / WARMSTART_RECORDS_FILE, default={}) or {}  # a study of several
    params = build.get("parameters") or next((b.get("parameters") for b in builds.values()), None)
    model = (say("model", millions=f"{params / 1e6:.1f}") if isinstance(params, (int, float))
             else say("tiny_model"))
    # the confirmatory study runs the alpha the extended study matched; its own root measures none
    own = (Path(roots[study]) / MATCHED_ALPHA_FILE).is_file()
    discount = _discount_clause(summary, roots[study] if own else roots.get("extended", roots[study]), a_label,
                                (train_logs or {}).get(study))
    return say("closing", study=say(STUDY_NAMES[study]), a=a_label, design=_design(final, "warm_starts_built"),
               diff=num(final["diff"], "final", True), ci=_ci(final), verdict=_verdict(final, summary["level"]),
               model=model, discount=discount) + "\n"


def headline_text(summaries: dict[str, dict]) -> str:
    """One sentence for the abstract: the leading study's primary result on final Pass@1 with its MDE."""
    study = _headline_study(summaries)
    if study is None:
        return ""
    row = _primary(summaries[study], "final")
    verdict = ("established" if established(row["p_adjusted"], row["ci_low"], row["ci_high"], summaries[study]["level"])
               else "not_established_headline")
    return say("headline", study=say("study_confirm_headline" if study == "confirm" else STUDY_NAMES[study]),
               design=_design(row, "warm_starts"), a=tex_text(row["a"]), diff=num(row["diff"], "final", True),
               ci=_ci(row), p=f"{row['p_adjusted']:.3f}", verdict=say(verdict), mde=num(row["mde"], "final")) + "\n"


def provenance_text(plan: dict | None, commits: list, plan_path: Path) -> str:
    """The design a study's plan fixed and the commits its runs record (``commits``: one per run as read, not a
    string where none was recorded; "" without runs): whether each ran a clean checkout (no ``-dirty``)."""
    if not commits:
        return ""
    commits = [c if isinstance(c, str) and c else "unknown" for c in commits]
    clean = [c for c in commits if c != "unknown" and not c.endswith("-dirty")]
    ids = ", ".join(say("commit_id_dirty" if c.endswith("-dirty") else "commit_id", id=c[:7])
                    for c in sorted(set(commits)))
    state = say("clean") if len(clean) == len(commits) else say("not_clean", n=len(commits) - len(clean))
    listed = say("commit" if len(set(commits)) == 1 else "commits", ids=ids)
    runs = (say("provenance", n=len(commits), commits=listed, state=state) if len(commits) > 1
            else say("provenance_one_run", commits=listed, state=state))
    plan = plan or {}
    if not (plan.get("warm_starts") and plan.get("seeds")):
        return runs + "\n"
    evaluation = plan.get("evaluation") or {}
    return say("provenance_planned", path=_tt(plan_path), n_warm_starts=len(plan["warm_starts"]),
               n_seeds=len(plan["seeds"]), n_pairs=len(plan.get("pairs", [])),
               n_eval=f"{evaluation['n_eval']:,}" if "n_eval" in evaluation else "?",
               data_seed=evaluation.get("data_seed", "?"), runs=runs) + "\n"


# ---------------------------------------------------------------------------
# what a later study says of an earlier one's claims
# ---------------------------------------------------------------------------

def claim_status(earlier: dict | None, later: dict | None, level: float) -> str:
    """What the later study's row says of the earlier study's claim on the same comparison and quantity.

    confirmed: both established, same sign; overturned: both established, opposite signs; not confirmed: the
    earlier one established, the later one not; newly established: only the later one; still not established:
    neither; not tested: the later study has no such row."""
    if later is None:
        return "not tested"
    was = earlier is not None and established(earlier["p_adjusted"], earlier["ci_low"], earlier["ci_high"], level)
    now = established(later["p_adjusted"], later["ci_low"], later["ci_high"], level)
    if was and now:
        return "confirmed" if (earlier["diff"] > 0) == (later["diff"] > 0) else "overturned"
    if was:
        return "not confirmed"
    return "newly established" if now else "still not established"


def _claim_cell(row: dict | None, level: float) -> str:
    if row is None:
        return "--"
    mark = "*" if established(row["p_adjusted"], row["ci_low"], row["ci_high"], level) else ""
    p = f"{row['p_adjusted']:.3f}" if math.isfinite(row["p_adjusted"]) else "n/a"
    return f"{num(row['diff'], row['key'], True)}{mark} ({p})"


def earlier_claims_rows(later: dict, earlier: dict) -> list[dict]:
    """Every comparison the earlier study made that the later one repeats, and every one the earlier study
    established, with both rows and :func:`claim_status` (the earlier study's order)."""
    level = later["level"]
    out = []
    for row in earlier["rows"]:
        again = _same_pair(later, row, row["key"])
        was = established(row["p_adjusted"], row["ci_low"], row["ci_high"], earlier["level"])
        if again is None and not (was or row["primary"]):
            continue
        out.append({"a": row["a"], "b": row["b"], "quantity": row["quantity"], "key": row["key"],
                    "earlier": row, "later": again, "status": claim_status(row, again, level)})
    return out


def earlier_claims_table(later: dict | None, earlier: dict | None) -> str:
    """The confirmatory study's verdict on each of the extended study's comparisons, as a LaTeX table
    ("" unless both studies have rows)."""
    if not later or not earlier or not later["rows"] or not earlier["rows"]:
        return ""
    rows = earlier_claims_rows(later, earlier)
    lines, previous = [], None
    for r in rows:  # the comparison is named on its first row only
        pair = f"{tex_text(r['a'])} vs {tex_text(r['b'])}"
        if previous is not None and pair != previous:
            lines.append("\\addlinespace")
        lines.append(say("earlier_claims_row", pair=pair if pair != previous else "",
                         quantity=tex_escape(r["quantity"]),
                         earlier=_claim_cell(r["earlier"], earlier["level"]),
                         later=_claim_cell(r["later"], later["level"]), status=r["status"]))
        previous = pair
    counts = {s: sum(r["status"] == s for r in rows) for s in dict.fromkeys(r["status"] for r in rows)}
    return say("earlier_claims", body="\n".join(lines), tally="; ".join(f"{n} {s}" for s, n in counts.items())) + "\n"


def sources_tex(present: dict[str, bool], names: list[str]) -> str:
    """``\\newif`` switches saying which sources have results (``present``: prefix -> any), and one
    ``generated@<name>`` mark per table or figure written, so the report includes exactly what exists
    (``\\ifgenerated`` in ``paper/main.tex``)."""
    lines = []
    for prefix, have in present.items():
        lines += [f"\\newif\\ifhave{prefix}", f"\\have{prefix}{'true' if have else 'false'}"]
    lines += [f"\\expandafter\\def\\csname generated@{name}\\endcsname{{}}" for name in sorted(set(names))]
    return "\n".join(lines) + "\n"


def command_today(command: str) -> str:
    """A recorded ``python -m`` command by today's module name: the committed record predates the lab package,
    where every study now lives (results files keep their bytes)."""
    return command.replace("-m saah_lib.studies.", "-m saah_lab.studies.")


def real_model_text(record: dict | None) -> str:
    """The discount measured on a real pretrained instruct model (``saah_lab.studies.real_model``): its entropy
    along the completions, the weight at the paper's alpha, the alphas matching the paper's logs and the top-K
    error, with the command that measured it ("" without the record)."""
    if not record:
        return ""
    first, last = record["entropy_profile"][0], record["entropy_profile"][-1]
    paper, matched, top = record["at_paper_alpha"], record["matched_alphas"], record["top_k_error"]
    alphas = ", ".join(f"{matched[k]['alpha']:g}" if matched[k].get("alpha") is not None else say("no_alpha")
                       for k in ("1.5b_low", "1.5b_mean", "1.5b_high"))
    low, high, weight = matched["1.5b_low"]["target"], matched["1.5b_high"]["target"], paper["mean_negative_weight"]
    verdict = "discounts_more" if weight < low else "discounts_less" if weight > high else "discounts_within"
    return say("real_model", model=tex_escape(record["model"]), prompts=record["prompts"],
               data=tex_escape(record["data"]),
               per_prompt=record["per_prompt"], max_tokens=record["max_new_tokens"],
               temperature=f"{record['temperature']:g}", seed=record["seed"],
               entropy=f"{record['mean_normalised_entropy']:.3f}", first=f"{first['mean_entropy']:.3f}",
               first_from=first["positions"][0], first_to=first["positions"][1] - 1,
               last=f"{last['mean_entropy']:.3f}", last_from=last["positions"][0], last_to=last["positions"][1] - 1,
               alpha=f"{paper['alpha']:g}", weight=f"{weight:.3f}", low=f"{low:.3f}", high=f"{high:.3g}",
               verdict=say(verdict), alphas=alphas, alpha_3b=f"{matched['3b_mean']['alpha']:g}", k=top["k"],
               vocab=f"{top['vocab_size']:,}", mean_error=f"{top['mean_abs_entropy_error']:.3f}",
               max_error=f"{top['max_abs_entropy_error']:.3f}",
               weight_error=f"{top['mean_abs_last_weight_error_at_paper_alpha']:.4f}",
               command=tex_escape(command_today(record["command"])), minutes=f"{record['wall_s'] / 60:.0f}",
               threads=record["torch_threads"]) + "\n"


def real_study_text(root: Path | None) -> str:
    """Where each run of the SmolLM2 study (``saah_lab.studies.real_study``) ended against the warmed-up model's
    Pass@1 and its 95% interval, and the smallest difference between two runs that evaluation noise alone lets one
    see ("" without runs)."""
    runs = [RunDir(folder) for folder in layout.folders(root, layout.RUNS)] if root else []
    evaluated = [(r.read_config() or {}, r.evals()) for r in runs]
    evaluated = [(c, e) for c, e in evaluated if len(e) > 1 and e[0]["step"] == 0]
    if not evaluated:
        return ""
    start = evaluated[0][1][0]
    p, n = start["pass_at_1"], start["n"]
    ends = {f"{c['method']} $\\alpha$={c['alpha']:g} s{c['seed']}": e[-1]["pass_at_1"] for c, e in evaluated}
    above = [f"{name} ({value:.3f})" for name, value in ends.items() if value > p + start["ci95"]]
    below = [f"{name} ({value:.3f})" for name, value in ends.items() if value < p - start["ci95"]]
    # two runs' final Pass@1 paired on the same n problems (McNemar's normal approximation, evaluation noise only):
    # the variance of their difference is the share of problems on which they disagree, over n
    discordant = float(np.mean([np.mean([a[i] != b[i] for i in a]) for a, b in itertools.combinations(
        [_final_correct(r) for r in runs if len(r.evals()) > 1], 2)] or [np.nan]))
    detectable = (1.96 + 0.8416) * math.sqrt(discordant / n)
    return say("real_study", start=f"{p:.3f}", ci=f"{start['ci95']:.3f}", n=n, runs=len(ends),
               above=", ".join(above) or say("no_run"), below=", ".join(below) or say("no_run"),
               within=len(ends) - len(above) - len(below), detectable=f"{detectable:.2f}",
               discordant=f"{discordant:.0%}".replace("%", "\\%")) + " " + _logged_discount(runs) + "\n"


def _logged_discount(runs: list[RunDir]) -> str:
    """Where the discount sat in training: each discounted run's logged mean weight on negative-advantage
    rollouts at its first step and over all its steps, and the mean normalised entropy of all runs' tokens."""
    logs = {(c["method"], c["alpha"], c["seed"]): r.train_log() for r in runs for c in [r.read_config() or {}]}
    def logged(key, steps):
        return pd.to_numeric(pd.Series([s.get(key) for s in steps], dtype=object), errors="coerce")
    weights = [say("logged_run_weight", method=tex_text(method_label(m, a)), seed=sd,
                   first=f"{logged('weight_neg_mean', log[:1]).iloc[0]:.2f}",
                   mean=f"{logged('weight_neg_mean', log).mean():.2f}")
               for (m, a, sd), log in sorted(logs.items()) if m != "grpo" and log]
    entropy = logged("entropy_norm", [s for log in logs.values() for s in log]).mean()
    paper = pd.read_csv(PAPER_REPORTED / "tab_sa_log_1b.csv", comment="#")
    paper_weight = pd.to_numeric(paper["weight_neg_mean"], errors="coerce").dropna()
    paper_entropy = pd.to_numeric(paper["entropy_norm"], errors="coerce").dropna()
    return say("logged_discount", weights="; ".join(weights), entropy=f"{entropy:.4f}",
               paper_weight=f"{paper_weight.mean():.2f}", paper_low=f"{paper_weight.min():.2f}",
               paper_high=f"{paper_weight.max():.2f}",
               paper_entropy=f"{paper_entropy.min():.3f} to {paper_entropy.max():.3f}")


def _final_correct(run: RunDir) -> dict:
    """Whether each evaluation problem was solved at the run's last evaluation, by problem id."""
    return {s["id"]: bool(s["correct"]) for s in read_jsonl(list(run.sample_files().values())[-1])}

