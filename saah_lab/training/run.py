"""One training run, start to finish: ``run_training(make_config(...))``.

Check the inputs -> load data and model -> lock the run folder (a second process training the same run id stops
with an error naming the first) -> stop if complete -> resume from the newest intact checkpoint -> write config.json
with this segment's provenance -> train, logging every step and evaluating every ``eval_every`` steps into
``<results>/runs/<run_id>/``. Nothing is written until the inputs are checked and loaded. :func:`baseline_for`
evaluates a config's untrained model the same way, once.
"""

from __future__ import annotations

import contextlib
import copy
import os
from pathlib import Path

from peft import LoraConfig
from transformers.integrations import get_available_reporting_integrations

from saah_lab.rundir.checkpoints import (
    ADAPTER_FIELDS,
    IDENTITY_FIELDS,
    MODEL_SHAPE_FIELDS,
    check_checkpoint_identity,
    resume_checkpoint,
)
from saah_lab.rundir.lock import run_lock
from saah_lab.rundir.provenance import SEGMENTS_KEY, provenance, with_segment
from saah_lab.training.study_trainer import StudyTrainer
from saah_lib.jsonio import read_json, remove_temp_files
from saah_lib.method.reward import TRL_REWARD_FUNCS
from saah_lib.models.backends import require_vllm
from saah_lib.models.compile_record import recorded_fallback
from saah_lib.models.evaluate import evaluate_pass_at_1
from saah_lib.models.loading import load_for_eval, load_model_and_tokenizer, resolve_model
from saah_lib.models.names import offline_hub_problem
from saah_lib.paths import in_repo, repo_relative
from saah_lib.progress import quiet_libraries, say
from saah_lib.rundir.folder import RunDir, changes_text
from saah_lib.rundir.layout import baseline_dir
from saah_lib.tasks.gsm8k import check_gsm8k_dir, paper_split
from saah_lib.tasks.problems import Problem
from saah_lib.tasks.prompts import to_trl_dataset
from saah_lib.tasks.synthetic import synthetic_split
from saah_lib.training.callbacks import PassAtOneCallback, TrainLogCallback, replace_progress_callbacks
from saah_lib.training.config import RunConfig
from saah_lib.training.distributed import is_main_process, world_size
from saah_lib.training.grpo_config import SAAHGRPOConfig, field_error, report_integrations


def load_split(cfg: RunConfig):
    """The config's training and evaluation problems (a DataSplit with provenance info)."""
    if cfg.dataset == "gsm8k":
        return paper_split(cfg.data_dir, n_train=cfg.n_train, n_eval=cfg.n_eval, seed=cfg.data_seed)
    return synthetic_split(cfg.n_train, cfg.n_eval, seed=cfg.data_seed)


def check_inputs(cfg: RunConfig) -> None:
    """Fail fast, before anything loads or is written: what the fields name (the backend's packages, the GSM8K
    folder, a model, the results folder, the reporting integrations); the fields were checked by make_config."""
    if cfg.trainer.generation_backend == "vllm":
        require_vllm()
    problem = offline_hub_problem(cfg.model_name)
    if problem is not None:
        raise field_error("model_name", problem)
    if cfg.dataset == "gsm8k":
        check_gsm8k_dir(cfg.data_dir)
    check_results_dir(cfg.run_dir)
    check_report_to(cfg.trainer.report_to)


def check_results_dir(folder: Path, folder_field: str = "run_id") -> None:
    """No file stands where ``folder`` or a folder above it should be, and the nearest existing folder is writable;
    else an error naming ``folder_field`` (the folder itself) or ``results_dir`` (anything above it)."""
    for path in [folder, *folder.parents]:
        if path.exists() and not path.is_dir():
            name = folder_field if path == folder else "results_dir"
            raise field_error(name, f"{path} is a file, not a folder (on the way to {folder})")
        if path.is_dir():
            if not os.access(path, os.W_OK | os.X_OK):
                raise field_error("results_dir", f"cannot write into {path} (on the way to {folder})")
            return


def check_report_to(report_to) -> None:
    """Every integration in ``report_to`` is installed (transformers would fail only after config.json is written)."""
    missing = [n for n in report_integrations(report_to) if n != "all"
               and n not in get_available_reporting_integrations()]
    if missing:
        raise ValueError(f"config field 'report_to': {', '.join(missing)} is not installed (installed: "
                         f"{', '.join(get_available_reporting_integrations()) or 'none'}); e.g. pip install "
                         f"tensorboard, or report_to='none'")


def trainer_args(cfg: RunConfig, progress: bool) -> SAAHGRPOConfig:
    """The config TRL gets: the run's own, with progress bars on or off for this call."""
    args = copy.copy(cfg.trainer)
    args.disable_tqdm = not progress
    args.output_dir = str(RunDir(cfg.run_dir).checkpoints_dir)
    return args


