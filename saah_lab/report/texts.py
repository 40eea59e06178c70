"""The report's texts: sentences from the paired evidence, the paper-matched alpha in words, the texts that
read several studies at once (which runs they share, the mini study's pointer to the powered study, the
closing note), and the switches that tell ``paper/main.tex`` which outputs exist.

Every number comes from the evidence summaries (:func:`saah_lab.analysis.evidence.evidence_summary`), the
study roots and their records; nothing is typed in.  Each function returns the text ("" when there is
nothing to say); :mod:`saah_lab.report.render` writes them.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from saah_lab.analysis.overlap import shared_runs
from saah_lab.analysis.plan import PAPER_CLAIM
from saah_lab.analysis.quantities import number_or_nan
from saah_lab.analysis.reported import read_reported_csv
from saah_lab.analysis.sentences import num, percent
from saah_lab.analysis.significance import established
from saah_lab.report.latex import tex_escape
from saah_lib import lab_name
from saah_lib.jsonio import read_json
from saah_lib.method.methods import ALPHA_RANGE, MAIN_ALPHA
from saah_lib.paths import PAPER_REPORTED, repo_relative
from saah_lib.rundir.layout import ALPHA_RANGE_FILE, MATCHED_ALPHA_FILE, WARMSTART_RECORD_FILE, WARMSTART_RECORDS_FILE

#: Written beside the matched alpha by ``python -m saah_lab.studies.matched_alpha --range <root>``.


# ---------------------------------------------------------------------------
# one study's evidence in words
# ---------------------------------------------------------------------------

def tex_text(s: str) -> str:
    """Free text (labels, the generated sentence) for LaTeX: escaped, with alpha and 2^n in math mode."""
    out = tex_escape(s).replace("α", r"$\alpha$").replace("<", "$<$").replace(">", "$>$")
    return re.sub(r"2/2\\textasciicircum\{\}(\d+)", r"$2/2^{\1}$", out)


def left_out_warning(summary: dict) -> str:
    """What a tolerant reading left out of the comparisons ("" when nothing): runs, then whole pairs."""
    parts = []
    if summary.get("left_out"):
        parts.append(f"{len(summary['left_out'])} damaged or incomplete run(s) left out: "
                     + ", ".join(summary["left_out"]) + ".")
    if summary.get("pairs_left_out"):
        parts.append(f"{len(summary['pairs_left_out'])} comparison(s) not made: "
                     + "; ".join(summary["pairs_left_out"]) + ".")
    return " ".join(parts)


def _range_text(alphas: dict, where: str) -> str:
    """The alphas matching the paper's lowest, mean and highest 1.5B level and its 3B mean, in words."""
    names = {"1.5b_low": "lowest 1.5B snapshot", "1.5b_mean": "1.5B mean", "1.5b_high": "highest 1.5B snapshot",
             "3b_mean": "3B mean"}
    parts = [f"the {names.get(k, k)} ({m['target']:.3f}) "
             + (f"at $\\alpha={m['alpha']:.1f}$" if m.get("alpha") is not None
                else f"at no $\\alpha$ up to {ALPHA_RANGE[1]:g}")
             for k, m in alphas.items()]
    return f"The paper's level is loosely pinned down; {where} the mean weight matches " + ", ".join(parts) + "."


def _drift_text(drift: dict, method: str = "sa") -> str:
    """How the logged mean weight on negative rollouts moved during the runs at the matched alpha."""
    by_ws = (drift.get("methods") or {}).get(method) or {}
    if not by_ws:
        return ""

    def span(name):
        lo, hi = min(d[name]["mean"] for d in by_ws.values()), max(d[name]["mean"] for d in by_ws.values())
        return f"{lo:.2f}" if f"{lo:.2f}" == f"{hi:.2f}" else f"{lo:.2f}--{hi:.2f}"

    return (f"The match holds at the start of training only: in the SA-AH-GRPO runs at that $\\alpha$ the logged "
            f"mean weight on negative-advantage rollouts is {span('start')} over the first {drift['window']} steps, "
            f"{span('during')} over all steps and {span('end')} over the last {drift['window']} (means over the "
            f"runs of each warm start).")


