"""The paper-matched alpha: the discount at which the CPU model's negative rollouts get the paper's weights.

At the paper's alpha = 0.5 the tiny model's completions (~60 tokens, low
entropy) are discounted by a few percent: its mean weight on negative-advantage
rollouts is about 0.88, against 0.36 in the paper's 1.5B log.  A study that
should say something about the paper's claim therefore also runs at the alpha
that gives the paper's level.  The rule, fixed before any run:

1. target: the paper's mean ``weight_neg_mean`` (:func:`saah_lib.analysis.reported.negative_weight_target`:
   every row of ``tab_sa_log_1b.csv``, 0.362);
2. rollouts of the warm start as at the start of training: the profile's first
   :data:`N_PROMPTS` training prompts, :data:`PER_PROMPT` completions each (the
   training group size), temperature and completion length of the profile;
3. each completion scored with the training reward (the sum of the four
   components), advantages normalised within each prompt's group as the trainer
   does (groups below the reward-std threshold get 0);
4. the profile's entropy estimate of every completion token (the tiny profile:
   exact), and alpha solved by bisection so that the mean weight over the
   tokens of negative-advantage rollouts equals the target
   (:func:`saah_lib.method.discount.solve_alpha`; the mean falls as alpha grows);
5. rounded to :data:`ALPHA_STEP` (0.1), so that run ids are short and a rerun on
   another CPU, whose sampled rollouts may differ in the last bits, lands on the
   same alpha.  The mean weight at the rounded alpha is recorded too.

The measurement is made on the study's reference warm start (``tiny-warmstart``,
seed 0) and recorded in ``<root>/paper_matched_alpha.json``
(:data:`saah_lib.rundir.layout.MATCHED_ALPHA_FILE`), with the mean weight the
chosen alpha gives on every other warm start of the study and at the main
alpha, so the reader sees how far each lies from the target.

``python -m saah_lib.studies.matched_alpha`` prints the measurement for the warm start.
"""

from __future__ import annotations

import argparse
import time

import torch

from saah_lib.analysis.reported import negative_weight_target
from saah_lib.analysis.resultset import matched_alpha
from saah_lib.jsonio import atomic_write_json
from saah_lib.method.discount import group_advantages, mean_negative_weight, padded, solve_alpha
from saah_lib.method.loss import normalised_entropy
from saah_lib.method.methods import MAIN_ALPHA, check_alpha
from saah_lib.method.reward import total_reward
from saah_lib.models.loading import load_model_and_tokenizer, resolve_model
from saah_lib.models.names import TINY_WARMSTART, canonical_model_name
from saah_lib.models.warmstart import torch_threads
from saah_lib.paths import PAPER_REPORTED
from saah_lib.rundir.layout import MATCHED_ALPHA_FILE
from saah_lib.studies.topk import completion_texts, sample_batch
from saah_lib.tasks.prompts import make_prompt
from saah_lib.tasks.synthetic import synthetic_split
from saah_lib.training.config import make_config

N_PROMPTS = 128
PER_PROMPT = 4  # the training group size (num_generations of the tiny profile)
ALPHA_STEP = 0.1
SAMPLING_SEED = 0
RECORD_VERSION = 1