#: The fields of SAAHGRPOConfig that stock TRL's GRPOConfig has too and that a run sets (the rest are TRL's defaults).
_STOCK_FIELDS = ("output_dir", "max_steps", "seed", "learning_rate", "lr_scheduler_type", "warmup_steps",
                 "weight_decay", "max_grad_norm", "beta", "epsilon", "num_generations", "per_device_train_batch_size",
                 "gradient_accumulation_steps", "max_completion_length", "temperature", "save_strategy", "save_steps",
                 "save_total_limit", "logging_steps", "report_to", "run_name", "bf16", "fp16", "use_cpu",
                 "activation_checkpointing", "disable_tqdm", "log_completions", "loss_type", "use_bias_correction_kl",
                 "use_vllm", "vllm_mode", "vllm_server_base_url", "vllm_gpu_memory_utilization")


def stock_grpo_kwargs(cfg: RunConfig, output_dir: Path, progress: bool) -> dict:
    """The run's trainer settings as arguments of stock TRL's ``GRPOConfig`` (the benchmark's baseline)."""
    args = trainer_args(cfg, progress)
    kwargs = {name: getattr(getattr(args, name), "value", getattr(args, name)) for name in _STOCK_FIELDS}  # no enums
    return {**kwargs, "output_dir": str(output_dir)}


def lora_config(cfg: RunConfig):
    if not cfg.use_lora:
        return None
    return LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
                      target_modules=list(cfg.lora_target_modules), task_type="CAUSAL_LM")


def baseline_for(cfg: RunConfig, name: str | None = None, progress: bool = True) -> dict:
    """Evaluate the config's untrained model on its evaluation split, once, under
    ``<results>/baselines/<name>/`` (default name: ``<profile>-zero-shot``)."""
    name = name or f"{cfg.profile}-zero-shot"
    check_inputs(cfg)
    quiet_libraries()
    split = load_split(cfg)
    config = {"name": name, "profile": cfg.profile, "model_label": cfg.model_label, "model_name": cfg.model_name,
              "method": "base", "n_eval": cfg.n_eval, "eval_max_new_tokens": cfg.eval_max_new_tokens,
              "data": split.info}
    out_dir = baseline_dir(in_repo(cfg.results_dir), name)
    check_results_dir(out_dir, folder_field="results_dir")
    return run_baseline(resolve_model(cfg.model_name, progress), split.eval, out_dir, config=config,
                        dtype=cfg.dtype, max_new_tokens=cfg.eval_max_new_tokens, batch_size=cfg.eval_batch_size,
                        progress=progress, generation_backend=cfg.trainer.generation_backend)


def run_baseline(model_path: str, problems: list[Problem], out_dir: Path, *, config: dict,
                 dtype: str = "float32", max_new_tokens: int = 512, batch_size: int = 64,
                 progress: bool = True, generation_backend: str = "hf") -> dict:
    """Evaluate an untrained model once, in the run layout (step 0), under ``out_dir``, with ``config`` beside it;
    decoded on the trained runs' ``generation_backend``. An existing result is returned as is, never recomputed."""
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
    """Be the one writer of ``run``'s folder (the main process: only it writes logs) and remove the temporary files
    an interrupted atomic write left."""
    lock = run_lock(run.dir) if is_main_process() else contextlib.nullcontext()
    with lock:
        if is_main_process():
            for folder in (run.dir, run.samples_dir):
                for stale in remove_temp_files(folder):
                    print(f"removed {stale}, left by an interrupted write")
        yield run


def run_training(cfg: RunConfig, callbacks=(), progress: bool = True) -> Path:
    """Train (or resume, or skip if complete: left byte for byte, its settings still compared) the run described
    by ``cfg``; returns its folder. config.json gains this segment's provenance."""
    check_inputs(cfg)
    quiet_libraries()  # no library bars or known deprecation warnings between our progress lines
    steps = cfg.trainer.max_steps
    say(f"run {cfg.run_id}: {cfg.trainer.method}, alpha {cfg.trainer.alpha:g}, {steps} steps, "
        f"seed {cfg.trainer.seed}, into {repo_relative(cfg.run_dir)}", progress)
    run = RunDir(cfg.run_dir)
    split = load_split(cfg)
    model_path = resolve_model(cfg.model_name, progress)
    model, tokenizer = load_model_and_tokenizer(model_path, cfg.dtype)
    cfg.trainer.check_vocabulary(model.get_output_embeddings().weight.size(0))  # the trainer's check, before writing
    resolved = repo_relative(model_path) if Path(model_path).exists() else model_path
    with writer_of(run):
        # the folder must be this run's before anything in it is moved or written
        run.check_identified()
        run.check_settings(cfg.run_settings())
        if run.is_complete(steps):
            print(f"run {cfg.run_id} is already complete ({steps} steps): nothing to do")
            return run.dir
        checkpoint = resume_checkpoint(run, world_size(), check=lambda found: check_checkpoint_identity(
            run, found, checkpoint_identity(cfg, model.config)))
        resume_step = int(checkpoint.name.split("-")[1]) if checkpoint else 0
        segment = with_segment(run.read_config(), provenance(), resume_step, steps)
        settings = segment_settings(run, cfg, segment, resume_step)
        run.write_config(settings, {"resolved_model": resolved, **segment, "data": split.info})
        _train(cfg, run, model, tokenizer, split, callbacks, progress, checkpoint, resume_step)
    return run.dir