def matched_alpha_text(record: dict, range_record: dict | None = None) -> str:
    """The paper-matched alpha of a study root in words: rule, target, measurement, choice ("" without one);
    with ``range_record`` (the root's ``alpha_range.json``) or a measurement that recorded ``alpha_range``,
    also the alphas matching the paper's other levels and the drift during training."""
    if not record:
        return ""
    t, w = record["target"], record["weight_neg_mean"]
    text = (f"Paper-matched $\\alpha$: the paper's 1.5B log (\\texttt{{{tex_escape(t['file'])}}}) gives a mean "
            f"weight on negative-advantage rollouts of {t['target']:.3f} (mean of "
            f"\\texttt{{{tex_escape(t['column'])}}} "
            f"over its {len(t['steps'])} logged steps, {t['steps'][0]} to {t['steps'][-1]}). On "
            f"{record['n_rollouts']} rollouts sampled from \\texttt{{{tex_escape(record['warm_start'])}}} as at the "
            "start "
            f"of training ({record['n_prompts']} training prompts $\\times$ {record['per_prompt']}, scored with the "
            f"training reward, advantages normalised within each group; {record['n_negative']} negative, mean "
            f"length {record['mean_completion_length']:.1f} tokens), the same mean weight is "
            f"{w['at_main_alpha']:.3f} at the main $\\alpha={MAIN_ALPHA:g}$. Bisection gives "
            f"$\\alpha={record['solved_alpha']:.3f}$, rounded to $\\alpha={record['alpha']:g}$, where the mean "
            f"weight is {w['at_alpha']:.3f}.")
    others = record.get("other_warm_starts") or {}
    if others:
        listed = "; ".join(f"\\texttt{{{tex_escape(name)}}} {o['weight_neg_mean']['at_alpha']:.3f}"
                           for name, o in others.items())
        text += f" At that $\\alpha$ the other warm starts give {listed}."
    if record.get("alpha_range"):
        text += " " + _range_text(record["alpha_range"]["alphas"], "on the same rollouts")
    elif range_record and range_record.get("alpha_range"):
        ws = range_record["alpha_range"]["warm_starts"].get(record["warm_start"])
        if ws:
            text += " " + _range_text(ws["alphas"], f"on the {ws['n_rollouts']} rollouts the runs logged from "
                                      f"this warm start before any update ({ws['n_negative']} negative)")
    if range_record and range_record.get("weight_drift"):
        text += " " + _drift_text(range_record["weight_drift"])
    return text + "\n"


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

STUDY_NAMES = {"mini": "mini study", "extended": "extended study", "confirm": "confirmatory study"}


def _tt(path) -> str:
    return f"\\texttt{{{tex_escape(repo_relative(path))}}}"


def overlap_text(roots: dict[str, Path]) -> str:
    """One sentence per pair of study roots that share runs ("" when none share any)."""
    names = [k for k in ("mini", "extended") if k in roots and Path(roots[k]).is_dir()]
    parts = []
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            result = shared_runs(roots[a], roots[b])
            if not result["shared"]:
                continue
            ids = ", ".join(f"\\texttt{{{tex_escape(r)}}}" for r in result["shared"])
            verb = "is a run" if len(result["shared"]) == 1 else "are runs"
            parts.append(f"{len(result['shared'])} of the {result['n_b']} runs of {_tt(roots[b])} {verb} of "
                         f"{_tt(roots[a])} (same settings, evaluations and training values; only step times "
                         f"differ): {ids}. The two studies are not independent evidence on those runs.")
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
    return (f"With {m['n_units']} seed pairs the mini study cannot detect a final Pass@1 difference below "
            f"{num(m['mde'], 'final')} (at 80\\% power); it checks the pipeline. The extended study "
            f"(Section~\\ref{{sec:extended}}) tests the primary comparison with {e['n_units']} seed pairs "
            f"(minimum detectable difference {num(e['mde'], 'final')}).\n")


def paper_train_var(directory: Path = PAPER_REPORTED) -> dict[str, dict[str, float]]:
    """The paper's training-reward variance per model and method (``tab_main.csv``), e.g. ``{"3B": {"grpo":
    0.0885, "sa": 0.0246, ...}, ...}``; {} without the file."""
    path = Path(directory) / "tab_main.csv"
    if not path.is_file():
        return {}
    out: dict[str, dict[str, float]] = {}
    for _, r in read_reported_csv(path).iterrows():
        value = number_or_nan(r.get("train_var"))
        if math.isfinite(value):
            out.setdefault(str(r["model_short"]), {})[str(r["method"])] = value
    return out


