"""Every generated text: a study's evidence summary and its paragraphs, the paper-matched alpha, the texts that
read several studies at once, the real-model paragraph, and the switches of ``paper/main.tex``.

Every number comes from the evidence (:mod:`saah_lab.analysis.evidence`) and the study roots' records; the words
are Jinja2 macros in ``templates/words.jinja``. Each function picks the macro for its case ("" for nothing to say).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import re
from collections import Counter
from pathlib import Path

import jinja2
import numpy as np
import pandas as pd
from jinja2 import nodes

from saah_lab.analysis.evidence import (
    FAMILY_RULE,
    INFERENCE,
    TOPK_FAMILY_RULE,
    attach_without_flagged,
    compare_pairs,
    families,
    health_summary,
    load_root_evidence,
    topk_pairs,
)
from saah_lab.analysis.groups import method_label
from saah_lab.analysis.health import RULES
from saah_lab.analysis.overlap import shared_runs
from saah_lab.analysis.plan import PAPER_CLAIM, StudyPlan, read_plan
from saah_lab.analysis.quantities import CHECKPOINTS, decimals
from saah_lab.analysis.runs import StudyRuns
from saah_lab.analysis.significance import LEVEL, MAX_UNITS_NEEDED, POWER, established
from saah_lab.report.latex import tex_escape
from saah_lib.jsonio import read_json, read_jsonl
from saah_lib.method.methods import ALPHA_RANGE, MAIN_ALPHA
from saah_lib.paths import PAPER_REPORTED, repo_relative
from saah_lib.rundir import layout
from saah_lib.rundir.folder import RunDir
from saah_lib.rundir.layout import MATCHED_ALPHA_FILE, WARMSTART_RECORD_FILE, WARMSTART_RECORDS_FILE


class TemplateError(ValueError):
    """A template that cannot be read or filled: unknown, damaged, or given the wrong fields."""


class Words:
    """The macros of one Jinja2 file, filled by name: ``say("name", field=value, ...)``.

    Strict both ways, so a typo fails loudly instead of printing a blank: every argument needs a value (str or int;
    the caller formats floats) and every value an argument. A file that does not parse, has an empty macro, or
    whose macros' names, arguments and placeholder counts do not give the digest ``structure`` is refused, named.
    """

    def __init__(self, path: str | Path, structure: str | None = None):
        self.path = Path(path)
        try:
            environment = jinja2.Environment(undefined=jinja2.StrictUndefined)
            tree = environment.parse(self.path.read_text())
            template = environment.from_string(tree)
        except (OSError, UnicodeDecodeError, jinja2.TemplateSyntaxError) as error:
            raise TemplateError(f"{self.path}: the template file cannot be read ({error})") from None
        self.module, shape = template.module, []
        for macro in tree.find_all(nodes.Macro):
            if not macro.body or macro.name in (s[0] for s in shape):
                raise TemplateError(f"{self.path}: template {macro.name!r} is empty or defined twice")
            placeholders = Counter(n.name for n in macro.find_all(nodes.Name) if n.ctx == "load")
            shape.append([macro.name, [a.name for a in macro.args], sorted(placeholders.items())])
        self.names = [s[0] for s in shape]
        self.structure = hashlib.sha256(json.dumps(sorted(shape)).encode()).hexdigest()[:16]
        if structure is not None and self.structure != structure:
            raise TemplateError(
                f"{self.path}: its templates' names and placeholders are not the ones the code fills (structure "
                f"{self.structure}, the code expects {structure}): a template was lost, renamed or added, or a "
                "placeholder lost, repeated or added. A change made on purpose gives the new structure here.")

    def __call__(self, name: str, **values) -> str:
        where = f"template {name!r} ({self.path.name})"
        for field, value in values.items():
            if not isinstance(value, (str, int)) or isinstance(value, bool):
                raise TemplateError(f"{where}: {field} is {value!r}; a value is text or a whole number (format it)")
        if name not in self.names:
            raise TemplateError(f"{self.path}: no template named {name!r}")
        try:
            return getattr(self.module, name)(**values)
        except (TypeError, jinja2.UndefinedError) as error:
            raise TemplateError(f"{where}: {error}") from None


# the digest of words.jinja's macro names, arguments and placeholder counts (Words): a damaged file is refused;
# a template or placeholder added or removed on purpose gives its new value here
say = Words(Path(__file__).with_name("templates") / "words.jinja", structure="a050e099211208e0")


# --- the paired evidence in words -------------------------------------------------------------------------------------
# What the rows show, no more: the primary comparison, each result with its deciding test, interval and MDE (a
# "not established" says how large a difference could go unseen); the secondary ones, each counted once; McNemar;
# run health. Per warm start nothing is called established: one warm start says nothing about another.

def fmt_p(p: float) -> str:
    if p is None or (isinstance(p, float) and math.isnan(p)):
        return "p not defined"
    return "p < 0.001" if p < 0.001 else f"p = {p:.3f}"


def num(x: float, key: str, signed: bool = False) -> str:
    """A value of quantity ``key`` with its decimals (:func:`saah_lab.analysis.quantities.decimals`), values too
    small to show in e-notation."""
    dp = decimals(key)
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    if abs(x) < 1e-12:  # a mean of differences that cancel exactly, up to float rounding
        x = 0.0
    if x != 0 and abs(x) < 0.5 * 10 ** (-dp):
        return f"{x:+.1e}" if signed else f"{x:.1e}"
    return f"{x:+.{dp}f}" if signed else f"{x:.{dp}f}"


def percent(confidence: float) -> str:
    """0.975 -> '97.5%', 0.95 -> '95%', 0.98333 -> '98.3%'."""
    return f"{100 * confidence:.1f}".rstrip("0").rstrip(".") + "%"


def seeds(n: int) -> str:
    return say("seed_pairs", n=n)


def _capital(text: str) -> str:
    return text[0].upper() + text[1:]


def ci(confidence: float, low: float, high: float, key: str) -> str:
    return say("ci", confidence=percent(confidence), low=num(low, key, True), high=num(high, key, True))


def _per_test_level(row) -> str:
    return f"{row.level / row.family_size:.4g}"


def mde_text(row) -> str:
    """How large a difference this test detects with 80% power at its family's level, and how many seeds 0.03
    and 0.02 would take."""
    if math.isnan(row.mde):
        return say("no_mde", constant=int(row.se == 0))
    values = {"power": f"{POWER:.0%}", "level": _per_test_level(row), "seeds": seeds(row.n_units),
              "mde": num(row.mde, row.key)}
    needed = ", ".join(say("would_take", effect=effect, n=str(n) if n is not None else
                           say("count_beyond", n=f"{MAX_UNITS_NEEDED:,}"))
                       for effect, n in (row.units_needed or {}).items())
    return say("mde", **values, needed=needed, units=row.units_needed_of if needed else "")


def decision_text(row) -> str:
    """The test that decides the row: which, on how many df, its p before and after the family adjustment."""
    return say("decision", crossed=int(row.n_problems > 1), df=f"{row.df:.0f}", p=fmt_p(row.p_value),
               m=row.family_size, p_adjusted=fmt_p(row.p_adjusted))


def row_sentence(row, level: float = LEVEL) -> str:
    """One sentence per row: 'higher/lower' only for an established difference, otherwise the estimate, the
    interval, 'not established' and the minimum detectable effect."""
    names = {"quantity": row.quantity, "a": row.a, "b": row.b}
    if row.n_units < 2:
        return _capital(say("row_one_seed", **names, diff=num(row.diff, row.key, True),
                            p=fmt_p(row.mcnemar_p) if row.key in CHECKPOINTS else ""))
    tests = say("tests", ci=ci(row.confidence, row.ci_low, row.ci_high, row.key), decision=decision_text(row),
                p=fmt_p(row.p_signflip))
    if row.is_established(level):
        return _capital(say("row_established", **names, direction="higher" if row.diff > 0 else "lower",
                            size=num(abs(row.diff), row.key), tests=tests, mde=num(row.mde, row.key)))
    return _capital(say("row_not_established", **names, diff=num(row.diff, row.key, True), tests=tests,
                        mde=mde_text(row)))


def _direction(row) -> str:
    ties = row.n_units - row.units_a_ahead - row.units_b_ahead
    return say("direction", a=row.a, ahead=row.units_a_ahead, behind=row.units_b_ahead, seeds=seeds(row.n_units),
               ties=ties)


def _per_warm_start(row) -> str:
    """Each warm start's difference and own test; descriptive, since one warm start cannot establish anything
    about others."""
    per = row.detail.get("per_warm_start") or {}
    if len(per) < 2:
        return ""
    items = "; ".join(say("per_warm_start_item", warm_start=ws, diff=num(v["mean_diff"], row.key, True),
                          p=fmt_p(v["p_value"]), n=v["n"]) for ws, v in per.items())
    signs = {math.copysign(1, v["mean_diff"]) for v in per.values() if v["mean_diff"] != 0}
    return say("per_warm_start", quantity=row.quantity, items=items, n=len(per), different=int(len(signs) > 1),
               k=sum(bool(v.get("significant")) for v in per.values()), level=_per_test_level(row))


def _without_flagged(row) -> str:
    w, units = row.without_flagged, ", ".join(row.flagged_units)
    if not w:
        return ""
    if w.get("untestable"):
        return say("without_flagged_untestable", units=units)
    return say("without_flagged", units=units, diff=num(w["diff"], row.key, True),
               ci=ci(w["confidence"], w["ci_low"], w["ci_high"], row.key), p=fmt_p(w["p_value"]),
               p_adjusted=fmt_p(w["p_adjusted"]), n=w["n_units"], mde=num(w["mde"], row.key),
               verdict=say("established" if w.get("established") else "not_established"))


def primary_paragraph(rows: list, plan: StudyPlan, level: float = LEVEL) -> str:
    primary = [r for r in rows if r.primary]
    if not primary:
        return say("primary_untested", plan=plan.describe())
    m = len(primary)
    parts = [say("primary", plan=plan.describe(), seeds=seeds(primary[0].n_units),
                 n_ws=max(r.n_warm_starts for r in primary), m=m, confidence=percent(1 - level / m),
                 level=f"{level:g}" if m == 1 else f"{level / m:.4g}")]
    for row in primary:
        parts.append(row_sentence(row, level))
        if row.key == "train_var":
            parts.append(_direction(row))
        parts += [s for s in (_per_warm_start(row), _without_flagged(row)) if s]
    return " ".join(parts)


def counted(rows: list) -> list:
    """The rows that are distinct comparisons: a peak row that repeats the final one is not counted twice."""
    return [r for r in rows if not r.same_as_final]


def single_seed_paragraph(rows: list) -> str:
    """Comparisons that rest on one seed pair: their final Pass@1 difference, and why there is no test."""
    single = [r for r in counted(rows) if r.n_units < 2]
    if not single:
        return ""
    n = len(dict.fromkeys((r.a, r.b) for r in single))
    finals = " ".join(row_sentence(r) for r in single if r.key == "final")
    return say("single_seeds", n=n, rows=finals)


def secondary_paragraph(rows: list, level: float = LEVEL, has_primary: bool = True) -> str:
    single = single_seed_paragraph([r for r in rows if not r.primary])
    rows = [r for r in rows if not r.primary and r.n_units >= 2]
    if not rows:
        return single
    distinct = counted(rows)
    found = [r for r in distinct if r.is_established(level)]
    pairs = say("pairs", n=len({(r.a, r.b) for r in rows}))
    head = say("secondary_head" if has_primary else "comparisons_head", pairs=pairs)
    found_text = say("found", head=head, k=len(found), n=len(distinct),
                     rows=" ".join(row_sentence(r, level) for r in found),
                     repeated="; ".join(sorted({f"{r.a} vs {r.b}" for r in rows if r.same_as_final})),
                     peak=int(any(r.key == "peak" for r in found)))
    return " ".join(filter(None, (found_text, single)))


def mcnemar_paragraph(rows: list, level: float = LEVEL) -> str:
    """Problem-level tests that reach the level where the seed-level one does not: what they mean."""
    only = [r for r in counted(rows) if r.key in CHECKPOINTS and r.mcnemar_p < level and not r.is_established(level)]
    if not only:
        return ""
    return say("mcnemar", items="; ".join(say("mcnemar_item", a=r.a, b=r.b, quantity=r.quantity,
                                               p=fmt_p(r.mcnemar_p), n=r.n_problems) for r in only))


def floor_paragraph(rows: list, level: float = LEVEL) -> str:
    floors = sorted({(r.n_units, r.min_p_signflip) for r in rows if r.min_p_signflip >= level and r.n_units >= 2})
    return " ".join(say("floor", n=n, floor=f"{floor:.4g}") for n, floor in floors)


def health_paragraph(runs: list, rows: list) -> str:
    flagged = sorted((r for r in runs if r.flagged), key=lambda r: r.run_id)
    items = "; ".join(say("health_item", run=r.run_id, why=r.health_text) for r in flagged)
    return say("health", rules="; ".join(RULES.values()), k=len(flagged), n=len(runs), items=items,
               rows=sum(1 for r in rows if r.flagged_units))


def evidence_paragraphs(rows: list, level: float = LEVEL, *, plan: StudyPlan | None = None,
                        runs: list | None = None) -> dict[str, str]:
    """The paragraph's parts by name (``primary``, ``secondary``, ``mcnemar``, ``floors``, ``health``);
    a part with nothing to say is empty."""
    if any(math.isnan(r.p_adjusted) and not math.isnan(r.p_value) for r in rows):
        raise ValueError("rows need family-adjusted p-values: call adjust(rows) first")
    return {"primary": primary_paragraph(rows, plan, level) if plan is not None and rows else "",
            "secondary": secondary_paragraph(rows, level, has_primary=plan is not None),
            "mcnemar": mcnemar_paragraph(rows, level), "floors": floor_paragraph(rows, level),
            "health": health_paragraph(runs, rows) if runs is not None else ""}


def warning_paragraph(left_out: list[str], pairs_left_out: list[str] | None, not_tested: list[str],
                      caption: bool = False) -> str:
    """What a tolerant reading left out and which planned comparisons had too few seeds: named, never dropped
    (``caption``: the shorter words of a table's caption)."""
    return " ".join(text for text in (
        say("left_out_runs", n=len(left_out), runs=", ".join(left_out), caption=int(caption)) if left_out else "",
        say("left_out_pairs", n=len(pairs_left_out), pairs="; ".join(pairs_left_out), caption=int(caption))
        if pairs_left_out else "",
        say("not_tested", n=len(not_tested), pairs="; ".join(not_tested)) if not_tested else "") if text)


def evidence_summary(root: str | Path | StudyRuns, pairs="plan", *, level: float = LEVEL,
                     tolerate_problems: bool = False,
                     loaded: tuple[list, list[str]] | None = None) -> dict:
    """Everything about a results root as one dict: plan, rows, families, health, paragraphs.

    ``pairs``: "plan" (the study plan's pairs) or "topk" (each top-K setting against the exact entropy, no primary).
    ``loaded``: the root's evidence and left-out names already read (same ``tolerate_problems``), so several
    summaries of one root read its runs once."""
    if pairs not in ("plan", "topk"):
        raise ValueError(f"pairs must be 'plan' or 'topk', got {pairs!r}")
    folder = root.root if isinstance(root, StudyRuns) else root
    plan = read_plan(folder) if pairs == "plan" else None
    if loaded is None:
        left_out: list[str] = []
        runs = load_root_evidence(root, tolerate_problems, left_out)
    else:
        runs, left_out = loaded
    tested = plan.pairs if plan else topk_pairs(runs)
    skipped: list[str] = []
    pairs_left_out: list[str] | None = [] if tolerate_problems else None  # strict: an unpairable pair raises
    # top-K runs may have one seed only: shown descriptively, their McNemar test about those two models
    rows = compare_pairs(runs, tested, plan=plan, level=level, skipped=skipped, min_units=2 if plan else 1,
                         left_out=pairs_left_out)
    attach_without_flagged(runs, rows, tested, plan, level)
    parts = evidence_paragraphs(rows, level, plan=plan, runs=runs) if rows else {}
    # only a plan's comparisons are planned: a top-K setting without its exact-entropy partner is no omission
    warning = warning_paragraph(left_out, pairs_left_out, skipped if plan else [])
    sentence = " ".join(p for p in (*parts.values(), warning) if p)  # the paragraph in one string
    return {"root": repo_relative(folder), "runs": [r.run_id for r in runs], "left_out": left_out,
            "pairs_left_out": pairs_left_out or [], "not_tested": skipped, "level": level, "power": POWER,
            "plan": plan.to_dict() if plan else None, "primary": plan.describe() if plan else None,
            "family_rule": FAMILY_RULE if plan else TOPK_FAMILY_RULE, "families": families(rows),
            "inference": INFERENCE, "health": health_summary(runs), "rows": [r.to_dict() for r in rows],
            "sentence": sentence, "paragraphs": {**parts, "warning": warning}}


# --- one study's evidence in words ------------------------------------------------------------------------------------

def tex_text(s: str) -> str:
    """Free text (labels, the generated sentence) for LaTeX: escaped, with alpha and 2^n in math mode."""
    out = tex_escape(s).replace("α", r"$\alpha$").replace("<", "$<$").replace(">", "$>$")
    return re.sub(r"2/2\\textasciicircum\{\}(\d+)", r"$2/2^{\1}$", out)


def left_out_warning(summary: dict) -> str:
    """What a tolerant reading left out of the comparisons ("" when nothing): runs, then whole pairs."""
    return warning_paragraph(summary.get("left_out"), summary.get("pairs_left_out"), [], caption=True)


#: The paper's logged levels, by the key of ``alpha_range``, and the template naming each.
LEVELS = {"1.5b_low": "level_low", "1.5b_mean": "level_mean", "1.5b_high": "level_high", "3b_mean": "level_3b"}


def matched_alpha_text(record: dict) -> str:
    """The paper-matched alpha of a study root in words, with the other warm starts at it and the alphas matching
    the paper's other levels where recorded ("" without one)."""
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
            say("alpha_range_item", level=say(LEVELS[k]), target=f"{m['target']:.3f}", max_alpha=f"{ALPHA_RANGE[1]:g}",
                alpha=f"{m['alpha']:.1f}" if m.get("alpha") is not None else "")
            for k, m in record["alpha_range"]["alphas"].items())))
    return " ".join(parts) + "\n"


