"""The paper-matched alpha: the discount at which the CPU model's negative rollouts get the paper's weights.

At alpha = 0.5 the tiny model's short, low-entropy completions are discounted far less than the paper's 1.5B
rollouts (docs/evidence.md), so the studies also run at the alpha at which the warm start's own rollouts, scored
as the trainer does, have the paper's mean weight on negative-advantage tokens (:func:`measure_matched_alpha`, a
rule fixed before any run), recorded in ``<root>/paper_matched_alpha.json`` with the range the paper's loose level
allows and the weight on the other warm starts. The match holds at the start of training; ``--range <root>``
writes how the discount drifted (:func:`write_alpha_range`).
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import pandas as pd
import torch

from saah_lab.analysis.reported import negative_weight_target
from saah_lab.analysis.resultset import matched_alpha
from saah_lab.analysis.runs import read_runs
from saah_lab.analysis.summaries import ordered_by_step
from saah_lab.rundir.manifest import write_manifest
from saah_lab.studies.discount import alphas_for_targets, group_advantages, mean_negative_weight, padded, solve_alpha
from saah_lab.studies.real_model import paper_targets, rollout_entropies
from saah_lib.jsonio import atomic_write_json, read_jsonl
from saah_lib.method.methods import MAIN_ALPHA, check_alpha
from saah_lib.models.loading import load_model_and_tokenizer, resolve_model
from saah_lib.models.names import TINY_WARMSTART, canonical_model_name
from saah_lib.models.warmstart import torch_threads
from saah_lib.paths import PAPER_REPORTED, repo_relative
from saah_lib.rundir.layout import ALPHA_RANGE_FILE, MATCHED_ALPHA_FILE, TOKEN_ENTROPIES_FILE
from saah_lib.tasks.prompts import make_prompt
from saah_lib.tasks.synthetic import synthetic_split
from saah_lib.training.config import make_config

N_PROMPTS = 128
PER_PROMPT = 4  # the training group size (num_generations of the tiny profile)
ALPHA_STEP = 0.1
SAMPLING_SEED = 0
RECORD_VERSION = 1
DRIFT_WINDOW = 10  # steps at each end of a run for the drift of its mean negative weight


@torch.no_grad()
def scored_rollouts(model_name: str, *, n_prompts: int = N_PROMPTS, per_prompt: int = PER_PROMPT,
                    profile: str = "tiny", seed: int = SAMPLING_SEED, batch_size: int = 32) -> dict:
    """``per_prompt`` completions of each of the profile's first ``n_prompts`` training prompts: per rollout its
    normalised entropy per token, reward and length (the caller's random state is left as it was)."""
    cfg = make_config(profile)
    if cfg.dataset != "synthetic":
        raise ValueError(f"profile {profile!r} trains on {cfg.dataset}; the measurement needs the synthetic task")
    problems = synthetic_split(cfg.n_train, cfg.n_eval, seed=cfg.data_seed).train[:n_prompts]
    model, tokenizer = load_model_and_tokenizer(resolve_model(model_name, progress=False), cfg.dtype)
    # one thread: the sampled tokens, hence the alpha, must not depend on the machine's core count
    with torch.random.fork_rng(), torch_threads(1):
        scored = rollout_entropies(model.eval(), tokenizer, [make_prompt(p.question, tokenizer) for p in problems],
                                   [p.answer for p in problems], per_prompt=per_prompt,
                                   max_new_tokens=cfg.trainer.max_completion_length, top_k=cfg.trainer.entropy_top_k,
                                   seed=seed, batch_size=batch_size, temperature=cfg.trainer.temperature)
    return {"entropies": scored["top_k"], "rewards": scored["rewards"], "lengths": scored["lengths"],
            "group_size": per_prompt, "vocab_size": int(scored["vocab_size"]),
            "reward_std_threshold": cfg.trainer.reward_std_threshold}


def rounded_alpha(alpha: float) -> float:
    """``alpha`` on the :data:`ALPHA_STEP` grid (a short run id, stable across machines)."""
    return check_alpha(round(round(alpha / ALPHA_STEP) * ALPHA_STEP, 6))


def _weights_summary(rollouts: dict, alphas: dict[str, float]) -> dict:
    adv = group_advantages(rollouts["rewards"], rollouts["group_size"], rollouts["reward_std_threshold"])
    data = padded(rollouts["entropies"])
    return {name: mean_negative_weight(data, adv, a) for name, a in alphas.items()}


def alpha_range(rollouts: dict) -> dict:
    """The alphas matching the paper's lowest, mean and highest 1.5B snapshot and its 3B mean on ``rollouts``."""
    adv = group_advantages(rollouts["rewards"], rollouts["group_size"], rollouts["reward_std_threshold"])
    return {"rule": "alpha at which the mean negative weight of the same rollouts equals each of the paper's "
                    "logged levels: lowest, mean and highest weight_neg_mean of tab_sa_log_1b.csv, mean of "
                    "tab_sa_log_3b.csv (steps without a negative rollout left out); bisection, 3 decimals",
            "alphas": alphas_for_targets(rollouts["entropies"], adv, paper_targets())}


def negative_weight_drift(train_log, window: int = DRIFT_WINDOW) -> dict[str, float]:
    """One run's logged ``weight_neg_mean`` (steps without a negative rollout have none): its mean over the
    first ``window`` logged steps (``start``), over all of them (``during``) and over the last ``window``
    (``end``); NaN where a span has no value."""
    log = ordered_by_step(train_log)
    values = log["weight_neg_mean"].astype(float) if "weight_neg_mean" in log else log["step"] * math.nan

    def mean(part) -> float:
        part = part.dropna()
        return float(part.mean()) if len(part) else math.nan

    return {"start": mean(values.iloc[:window]), "during": mean(values), "end": mean(values.iloc[-window:])}


def weight_drift(root, alpha: float, window: int = DRIFT_WINDOW) -> dict:
    """How the matched discount moved during a study's runs at ``alpha`` (exact entropy only), per method and
    warm start: the number of runs and, for each span of :func:`negative_weight_drift`, the mean over runs and
    the lowest and highest run."""
    spans: dict[str, dict[str, list[dict]]] = {}
    for folder in read_runs(root).runs:
        cfg = folder.config
        if (cfg.get("method") not in ("ah", "sa") or cfg.get("entropy_top_k") is not None
                or not math.isclose(float(cfg.get("alpha", math.nan)), alpha)):
            continue
        warm_start = canonical_model_name(cfg["model_name"])
        spans.setdefault(cfg["method"], {}).setdefault(warm_start, []).append(
            negative_weight_drift(pd.DataFrame(folder.train_log), window))
    out = {"rule": f"per run: mean of the logged weight_neg_mean over the first {window} steps (start), all "
                   f"steps (during) and the last {window} steps (end); then mean, lowest and highest over runs",
           "alpha": alpha, "window": window, "methods": {}}
    for method, by_warm_start in sorted(spans.items()):
        out["methods"][method] = {
            ws: {"runs": len(runs), **{span: {"mean": sum(r[span] for r in runs) / len(runs),
                                              "low": min(r[span] for r in runs), "high": max(r[span] for r in runs)}
                                       for span in ("start", "during", "end")}}
            for ws, runs in sorted(by_warm_start.items())}
    return out


def _mean_length(rollouts: dict) -> float:
    return float(sum(rollouts["lengths"]) / max(1, len(rollouts["lengths"])))


def measure_matched_alpha(model_name: str = TINY_WARMSTART, *, other_warm_starts=(), n_prompts: int = N_PROMPTS,
                          per_prompt: int = PER_PROMPT, profile: str = "tiny", seed: int = SAMPLING_SEED,
                          target: dict | None = None) -> dict:
    """The paper-matched alpha of ``model_name`` (and its weight on ``other_warm_starts``), by the rule fixed
    before any run: the alpha at which the warm start's rollouts on the profile's first training prompts, scored as
    the trainer does, have the paper's mean ``weight_neg_mean``, by bisection, rounded to :data:`ALPHA_STEP` (a CPU
    whose rollouts differ in the last bits lands on the same alpha); ``alpha_range``: the paper's other levels'."""
    started = time.perf_counter()
    target = target or negative_weight_target(PAPER_REPORTED)
    rollouts = scored_rollouts(model_name, n_prompts=n_prompts, per_prompt=per_prompt, profile=profile, seed=seed)
    adv = group_advantages(rollouts["rewards"], rollouts["group_size"], rollouts["reward_std_threshold"])
    solved = solve_alpha(rollouts["entropies"], adv, target["target"])
    alpha = rounded_alpha(solved["alpha"])
    record = {
        "version": RECORD_VERSION,
        "rule": "alpha at which the mean weight on the tokens of negative-advantage rollouts sampled from the "
                "warm start equals the paper's mean weight_neg_mean; bisection, then rounded to "
                f"{ALPHA_STEP:g}",
        "target": target,
        "warm_start": canonical_model_name(model_name),
        "profile": profile,
        "n_prompts": n_prompts,
        "per_prompt": per_prompt,
        "sampling_seed": seed,
        "n_rollouts": len(rollouts["rewards"]),
        "n_negative": int((adv < 0).sum()),
        "n_tokens": int(sum(rollouts["lengths"])),
        "mean_completion_length": _mean_length(rollouts),
        "mean_reward": float(sum(rollouts["rewards"]) / max(1, len(rollouts["rewards"]))),
        "solved_alpha": solved["alpha"],
        "alpha": alpha,
        "weight_neg_mean": _weights_summary(rollouts, {"at_alpha": alpha, "at_solved_alpha": solved["alpha"],
                                                       "at_main_alpha": MAIN_ALPHA}),
        "other_warm_starts": {},
        "alpha_range": alpha_range(rollouts),
    }
    for other in other_warm_starts:
        theirs = scored_rollouts(other, n_prompts=n_prompts, per_prompt=per_prompt, profile=profile, seed=seed)
        record["other_warm_starts"][canonical_model_name(other)] = {
            "weight_neg_mean": _weights_summary(theirs, {"at_alpha": alpha, "at_main_alpha": MAIN_ALPHA}),
            "mean_completion_length": _mean_length(theirs)}
    record["wall_s"] = round(time.perf_counter() - started, 2)
    return record


def read_matched_alpha(root) -> float | None:
    """The paper-matched alpha recorded in a study root, or None when it has not been measured there."""
    alpha = matched_alpha(root)
    return None if alpha is None else check_alpha(alpha)


def ensure_matched_alpha(root, *, other_warm_starts=(), n_prompts: int = N_PROMPTS) -> float:
    """The root's paper-matched alpha, measured and recorded first if the root has none yet."""
    alpha = read_matched_alpha(root)
    if alpha is not None:
        return alpha
    record = measure_matched_alpha(other_warm_starts=other_warm_starts, n_prompts=n_prompts)
    root.mkdir(parents=True, exist_ok=True)
    atomic_write_json(root / MATCHED_ALPHA_FILE, record)
    return record["alpha"]


def warm_start_rollouts(train_log: list[dict], token_entropies: list[dict]) -> list[dict]:
    """The logged rollouts the unchanged warm start drew: those before any update at a learning rate above 0."""
    lr = {int(r["step"]): float(r["learning_rate"]) for r in train_log if "learning_rate" in r}
    last = 1
    while lr.get(last) == 0.0:
        last += 1
    return [r for r in token_entropies if int(r["step"]) <= last]


def logged_alpha_range(root, alpha: float) -> dict:
    """The alphas matching the paper's levels on the warm-start rollouts a study's runs logged, per warm start
    (exact-entropy runs; each seed's rollouts once: they are the same in every method)."""
    by_warm_start: dict[str, dict] = {}
    for folder in read_runs(root).runs:
        cfg = folder.config
        if cfg.get("entropy_top_k") is not None:
            continue
        logged = read_jsonl(Path(folder.path) / TOKEN_ENTROPIES_FILE)
        unique = by_warm_start.setdefault(canonical_model_name(cfg["model_name"]), {})
        for r in warm_start_rollouts(folder.train_log, logged):
            unique[(cfg["seed"], r["step"], r["advantage"], tuple(r["entropy_norm"]))] = r
    out = {"rule": "alpha at which the mean weight on the tokens of negative-advantage rollouts equals each of the "
                   "paper's logged levels (lowest, mean and highest weight_neg_mean of tab_sa_log_1b.csv, mean of "
                   "tab_sa_log_3b.csv, steps without a negative rollout left out), solved on the rollouts the "
                   "runs logged from the unchanged warm start (token_entropies.jsonl: the steps before any "
                   "update at a learning rate above 0), each seed once; bisection, 3 decimals",
           "targets": paper_targets(), "warm_starts": {}}
    for warm_start, rollouts in sorted(by_warm_start.items()):
        entropies = [r["entropy_norm"] for r in rollouts.values()]
        adv = torch.tensor([r["advantage"] for r in rollouts.values()], dtype=torch.float64)
        out["warm_starts"][warm_start] = {
            "n_rollouts": len(entropies), "n_negative": int((adv < 0).sum()),
            "seeds": sorted({key[0] for key in rollouts}),
            "weight_neg_mean": {"at_alpha": mean_negative_weight(entropies, adv, alpha),
                                "at_main_alpha": mean_negative_weight(entropies, adv, MAIN_ALPHA)},
            "alphas": alphas_for_targets(entropies, adv, out["targets"]),
        }
    return out


def write_alpha_range(root) -> dict:
    """Write ``<root>/alpha_range.json`` from the root's runs, then its manifest: the alphas matching the paper's
    levels on the logged warm-start rollouts (no model needed, so any CPU serves) and the discount's drift
    during training at the recorded alpha (:func:`weight_drift`)."""
    root = Path(root)
    alpha = read_matched_alpha(root)
    if alpha is None:
        raise FileNotFoundError(f"{root / MATCHED_ALPHA_FILE}: no paper-matched alpha recorded")
    record = {"version": RECORD_VERSION, "paper_matched_alpha": alpha,
              "alpha_range": logged_alpha_range(root, alpha), "weight_drift": weight_drift(root, alpha),
              "command": f"python -m saah_lab.studies.matched_alpha --range {repo_relative(root)}"}
    atomic_write_json(root / ALPHA_RANGE_FILE, record)
    write_manifest(root)
    return record


def _print_range(record: dict) -> None:  # what --range wrote
    for ws, m in record["alpha_range"]["warm_starts"].items():
        print(f"  {ws} ({m['n_rollouts']} logged warm-start rollouts, {m['n_negative']} negative): " + "; ".join(
            f"{name} {a['target']:.3f} -> " + (f"alpha {a['alpha']:g}" if a["alpha"] is not None else "no alpha <= 10")
            for name, a in m["alphas"].items()))
    for method, by_ws in record["weight_drift"]["methods"].items():
        for ws, d in by_ws.items():
            print(f"  {method} on {ws} ({d['runs']} runs): " + ", ".join(
                f"{span} {d[span]['mean']:.3f} [{d[span]['low']:.3f}, {d[span]['high']:.3f}]"
                for span in ("start", "during", "end")))


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m saah_lab.studies.matched_alpha", description=__doc__.splitlines()[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--model", default=TINY_WARMSTART, help="a tiny warm start's name (built if missing)")
    parser.add_argument("--others", nargs="*", default=[], help="other warm starts to measure at the chosen alpha")
    parser.add_argument("--prompts", type=int, default=N_PROMPTS,
                        help=f"training prompts sampled, {PER_PROMPT} completions each")
    parser.add_argument("--range", metavar="ROOT", default=None,
                        help=f"instead: write ROOT/{'alpha_range.json'} from ROOT's runs (the alphas matching the "
                             "paper's lowest, mean and highest logged level, and the discount's drift during "
                             "training) and rewrite ROOT's manifest")
    args = parser.parse_args(argv)
    if args.range:
        record = write_alpha_range(args.range)
        print(f"{args.range}/{ALPHA_RANGE_FILE}: at the paper-matched alpha {record['paper_matched_alpha']:g}")
        _print_range(record)
        return
    record = measure_matched_alpha(args.model, other_warm_starts=args.others, n_prompts=args.prompts)
    w = record["weight_neg_mean"]
    print(f"target {record['target']['target']:.4f} (mean of {record['target']['column']} over steps "
          f"{record['target']['steps']} of {record['target']['file']})")
    print(f"{record['n_rollouts']} rollouts, {record['n_negative']} with negative advantage, mean length "
          f"{record['mean_completion_length']:.1f} tokens")
    print(f"solved alpha {record['solved_alpha']:.4f} -> alpha {record['alpha']:g}: mean negative weight "
          f"{w['at_alpha']:.4f} (at alpha {MAIN_ALPHA:g}: {w['at_main_alpha']:.4f}); {record['wall_s']:.0f} s")
    for name, other in record["other_warm_starts"].items():
        print(f"  {name}: {other['weight_neg_mean']['at_alpha']:.4f} at alpha {record['alpha']:g}")
    for name, m in record["alpha_range"]["alphas"].items():
        print(f"  {name}: target {m['target']:.3f} -> " + (f"alpha {m['alpha']:g}" if m["alpha"] is not None
                                                             else f"no alpha ({m['reason']})"))


if __name__ == "__main__":
    main()