@torch.no_grad()
def scored_rollouts(model_name: str, *, n_prompts: int = N_PROMPTS, per_prompt: int = PER_PROMPT,
                    profile: str = "tiny", seed: int = SAMPLING_SEED, batch_size: int = 32) -> dict:
    """Sample ``per_prompt`` completions of each of the profile's first ``n_prompts`` training prompts.

    Returns ``{"entropies": [per rollout: normalised entropy per token], "rewards": [...],
    "lengths": [...], "group_size": per_prompt}``.  The caller's random state is left as it was.
    """
    cfg = make_config(profile)
    if cfg.dataset != "synthetic":
        raise ValueError(f"profile {profile!r} trains on {cfg.dataset}; the measurement needs the synthetic task")
    problems = synthetic_split(cfg.n_train, cfg.n_eval, seed=cfg.data_seed).train[:n_prompts]
    model, tokenizer = load_model_and_tokenizer(resolve_model(model_name, progress=False), cfg.dtype)
    model.eval()
    vocab = model.get_output_embeddings().weight.size(0)
    entropies, rewards, lengths = [], [], []
    # one thread: the sampled tokens, hence the alpha, must not depend on the machine's core count
    with torch.random.fork_rng(), torch_threads(1):
        torch.manual_seed(seed)
        for start in range(0, len(problems), batch_size):
            chunk = problems[start:start + batch_size]
            completion, mask, logits = sample_batch(
                model, tokenizer, [make_prompt(p.question, tokenizer) for p in chunk], per_prompt=per_prompt,
                max_new_tokens=cfg.trainer.max_completion_length, temperature=cfg.trainer.temperature)
            h = normalised_entropy(logits, vocab, top_k=cfg.trainer.entropy_top_k)
            texts = completion_texts(tokenizer, completion, mask)
            golds = [p.answer for p in chunk for _ in range(per_prompt)]
            for i, (text, gold) in enumerate(zip(texts, golds)):
                n = int(mask[i].sum())
                entropies.append(h[i, :n].double().tolist())
                rewards.append(total_reward(text, gold))
                lengths.append(n)
    return {"entropies": entropies, "rewards": rewards, "lengths": lengths, "group_size": per_prompt,
            "vocab_size": int(vocab), "reward_std_threshold": cfg.trainer.reward_std_threshold}


def rounded_alpha(alpha: float) -> float:
    """``alpha`` on the :data:`ALPHA_STEP` grid (a short run id, stable across machines)."""
    return check_alpha(round(round(alpha / ALPHA_STEP) * ALPHA_STEP, 6))


def _weights_summary(rollouts: dict, alphas: dict[str, float]) -> dict:
    adv = group_advantages(rollouts["rewards"], rollouts["group_size"], rollouts["reward_std_threshold"])
    data = padded(rollouts["entropies"])
    return {name: mean_negative_weight(data, adv, a) for name, a in alphas.items()}


def measure_matched_alpha(model_name: str = TINY_WARMSTART, *, other_warm_starts=(), n_prompts: int = N_PROMPTS,
                          per_prompt: int = PER_PROMPT, profile: str = "tiny", seed: int = SAMPLING_SEED,
                          target: dict | None = None) -> dict:
    """Measure on ``model_name`` and solve for the paper-matched alpha (the module's rule); the mean negative
    weight of that alpha is also measured on each of ``other_warm_starts`` (model names)."""
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
        "mean_completion_length": float(sum(rollouts["lengths"]) / max(1, len(rollouts["lengths"]))),
        "mean_reward": float(sum(rollouts["rewards"]) / max(1, len(rollouts["rewards"]))),
        "solved_alpha": solved["alpha"],
        "alpha": alpha,
        "weight_neg_mean": _weights_summary(rollouts, {"at_alpha": alpha, "at_solved_alpha": solved["alpha"],
                                                       "at_main_alpha": MAIN_ALPHA}),
        "other_warm_starts": {},
    }
    for other in other_warm_starts:
        other_rollouts = scored_rollouts(other, n_prompts=n_prompts, per_prompt=per_prompt, profile=profile,
                                         seed=seed)
        record["other_warm_starts"][canonical_model_name(other)] = {
            "weight_neg_mean": _weights_summary(other_rollouts, {"at_alpha": alpha, "at_main_alpha": MAIN_ALPHA}),
            "mean_completion_length": float(sum(other_rollouts["lengths"]) / max(1, len(other_rollouts["lengths"]))),
        }
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


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m saah_lib.studies.matched_alpha", description=__doc__.splitlines()[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--model", default=TINY_WARMSTART, help="a tiny warm start's name (built if missing)")
    parser.add_argument("--others", nargs="*", default=[], help="other warm starts to measure at the chosen alpha")
    parser.add_argument("--prompts", type=int, default=N_PROMPTS)
    args = parser.parse_args(argv)
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


if __name__ == "__main__":
    main()