def _paper_variance_clause(observed: str) -> str:
    """Which of the paper's own tables agree with the observed direction of SA-AH-GRPO's variance against
    GRPO's: the paper's claim of lower variance holds in one of its tables, not in both."""
    tables = {m: v for m, v in paper_train_var().items() if "sa" in v and "grpo" in v}
    if not tables:
        return ""
    parts = [f"{model} {num(v['sa'], 'train_var')} against {num(v['grpo'], 'train_var')}"
             for model, v in sorted(tables.items(), reverse=True)]
    same = [m for m, v in tables.items() if (v["sa"] > v["grpo"]) == (observed == "higher")]
    if not same:
        return ""
    return f" (the paper's own table, SA-AH-GRPO against GRPO: {', '.join(parts)}; " \
           f"its {' and '.join(sorted(same, reverse=True))} row goes the same way as ours)"


def _percent(row: dict) -> str:
    """The interval's confidence as LaTeX: 97.5\\% in a family of two."""
    return percent(row["confidence"]).replace("%", "\\%")


def _verdict(row: dict, key: str, level: float) -> str:
    claim = PAPER_CLAIM[key]
    observed = "higher" if row["diff"] > 0 else "lower"
    agree = "as the paper claims" if observed == claim else f"opposite to the paper's claim of {claim}"
    if key == "train_var" and observed != claim:
        agree += _paper_variance_clause(observed)
    tested = f"adjusted p = {row['p_adjusted']:.3f}" if math.isfinite(row["p_adjusted"]) else "no test"
    if established(row["p_adjusted"], row["ci_low"], row["ci_high"], level):
        return f"SA-AH-GRPO is {observed}, {agree} ({tested})"
    return (f"not established ({tested}; the paper claims {claim}; a difference smaller than "
            f"{num(row['mde'], key)} would go unseen)")


def _discount_clause(summary: dict, root: Path, a_label: str, matched_here: bool = True) -> str:
    """At which discount the primary arm ran, in the terms of the paper-matched alpha measurement in ``root``;
    ``matched_here``: ``root`` is the study's own (its runs' drift of the weight is then told too), else the
    study ran the alpha another study matched."""
    record = read_json(Path(root) / MATCHED_ALPHA_FILE, default={}) or {}
    plan = summary.get("plan") or {}
    arm = plan.get("primary", {}).get("a", {})
    alpha = arm.get("alpha")
    if record and alpha is not None and math.isclose(alpha, record.get("alpha", math.nan)):
        later = ""
        drift = (read_json(Path(root) / ALPHA_RANGE_FILE, default={}) or {}).get("weight_drift") or {}
        by_ws = (drift.get("methods") or {}).get(arm.get("method", "sa")) or {}
        if matched_here and by_ws:
            during = [d["during"]["mean"] for d in by_ws.values()]
            low, high = f"{min(during):.2f}", f"{max(during):.2f}"
            later = f", rising to {low}" + (f"--{high}" if low != high else "") + " on average during training"
        where = "" if matched_here else f", measured on the warm start of {_tt(root)}"
        return (f"at the paper's discount level ({a_label}: a mean weight of "
                f"{record['weight_neg_mean']['at_alpha']:.2f} on negative-advantage rollouts at the start of "
                f"training{where}{later}, against {record['target']['target']:.2f} in the paper's log)")
    if record and alpha is not None and math.isclose(alpha, MAIN_ALPHA):
        return (f"at a weaker discount than the paper's ({a_label}: a mean weight of "
                f"{record['weight_neg_mean']['at_main_alpha']:.2f} on negative-advantage rollouts at the start of "
                f"training, against {record['target']['target']:.2f} in the paper's log)")
    return f"at $\\alpha={alpha:g}$" if alpha is not None else ""


def _headline_study(summaries: dict[str, dict]) -> str | None:
    """The study whose primary comparison leads: the confirmatory one, else the largest with a primary row."""
    return next((k for k in ("confirm", "extended", "mini") if _primary(summaries.get(k), "final")), None)


