"""One training run, start to finish: ``run_training(make_config(...))``.

Reading order: check the config, data and model paths -> load data -> load
model -> write config.json -> resume point (the newest intact checkpoint) ->
build trainer (TRL + our loss) -> train, logging every step and evaluating
every ``eval_every`` steps into ``<results>/runs/<run_id>/``.  Nothing is
written (not even the run folder) until the inputs have been found and loaded.
"""

from __future__ import annotations

import time
from pathlib import Path

from transformers import TrainerCallback

from saah_lib.config import REPO_ROOT, TINY_MODEL, TINY_MODEL_DIR, SAAHConfig, model_location, repo_relative, validate
from saah_lib.evaluate import PassAtOneCallback
from saah_lib.reward import TRL_REWARD_FUNCS
from saah_lib.runlog import TRAIN_LOG_FROM_TRL, RunLog, provenance
from saah_lib.trainer import SAAHGRPOConfig, SAAHGRPOTrainer, load_model_and_tokenizer

class TrainLogCallback(TrainerCallback):
    """Appends one line per optimiser step to train_log.jsonl (TRL logs every step)."""

    def __init__(self, runlog: RunLog, trainer: SAAHGRPOTrainer | None = None):
        self.runlog, self.trainer = runlog, trainer
        self._step_started = None
        self.step_time = None

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
        self.runlog.log_step(record)
        if self.trainer is not None and self.trainer.token_entropy_samples:
            samples = [{"step": state.global_step, **s} for s in self.trainer.token_entropy_samples]
            self.runlog.log_token_entropies(samples)
            self.trainer.token_entropy_samples.clear()


def load_split(cfg: SAAHConfig):
    """The config's training and evaluation problems (a DataSplit with provenance info)."""
    if cfg.dataset == "gsm8k":
        from saah_lib.data import paper_split

        return paper_split(cfg.data_dir, n_train=cfg.n_train, n_eval=cfg.n_eval, seed=cfg.data_seed)
    from saah_lib.synthetic import synthetic_split

    return synthetic_split(cfg.n_train, cfg.n_eval, seed=cfg.data_seed)


def check_inputs(cfg: SAAHConfig) -> None:
    """Fail fast, before anything loads or is written: the config's fields (it
    may have been changed since it was made), the GSM8K folder and a local
    model folder.  The tiny warm start is exempt: it is built on first use."""
    validate(cfg)
    if cfg.dataset == "gsm8k":
        from saah_lib.data import check_gsm8k_dir

        check_gsm8k_dir(cfg.data_dir)
    folder = Path(model_location(cfg.model_name))
    if cfg.model_name != TINY_MODEL and folder.is_dir():
        if not any((folder / name).is_file() for name in ("config.json", "adapter_config.json")):
            raise FileNotFoundError(
                f"config field 'model_name': folder {cfg.model_name!r} holds no model (no config.json)"
            )


def resolve_model(cfg: SAAHConfig, progress: bool = True) -> str:
    """The model folder (absolute) or hub id to load; the tiny warm start is built on first use."""
    if cfg.model_name == TINY_MODEL:
        from saah_lib.tiny_model import build_warm_start

        return str(build_warm_start(TINY_MODEL_DIR, progress=progress))
    return model_location(cfg.model_name)


def trl_kwargs(cfg: SAAHConfig, output_dir: Path, progress: bool) -> dict:
    """The config's settings in TRL's ``GRPOConfig`` vocabulary (shared with stock TRL in the benchmark)."""
    import torch

    from saah_lib.distributed import batch_layout, world_size

    on_gpu = torch.cuda.is_available()
    # one process: the config's own split; N processes (accelerate launch): the same completions per step
    layout = batch_layout(cfg.completions_per_step, cfg.num_generations, cfg.gradient_accumulation_steps,
                          world_size())
    return dict(
        output_dir=str(output_dir),
        beta=cfg.beta,
        epsilon=cfg.epsilon,
        loss_type="bnpo",
        use_bias_correction_kl=False,
        learning_rate=cfg.learning_rate,
        lr_scheduler_type=cfg.lr_scheduler,
        warmup_steps=cfg.warmup_steps,
        weight_decay=cfg.weight_decay,
        max_grad_norm=cfg.max_grad_norm,
        per_device_train_batch_size=layout.per_device_batch_size,
        gradient_accumulation_steps=layout.gradient_accumulation_steps,
        num_generations=cfg.num_generations,
        max_completion_length=cfg.max_completion_length,
        temperature=cfg.temperature,
        max_steps=cfg.steps,
        save_strategy="steps",
        save_steps=cfg.save_every,
        save_total_limit=cfg.keep_checkpoints,
        logging_steps=1,
        report_to="none",
        seed=cfg.seed,
        data_seed=cfg.seed,
        bf16=cfg.dtype == "bfloat16" and on_gpu,
        fp16=cfg.dtype == "float16" and on_gpu,
        activation_checkpointing=cfg.gradient_checkpointing,
        disable_tqdm=not progress,
        log_completions=False,
        use_cpu=not on_gpu,
        # TRL's own vLLM switch (generation_backend="vllm"); the compiled backend is ours (grpo_args)
        use_vllm=cfg.generation_backend == "vllm",
        vllm_mode=cfg.vllm_mode,
        vllm_server_base_url=cfg.vllm_server_base_url,
        vllm_gpu_memory_utilization=cfg.vllm_gpu_memory_utilization,
    )


