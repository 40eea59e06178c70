"""Greedy Pass@1: one greedy completion per problem, correct when its answer
exactly equals the gold answer (the reward's exact-match rule)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import torch
from tqdm.auto import tqdm
from transformers import TrainerCallback

from saah_lib.data import Problem, make_prompt
from saah_lib.reward import answers_match, extract_answer
from saah_lib.summaries import pass_at_1_ci


@dataclass
class EvalResult:
    pass_at_1: float
    ci95: float
    n: int
    n_correct: int
    records: list[dict] = field(repr=False, default_factory=list)

    def summary(self, step: int) -> dict:
        return {"step": step, "pass_at_1": self.pass_at_1, "ci95": self.ci95, "n": self.n, "n_correct": self.n_correct}


def _completion_text(ids: list[int], tokenizer) -> str:
    """Decode generated ids up to the first end-of-sequence, keeping tag tokens."""
    stop = {tokenizer.eos_token_id, tokenizer.pad_token_id} - {None}
    for i, t in enumerate(ids):
        if t in stop:
            ids = ids[:i]
            break
    return tokenizer.decode(ids, skip_special_tokens=False)


@torch.no_grad()
def greedy_completions(model, tokenizer, prompts: list[str], *, max_new_tokens: int = 512,
                       batch_size: int = 64, progress: bool = True, desc: str = "eval",
                       generation_backend: str = "hf", engine=None) -> list[str]:
    """Greedy completions for ``prompts``, batched with left padding.

    Prompts are batched by length (less padding); results come back in input order.
    ``generation_backend``: ``hf`` (``model.generate``), ``compiled`` (``saah_lib.rollout``,
    static shapes, LoRA merged) or ``auto`` (compiled on CUDA, hf elsewhere); ``vllm``
    evaluates like ``auto`` since evaluation runs on the trainer's own model.
    ``engine`` reuses a ``StaticRollout`` (and its compiled graph) across calls.
    """
    from saah_lib.rollout import StaticRollout, resolve_backend

    was_training = model.training
    model.eval()
    if tokenizer.pad_token_id is None:
        raise ValueError("the tokenizer needs a pad token for batched generation")
    device = next(model.parameters()).device
    backend = resolve_backend("auto" if generation_backend == "vllm" else generation_backend, device)
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    out: list[str | None] = [None] * len(prompts)
    batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    if backend == "compiled" and engine is None:
        engine = StaticRollout(max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id,
                               eos_token_ids=tokenizer.eos_token_id, compile=device.type == "cuda")
    try:
        for batch in tqdm(batches, desc=desc, disable=not progress, leave=False):
            texts = [prompts[i] for i in batch]
            if backend == "compiled":
                new_tokens = _static_greedy(model, tokenizer, texts, engine, batch_size)
            else:
                enc = tokenizer(texts, return_tensors="pt", padding=True,
                                padding_side="left", add_special_tokens=False).to(device)
                gen = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False,
                                     pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
                new_tokens = gen[:, enc["input_ids"].shape[1]:].tolist()
            for i, ids in zip(batch, new_tokens):
                out[i] = _completion_text(ids, tokenizer)
    finally:
        model.train(was_training)
    return out  # type: ignore[return-value]


def _static_greedy(model, tokenizer, texts: list[str], engine, batch_size: int) -> list[list[int]]:
    """One batch through the static engine; a short last batch is padded with repeats so the
    compiled decode step keeps its shape (rows are independent, the repeats are dropped)."""
    from saah_lib.rollout import SamplingSettings, merged_lora

    ids = tokenizer(texts, add_special_tokens=False)["input_ids"]
    n = len(ids)
    ids = ids + [ids[-1]] * (batch_size - n)
    with merged_lora(model):
        completions, _ = engine.generate(model, ids, SamplingSettings(do_sample=False))
    return completions[:n]


def score_completions(problems: list[Problem], completions: list[str]) -> EvalResult:
    records = []
    for problem, completion in zip(problems, completions, strict=True):
        extracted = extract_answer(completion)
        records.append({
            "id": problem.id, "question": problem.question, "gold": problem.answer,
            "completion": completion, "extracted": extracted,
            "correct": answers_match(extracted, problem.answer),
        })
    n_correct = sum(r["correct"] for r in records)
    n = len(records)
    p = n_correct / n if n else float("nan")
    return EvalResult(p, pass_at_1_ci(p, n), n, n_correct, records)


def evaluate_pass_at_1(model, tokenizer, problems: list[Problem], *, max_new_tokens: int = 512,
                       batch_size: int = 64, progress: bool = True, desc: str = "eval",
                       generation_backend: str = "hf", engine=None) -> EvalResult:
    prompts = [make_prompt(p.question, tokenizer) for p in problems]
    completions = greedy_completions(model, tokenizer, prompts, max_new_tokens=max_new_tokens,
                                     batch_size=batch_size, progress=progress, desc=desc,
                                     generation_backend=generation_backend, engine=engine)
    return score_completions(problems, completions)


def load_for_eval(model_path: str | Path, dtype: str = "float32", device: str | None = None):
    """A model folder or a LoRA adapter folder (``adapter_config.json``), with its tokenizer."""
    from saah_lib.trainer import load_model_and_tokenizer  # local import: trainer pulls in TRL

    path = Path(model_path)
    adapter_config = path / "adapter_config.json"
    if adapter_config.exists():
        from peft import PeftModel

        base = json.loads(adapter_config.read_text())["base_model_name_or_path"]
        model, tokenizer = load_model_and_tokenizer(base, dtype)
        model = PeftModel.from_pretrained(model, path)
    else:
        model, tokenizer = load_model_and_tokenizer(str(model_path), dtype)
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    return model.to(device), tokenizer


class PassAtOneCallback(TrainerCallback):
    """Evaluates at step 0, every ``eval_every`` steps and at the last step.

    Results go to the run log; a step already evaluated (a resumed run) is skipped.
    """

    def __init__(self, runlog, tokenizer, problems, *, eval_every: int, max_new_tokens: int,
                 batch_size: int, progress: bool = True, generation_backend: str = "hf"):
        self.runlog, self.tokenizer, self.problems = runlog, tokenizer, problems
        self.eval_every, self.max_new_tokens, self.batch_size = eval_every, max_new_tokens, batch_size
        self.progress = progress
        self.generation_backend = generation_backend
        self.engine = None  # the compiled backend's StaticRollout, kept so its graph is reused
        self.history: list[dict] = []

    def _evaluate(self, model, step: int) -> None:
        if step in self.runlog.evaluated_steps():
            return
        from saah_lib.rollout import StaticRollout, resolve_backend

        backend = self.generation_backend
        device = next(model.parameters()).device
        if self.engine is None and resolve_backend("auto" if backend == "vllm" else backend, device) == "compiled":
            self.engine = StaticRollout(max_new_tokens=self.max_new_tokens, eos_token_ids=self.tokenizer.eos_token_id,
                                        pad_token_id=self.tokenizer.pad_token_id, compile=device.type == "cuda")
        result = evaluate_pass_at_1(model, self.tokenizer, self.problems, max_new_tokens=self.max_new_tokens,
                                    batch_size=self.batch_size, progress=self.progress, desc=f"eval@{step}",
                                    generation_backend=backend, engine=self.engine)
        summary = result.summary(step)
        self.runlog.log_eval(summary, result.records)
        self.history.append(summary)
        print(f"step {step}: Pass@1 = {result.pass_at_1:.3f} ± {result.ci95:.3f} (n={result.n})", flush=True)

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        if not state.is_world_process_zero:
            return  # several processes: the main one evaluates and logs
        if state.global_step == 0:
            self._evaluate(model, 0)

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if not state.is_world_process_zero:
            return
        step = state.global_step
        if step % self.eval_every == 0 or step == state.max_steps:
            self._evaluate(model, step)


def run_baseline(model_path: str, problems: list[Problem], out_dir: Path, *, config: dict,
                 dtype: str = "float32", max_new_tokens: int = 512, batch_size: int = 64,
                 progress: bool = True) -> dict:
    """Evaluate an untrained model once, in the run layout (step 0), under ``out_dir``.

    ``config`` (model_label, profile, data info, ...) is stored beside the result.
    An existing result is returned as is, so a finished baseline is never recomputed.
    """
    from saah_lib.runlog import RunLog, provenance

    log = RunLog(out_dir)
    done = [r for r in log.evals() if r["step"] == 0]
    if done:
        return done[0]
    model, tokenizer = load_for_eval(model_path, dtype)
    log.write_config(config, provenance())
    result = evaluate_pass_at_1(model, tokenizer, problems, max_new_tokens=max_new_tokens,
                                batch_size=batch_size, progress=progress, desc="baseline")
    log.log_eval(result.summary(0), result.records)
    return result.summary(0)