def closing_text(summaries: dict[str, dict], roots: dict[str, Path]) -> str:
    """Two or three sentences: what the leading study's primary comparison supports, and what it cannot."""
    study = _headline_study(summaries)
    if study is None:
        return ""
    summary = summaries[study]
    final, var = _primary(summary, "final"), _primary(summary, "train_var")
    level = summary["level"]
    n_ws = final["n_warm_starts"]
    where = f" from {n_ws} independently built warm starts" if n_ws > 1 else " from one warm start"
    a_label = tex_text(final["a"])
    text = (f"In the CPU {STUDY_NAMES.get(study, study)}'s primary comparison, fixed before its runs "
            f"({a_label} against GRPO over {final['n_units']} seed pairs{where}"
            + (f", {final['n_problems']:,} evaluation problems" if final.get("n_problems") else "")
            + "), final Pass@1 differs by "
            f"{num(final['diff'], 'final', True)} ({_percent(final)} CI [{num(final['ci_low'], 'final', True)}, "
            f"{num(final['ci_high'], 'final', True)}]): {_verdict(final, 'final', level)}")
    if var is not None:
        text += (f"; training-reward variance differs by {num(var['diff'], 'train_var', True)} ({_percent(var)} CI "
                 f"[{num(var['ci_low'], 'train_var', True)}, {num(var['ci_high'], 'train_var', True)}]): "
                 f"{_verdict(var, 'train_var', level)}")
        within = _same_pair(summary, var, "train_var_within")
        if within is not None:
            text += (f"; the rewards' spread within a step, which the batch size does not shrink, differs by "
                     f"{num(within['diff'], 'train_var_within', True)} (paired t p = {within['p_value']:.3f})")
    text += ". "
    build = read_json(Path(roots[study]) / WARMSTART_RECORD_FILE, default={}) or {}
    builds = read_json(Path(roots[study]) / WARMSTART_RECORDS_FILE, default={}) or {}  # a study of several
    params = build.get("parameters") or next((b.get("parameters") for b in builds.values()), None)
    model = f"a {params / 1e6:.1f}M-parameter model" if isinstance(params, (int, float)) else "a tiny model"
    # the confirmatory study runs the alpha the extended study matched; its own root measures none
    own = (Path(roots[study]) / MATCHED_ALPHA_FILE).is_file()
    clause = _discount_clause(summary, roots[study] if own else roots.get("extended", roots[study]), a_label,
                              matched_here=own)
    text += (f"These runs train {model} on synthetic arithmetic problems{' ' + clause if clause else ''}: they test "
             "the selective discount's effect "
             "on such a model, and cannot confirm or refute the paper's GSM8K accuracies at 1.5B and 3B "
             "parameters.\n")
    return text


def headline_text(summaries: dict[str, dict]) -> str:
    """One sentence for the abstract: the leading study's primary result on final Pass@1 with its MDE."""
    study = _headline_study(summaries)
    if study is None:
        return ""
    row = _primary(summaries[study], "final")
    level = summaries[study]["level"]
    design = (f"{row['n_units']} seed pairs from {row['n_warm_starts']} warm starts"
              + (f", {row['n_problems']:,} evaluation problems" if row.get("n_problems") else ""))
    kind = ("pre-registered confirmatory study" if study == "confirm" else STUDY_NAMES.get(study, study))
    verdict = ("established" if established(row["p_adjusted"], row["ci_low"], row["ci_high"], level)
               else "not established")
    return (f"In our {kind} ({design}), {tex_text(row['a'])} minus GRPO in final Pass@1 is "
            f"{num(row['diff'], 'final', True)} ({_percent(row)} CI [{num(row['ci_low'], 'final', True)}, "
            f"{num(row['ci_high'], 'final', True)}], adjusted $p$ = {row['p_adjusted']:.3f}): {verdict}; the "
            f"smallest difference that design detects with 80\\% power is {num(row['mde'], 'final')}.\n")