def segment_settings(run: RunDir, cfg: RunConfig, segment: dict, resume_step: int) -> dict:
    """config.json's settings once this segment starts: a resume may change some (RunDir.RESUMABLE_DIFFERENCES);
    config.json keeps the recorded values, and this segment's entry records the changes, as stdout says."""
    settings = cfg.run_settings()
    changed = run.resumed_changes(settings)
    if changed:
        segment[SEGMENTS_KEY][-1]["settings"] = {name: given for name, (_, given) in changed.items()}
        settings.update({name: recorded for name, (recorded, _) in changed.items()})
        print(f"run {cfg.run_id}: the steps from {resume_step} on run with {changes_text(changed)} (recorded -> "
              f"now); config.json keeps the recorded values and lists these under this segment's settings")
    return settings


def checkpoint_identity(cfg: RunConfig, model_config) -> dict[str, dict]:
    """What a checkpoint of this run records, by file: the trainer fields that shape training, the steps, and the
    model's shape (full fine-tuning) or the adapter's settings (LoRA)."""
    trainer = {name: getattr(getattr(cfg.trainer, name), "value", getattr(cfg.trainer, name))
               for name in IDENTITY_FIELDS}
    expected = {"training_args.bin": trainer, "trainer_state.json": {"max_steps": cfg.trainer.max_steps}}
    if cfg.use_lora:
        lora = {"r": cfg.lora_r, "lora_alpha": cfg.lora_alpha, "target_modules": sorted(cfg.lora_target_modules)}
        expected["adapter_config.json"] = {name: lora[name] for name in ADAPTER_FIELDS}
    else:
        expected["config.json"] = {name: getattr(model_config, name) for name in MODEL_SHAPE_FIELDS
                                   if hasattr(model_config, name)}
    return expected


def _train(cfg: RunConfig, run: RunDir, model, tokenizer, split, callbacks, progress: bool,
           checkpoint: Path | None, resume_step: int) -> None:
    """Resume from ``checkpoint`` (or start) and train to ``max_steps``."""
    run.truncate_after(resume_step)  # anything logged after the checkpoint is redone
    if checkpoint:
        print(f"resuming {cfg.run_id} from step {resume_step}")
    trainer = StudyTrainer(
        model=model,
        reward_funcs=list(TRL_REWARD_FUNCS),
        args=trainer_args(cfg, progress),
        train_dataset=to_trl_dataset(split.train, tokenizer),
        processing_class=tokenizer,
        peft_config=lora_config(cfg),
    )
    replace_progress_callbacks(trainer, cfg.run_id, progress)
    trainer.add_callback(TrainLogCallback(run, trainer))
    trainer.add_callback(PassAtOneCallback(
        run, tokenizer, split.eval, eval_every=cfg.eval_every, max_new_tokens=cfg.eval_max_new_tokens,
        batch_size=cfg.eval_batch_size, progress=progress, generation_backend=cfg.trainer.generation_backend,
        trainer=trainer,  # evaluation shares the trainer's compile settings and health record
    ))
    for callback in callbacks:
        trainer.add_callback(callback)
    trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)


def run_summary(run_dir: Path, wall_s: float | None = None) -> str:
    """The lines that end a run: final and peak Pass@1, the untrained model's (step 0), time, where the logs are."""
    run = RunDir(run_dir)
    evals = run.evals()
    lines = [f"run {run.dir.name}"]
    if evals:
        final, peak = evals[-1], max(evals, key=lambda r: r["pass_at_1"])
        lines.append(f"  Pass@1 final {final['pass_at_1']:.3f} (step {final['step']}), "
                     f"peak {peak['pass_at_1']:.3f} (step {peak['step']})")
        start = [r for r in evals if r["step"] == 0]
        lines.append(f"  baseline (step 0) {start[0]['pass_at_1']:.3f}" if start else "  baseline: not evaluated")
    else:
        lines.append("  no evaluation logged")
    fallback = recorded_fallback(read_json(run.compile_health_path, default=None))
    if fallback:
        lines.append(f"  FALLBACK: {fallback}")
    if wall_s is not None:
        lines.append(f"  wall time {wall_s / 60:.1f} min")
    lines.append(f"  logs in {repo_relative(run.dir)} (eval.jsonl, train_log.jsonl, eval_samples/)")
    return "\n".join(lines)
