"""The result set: everything the tables and figures need, from our runs (:meth:`ResultSet.from_runs`, seeds of
each (model, method, alpha) averaged) or the paper's numbers (:func:`saah_lab.analysis.reported.read_paper_reported`):
the same frames, so the tables and figures never need to know the source.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from saah_lab.analysis.frames import baselines_frame, evals_long, runs_frame, token_entropies_frame, train_logs_long
from saah_lab.analysis.groups import GROUP_KEYS, METHOD_LABELS, is_main_alpha, model_order, sort_groups
from saah_lab.analysis.quantities import number_or_nan
from saah_lab.analysis.runs import StudyRuns, read_runs
from saah_lib.jsonio import read_json
from saah_lib.method.methods import MAIN_ALPHAS
from saah_lib.rundir.layout import MATCHED_ALPHA_FILE, STUDY_PLAN_FILE, TRAIN_LOG_KEYS
from saah_lib.tasks.scoring import pass_at_1_ci
from saah_lib.training.profiles import PROFILES

#: Columns of the per-step diagnostic tables (tab:sa_log_*).
DIAGNOSTIC_COLUMNS = (
    "reward_mean", "reward_std", "kl", "entropy_norm", "weight_mean",
    "weight_neg_mean", "neg_frac", "completion_length",
)


def aggregate_seeds(df: pd.DataFrame, keys: list[str], cols: list[str]) -> pd.DataFrame:
    """Per group: each column's mean, its sample std ``c_std`` (NaN with one seed), and ``n_seeds`` (runs with
    a value in the first column)."""
    if df.empty:
        return pd.DataFrame(columns=keys + cols + [c + "_std" for c in cols] + ["n_seeds"])
    g = df.groupby(keys, dropna=False, sort=False)
    mean = g[cols].mean()
    std = g[cols].std(ddof=1).add_suffix("_std")
    count = g[cols[0]].count().rename("n_seeds")
    return pd.concat([mean, std, count], axis=1).reset_index()


@dataclass
class ResultSet:
    """Frames keyed by ``model_label, method, alpha``: ``summary`` (one row per group, seed means and ``*_std``,
    plus a ``base`` row per model), ``checkpoints`` (Pass@1 per training step), ``ablation`` (the alpha ablation's
    entries), ``diagnostics`` (sampled steps of :data:`DIAGNOSTIC_COLUMNS`), ``baselines`` (one per model),
    ``curves`` (per-step training curves for the figures)."""

    source: str
    summary: pd.DataFrame
    checkpoints: pd.DataFrame
    ablation: pd.DataFrame
    diagnostics: pd.DataFrame
    baselines: pd.DataFrame
    curves: pd.DataFrame = field(default_factory=pd.DataFrame)
    runs: pd.DataFrame | None = None
    evals: pd.DataFrame | None = None
    train_logs: pd.DataFrame | None = None
    token_entropies: pd.DataFrame | None = None
    hparams: pd.DataFrame | None = None
    root: Path | None = None
    notes: dict = field(default_factory=dict)
    #: One message per folder flagged (damaged, incomplete) or excluded; empty when read strictly.
    warnings: list[str] = field(default_factory=list)

    @property
    def models(self) -> list:
        labels = list(self.summary["model_label"]) if len(self.summary) else []
        labels += list(self.checkpoints["model_label"]) if len(self.checkpoints) else []
        return model_order(labels)

    def baseline_for(self, model_label) -> dict | None:
        b = self.baselines
        if b is None or b.empty:
            return None
        sub = b[b["model_label"] == model_label]
        return None if sub.empty else sub.iloc[0].to_dict()

    def is_empty(self) -> bool:
        return all(df is None or df.empty for df in (self.summary, self.checkpoints, self.diagnostics))

    def runs_counted(self) -> str:
        """"N runs" as the health notes count them, with the top-K ablation's runs, which these tables hold
        apart, named so that the count adds up to the study's."""
        n_apart = len(self.notes.get("other_entropy_runs") or ())
        n = 0 if self.runs is None else len(self.runs)
        return f"{n} runs" + (f" (and {n_apart} top-K runs, reported apart)" if n_apart else "")

    def flagged_runs(self) -> pd.DataFrame:
        """The runs the health rules flag (:meth:`saah_lab.analysis.runs.StudyRuns.flagged`), by run id; empty
        for the paper's numbers, which have no runs."""
        runs = self.runs
        if runs is None or runs.empty or "flagged" not in runs:
            return pd.DataFrame(columns=["run_id", "flagged", "health"])
        return runs[runs["flagged"].astype(bool)].sort_values("run_id")

    @property
    def excluded(self) -> list[str]:
        """The warnings about folders left out entirely (``<folder>: excluded (<why>)``)."""
        return [w for w in self.warnings if ": excluded (" in w]

    @classmethod
    def from_runs(cls, root: str | Path | StudyRuns, main_alphas: dict | None = None, diag_every: int | None = None,
                  ablation_model=None, tolerate_problems: bool = False) -> "ResultSet":
        """From a results root (or one already read).  A model without a baseline folder gets its runs' step-0
        evaluations (``baselines.kind`` says so).  A damaged or incomplete run raises unless ``tolerate_problems``;
        then it is flagged and :attr:`warnings` lists it."""
        study = root if isinstance(root, StudyRuns) else read_runs(root, tolerate_problems)
        root = study.root
        matched = matched_alpha(root)
        main_alphas = dict(MAIN_ALPHAS if main_alphas is None else main_alphas)
        if matched is not None:  # the paper-matched runs belong to the main comparison too
            main_alphas = {m: a if m == "grpo" else (*np.atleast_1d(a), matched) for m, a in main_alphas.items()}
        folders, other_entropy = _split_by_entropy_estimate(study.runs)
        runs, evals, tlogs = runs_frame(folders), evals_long(folders), train_logs_long(folders)
        # each run's health as read_runs found it: the rules it breaks, flagged (StudyRuns.flagged), what it did
        health = [study.health[f.path.name] for f in folders]
        runs = runs.assign(flags=[",".join(h.flags) for h in health],
                           flagged=pd.Series([study.flagged(f) for f in folders], index=runs.index, dtype=bool),
                           health=[h.describe() for h in health])
        baselines = _baselines(baselines_frame(study.baselines), evals)
        summ = _summary(runs, baselines, main_alphas)
        ck = _checkpoints(evals, main_alphas)
        abl = _ablation_from_summary(summ, main_alphas, ablation_model)
        curves, diag = _curves_and_diagnostics(tlogs, runs, ck, diag_every)
        return cls(source="runs", summary=summ, checkpoints=ck, ablation=abl, diagnostics=diag,
                   baselines=baselines, curves=curves, runs=runs, evals=evals, train_logs=tlogs,
                   token_entropies=token_entropies_frame(folders), root=root,
                   notes={"main_alphas": main_alphas, "other_entropy_runs": other_entropy,
                          "matched_alpha": matched},
                   warnings=list(study.warnings))


