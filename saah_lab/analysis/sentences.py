"""The paragraph that says what the paired evidence shows, and no more, written from its rows alone.

Order: the primary comparison first, each result with the test that decided it (the crossed t test of
:func:`saah_lab.analysis.significance.crossed_test`, its df and family-adjusted p), the interval at the
family's confidence and the minimum detectable effect (a "not established" always says how large a difference
could have gone unseen); then the secondary comparisons, each counted once; then what the problem-level McNemar
tests can and cannot say; then run health. Per warm start the text never calls a difference established: one
warm start says nothing about another. The code picks a template of ``templates/evidence.txt`` and computes its
values; the words are in the template (:mod:`saah_lab.analysis.wording`).
"""

from __future__ import annotations

import math
from pathlib import Path

from saah_lab.analysis.health import RULES
from saah_lab.analysis.plan import StudyPlan
from saah_lab.analysis.quantities import CHECKPOINTS, decimals
from saah_lab.analysis.significance import LEVEL, MAX_UNITS_NEEDED, POWER
from saah_lab.analysis.wording import Templates

# The rows are saah_lab.analysis.evidence.EvidenceRow and the runs its RunEvidence; that module imports this
# one, so they are not imported here.
# the digest of evidence.txt's template names and placeholder counts (saah_lab.analysis.wording): a damaged file
# is refused; a template or placeholder added or removed on purpose gives its new value here
say = Templates(Path(__file__).with_name("templates") / "evidence.txt", structure="eff4c10d32b4f90b")


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
    return say("seed_pair" if n == 1 else "seed_pairs", n=n)


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
        return say("mde_constant" if row.se == 0 else "mde_one_seed")
    values = {"power": f"{POWER:.0%}", "level": _per_test_level(row), "seeds": seeds(row.n_units),
              "mde": num(row.mde, row.key)}
    if not row.units_needed:
        return say("mde", **values)
    needed = ", ".join(say("would_take", effect=effect, n=str(n) if n is not None else
                           say("count_beyond", n=f"{MAX_UNITS_NEEDED:,}")) for effect, n in row.units_needed.items())
    return say("mde_needed", **values, needed=needed, units=row.units_needed_of)


def decision_text(row) -> str:
    """The test that decides the row: which, on how many df, its p before and after the family adjustment."""
    adjusted = (say("family_bonferroni", m=row.family_size, p=fmt_p(row.p_adjusted)) if row.family_size > 1
                else say("family_of_one"))
    return say("decision", over=say("over_crossed" if row.n_problems > 1 else "over_seeds"), df=f"{row.df:.0f}",
               p=fmt_p(row.p_value), adjusted=adjusted)


def row_sentence(row, level: float = LEVEL) -> str:
    """One sentence per row: 'higher/lower' only for an established difference, otherwise the estimate, the
    interval, 'not established' and the minimum detectable effect."""
    names = {"quantity": row.quantity, "a": row.a, "b": row.b}
    if row.n_units < 2:
        if row.key in CHECKPOINTS:
            return _capital(say("row_one_seed_mcnemar", **names, diff=num(row.diff, row.key, True),
                                p=fmt_p(row.mcnemar_p)))
        return _capital(say("row_one_seed", **names, diff=num(row.diff, row.key, True)))
    tests = say("tests", ci=ci(row.confidence, row.ci_low, row.ci_high, row.key), decision=decision_text(row),
                p=fmt_p(row.p_signflip))
    if row.is_established(level):
        return _capital(say("row_established", **names, direction="higher" if row.diff > 0 else "lower",
                            size=num(abs(row.diff), row.key), tests=tests, mde=num(row.mde, row.key)))
    return _capital(say("row_not_established", **names, diff=num(row.diff, row.key, True), tests=tests,
                        mde=mde_text(row)))


def _direction(row) -> str:
    ties = row.n_units - row.units_a_ahead - row.units_b_ahead
    values = {"a": row.a, "ahead": row.units_a_ahead, "behind": row.units_b_ahead, "seeds": seeds(row.n_units)}
    return say("direction_ties", **values, ties=ties) if ties else say("direction", **values)


def _significant_in(per: dict) -> str:
    hits, n = sum(bool(v.get("significant")) for v in per.values()), len(per)
    if hits == 0:
        return say("significant_in_neither" if n == 2 else "significant_in_none")
    if hits == n:
        return say("significant_in_both" if n == 2 else "significant_in_every")
    return say("significant_in_some", k=hits, n=n) if n > 2 else say("significant_in_one")