def grpo_args(cfg: SAAHConfig, output_dir: Path, progress: bool, **overrides) -> SAAHGRPOConfig:
    return SAAHGRPOConfig(
        method=cfg.method,
        alpha=cfg.alpha,
        entropy_top_k=cfg.entropy_top_k,
        reward_std_threshold=cfg.reward_std_threshold,
        log_token_entropies=cfg.log_token_entropies,
        generation_backend=cfg.generation_backend,
        **{**trl_kwargs(cfg, output_dir, progress), **overrides},
    )


def lora_config(cfg: SAAHConfig):
    if not cfg.use_lora:
        return None
    from peft import LoraConfig

    return LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
                      target_modules=list(cfg.lora_target_modules), task_type="CAUSAL_LM")


def baseline_for(cfg: SAAHConfig, name: str | None = None, progress: bool = True) -> dict:
    """Evaluate the config's untrained model on its evaluation split, once, under
    ``<results>/baselines/<name>/`` (default name: ``<profile>-zero-shot``)."""
    from saah_lib.evaluate import run_baseline

    name = name or f"{cfg.profile}-zero-shot"
    check_inputs(cfg)
    split = load_split(cfg)
    config = {"name": name, "profile": cfg.profile, "model_label": cfg.model_label, "model_name": cfg.model_name,
              "method": "base", "n_eval": cfg.n_eval, "eval_max_new_tokens": cfg.eval_max_new_tokens,
              "data": split.info}
    return run_baseline(resolve_model(cfg, progress), split.eval, Path(cfg.results_dir) / "baselines" / name,
                        config=config, dtype=cfg.dtype, max_new_tokens=cfg.eval_max_new_tokens,
                        batch_size=cfg.eval_batch_size, progress=progress)


def resume_checkpoint(runlog: RunLog) -> Path | None:
    """The newest intact checkpoint; newer damaged ones are set aside, never deleted.

    A damaged checkpoint (a file that does not load, see
    ``runlog.checkpoint_problem``) is moved to ``checkpoints/damaged/`` with a
    message naming it, and the run resumes from the previous intact one, as
    it would after a crash just before the damaged save.

    With no intact checkpoint left, what happens depends on the damage.  If
    every folder is an interrupted save (no ``trainer_state.json``, which the
    trainer writes last), the run starts over from step 0, as it always has
    after a crash during its first save.  If a finished save was damaged
    later, starting over would throw away the whole run's training, so it is
    an error naming the folders, and nothing is changed: they may be
    repairable, or the user moves them away to start over.
    """
    checkpoint, damaged = runlog.resume_point()
    finished = [folder for folder in damaged if (folder / "trainer_state.json").is_file()]
    if checkpoint is None and finished:
        details = "; ".join(f"{folder}: {problem}" for folder, problem in damaged.items())
        raise RuntimeError(
            f"run {runlog.dir.name!r} cannot resume: no intact checkpoint ({details}). Nothing was changed. "
            f"Restore or repair these checkpoints, or move them out of {runlog.checkpoints_dir} "
            "to train the run again from step 0."
        )
    for folder, problem in damaged.items():
        moved = runlog.set_aside(folder)
        fallback = checkpoint.name if checkpoint else "the start (no intact checkpoint is left)"
        print(f"checkpoint {folder} is damaged: {problem}. It was moved to {moved} (nothing deleted) "
              f"and the run resumes from {fallback}.")
    return checkpoint


def run_training(cfg: SAAHConfig, callbacks=(), progress: bool = True) -> Path:
    """Train (or resume, or skip if complete) the run described by ``cfg``; returns its folder."""
    check_inputs(cfg)
    runlog = RunLog(cfg.run_dir)
    split = load_split(cfg)
    model_path = resolve_model(cfg, progress)
    model, tokenizer = load_model_and_tokenizer(model_path, cfg.dtype)
    resolved = repo_relative(model_path) if Path(model_path).exists() else model_path
    runlog.write_config(cfg.run_settings(), {"resolved_model": resolved, **provenance(REPO_ROOT), "data": split.info})
    if runlog.is_complete(cfg.steps):
        print(f"run {cfg.run_id} is already complete ({cfg.steps} steps): nothing to do")
        return runlog.dir

    checkpoint = resume_checkpoint(runlog)
    resume_step = int(checkpoint.name.split("-")[1]) if checkpoint else 0
    runlog.truncate_after(resume_step)  # anything logged after the checkpoint is redone
    if checkpoint:
        print(f"resuming {cfg.run_id} from step {resume_step}")

    from saah_lib.data import to_trl_dataset

    trainer = SAAHGRPOTrainer(
        model=model,
        reward_funcs=list(TRL_REWARD_FUNCS),
        args=grpo_args(cfg, runlog.checkpoints_dir, progress),
        train_dataset=to_trl_dataset(split.train, tokenizer),
        processing_class=tokenizer,
        peft_config=lora_config(cfg),
    )
    trainer.add_callback(TrainLogCallback(runlog, trainer))
    trainer.add_callback(PassAtOneCallback(
        runlog, tokenizer, split.eval, eval_every=cfg.eval_every, max_new_tokens=cfg.eval_max_new_tokens,
        batch_size=cfg.eval_batch_size, progress=progress, generation_backend=cfg.generation_backend,
    ))
    for cb in callbacks:
        trainer.add_callback(cb)
    trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
    return runlog.dir
