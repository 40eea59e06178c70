"""Texts that read several studies at once: which runs they share, the mini study's pointer to the powered
study, and the closing note on what the CPU evidence supports about the paper's claims.

Every number comes from the evidence summaries (:func:`saah_lib.analysis.evidence_summary.evidence_summary`)
and the study roots; nothing is typed in.  Written by :func:`saah_lib.report.render.render_report` as
``<tables>/studies_overlap.tex``, ``<tables>/studies_mini_defers.tex`` and ``<tables>/studies_closing_note.tex``.
"""

from __future__ import annotations

import math
from pathlib import Path

from saah_lib.analysis.overlap import shared_runs
from saah_lib.analysis.plan import PAPER_CLAIM
from saah_lib.jsonio import read_json
from saah_lib.method.methods import MAIN_ALPHA
from saah_lib.paths import repo_relative
from saah_lib.report.evidence_report import tex_text
from saah_lib.report.latex import tex_escape
from saah_lib.rundir.layout import MATCHED_ALPHA_FILE, WARMSTART_RECORD_FILE

STUDY_NAMES = {"mini": "mini study", "extended": "extended study"}


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


def _num(x: float, key: str, signed: bool = True) -> str:
    dp = 3 if key == "final" else 4
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    x = 0.0 if abs(x) < 1e-12 else x
    return f"{x:+.{dp}f}" if signed else f"{x:.{dp}f}"


def defer_text(mini: dict | None, extended: dict | None) -> str:
    """The mini study's primary comparison points to the powered one (numbers from both summaries)."""
    m, e = _primary(mini, "final"), _primary(extended, "final")
    if m is None or e is None:
        return ""
    return (f"With {m['n_units']} seed pairs the mini study cannot detect a final Pass@1 difference below "
            f"{_num(m['mde'], 'final', False)} (at 80\\% power); it checks the pipeline. The extended study "
            f"(Section~\\ref{{sec:extended}}) tests the primary comparison with {e['n_units']} seed pairs "
            f"(minimum detectable difference {_num(e['mde'], 'final', False)}).\n")


def _verdict(row: dict, key: str, level: float) -> str:
    claim = PAPER_CLAIM[key]
    established = row["p_holm"] < level and (row["ci_low"] > 0 or row["ci_high"] < 0)
    observed = "higher" if row["diff"] > 0 else "lower"
    agree = "as the paper claims" if observed == claim else f"opposite to the paper's claim of {claim}"
    if established:
        return f"SA-AH-GRPO is {observed}, {agree}"
    if row["p_holm"] < level:
        # the two criteria disagree: say so rather than call it either a difference or none
        return (f"not established: the paired t test over seeds finds SA-AH-GRPO {observed}, {agree} "
                f"(Holm p = {row['p_holm']:.3f}), but the interval, which also resamples the evaluation problems, "
                f"includes 0")
    return (f"no difference detected (the paper claims {claim}; a difference smaller than "
            f"{_num(row['mde'], key, False)} would go unseen)")


def _discount_clause(summary: dict, root: Path, a_label: str) -> str:
    """At which discount the primary arm ran, in the terms of the paper-matched alpha measurement."""
    record = read_json(Path(root) / MATCHED_ALPHA_FILE, default={}) or {}
    plan = summary.get("plan") or {}
    alpha = plan.get("primary", {}).get("a", {}).get("alpha")
    if record and alpha is not None and math.isclose(alpha, record.get("alpha", math.nan)):
        return (f"at the paper's discount level ({a_label}: a mean weight of "
                f"{record['weight_neg_mean']['at_alpha']:.2f} on negative-advantage rollouts at the start of "
                f"training, against {record['target']['target']:.2f} in the paper's log)")
    if record and alpha is not None and math.isclose(alpha, MAIN_ALPHA):
        return (f"at a weaker discount than the paper's ({a_label}: a mean weight of "
                f"{record['weight_neg_mean']['at_main_alpha']:.2f} on negative-advantage rollouts at the start of "
                f"training, against {record['target']['target']:.2f} in the paper's log)")
    return f"at $\\alpha={alpha:g}$" if alpha is not None else ""


def closing_text(summaries: dict[str, dict], roots: dict[str, Path]) -> str:
    """Two or three sentences: what the largest study's primary comparison supports, and what it cannot."""
    usable = [k for k in ("extended", "mini") if _primary(summaries.get(k), "final")]
    if not usable:
        return ""
    study = usable[0]
    summary = summaries[study]
    final, var = _primary(summary, "final"), _primary(summary, "train_var")
    level = summary["level"]
    n_ws = final["n_warm_starts"]
    where = f" from {n_ws} independently built warm starts" if n_ws > 1 else " from one warm start"
    a_label = tex_text(final["a"])
    text = (f"In the CPU {STUDY_NAMES.get(study, study)}'s primary comparison, fixed before its runs "
            f"({a_label} against GRPO over {final['n_units']} seed pairs{where}), final Pass@1 differs by "
            f"{_num(final['diff'], 'final')} (95\\% CI [{_num(final['ci_low'], 'final')}, "
            f"{_num(final['ci_high'], 'final')}]): {_verdict(final, 'final', level)}")
    if var is not None:
        text += (f"; training-reward variance differs by {_num(var['diff'], 'train_var')} (95\\% CI "
                 f"[{_num(var['ci_low'], 'train_var')}, {_num(var['ci_high'], 'train_var')}]): "
                 f"{_verdict(var, 'train_var', level)}")
    text += ". "
    build = read_json(Path(roots[study]) / WARMSTART_RECORD_FILE, default={}) or {}
    params = build.get("parameters")
    model = f"a {params / 1e6:.1f}M-parameter model" if isinstance(params, (int, float)) else "a tiny model"
    clause = _discount_clause(summary, roots[study], a_label)
    text += (f"These runs train {model} on synthetic arithmetic problems{' ' + clause if clause else ''}: they test "
             "the selective discount's effect "
             "on such a model, and cannot confirm or refute the paper's GSM8K accuracies at 1.5B and 3B "
             "parameters.\n")
    return text
