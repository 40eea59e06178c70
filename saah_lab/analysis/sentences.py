"""The paragraph that says what the paired evidence shows, and no more, written from its rows alone.

Order: the primary comparison first, each of its results with the test
that decided it (the crossed t test of :func:`saah_lab.analysis.significance.crossed_test`,
its df and its family-adjusted p), the interval at the family's confidence, and
the minimum detectable effect of that same test (a "not established" always says
how large a difference could have gone unseen); then the secondary comparisons,
counted once each (a peak row that repeats the final one is not counted again);
then what the problem-level McNemar tests can and cannot say; then run health.
Per warm start the text says whether each warm start's own test is significant,
and never calls a difference established in a warm start: one warm start says
nothing about another.
"""

from __future__ import annotations

import math

from saah_lab.analysis.health import RULES
from saah_lab.analysis.plan import StudyPlan
from saah_lab.analysis.quantities import CHECKPOINTS, decimals
from saah_lab.analysis.significance import LEVEL, MAX_UNITS_NEEDED, POWER

# The rows are saah_lab.analysis.evidence.EvidenceRow and the runs its RunEvidence; that module imports this
# one, so they are not imported here.


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


def _count(n: int | None) -> str:
    return f"more than {MAX_UNITS_NEEDED:,}" if n is None else str(n)


def _seeds(n: int) -> str:
    return f"{n} seed pair{'s' if n != 1 else ''}"


def percent(confidence: float) -> str:
    """0.975 -> '97.5%', 0.95 -> '95%', 0.98333 -> '98.3%'."""
    return f"{100 * confidence:.1f}".rstrip("0").rstrip(".") + "%"


def _ci(row) -> str:
    return f"{percent(row.confidence)} CI [{num(row.ci_low, row.key, True)}, {num(row.ci_high, row.key, True)}]"


def _per_test_level(row) -> str:
    return f"{row.level / row.family_size:.4g}"


def mde_text(row) -> str:
    """How large a difference this test detects with 80% power at its family's level, and how many seeds 0.03
    and 0.02 would take."""
    if math.isnan(row.mde) and row.se == 0:
        return ("no minimum detectable effect: the differences do not vary (every seed and problem alike), so "
                "there is no variance to say what this test would detect")
    if math.isnan(row.mde):
        return "no minimum detectable effect without two seeds in a warm start"
    text = (f"the smallest difference this test detects with {POWER:.0%} power at level {_per_test_level(row)} "
            f"over {_seeds(row.n_units)} is {num(row.mde, row.key)}")
    if row.units_needed:
        needed = ", ".join(f"{effect} would take {_count(n)}" for effect, n in row.units_needed.items())
        text += f" (detecting {needed} {row.units_needed_of} on these problems)"
    return text


def decision_text(row) -> str:
    """The test that decides the row: which, on how many df, its p before and after the family adjustment."""
    over = "seeds x problems" if row.n_problems > 1 else "seeds"
    adjusted = (f"Bonferroni over {row.family_size} {fmt_p(row.p_adjusted)}" if row.family_size > 1
                else "a family of one")
    return f"crossed t over {over}, {row.df:.0f} df, {fmt_p(row.p_value)}, {adjusted}"


def _tests(row) -> str:
    return f"{_ci(row)}; {decision_text(row)}; sign-flip over seeds {fmt_p(row.p_signflip)}"


def row_sentence(row, level: float = LEVEL) -> str:
    """One sentence per row: 'higher/lower' only for an established difference, otherwise the estimate, the
    interval, 'not established' (never 'no difference': a difference below the MDE may be there) and the
    minimum detectable effect."""
    if row.n_units < 2:
        mcnemar = f"; McNemar {fmt_p(row.mcnemar_p)} on these two trained models" if row.key in CHECKPOINTS else ""
        text = (f"{row.quantity}, {row.a} minus {row.b}: {num(row.diff, row.key, True)} on one seed pair (no "
                f"test over seeds{mcnemar})")
        return text[0].upper() + text[1:] + "."
    if row.is_established(level):
        word = "higher" if row.diff > 0 else "lower"
        text = (f"{row.a} has {word} {row.quantity} than {row.b} by {num(abs(row.diff), row.key)} ({_tests(row)}; "
                f"MDE {num(row.mde, row.key)})")
    else:
        text = (f"{row.quantity}, {row.a} minus {row.b}: {num(row.diff, row.key, True)} ({_tests(row)}): "
                f"not established at the family's level; {mde_text(row)}")
    return text[0].upper() + text[1:] + "."