def matched_alpha(root: Path) -> float | None:
    """The paper-matched alpha of a study root: measured there (:data:`saah_lib.rundir.layout.MATCHED_ALPHA_FILE`),
    else fixed by its study plan (``paper_matched_alpha``: the confirmatory study runs the extended study's)."""
    path = Path(root) / MATCHED_ALPHA_FILE
    record = read_json(path)
    if record is None:
        path = Path(root) / STUDY_PLAN_FILE
        plan = read_json(path)
        record = {"alpha": plan.get("paper_matched_alpha")} if isinstance(plan, dict) else {}
        if record.get("alpha") is None:
            return None
    alpha = record.get("alpha") if isinstance(record, dict) else None
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not math.isfinite(alpha):
        raise ValueError(f"{path}: no numeric 'alpha'")
    return float(alpha)


def _split_by_entropy_estimate(folders: list) -> tuple[list, list[str]]:
    """The runs that use their profile's entropy estimate, and the names of the others (the top-K ablation's:
    averaging them in would mix two estimators)."""
    kept, others = [], []
    for folder in folders:
        config = folder.config or {}
        # the defaults (the tiny profile) use the exact entropy: None
        reference = PROFILES.get(config.get("profile"), {}).get("entropy_top_k")
        if folder.config is not None and config.get("entropy_top_k", reference) != reference:
            others.append(folder.path.name)
        else:
            kept.append(folder)
    return kept, sorted(others)


BASELINE_COLUMNS = ["model_label", "name", "pass_at_1", "ci95", "n", "raw_pass_at_1", "kind"]