def provenance_text(plan: dict | None, commits: list, plan_path: Path) -> str:
    """The design a study's plan fixed and the commits its runs record (``commits``: one per run as read, not a
    string where none was recorded; "" without runs): whether each ran a clean checkout (no ``-dirty``)."""
    if not commits:
        return ""
    commits = [c if isinstance(c, str) and c else "unknown" for c in commits]
    plan = plan or {}
    clean = [c for c in commits if c != "unknown" and not c.endswith("-dirty")]
    distinct = ", ".join(f"\\texttt{{{c[:7]}}}" + ("" if not c.endswith("-dirty") else "-dirty")
                         for c in sorted(set(commits)))
    evaluation = plan.get("evaluation") or {}
    design = ""
    if plan.get("warm_starts") and plan.get("seeds"):
        design = (f"Its plan ({_tt(plan_path)}) fixes {len(plan['warm_starts'])} newly built "
                  f"warm starts $\\times$ {len(plan['seeds'])} training seeds, {len(plan.get('pairs', []))} "
                  f"comparisons with GRPO, {evaluation.get('n_eval', '?'):,} evaluation problems (data seed "
                  f"{evaluation.get('data_seed', '?')}), the test and the rule before any run. ")
    verb = "record" if len(commits) > 1 else "records"
    state = ("with no local changes" if len(clean) == len(commits) else
             f"{len(commits) - len(clean)} of them with local changes or none recorded")
    noun = "commit" if len(set(commits)) == 1 else "commits"
    return f"{design}Its {len(commits)} runs {verb} {noun} {distinct}, {state}.\n"


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
        lines.append(f"{pair if pair != previous else ''} & {tex_escape(r['quantity'])} & "
                     f"{_claim_cell(r['earlier'], earlier['level'])} & {_claim_cell(r['later'], later['level'])} & "
                     f"{r['status']} \\\\")
        previous = pair
    body = "\n".join(lines)
    counts = {s: sum(r["status"] == s for r in rows) for s in dict.fromkeys(r["status"] for r in rows)}
    tally = "; ".join(f"{n} {s}" for s, n in counts.items())
    return ("\\begin{table}[ht]\n\\centering\\footnotesize\n"
            "\\begin{tabular}{>{\\raggedright\\arraybackslash}p{3.4cm}>{\\raggedright\\arraybackslash}p{3.3cm}rrl}\n"
            "\\toprule\n"
            "Comparison & Quantity & Extended & Confirmatory & Reading \\\\\n\\midrule\n" + body
            + "\n\\bottomrule\n\\end{tabular}\n"
            f"\\caption{{What the confirmatory study says of the extended study's comparisons ({tally}). "
            "Each study's cell: $\\Delta$ (A minus B) with its $p$ adjusted within that study's family; "
            "* established. Comparisons the confirmatory study does not repeat are listed when the extended study "
            "established them or made them its primary one.}\n\\label{tab:earlier-claims}\n\\end{table}\n")


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
    """A recorded ``python -m`` command, its module written by today's name where it has moved to the lab."""
    return re.sub(r"(?<=-m )saah_lib\.[\w.]+", lambda found: lab_name(found.group()) or found.group(), command)


def real_model_text(record: dict | None) -> str:
    """The discount measured on a real pretrained instruct model (``saah_lab.studies.real_model``): its entropy
    along the completions, the weight at the paper's alpha, the alphas matching the paper's logs and the top-K
    error, with the command that measured it ("" without the record)."""
    if not record:
        return ""
    profile = record["entropy_profile"]
    first, last = profile[0], profile[-1]
    paper = record["at_paper_alpha"]
    matched = record["matched_alphas"]
    alphas = ", ".join(f"{matched[k]['alpha']:g}" if matched[k].get("alpha") is not None else "none"
                       for k in ("1.5b_low", "1.5b_mean", "1.5b_high"))
    top = record["top_k_error"]
    low, high, weight = matched["1.5b_low"]["target"], matched["1.5b_high"]["target"], paper["mean_negative_weight"]
    verdict = ("discounts this model more than the paper's log shows for Qwen2.5-1.5B" if weight < low else
               "discounts this model less than the paper's log shows for Qwen2.5-1.5B" if weight > high else
               "discounts this model within the range of the paper's log")
    return (f"On {tex_escape(record['model'])}, {record['prompts']} prompts of {tex_escape(record['data'])} "
            f"$\\times$ {record['per_prompt']} rollouts (at most {record['max_new_tokens']} tokens, temperature "
            f"{record['temperature']:g}, seed {record['seed']}), the mean normalised entropy is "
            f"{record['mean_normalised_entropy']:.3f}, rising along the completion from {first['mean_entropy']:.3f} "
            f"(tokens {first['positions'][0]}--{first['positions'][1] - 1}) to {last['mean_entropy']:.3f} (tokens "
            f"{last['positions'][0]}--{last['positions'][1] - 1}). At the paper's $\\alpha$ = {paper['alpha']:g} "
            f"the mean weight on the tokens of negative-advantage rollouts is {paper['mean_negative_weight']:.3f}, "
            f"against {low:.3f}--{high:.3g} in the paper's 1.5B log: $\\alpha$ = {paper['alpha']:g} {verdict}. "
            f"The alphas that give the log's lowest, mean and "
            f"highest weight are {alphas} (its 3B mean: {matched['3b_mean']['alpha']:g}). The top-{top['k']} "
            f"entropy estimate at V = {top['vocab_size']:,} errs by {top['mean_abs_entropy_error']:.3f} on average "
            f"({top['max_abs_entropy_error']:.3f} at worst) in normalised entropy per token, and by "
            f"{top['mean_abs_last_weight_error_at_paper_alpha']:.4f} in the last token's weight at $\\alpha$ = "
            f"{paper['alpha']:g}. Measured by \\texttt{{{tex_escape(command_today(record['command']))}}} "
            f"(\\texttt{{make real-model}}), {record['wall_s'] / 60:.0f} min on {record['torch_threads']} CPU threads.\n")