def _direction(row) -> str:
    ties = row.n_units - row.units_a_ahead - row.units_b_ahead
    return (f"{row.a} is higher in {row.units_a_ahead} and lower in {row.units_b_ahead} of "
            f"{_seeds(row.n_units)}" + (f" ({ties} equal)" if ties else ""))


def _significant_in(per: dict) -> str:
    hits = sum(bool(v.get("significant")) for v in per.values())
    if hits == 0:
        return "significant in neither" if len(per) == 2 else "significant in none"
    if hits == len(per):
        return "significant in both" if len(per) == 2 else "significant in every one"
    return f"significant in {hits} of {len(per)}" if len(per) > 2 else "significant in one"


def _per_warm_start(row) -> str:
    """Each warm start's difference and own test; descriptive, since one warm start cannot establish anything
    about others."""
    per = row.detail.get("per_warm_start") or {}
    if len(per) < 2:
        return ""
    parts = [f"{ws}: {num(v['mean_diff'], row.key, True)} ({fmt_p(v['p_value'])}, {v['n']} seeds)"
             for ws, v in per.items()]
    signs = {math.copysign(1, v["mean_diff"]) for v in per.values() if v["mean_diff"] != 0}
    sign = ("the same sign in both" if len(per) == 2 else "the same sign in every one") if len(signs) <= 1 \
        else "a different sign between them"
    return (f"Per warm start, {row.quantity} (each warm start's own crossed test; descriptive, one warm start "
            "cannot establish a difference for others): " + "; ".join(parts)
            + f": {sign}, {_significant_in(per)} at level {_per_test_level(row)}.")


def _without_flagged(row) -> str:
    w = row.without_flagged
    if not w:
        return ""
    if w.get("untestable"):
        return (f"Without the seed pairs with a flagged run ({', '.join(row.flagged_units)}) fewer than two "
                "remain: no test.")
    verdict = "established" if w.get("established") else "not established"
    return (f"Without the seed pairs with a flagged run ({', '.join(row.flagged_units)}): "
            f"{num(w['diff'], row.key, True)} ({percent(w['confidence'])} CI [{num(w['ci_low'], row.key, True)}, "
            f"{num(w['ci_high'], row.key, True)}], crossed t {fmt_p(w['p_value'])}, adjusted {fmt_p(w['p_adjusted'])}"
            f", {w['n_units']} seed pairs, MDE {num(w['mde'], row.key)}), {verdict} (computed on those seed pairs).")


def primary_paragraph(rows: list, plan: StudyPlan, level: float = LEVEL) -> str:
    primary = [r for r in rows if r.primary]
    if not primary:
        return (f"The primary comparison ({plan.describe()}) could not be tested: fewer than two seeds have "
                "runs of both.")
    n_ws = max(r.n_warm_starts for r in primary)
    where = (f" from {n_ws} warm starts taken as fixed strata, so the result is about these two" if n_ws == 2
             else f" from {n_ws} warm starts taken as a random factor" if n_ws > 2 else "")
    m = len(primary)
    family = (f"a family of one test, at level {level:g} with a {percent(1 - level)} interval" if m == 1 else
              f"Bonferroni over its {m} tests: each at level {level / m:.4g}, intervals at {percent(1 - level / m)}")
    parts = [f"Primary comparison, fixed in the study plan before the runs: {plan.describe()}, over "
             f"{_seeds(primary[0].n_units)}{where} ({family})."]
    for row in primary:
        parts.append(row_sentence(row, level))
        if row.key == "train_var":
            parts.append(f"Training-reward variance: {_direction(row)}.")
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
    pairs = list(dict.fromkeys((r.a, r.b) for r in single))
    finals = [row_sentence(r) for r in single if r.key == "final"]
    return (f"{len(pairs)} comparison{'s rest' if len(pairs) != 1 else ' rests'} on one seed pair, so nothing "
            "about another seed can be tested: " + " ".join(finals))


