"""What a training run does besides training: its per-step log line, its greedy evaluations, its progress.

All are TRL callbacks; only the main process writes (several processes under ``accelerate launch`` share one run
folder).  When the decode step is compiled the log callback also keeps the run's compile health record
(``compile_health.json``) up to date. :func:`replace_progress_callbacks` swaps transformers' own progress
output, which prints every step's log dict (``PrinterCallback``, ``ProgressCallback.on_log``), for a bar and
short lines (:mod:`saah_lib.progress`).
"""

from __future__ import annotations

import time

from transformers import TrainerCallback
from transformers.trainer_callback import PrinterCallback, ProgressCallback

from saah_lib.models.backends import evaluation_backend
from saah_lib.models.evaluate import evaluate_pass_at_1
from saah_lib.models.rollout import build_engine
from saah_lib.progress import ProgressLines, bars_shown
from saah_lib.rundir.folder import RunDir
from saah_lib.rundir.layout import TRAIN_LOG_FROM_TRL


class TrainLogCallback(TrainerCallback):
    """Appends one line per optimiser step to train_log.jsonl (TRL logs every step).

    With a ``trainer`` whose backend is ``compiled`` it also rewrites the run's compile health
    record after every step and at the end (a separate file: the log lines keep their keys).
    """

    def __init__(self, run: RunDir, trainer=None):
        self.run, self.trainer = run, trainer
        self._step_started = None
        self.step_time = None
        self._first_step = 0

    def on_train_begin(self, args, state, control, **kwargs):
        self._first_step = state.global_step  # a resumed run starts a new health record here

    def on_train_end(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            self._write_compile_health()

    def _write_compile_health(self) -> None:
        health = getattr(self.trainer, "compile_health", None)
        if health is None or health.backend is None:
            return  # nothing was compiled (hf, vllm, or the static engine decoding eagerly on CPU)
        self.run.write_compile_health({"from_step": self._first_step, **health.record()})

    def on_step_begin(self, args, state, control, **kwargs):
        self._step_started = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        self.step_time = time.perf_counter() - self._step_started

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not logs or "reward" not in logs or not state.is_world_process_zero:
            return  # the end-of-training summary, or another rank
        record = {"step": state.global_step}
        record.update({ours: logs.get(theirs) for ours, theirs in TRAIN_LOG_FROM_TRL.items()})
        record["step_time"] = self.step_time
        self.run.log_step(record)
        self._write_compile_health()
        if self.trainer is not None and self.trainer.token_entropy_samples:
            samples = [{"step": state.global_step, **s} for s in self.trainer.token_entropy_samples]
            self.run.log_token_entropies(samples)
            self.trainer.token_entropy_samples.clear()


class PassAtOneCallback(TrainerCallback):
    """Evaluates at step 0, every ``eval_every`` steps and at the last step.

    Results go to the run log; a step already evaluated (a resumed run) is skipped.
    """

    def __init__(self, run: RunDir, tokenizer, problems, *, eval_every: int, max_new_tokens: int,
                 batch_size: int, progress: bool = True, generation_backend: str = "hf", trainer=None):
        self.run, self.tokenizer, self.problems = run, tokenizer, problems
        self.eval_every, self.max_new_tokens, self.batch_size = eval_every, max_new_tokens, batch_size
        self.progress = progress
        self.generation_backend = generation_backend
        self.trainer = trainer  # when given, evaluation uses its compile settings and health record
        self.engine = None  # the compiled backend's StaticRollout, kept so its graph is reused
        self.history: list[dict] = []

    def _evaluate(self, model, step: int) -> None:
        if step in self.run.evaluated_steps():
            return
        result = evaluate_pass_at_1(model, self.tokenizer, self.problems, max_new_tokens=self.max_new_tokens,
                                    batch_size=self.batch_size, progress=self.progress, desc=f"eval@{step}",
                                    generation_backend=self.generation_backend, engine=self._static_engine(model))
        summary = result.summary(step)
        self.run.log_eval(summary, result.records)
        self.history.append(summary)
        if self.progress:
            print(f"step {step}: Pass@1 = {result.pass_at_1:.3f} ± {result.ci95:.3f} (n={result.n})", flush=True)

    def _static_engine(self, model):
        """The compiled backend's engine, built on first use and kept (with its graphs); None for hf."""
        device = next(model.parameters()).device
        if self.engine is None and evaluation_backend(self.generation_backend) == "compiled":
            if hasattr(self.trainer, "evaluation_engine"):  # the rollout layer's compile settings and health
                self.engine = self.trainer.evaluation_engine(self.max_new_tokens)
            else:
                tok = self.tokenizer
                self.engine = build_engine(max_new_tokens=self.max_new_tokens, pad_token_id=tok.pad_token_id,
                                           eos_token_ids=tok.eos_token_id, device=device, name="evaluation")
        return self.engine

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


class StepBar(ProgressCallback):
    """transformers' training bar (``tqdm.auto``: a widget in Jupyter) without its per-step dict of logs."""

    def on_log(self, args, state, control, logs=None, **kwargs):
        pass  # ProgressCallback writes every log dict under the bar; ProgressLines says what matters


class ProgressLineCallback(TrainerCallback):
    """Short progress lines while training (:class:`saah_lib.progress.ProgressLines`), with the step's mean reward."""

    def __init__(self, run_id: str, progress: bool = True):
        self.run_id, self.progress = run_id, progress
        self.lines = None
        self.reward = None

    def _note(self) -> str:
        return "" if self.reward is None else f"reward {self.reward:.2f}"

    def on_train_begin(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            self.lines = ProgressLines(f"training {self.run_id}", state.max_steps, progress=self.progress)

    def on_log(self, args, state, control, logs=None, **kwargs):
        # after the step (on_step_end comes before the step's log, so its reward would be the last step's)
        if logs and "reward" in logs and self.lines is not None:
            self.reward = logs["reward"]
            self.lines.update(state.global_step, self._note())

    def on_train_end(self, args, state, control, **kwargs):
        if self.lines is not None:
            self.lines.finish(state.global_step, self._note())


def replace_progress_callbacks(trainer, run_id: str, progress: bool) -> None:
    """Take out transformers' printing callbacks; put in a bar (where it redraws in place) and progress lines.

    Only output changes: these callbacks compute nothing that training or its logs use.
    """
    for callback in list(trainer.callback_handler.callbacks):
        # NotebookProgressCallback (transformers' choice inside Jupyter) is matched by name: importing it needs IPython
        if isinstance(callback, (PrinterCallback, ProgressCallback)) or type(callback).__name__ == "NotebookProgressCallback":
            trainer.remove_callback(callback)
    if bars_shown(progress):
        trainer.add_callback(StepBar())
    trainer.add_callback(ProgressLineCallback(run_id, progress))
