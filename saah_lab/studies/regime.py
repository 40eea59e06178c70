"""Which warm-up puts SmolLM2 in the paper's entropy regime: a pilot for the pre-registered real-model study.

Fine-tunes SmolLM2-135M-Instruct on reference solutions in the tagged answer format (the synthetic problems'
templated references, or GSM8K's own solutions) and, at the steps asked, samples held-out synthetic problems at
the training temperature: the mean top-K normalised entropy of the sampled tokens (what a run logs as
``entropy_norm``), how many completions are in the format, how many are exact, and greedy Pass@1. The paper's
1.5B log has a mean normalised entropy of 0.027 (0.015 to 0.043). Nothing here trains with RL.

    python -m saah_lab.studies.regime --sft gsm8k --steps 30 --measure-at 15 30 --out results/real_pilot/gsm8k-30.json
"""

from __future__ import annotations

import argparse
import copy
import time

import torch

from saah_lab.studies.real_model import load_smollm2
from saah_lab.studies.real_study import WarmUpSettings
from saah_lab.studies.topk import completion_texts, sample_batch
from saah_lib.jsonio import atomic_write_json
from saah_lib.method.loss import normalised_entropy
from saah_lib.method.methods import PAPER_ENTROPY_TOP_K
from saah_lib.method.reward import CORRECT_EXACT, FORMAT_FULL, r_correct, reward_components
from saah_lib.models.warmstart import supervised_finetune
from saah_lib.numerics import RECORD_KEY, cpu_numerics_record
from saah_lib.tasks.gsm8k import load_gsm8k, tagged_solution
from saah_lib.tasks.prompts import make_prompt
from saah_lib.tasks.synthetic import generate_problems

SFT_SEED, PROBE_SEED, GREEDY_SEED = 10_000, 777, 778  # three disjoint streams of problems
PER_PROMPT, MAX_NEW_TOKENS, BATCH_PROMPTS = 4, 128, 8


def sft_problems(source: str, n: int, data_dir: str | None = None):
    """``n`` warm-up targets: synthetic references (training partition by calculation chain) or GSM8K's first
    ``n`` training solutions rewritten in the tagged format."""
    if source == "synthetic":
        return generate_problems(n, SFT_SEED, partition="train", held_out_by="chain", id_prefix="sft")
    return [tagged_solution(p) for p in load_gsm8k("train", data_dir)[:n]]


@torch.no_grad()
def greedy_pass_at_1(model, tokenizer, problems) -> float:
    """Greedy Pass@1 (exact answers) of ``model`` on ``problems``, 32 at a time."""
    exact = 0
    for start in range(0, len(problems), 32):
        batch = problems[start:start + 32]
        enc = tokenizer([make_prompt(p.question, tokenizer) for p in batch], return_tensors="pt", padding=True,
                        padding_side="left", add_special_tokens=False)
        out = model.generate(**enc, do_sample=False, max_new_tokens=MAX_NEW_TOKENS,
                             pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
        texts = tokenizer.batch_decode(out[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
        exact += sum(r_correct(t, p.answer) == CORRECT_EXACT for t, p in zip(texts, batch))
    return exact / len(problems)


def measure(model, tokenizer, probe, greedy, temperature: float, seed: int = 0) -> dict:
    """The sampled regime of a bfloat16 copy of ``model`` (the trained float32 weights stay as they are)."""
    started = time.perf_counter()
    policy = copy.deepcopy(model).to(torch.bfloat16).eval()
    torch.manual_seed(seed)
    entropies, rows = [], []
    for start in range(0, len(probe), BATCH_PROMPTS):
        batch = probe[start:start + BATCH_PROMPTS]
        ids, mask, logits = sample_batch(policy, tokenizer, [make_prompt(p.question, tokenizer) for p in batch],
                                         per_prompt=PER_PROMPT, max_new_tokens=MAX_NEW_TOKENS, temperature=temperature)
        h = normalised_entropy(logits, policy.config.vocab_size, top_k=PAPER_ENTROPY_TOP_K)
        for i, text in enumerate(completion_texts(tokenizer, ids, mask)):
            n = int(mask[i].sum())
            entropies += h[i, :n].tolist()
            rows.append({**reward_components(text, batch[i // PER_PROMPT].answer), "tokens": n})
    share = lambda test: round(sum(map(test, rows)) / len(rows), 4)  # noqa: E731
    return {"temperature": temperature, "completions": len(rows), "tokens": len(entropies),
            "mean_normalised_entropy": sum(entropies) / len(entropies),
            "full_format": share(lambda r: r["format"] == FORMAT_FULL),
            "exact": share(lambda r: r["correct"] == CORRECT_EXACT),
            "truncated": share(lambda r: r["tokens"] >= MAX_NEW_TOKENS),
            "mean_tokens": sum(r["tokens"] for r in rows) / len(rows),
            "greedy_pass_at_1": greedy_pass_at_1(policy, tokenizer, greedy) if greedy else None,
            "greedy_problems": len(greedy), "seconds": round(time.perf_counter() - started, 1)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m saah_lab.studies.regime", description=__doc__.splitlines()[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--sft", choices=("none", "synthetic", "gsm8k"), default="none", help="the warm-up's targets")
    ap.add_argument("--steps", type=int, default=30, help="supervised steps of 8 targets (the schedule's length)")
    ap.add_argument("--measure-at", type=int, nargs="+", default=[30], help="steps after which to measure (0: before)")
    ap.add_argument("--prompts", type=int, default=16, help="held-out synthetic prompts sampled 4 times each")
    ap.add_argument("--greedy", type=int, default=64, help="held-out synthetic problems for greedy Pass@1")
    ap.add_argument("--temperature", type=float, nargs="+", default=[0.7], help="sampling temperatures")
    ap.add_argument("--data-dir", default=None, help="GSM8K folder (default: $SAAH_GSM8K_DIR)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", required=True, help="the JSON record to write")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    held_out = dict(partition="eval", held_out_by="chain")
    probe = generate_problems(args.prompts, PROBE_SEED, id_prefix="probe", **held_out)
    greedy = generate_problems(args.greedy, GREEDY_SEED, id_prefix="greedy", **held_out)
    record = {"settings": vars(args), "measured": [], RECORD_KEY: cpu_numerics_record()}

    def measure_at(step: int, model, tokenizer) -> None:
        for i, temperature in enumerate(args.temperature):
            row = {"step": step, **measure(model, tokenizer, probe, greedy if i == 0 else [], temperature)}
            record["measured"].append(row)
            print(row, flush=True)
            atomic_write_json(args.out, record)

    torch.manual_seed(0)
    model, tokenizer = load_smollm2("float32")
    if 0 in args.measure_at:
        measure_at(0, model, tokenizer)
    if args.sft != "none":
        settings = WarmUpSettings(sft_steps=args.steps)  # the committed warm-up's schedule: 8 a step, lr 3e-5
        targets = sft_problems(args.sft, args.steps * settings.batch_size, args.data_dir)
        supervised_finetune(model, tokenizer, targets, settings, 0, progress=True, on_step=lambda done, _:
                            measure_at(done, model, tokenizer) if done in args.measure_at else None)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