def secondary_paragraph(rows: list, level: float = LEVEL, has_primary: bool = True) -> str:
    single = single_seed_paragraph([r for r in rows if not r.primary])
    rows = [r for r in rows if not r.primary and r.n_units >= 2]
    if not rows:
        return single
    distinct = counted(rows)
    found = [r for r in distinct if r.is_established(level)]
    pairs = len({(r.a, r.b) for r in rows})
    kind = "Secondary comparisons (exploratory" if has_primary else "Comparisons ("
    head = (f"{kind}{'; ' if has_primary else ''}Bonferroni within each quantity across the {pairs} pair"
            f"{'s' if pairs != 1 else ''}): ")
    if found:
        head += (f"{len(found)} of {len(distinct)} distinct differences {'is' if len(found) == 1 else 'are'} "
                 "established. " + " ".join(row_sentence(r, level) for r in found))
    else:
        head += f"none of the {len(distinct)} distinct differences is established."
    parts = [head]
    repeated = sorted({f"{r.a} vs {r.b}" for r in rows if r.same_as_final})
    if repeated:
        parts.append("Peak and final are the same checkpoint in every run of " + "; ".join(repeated)
                     + ", so those peak rows repeat the final ones and are counted once.")
    if any(r.key == "peak" for r in found):
        parts.append("Peak checkpoints are picked on the evaluation problems themselves, so a peak difference is "
                     "weaker evidence than a final one.")
    return " ".join(parts + ([single] if single else []))


def mcnemar_paragraph(rows: list, level: float = LEVEL) -> str:
    """Problem-level tests that reach the level where the seed-level one does not: what they mean."""
    only = [r for r in counted(rows) if r.key in CHECKPOINTS and r.mcnemar_p < level and not r.is_established(level)]
    if not only:
        return ""
    listed = "; ".join(f"{r.a} vs {r.b}, {r.quantity} ({fmt_p(r.mcnemar_p)}, {r.n_problems} problems)" for r in only)
    return ("The problem-level McNemar test (unadjusted) reaches the level where the seed-level test does not: "
            f"{listed}. It takes the problems as the sampling unit with these trained models fixed, so it says "
            "that these particular models differ on such problems, not that another training seed would rank the "
            "methods the same way.")


def floor_paragraph(rows: list, level: float = LEVEL) -> str:
    floors = sorted({(r.n_units, r.min_p_signflip) for r in rows if r.min_p_signflip >= level and r.n_units >= 2})
    return " ".join(f"With {n} seed pairs the sign-flip test cannot give p below 2/2^{n} = {floor:.4g}; the crossed "
                    "t test can, under its assumption of roughly normal mean squares." for n, floor in floors)


def health_paragraph(runs: list, rows: list) -> str:
    rules = "; ".join(RULES.values())
    flagged = sorted((r for r in runs if r.flagged), key=lambda r: r.run_id)
    if not flagged:
        return f"Run health: none of the {len(runs)} runs breaks a health rule ({rules})."
    listed = "; ".join(f"{r.run_id} ({r.health_text})" for r in flagged)
    affected = sum(1 for r in rows if r.flagged_units)
    where = (f"the {affected} rows they enter are also given without the seed pairs that contain them" if affected
             else "they enter none of these comparisons")
    return (f"Run health ({rules}): {len(flagged)} of {len(runs)} runs flagged: {listed}. They stay in every "
            f"result; {where}.")


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

