"""How wrong is the top-K entropy estimate, and how wrong does it make the horizon weights?

On rollouts sampled as in training, every completion token's exact normalised entropy ``H_t / log V`` is
compared with the top-K estimate (softmax over the K largest logits), and so are the horizon weights built from
each (:func:`topk_errors`); the weight error compounds, so the last token's is reported too. Also here: the
top-K ablation's training runs (:func:`topk_training_configs`).

``python -m saah_lab.studies.topk --model cache/tiny-warmstart --out results/extended/topk_entropy_error.json``
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from saah_lib.jsonio import atomic_write_json
from saah_lib.method.loss import horizon_weights, normalised_entropy
from saah_lib.method.methods import MAIN_ALPHA, SWEEP_ALPHAS
from saah_lib.paths import EXTENDED_ROOT, TINY_WARMSTART_DIR, in_repo, repo_relative
from saah_lib.rundir.layout import TOPK_ERROR_FILE
from saah_lib.tasks.prompts import make_prompt
from saah_lib.tasks.synthetic import synthetic_split
from saah_lib.training.config import make_config

DEFAULT_KS = (5, 10, 20, 50, 100, 200)
DEFAULT_ALPHAS = tuple(a for a in SWEEP_ALPHAS if a != 0)  # alpha = 0 has weight 1 whatever the entropy
TRAINING_KS = (5, 20, 100)  # the training runs: from ~1% to ~15% of the tiny 660-token vocabulary
TRAINING_METHOD, TRAINING_ALPHA = "sa", MAIN_ALPHA
RESULT_FILE = TOPK_ERROR_FILE


def completion_mask(completion_ids: torch.Tensor, eos_token_id: int | None) -> torch.Tensor:
    """1 on completion tokens up to and including the first end-of-sequence token (TRL's mask), else 0."""
    if eos_token_id is None:
        return torch.ones_like(completion_ids, dtype=torch.long)
    is_eos = completion_ids == eos_token_id
    # tokens strictly after the first eos: cumulative count of eos before them is >= 1
    after = (torch.cumsum(is_eos.long(), dim=1) - is_eos.long()) > 0
    return (~after).long()


@torch.no_grad()
def sample_batch(model, tokenizer, prompts: list[str], *, per_prompt: int, max_new_tokens: int,
                 temperature: float = 1.0):
    """One batch of sampled completions as TRL samples them (no top-k/top-p truncation), and the logits that
    produced them: ``(completion ids [B, T], TRL's mask [B, T], float32 logits [B, T, V] / temperature)``."""
    enc = tokenizer(prompts, return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False)
    gen = model.generate(**enc, do_sample=True, temperature=temperature, top_k=0, top_p=1.0,
                         max_new_tokens=max_new_tokens, num_return_sequences=per_prompt,
                         pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
    prompt_len = enc["input_ids"].shape[1]
    completion = gen[:, prompt_len:]
    mask = completion_mask(completion, tokenizer.eos_token_id)
    attention = torch.cat([enc["attention_mask"].repeat_interleave(per_prompt, dim=0), mask], dim=1)
    logits = model(input_ids=gen, attention_mask=attention).logits
    # position i predicts token i + 1: the completion's tokens are predicted from prompt_len - 1 on
    return completion, mask, logits[:, prompt_len - 1:-1].float() / temperature


def completion_texts(tokenizer, completion: torch.Tensor, mask: torch.Tensor) -> list[str]:
    """The completions as TRL hands them to the reward (masked and special tokens dropped)."""
    return tokenizer.batch_decode(completion * mask + tokenizer.pad_token_id * (1 - mask), skip_special_tokens=True)


def _stats(values: torch.Tensor) -> dict:
    values = values.double()
    if values.numel() == 0:
        return {"mean": float("nan"), "max": float("nan")}
    return {"mean": values.mean().item(), "max": values.max().item()}


def _completion_tokens(xs, masks) -> torch.Tensor:
    """The values at completion tokens, all batches in one tensor."""
    return torch.cat([x[m > 0] for x, m in zip(xs, masks)])


def _last_tokens(xs, masks) -> torch.Tensor:
    """The value at each completion's last real token."""
    out = []
    for x, m in zip(xs, masks):
        n = m.sum(1).long()
        keep = n > 0
        out.append(x[keep].gather(1, (n[keep] - 1).unsqueeze(1)).squeeze(1))
    return torch.cat(out)


def _weight_errors(exact, estimate, masks, alpha: float) -> dict:
    """The horizon weights' errors at ``alpha`` of the estimated entropies against the exact ones."""
    w_exact = [horizon_weights(h, m, alpha) for h, m in zip(exact, masks)]
    w_k = [horizon_weights(h, m, alpha) for h, m in zip(estimate, masks)]
    abs_err = [(a - b).abs() for a, b in zip(w_k, w_exact)]
    rel_err = [e / b for e, b in zip(abs_err, w_exact)]
    return {
        "abs_err": _stats(_completion_tokens(abs_err, masks)),
        "rel_err": _stats(_completion_tokens(rel_err, masks)),
        "last_token_rel_err": _stats(_last_tokens(rel_err, masks)),
        "last_token_weight_exact_mean": _last_tokens(w_exact, masks).double().mean().item(),
    }


def _k_row(k: int, vocab: int, exact, estimate, mass, masks, alphas) -> dict:
    """The errors of the top-``k`` estimate: of the normalised entropy, its mass, and per alpha the weights'."""
    h_exact = _completion_tokens(exact, masks)
    diff = _completion_tokens(estimate, masks) - h_exact
    mass = _completion_tokens(mass, masks)
    return {
        "k": int(k),
        "frac_vocab": min(k, vocab) / vocab,
        "exact": k >= vocab,
        "entropy_abs_err": _stats(diff.abs()),
        "entropy_signed_err_mean": diff.double().mean().item(),
        "entropy_rel_err_of_total": (diff.double().sum() / h_exact.double().sum()).item()
        if h_exact.sum() > 0 else float("nan"),
        "topk_mass": {"mean": mass.double().mean().item(), "min": mass.min().item()},
        "weights": {f"{alpha:g}": _weight_errors(exact, estimate, masks, alpha) for alpha in alphas},
    }


def topk_errors(batches, ks=DEFAULT_KS, alphas=DEFAULT_ALPHAS, vocab_size: int | None = None) -> dict:
    """Errors of the top-K estimate against the exact entropy over every completion token of ``batches``
    (``[(logits [B, T, V], mask [B, T]), ...]``): per K, of the normalised entropy, the top-K mass, and per alpha
    of the horizon weights at every token and at each completion's last token."""
    if not batches:
        raise ValueError("no rollouts to measure")
    vocab = vocab_size or batches[0][0].size(-1)
    exact, masks, per_k, mass = [], [], {k: [] for k in ks}, {k: [] for k in ks}
    for logits, mask in batches:
        exact.append(normalised_entropy(logits, vocab, top_k=None))
        masks.append(mask.float())
        probs = torch.softmax(logits.float(), dim=-1)
        for k in ks:  # the top-K estimate, and the mass of the K largest probabilities
            per_k[k].append(normalised_entropy(logits, vocab, top_k=k))
            mass[k].append(torch.topk(probs, min(k, probs.size(-1)), dim=-1).values.sum(-1))
    h_exact = _completion_tokens(exact, masks)
    return {
        "vocab_size": int(vocab),
        "n_rollouts": int(sum(m.size(0) for m in masks)),
        "n_tokens": int(h_exact.numel()),
        "exact_entropy_norm": {**_stats(h_exact), "median": h_exact.double().median().item()},
        "alphas": list(alphas),
        "per_k": [_k_row(k, vocab, exact, per_k[k], mass[k], masks, alphas) for k in ks],
    }


def measure_topk(model_dir: str | Path, *, n_prompts: int = 64, per_prompt: int = 4, ks=DEFAULT_KS,
                 alphas=DEFAULT_ALPHAS, seed: int = 0, profile: str = "tiny", problems=None) -> dict:
    """Measure on rollouts of ``model_dir`` on the profile's first ``n_prompts`` training problems (or ``problems``)."""
    model_dir = Path(model_dir)
    if not (model_dir / "config.json").is_file():
        raise ValueError(f"{model_dir}: not a model folder (no config.json)")
    cfg = make_config(profile)
    if problems is None:
        if cfg.dataset != "synthetic":
            raise ValueError(f"profile {profile!r} trains on {cfg.dataset}; pass problems= explicitly")
        problems = synthetic_split(cfg.n_train, cfg.n_eval, seed=cfg.data_seed).train
    problems = list(problems)[:n_prompts]
    start = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    prompts = [make_prompt(p.question, tokenizer) for p in problems]
    model.eval()
    torch.manual_seed(seed)
    batches = [sample_batch(model, tokenizer, prompts[i:i + 16], per_prompt=per_prompt, temperature=cfg.trainer.
                            temperature, max_new_tokens=cfg.trainer.max_completion_length)[:0:-1]
               for i in range(0, len(prompts), 16)]  # (logits, mask) per batch of 16 prompts
    vocab = model.get_output_embeddings().weight.size(0)
    result = topk_errors(batches, ks=tuple(ks) + ((vocab,) if vocab not in ks else ()), alphas=alphas,
                         vocab_size=vocab)
    result.update({
        "model": repo_relative(model_dir),  # no machine path in the results
        "profile": profile,
        "n_prompts": len(problems),
        "per_prompt": per_prompt,
        "first_problem_id": problems[0].id if problems else None,
        "temperature": cfg.trainer.temperature,
        "max_new_tokens": cfg.trainer.max_completion_length,
        "seed": seed,
        "wall_s": round(time.perf_counter() - start, 2),
    })
    return result


def topk_run_id(k: int, seed: int, method: str = TRAINING_METHOD, alpha: float = TRAINING_ALPHA,
                profile: str = "tiny") -> str:
    return f"{profile}-{method}-a{alpha:g}-k{k}-s{seed}"


def topk_training_configs(ks=TRAINING_KS, seeds=(0,), *, results_dir: str = "results/extended", steps: int | None = None,
                          profile: str = "tiny", method: str = TRAINING_METHOD, alpha: float = TRAINING_ALPHA):
    """One config per (K, seed): SA-AH-GRPO at the main alpha with ``entropy_top_k=K``, under its own run id."""
    return [make_config(profile, method=method, alpha=alpha, entropy_top_k=int(k), seed=seed, max_steps=steps,
                        results_dir=results_dir, run_id=topk_run_id(k, seed, method, alpha, profile))
            for k in ks for seed in seeds]


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m saah_lab.studies.topk", description=__doc__.splitlines()[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--model", type=in_repo, default=repo_relative(TINY_WARMSTART_DIR), help="model folder")
    parser.add_argument("--out", type=in_repo, default=repo_relative(EXTENDED_ROOT / RESULT_FILE), help="JSON written")
    parser.add_argument("--prompts", type=int, default=64, help="prompts sampled")
    parser.add_argument("--per-prompt", type=int, default=4, help="rollouts per prompt")
    parser.add_argument("--ks", type=int, nargs="+", default=list(DEFAULT_KS), help="K values measured")
    parser.add_argument("--seed", type=int, default=0, help="sampling seed")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    result = measure_topk(args.model, n_prompts=args.prompts, per_prompt=args.per_prompt, ks=args.ks, seed=args.seed)
    atomic_write_json(args.out, result)
    for row in result["per_k"]:
        w = row["weights"][f"{MAIN_ALPHA:g}"]
        print(f"K={row['k']:4d}  |dH| mean {row['entropy_abs_err']['mean']:.2e} max {row['entropy_abs_err']['max']:.2e}"
              f"  weight rel err (a={MAIN_ALPHA:g}) mean {w['rel_err']['mean']:.2e} max {w['rel_err']['max']:.2e}")
    print(f"wrote {args.out} ({result['n_tokens']} tokens, {result['wall_s']:.0f} s)")


if __name__ == "__main__":
    main()
