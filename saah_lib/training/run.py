"""One training run, start to finish: ``run_training(make_config(...))``.

Reading order: check the config, the chosen backend's packages, the data, model and
results paths -> load data -> load model (and check what needs its vocabulary) -> lock
the run folder -> write config.json -> resume point (the newest intact checkpoint) ->
build trainer (TRL + our loss) -> train, logging every step and evaluating
every ``eval_every`` steps into ``<results>/runs/<run_id>/``.  Nothing is
written (not even the run folder) until the inputs have been checked and loaded.
The run folder is locked (:func:`saah_lib.rundir.lock.run_lock`) from the first write to the
end, so a second process training the same run id stops with an error naming the first.
:func:`baseline_for` evaluates a config's untrained model the same way, once.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import torch
from peft import LoraConfig
from transformers.integrations import get_available_reporting_integrations

from saah_lib.jsonio import remove_temp_files
from saah_lib.method.reward import TRL_REWARD_FUNCS
from saah_lib.models.backends import require_vllm
from saah_lib.models.evaluate import evaluate_pass_at_1
from saah_lib.models.loading import load_for_eval, load_model_and_tokenizer, resolve_model
from saah_lib.models.names import offline_hub_problem
from saah_lib.paths import in_repo, repo_relative
from saah_lib.progress import say
from saah_lib.rundir.checkpoints import resume_checkpoint
from saah_lib.rundir.folder import RunDir
from saah_lib.rundir.layout import baseline_dir
from saah_lib.rundir.lock import run_lock
from saah_lib.rundir.provenance import provenance
from saah_lib.tasks.gsm8k import check_gsm8k_dir, paper_split
from saah_lib.tasks.problems import Problem
from saah_lib.tasks.prompts import to_trl_dataset
from saah_lib.tasks.synthetic import synthetic_split
from saah_lib.training.callbacks import PassAtOneCallback, TrainLogCallback, replace_progress_callbacks
from saah_lib.training.config import SAAHConfig, check_vocabulary, field_error, report_integrations, validate
from saah_lib.training.distributed import batch_layout, is_main_process, world_size
from saah_lib.training.trainer import SAAHGRPOConfig, SAAHGRPOTrainer


def load_split(cfg: SAAHConfig):
    """The config's training and evaluation problems (a DataSplit with provenance info)."""
    if cfg.dataset == "gsm8k":
        return paper_split(cfg.data_dir, n_train=cfg.n_train, n_eval=cfg.n_eval, seed=cfg.data_seed)
    return synthetic_split(cfg.n_train, cfg.n_eval, seed=cfg.data_seed)


def check_inputs(cfg: SAAHConfig) -> None:
    """Fail fast, before anything loads or is written: the config's fields (it
    may have been changed since it was made, so they are checked again), the
    packages of the chosen generation backend, the GSM8K folder, a local model
    folder (or, offline, a cached hub model) and the results folder.  The tiny
    warm start is built on first use."""
    validate(cfg)
    if cfg.generation_backend == "vllm":
        require_vllm()
    problem = offline_hub_problem(cfg.model_name)
    if problem is not None:
        raise field_error("model_name", problem)
    if cfg.dataset == "gsm8k":
        check_gsm8k_dir(cfg.data_dir)
    check_results_dir(cfg.run_dir)
    check_report_to(cfg.report_to)


def check_results_dir(folder: Path, folder_field: str = "run_id") -> None:
    """A run or baseline ``folder`` can be made or written: no file stands where it or a folder above it
    should be, and the nearest existing folder on the way is writable.  The error names the config
    field at fault: ``folder_field`` for the folder itself, ``results_dir`` for anything above it."""
    for path in [folder, *folder.parents]:
        if path.exists() and not path.is_dir():
            name = folder_field if path == folder else "results_dir"
            raise field_error(name, f"{path} is a file, not a folder (on the way to {folder})")
        if path.is_dir():
            if not os.access(path, os.W_OK | os.X_OK):
                raise field_error("results_dir", f"cannot write into {path} (on the way to {folder})")
            return


def check_report_to(report_to: str) -> None:
    """Every integration in ``report_to`` is installed (transformers would fail only after config.json is written)."""
    missing = [n for n in report_integrations(report_to) if n != "all"
               and n not in get_available_reporting_integrations()]
    if missing:
        raise ValueError(f"config field 'report_to': {', '.join(missing)} is not installed (installed: "
                         f"{', '.join(get_available_reporting_integrations()) or 'none'}); e.g. pip install "
                         f"tensorboard, or report_to='none'")


def trl_kwargs(cfg: SAAHConfig, output_dir: Path, progress: bool) -> dict:
    """The config's settings in TRL's ``GRPOConfig`` vocabulary (shared with stock TRL in the benchmark)."""
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
        report_to=report_integrations(cfg.report_to),
        run_name=cfg.run_name or cfg.run_id,
        seed=cfg.seed,  # TRL also draws its prompt order from it (its data_seed is left unset)
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
    return LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
                      target_modules=list(cfg.lora_target_modules), task_type="CAUSAL_LM")