#: The paragraphs of each sentence file: the primary comparison with its run health (leading a study's results),
#: the others, and all of them (the top-K runs, which have no primary comparison).
SENTENCES = {"primary": ("primary", "health"), "secondary": ("secondary", "mcnemar", "floors", "warning"),
             "whole": ("primary", "secondary", "mcnemar", "floors", "health", "warning")}


def sentence_file(summary: dict | None, which: str) -> str:
    """The paragraphs ``SENTENCES[which]`` of a summary for LaTeX ("" without rows or words)."""
    parts = summary.get("paragraphs", {}) if summary and summary["rows"] else {}
    text = " ".join(parts[k] for k in SENTENCES[which] if parts.get(k))
    return tex_text(text) + "\n" if text else ""


# --- several studies at once ------------------------------------------------------------------------------------------

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
                parts.append(say("overlap", n=len(shared["shared"]), total=shared["n_b"], a=_tt(roots[a]),
                                 b=_tt(roots[b]), ids=ids))
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
        return say("not_established_claim", tested=tested, claim=claim, mde=num(row["mde"], "final"))
    return say("established_claim", observed=observed, claim=claim, tested=tested)


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
    return say("discount_matched", a=a_label, low=low, high=high, n=len(per_warm_start),
               target=f"{record['target']['target']:.2f}")