def _baselines(base_raw: pd.DataFrame, evals: pd.DataFrame) -> pd.DataFrame:
    """One baseline per model: a baseline folder (a zero-shot one preferred), else the runs' step 0."""
    brows = []
    if len(base_raw):
        for label, sub in base_raw.groupby("model_label", dropna=True, sort=False):
            # several baselines of one model (zero-shot, warm-start): prefer a zero-shot one
            sub = sub.assign(_zero=~sub["name"].astype(str).str.contains("zero", case=False))
            sub = sub.sort_values(["_zero", "name", "step"], kind="stable")
            r = sub[sub["name"] == sub["name"].iloc[0]].iloc[-1]
            brows.append({"model_label": label, "name": r["name"], "pass_at_1": r["pass_at_1"],
                          "ci95": r["ci95"], "n": r["n"], "raw_pass_at_1": np.nan, "kind": "baseline"})
    have = {b["model_label"] for b in brows}
    if len(evals):
        s0 = evals[(evals["step"] == 0) & evals["pass_at_1"].notna()]
        for label, sub in s0.groupby("model_label", dropna=True, sort=False):
            if label in have:
                continue
            p = float(sub["pass_at_1"].mean())
            n = float(sub["n"].mean()) if sub["n"].notna().any() else float("nan")
            ci = float(sub["ci95"].mean()) if len(sub) == 1 else pass_at_1_ci(p, n)
            brows.append({"model_label": label, "name": "step 0 of the runs", "pass_at_1": p, "ci95": ci,
                          "n": n, "raw_pass_at_1": np.nan, "kind": "step0"})
    return pd.DataFrame(brows, columns=BASELINE_COLUMNS)


def _summary(runs: pd.DataFrame, baselines: pd.DataFrame, main_alphas: dict) -> pd.DataFrame:
    """One row per (model, method, alpha): seed means and std of each run summary, plus a base row per model."""
    scols = ["final_pass_at_1", "final_ci95", "peak_pass_at_1", "peak_ci95", "train_var", "mean_kl",
             "final_step", "peak_step"]
    if len(runs):
        r = runs.assign(**{c: pd.to_numeric(runs[c], errors="coerce") for c in scols + ["max_steps"]})
        summ = aggregate_seeds(r, GROUP_KEYS, scols)
        extra = r.groupby(GROUP_KEYS, dropna=False, sort=False).agg(
            steps=("max_steps", "max"), complete=("complete", "all"), damaged=("damaged", "any"),
            n_runs=("run_id", "count"), n_flagged=("flagged", "sum"),
            seeds=("seed", lambda s: ",".join(str(int(x)) for x in pd.to_numeric(s, errors="coerce").dropna())),
        ).reset_index()
        summ = summ.merge(extra, on=GROUP_KEYS, how="left")
    else:
        summ = pd.DataFrame(columns=GROUP_KEYS + scols + ["steps", "complete", "damaged", "n_seeds", "n_runs", "seeds",
                                     "n_flagged"])
    for _, b in baselines.iterrows():
        summ = pd.concat([summ, pd.DataFrame([{
            "model_label": b["model_label"], "method": "base", "alpha": np.nan,
            "final_pass_at_1": b["pass_at_1"], "final_ci95": b["ci95"], "n_seeds": 1, "complete": True,
            "base_kind": b["kind"]}])], ignore_index=True)
    if len(summ):
        summ["in_main"] = [m == "base" or is_main_alpha(m, number_or_nan(a), main_alphas)
                           for m, a in zip(summ["method"], summ["alpha"])]
    return sort_groups(summ)


def _checkpoints(evals: pd.DataFrame, main_alphas: dict) -> pd.DataFrame:
    """Pass@1 per (model, method, alpha, training step), averaged over seeds."""
    if not len(evals):
        return pd.DataFrame(columns=GROUP_KEYS + ["step", "pass_at_1", "ci95", "pass_at_1_std", "n_seeds", "in_main"])
    ev = evals[(evals["step"] > 0) & evals["pass_at_1"].notna()].copy()
    ck = aggregate_seeds(ev, GROUP_KEYS + ["step"], ["pass_at_1", "ci95"])
    ck = ck.drop(columns=["ci95_std"])
    ck["in_main"] = [is_main_alpha(m, number_or_nan(a), main_alphas) for m, a in zip(ck["method"], ck["alpha"])]
    return sort_groups(ck, ["step"])