def _per_warm_start(row) -> str:
    """Each warm start's difference and own test; descriptive, since one warm start cannot establish anything
    about others."""
    per = row.detail.get("per_warm_start") or {}
    if len(per) < 2:
        return ""
    items = "; ".join(say("per_warm_start_item", warm_start=ws, diff=num(v["mean_diff"], row.key, True),
                          p=fmt_p(v["p_value"]), n=v["n"]) for ws, v in per.items())
    signs = {math.copysign(1, v["mean_diff"]) for v in per.values() if v["mean_diff"] != 0}
    sign = ("different_sign" if len(signs) > 1 else "same_sign_both" if len(per) == 2 else "same_sign_every")
    return say("per_warm_start", quantity=row.quantity, items=items, sign=say(sign), significant=_significant_in(per),
               level=_per_test_level(row))


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
    n_ws, m, n_seeds = max(r.n_warm_starts for r in primary), len(primary), seeds(primary[0].n_units)
    design = (say("design_fixed", seeds=n_seeds, n=n_ws) if n_ws == 2 else
              say("design_random", seeds=n_seeds, n=n_ws) if n_ws > 2 else n_seeds)
    family = (say("primary_family_of_one", level=f"{level:g}", confidence=percent(1 - level)) if m == 1 else
              say("primary_family", m=m, level=f"{level / m:.4g}", confidence=percent(1 - level / m)))
    parts = [say("primary", plan=plan.describe(), design=design, family=family)]
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
    return say("single_seed", rows=finals) if n == 1 else say("single_seeds", n=n, rows=finals)


def secondary_paragraph(rows: list, level: float = LEVEL, has_primary: bool = True) -> str:
    single = single_seed_paragraph([r for r in rows if not r.primary])
    rows = [r for r in rows if not r.primary and r.n_units >= 2]
    if not rows:
        return single
    distinct = counted(rows)
    found = [r for r in distinct if r.is_established(level)]
    n_pairs = len({(r.a, r.b) for r in rows})
    head = say("secondary_head" if has_primary else "comparisons_head",
               pairs=say("pair" if n_pairs == 1 else "pairs", n=n_pairs))
    found_rows = " ".join(row_sentence(r, level) for r in found)
    parts = [say("found_none", head=head, n=len(distinct)) if not found else
             say("found_one", head=head, n=len(distinct), rows=found_rows) if len(found) == 1 else
             say("found_some", head=head, k=len(found), n=len(distinct), rows=found_rows)]
    repeated = sorted({f"{r.a} vs {r.b}" for r in rows if r.same_as_final})
    if repeated:
        parts.append(say("peak_repeats_final", pairs="; ".join(repeated)))
    if any(r.key == "peak" for r in found):
        parts.append(say("peak_is_weaker"))
    return " ".join(parts + ([single] if single else []))


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
    rules = "; ".join(RULES.values())
    flagged = sorted((r for r in runs if r.flagged), key=lambda r: r.run_id)
    if not flagged:
        return say("health_none", n=len(runs), rules=rules)
    items = "; ".join(say("health_item", run=r.run_id, why=r.health_text) for r in flagged)
    affected = sum(1 for r in rows if r.flagged_units)
    values = {"rules": rules, "k": len(flagged), "n": len(runs), "items": items}
    return say("health_flagged", **values, rows=affected) if affected else say("health_flagged_elsewhere", **values)


def evidence_paragraphs(rows: list, level: float = LEVEL, *, plan: StudyPlan | None = None,
                        runs: list | None = None) -> dict[str, str]:
    """The paragraph's parts by name (``primary``, ``secondary``, ``mcnemar``, ``floors``, ``health``);
    a part with nothing to say is empty."""
    if any(math.isnan(r.p_adjusted) and not math.isnan(r.p_value) for r in rows):
        raise ValueError("rows need family-adjusted p-values: call adjust(rows) first")
    return {
        "primary": primary_paragraph(rows, plan, level) if plan is not None and rows else "",
        "secondary": secondary_paragraph(rows, level, has_primary=plan is not None),
        "mcnemar": mcnemar_paragraph(rows, level),
        "floors": floor_paragraph(rows, level),
        "health": health_paragraph(runs, rows) if runs is not None else "",
    }


def warning_paragraph(left_out: list[str], pairs_left_out: list[str] | None, not_tested: list[str]) -> str:
    """What a tolerant reading left out and which planned comparisons had too few seeds: named, never dropped."""
    return " ".join(text for text in (
        say("left_out_runs", n=len(left_out), runs=", ".join(left_out)) if left_out else "",
        say("left_out_pairs", n=len(pairs_left_out), pairs="; ".join(pairs_left_out)) if pairs_left_out else "",
        say("not_tested", n=len(not_tested), pairs="; ".join(not_tested)) if not_tested else "") if text)