def _headline_study(summaries: dict[str, dict]) -> str | None:
    """The study whose primary comparison leads: the confirmatory one, else the largest with a primary row."""
    return next((k for k in ("confirm", "extended", "mini") if _primary(summaries.get(k), "final")), None)


def _design(row: dict, warm_starts: str) -> str:
    """The primary row's seed pairs, warm starts and, where counted, evaluation problems."""
    n_ws = row["n_warm_starts"]
    return say("design", seeds=seeds(row["n_units"]),
               problems=f"{row['n_problems']:,}" if row.get("n_problems") else "",
               warm_starts=say(warm_starts, n=n_ws) if n_ws > 1 else say("one_warm_start"))


def closing_text(summaries: dict[str, dict], roots: dict[str, Path], train_logs: dict | None = None) -> str:
    """What the leading study's primary final Pass@1 comparison supports, and what it cannot (``train_logs``:
    each study's logged steps, for the discount its runs ran at)."""
    study = _headline_study(summaries)
    if study is None:
        return ""
    summary = summaries[study]
    final = _primary(summary, "final")
    a_label = tex_text(final["a"])
    build = read_json(Path(roots[study]) / WARMSTART_RECORD_FILE, default={}) or {}
    builds = read_json(Path(roots[study]) / WARMSTART_RECORDS_FILE, default={}) or {}  # a study of several
    params = build.get("parameters") or next((b.get("parameters") for b in builds.values()), None)
    model = say("model", millions=f"{params / 1e6:.1f}" if isinstance(params, (int, float)) else "")
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
               else "not_established")
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
    ids = ", ".join(say("commit_id", id=c[:7], dirty=int(c.endswith("-dirty"))) for c in sorted(set(commits)))
    runs = say("provenance", n=len(commits), n_commits=len(set(commits)), ids=ids, dirty=len(commits) - len(clean))
    plan = plan or {}
    if not (plan.get("warm_starts") and plan.get("seeds")):
        return runs + "\n"
    evaluation = plan.get("evaluation") or {}
    return say("provenance_planned", path=_tt(plan_path), n_warm_starts=len(plan["warm_starts"]),
               n_seeds=len(plan["seeds"]), n_pairs=len(plan.get("pairs", [])),
               n_eval=f"{evaluation['n_eval']:,}" if "n_eval" in evaluation else "?",
               data_seed=evaluation.get("data_seed", "?"), runs=runs) + "\n"