def _curves_and_diagnostics(tlogs: pd.DataFrame, runs: pd.DataFrame, ck: pd.DataFrame,
                            diag_every: int | None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per-step training curves averaged over seeds, and their rows sampled for the diagnostic tables."""
    if not len(tlogs):
        return pd.DataFrame(), pd.DataFrame()
    cols = [c for c in TRAIN_LOG_KEYS if c != "step"]
    g = tlogs.groupby(GROUP_KEYS + ["step"], dropna=False, sort=False)
    curves = g[cols].mean()
    curves["n_seeds"] = g["run_id"].nunique()
    curves = sort_groups(curves.reset_index(), ["step"])
    return curves, _sample_diagnostics(curves, runs, ck, diag_every)


#: The alpha ablation's columns, from our runs or the paper's table.
ABLATION_COLUMNS = GROUP_KEYS + ["label", "steps", "peak_pass_at_1", "final_pass_at_1", "peak_pass_at_1_std",
                                 "final_pass_at_1_std", "n_seeds", "partial", "note"]
#: The ablation names its GRPO and SA-AH-GRPO reference rows; its AH-GRPO rows are named by their alpha.
ABLATION_LABELS = {m: METHOD_LABELS[m] for m in ("grpo", "sa")}


def _ablation_from_summary(summ: pd.DataFrame, main_alphas: dict, ablation_model=None) -> pd.DataFrame:
    cols = ABLATION_COLUMNS
    if summ.empty:
        return pd.DataFrame(columns=cols)
    ah = summ[summ["method"] == "ah"]
    if ablation_model is None:
        counts = ah.groupby("model_label")["alpha"].nunique()
        counts = counts[counts >= 2]
        if counts.empty:
            return pd.DataFrame(columns=cols)
        best = counts.max()
        ablation_model = model_order([m for m, c in counts.items() if c == best])[-1]
    sub = summ[summ["model_label"] == ablation_model]
    ah_alphas = set(np.round(pd.to_numeric(sub.loc[sub.method == "ah", "alpha"]), 6))
    # every SA-AH-GRPO alpha: the main one as the reference, the others as its own sweep
    sub = sub[sub["method"].isin(["ah", "sa"]) | ((sub["method"] == "grpo") & (0.0 not in ah_alphas))]
    df = sub.assign(label=sub["method"].map(ABLATION_LABELS).fillna(""), note="",
                    partial=~sub["complete"].fillna(True).astype(bool)).reindex(columns=cols)
    # AH/GRPO rows by alpha, the SA reference last
    df["_sa"] = (df["method"] == "sa").astype(int)
    return df.sort_values(["_sa", "alpha"], kind="stable").drop(columns="_sa").reset_index(drop=True)


def in_group(frame: pd.DataFrame, key: tuple) -> pd.Series:
    """The rows of ``frame`` in the (model, method, alpha) group ``key``; a missing alpha matches a missing one."""
    alpha = number_or_nan(key[2])
    return (frame["model_label"] == key[0]) & (frame["method"] == key[1]) & np.isclose(
        pd.to_numeric(frame["alpha"], errors="coerce").fillna(-9e9), -9e9 if math.isnan(alpha) else alpha)


def _sample_diagnostics(curves: pd.DataFrame, runs: pd.DataFrame, ck: pd.DataFrame,
                        diag_every: int | None) -> pd.DataFrame:
    """Rows of the diagnostic tables: the first logged step and every ``eval_every`` steps (the runs' config, or
    ``diag_every``; without either the evaluated steps), with Pass@1 where evaluated."""
    out = []
    for key, sub in curves.groupby(GROUP_KEYS, dropna=False, sort=False):
        sub = sub.sort_values("step")
        every = diag_every
        if every is None and runs is not None and len(runs):
            ee = pd.to_numeric(runs.loc[in_group(runs, key), "eval_every"], errors="coerce").dropna()
            every = int(ee.iloc[0]) if len(ee) and ee.iloc[0] > 0 else None
        ck_sub = ck[in_group(ck, key)] if len(ck) else ck
        p = dict(zip(ck_sub["step"], ck_sub["pass_at_1"]))
        steps = sub["step"]
        pick = sub[((steps % every == 0) if every else steps.isin(list(p))) | (steps == steps.iloc[0])].copy()
        pick["pass_at_1"] = [p.get(s, np.nan) for s in pick["step"]]
        pick["weight_neg_note"] = np.where(pick["weight_neg_mean"].isna() & (pick["neg_frac"] == 0), "all_positive", "")
        out.append(pick)
    if not out:
        return pd.DataFrame()
    cols = GROUP_KEYS + ["step", "pass_at_1", *DIAGNOSTIC_COLUMNS, "weight_neg_note", "n_seeds"]
    df = pd.concat(out, ignore_index=True)
    return df[[c for c in cols if c in df.columns]]