def baseline_for(cfg: SAAHConfig, name: str | None = None, progress: bool = True) -> dict:
    """Evaluate the config's untrained model on its evaluation split, once, under
    ``<results>/baselines/<name>/`` (default name: ``<profile>-zero-shot``)."""
    name = name or f"{cfg.profile}-zero-shot"
    check_inputs(cfg)
    split = load_split(cfg)
    config = {"name": name, "profile": cfg.profile, "model_label": cfg.model_label, "model_name": cfg.model_name,
              "method": "base", "n_eval": cfg.n_eval, "eval_max_new_tokens": cfg.eval_max_new_tokens,
              "data": split.info}
    out_dir = baseline_dir(in_repo(cfg.results_dir), name)
    check_results_dir(out_dir, folder_field="results_dir")
    return run_baseline(resolve_model(cfg.model_name, progress), split.eval, out_dir, config=config,
                        dtype=cfg.dtype, max_new_tokens=cfg.eval_max_new_tokens, batch_size=cfg.eval_batch_size,
                        progress=progress, generation_backend=cfg.generation_backend)


def run_baseline(model_path: str, problems: list[Problem], out_dir: Path, *, config: dict,
                 dtype: str = "float32", max_new_tokens: int = 512, batch_size: int = 64,
                 progress: bool = True, generation_backend: str = "hf") -> dict:
    """Evaluate an untrained model once, in the run layout (step 0), under ``out_dir``.

    ``generation_backend`` is the config's, so that the baseline and the trained runs' evaluations
    decode on the same backend (``auto``: compiled on CUDA, hf elsewhere).

    ``config`` (model_label, profile, data info, ...) is stored beside the result.
    An existing result is returned as is, so a finished baseline is never recomputed.
    """
    log = RunDir(out_dir)
    done = [r for r in log.evals() if r["step"] == 0]
    if done:
        return done[0]
    model, tokenizer = load_for_eval(model_path, dtype)
    with writer_of(log):
        done = [r for r in log.evals() if r["step"] == 0]  # written meanwhile by the previous holder
        if done:
            return done[0]
        log.write_config(config, provenance())
        result = evaluate_pass_at_1(model, tokenizer, problems, max_new_tokens=max_new_tokens,
                                    batch_size=batch_size, progress=progress, desc="baseline",
                                    generation_backend=generation_backend)
        log.log_eval(result.summary(0), result.records)
    return result.summary(0)


@contextlib.contextmanager
def writer_of(run: RunDir):
    """Be the one writer of ``run``'s folder: hold its lock (the main process only, as only it writes its
    logs; the others of an ``accelerate launch`` share the folder), and remove the temporary files that
    an interrupted atomic write left behind."""
    lock = run_lock(run.dir) if is_main_process() else contextlib.nullcontext()
    with lock:
        if is_main_process():
            for folder in (run.dir, run.samples_dir):
                for stale in remove_temp_files(folder):
                    print(f"removed {stale}, left by an interrupted write")
        yield run


def run_training(cfg: SAAHConfig, callbacks=(), progress: bool = True) -> Path:
    """Train (or resume, or skip if complete) the run described by ``cfg``; returns its folder."""
    check_inputs(cfg)
    say(f"run {cfg.run_id}: {cfg.method}, alpha {cfg.alpha:g}, {cfg.steps} steps, seed {cfg.seed}, "
        f"into {repo_relative(cfg.run_dir)}", progress)
    run = RunDir(cfg.run_dir)
    split = load_split(cfg)
    model_path = resolve_model(cfg.model_name, progress)
    model, tokenizer = load_model_and_tokenizer(model_path, cfg.dtype)
    check_vocabulary(cfg, model.get_output_embeddings().weight.size(0))
    resolved = repo_relative(model_path) if Path(model_path).exists() else model_path
    with writer_of(run):
        run.write_config(cfg.run_settings(), {"resolved_model": resolved, **provenance(), "data": split.info})
        if run.is_complete(cfg.steps):
            print(f"run {cfg.run_id} is already complete ({cfg.steps} steps): nothing to do")
            return run.dir
        _train(cfg, run, model, tokenizer, split, callbacks, progress)
    return run.dir


def _train(cfg: SAAHConfig, run: RunDir, model, tokenizer, split, callbacks, progress: bool) -> None:
    """Resume from the newest intact checkpoint (or start) and train to ``cfg.steps``."""
    checkpoint = resume_checkpoint(run, world_size())
    resume_step = int(checkpoint.name.split("-")[1]) if checkpoint else 0
    run.truncate_after(resume_step)  # anything logged after the checkpoint is redone
    if checkpoint:
        print(f"resuming {cfg.run_id} from step {resume_step}")

    trainer = SAAHGRPOTrainer(
        model=model,
        reward_funcs=list(TRL_REWARD_FUNCS),
        args=grpo_args(cfg, run.checkpoints_dir, progress),
        train_dataset=to_trl_dataset(split.train, tokenizer),
        processing_class=tokenizer,
        peft_config=lora_config(cfg),
    )
    replace_progress_callbacks(trainer, cfg.run_id, progress)
    trainer.add_callback(TrainLogCallback(run, trainer))
    trainer.add_callback(PassAtOneCallback(
        run, tokenizer, split.eval, eval_every=cfg.eval_every, max_new_tokens=cfg.eval_max_new_tokens,
        batch_size=cfg.eval_batch_size, progress=progress, generation_backend=cfg.generation_backend,
        trainer=trainer,  # evaluation shares the trainer's compile settings and health record
    ))
    for cb in callbacks:
        trainer.add_callback(cb)
    trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