# --- what a later study says of an earlier one's claims ---------------------------------------------------------------

def claim_status(earlier: dict | None, later: dict | None, level: float) -> str:
    """What the later study's row says of the earlier study's claim on the same comparison and quantity: confirmed
    or overturned (both established, same or opposite sign), not confirmed, newly established, still not
    established, or not tested (no such later row)."""
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
        lines.append(say("earlier_claims_row", pair="" if pair == previous else pair,
                         quantity=tex_escape(r["quantity"]), earlier=_claim_cell(r["earlier"], earlier["level"]),
                         later=_claim_cell(r["later"], later["level"]), status=r["status"]))
        previous = pair
    tally = "; ".join(f"{n} {status}" for status, n in Counter(r["status"] for r in rows).items())  # first seen first
    return say("earlier_claims", body="\n".join(lines), tally=tally) + "\n"


def sources_tex(present: dict[str, bool], names: list[str]) -> str:
    """``\\newif`` switches saying which sources have results and a ``generated@<name>`` mark per output written,
    so ``paper/main.tex`` includes exactly what exists."""
    lines = []
    for prefix, have in present.items():
        lines += [f"\\newif\\ifhave{prefix}", f"\\have{prefix}{'true' if have else 'false'}"]
    lines += [f"\\expandafter\\def\\csname generated@{name}\\endcsname{{}}" for name in sorted(set(names))]
    return "\n".join(lines) + "\n"


def real_model_text(record: dict | None) -> str:
    """The discount measured on a real instruct model (``saah_lab.studies.real_model``) ("" without its record)."""
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
               # the committed record predates the lab package (saah_lib.studies then): today's module name
               command=tex_escape(record["command"].replace("saah_lib.studies.", "saah_lab.studies.")),
               minutes=f"{record['wall_s'] / 60:.0f}", threads=record["torch_threads"]) + "\n"


def real_study_text(root: Path | None) -> str:
    """Where each SmolLM2 run ended against the warmed-up model's Pass@1 and its 95% interval, and the smallest
    difference evaluation noise lets one see between two runs ("" without runs)."""
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

