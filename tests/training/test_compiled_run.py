"""A whole training run with the compiled rollout backend: LoRA, gradient checkpointing, evaluations.

TRL switches gradient checkpointing off for every generation and back on afterwards, which (for a
PEFT-wrapped model) leaves one more forward hook on the input embeddings each time. A compiled decode
step that guards on the model's hooks then recompiles at every step until dynamo's recompile limit,
after which it silently runs uncompiled. These tests run long enough to see that.
"""

import contextlib
import json
import warnings
from collections import Counter

import pytest
import torch
import torch._dynamo
from peft import LoraConfig
from torch._dynamo.utils import counters

import saah_lib.models.evaluate as evaluate
from saah_lab.training.study_trainer import StudyTrainer
from saah_lib.jsonio import read_jsonl
from saah_lib.method.reward import TRL_REWARD_FUNCS
from saah_lib.models.loading import load_model_and_tokenizer
from saah_lib.models.rollout import reserved_capacity
from saah_lib.rundir.folder import RunDir
from saah_lib.rundir.layout import TRAIN_LOG_KEYS
from saah_lib.tasks.prompts import to_trl_dataset
from saah_lib.tasks.synthetic import generate_problems
from saah_lib.training.callbacks import PassAtOneCallback, TrainLogCallback
from saah_lib.training.config import LORA_TARGETS
from saah_lib.training.trainer import SAAHGRPOConfig

#: One entry per graph compiled through the counting backend: the shapes of the graph's tensor inputs.
COMPILED: list[tuple] = []


@torch._dynamo.register_backend(name="saah_test_counting_eager")
def counting_eager(gm, example_inputs):
    COMPILED.append(tuple(tuple(x.shape) for x in example_inputs if isinstance(x, torch.Tensor)))
    return gm.forward


def lora_checkpointed_trainer(model_dir, tmp_path, steps, backend="saah_test_counting_eager"):
    model, tok = load_model_and_tokenizer(str(model_dir))
    lora = LoraConfig(r=4, lora_alpha=8, lora_dropout=0.05, target_modules=list(LORA_TARGETS), task_type="CAUSAL_LM")
    args = SAAHGRPOConfig(
        output_dir=str(tmp_path / "out"), per_device_train_batch_size=4, num_generations=4, max_completion_length=20,
        report_to="none", use_cpu=True, bf16=False, logging_steps=1, max_steps=steps, seed=0, beta=0.0,
        save_strategy="no", disable_tqdm=True, gradient_checkpointing=True,
        generation_backend="compiled", rollout_compile=True, rollout_compile_backend=backend,
    )
    trainer = StudyTrainer(model=model, reward_funcs=list(TRL_REWARD_FUNCS), args=args,
                              train_dataset=to_trl_dataset(generate_problems(64, seed=0), tok), processing_class=tok,
                              peft_config=lora)
    return trainer, tok


@pytest.mark.slow
def test_twelve_steps_and_three_evaluations_compile_one_graph_per_engine_and_free_their_caches(tiny_random_model_dir,
                                                                                             tmp_path):
    torch._dynamo.reset()
    COMPILED.clear()
    counters.clear()
    trainer, tok = lora_checkpointed_trainer(tiny_random_model_dir, tmp_path, steps=12)
    run = RunDir(tmp_path / "run")
    # evaluation batches of 3 against rollout batches of 4: greedy and sampled steps are different graphs,
    # and distinct shapes keep them apart in COMPILED
    evaluation = PassAtOneCallback(run, tok, generate_problems(6, seed=2), eval_every=6, max_new_tokens=12,
                                   batch_size=3, progress=False, generation_backend="compiled", trainer=trainer)
    trainer.add_callback(evaluation)
    trainer.add_callback(TrainLogCallback(run, trainer))
    trainer.train()

    assert trainer.state.global_step == 12 and [e["step"] for e in run.evals()] == [0, 6, 12]
    shapes = trainer.rollout_engine().compiled_steps_seen | evaluation.engine.compiled_steps_seen
    per_graph = Counter(COMPILED)
    assert sum(counters["graph_break"].values()) == 0
    assert max(per_graph.values()) == 1, f"a shape was compiled again: {per_graph}"
    assert len(per_graph) == len(shapes) == 2  # one graph per engine (one batch size each), no partial graphs
    # the rollout cache was sized before the first step for the longest training prompt, as TRL tokenises it
    longest = max(len(tok(p)["input_ids"]) for p in trainer.train_dataset["prompt"])
    assert trainer.rollout_engine().prompt_capacity == reserved_capacity(longest)
    # nothing is held once training and each evaluation ended; the graphs were reused after each release
    assert trainer.rollout_engine().held_bytes() == 0 and evaluation.engine.held_bytes() == 0

    # what the run recorded about it: the same counts, in a file of its own (the log lines keep their keys)
    assert all(list(line) == list(TRAIN_LOG_KEYS) for line in run.train_log()) and len(run.train_log()) == 12
    (record,) = json.loads(run.compile_health_path.read_text())["processes"]
    assert record["from_step"] == 0 and record["backend"] == "saah_test_counting_eager"
    assert sorted((g["engine"], g["batch"]) for g in record["graphs"]) == sorted(
        [("rollout", 4), ("evaluation", 3)])
    assert record["compiled_graphs"] == len(per_graph)
    assert record["recompiles"] == 0 and record["graph_breaks"] == 0 and record["fallback"] is None
    assert record["cudagraph_skips"] is None  # CPU: no CUDA graphs to skip
    assert record["rollouts"] == 12 + 3 * 2 and 0 < record["host_syncs_per_token"] <= 1 / 16
    # transformers' leaked input-gradient hooks were dropped after each generation: still one
    assert len(trainer.model.get_input_embeddings()._forward_hooks) == 1


@torch._dynamo.register_backend(name="saah_test_no_capture")
def failing_backend(gm, example_inputs):
    raise RuntimeError("CUDA graph capture is not supported by this driver (simulated)")


@pytest.mark.parametrize("evaluate", [True, False], ids=["fails-in-evaluation", "fails-in-rollout"])
def test_a_compile_failure_falls_back_to_hf_once_with_a_warning_and_a_record(tiny_random_model_dir, tmp_path,
                                                                            evaluate, capsys):
    torch._dynamo.reset()
    trainer, tok = lora_checkpointed_trainer(tiny_random_model_dir, tmp_path, steps=3, backend="saah_test_no_capture")
    run = RunDir(tmp_path / "run")
    hf_calls = []
    real_generate = trainer.model.generate  # TRL's path and hf evaluation call the model's generate

    def counting_generate(*args, **kwargs):
        hf_calls.append(1)
        return real_generate(*args, **kwargs)

    trainer.model.generate = counting_generate
    trainer.add_callback(TrainLogCallback(run, trainer))
    if evaluate:
        trainer.add_callback(PassAtOneCallback(run, tok, generate_problems(3, seed=2), eval_every=2,
                                               max_new_tokens=8, batch_size=3, progress=False,
                                               generation_backend="compiled", trainer=trainer))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.train()
    assert capsys.readouterr().out.count("FALLBACK: compiled decoding failed") == 1  # in the progress lines
    fallback_warnings = [w for w in caught if "continues with generation_backend='hf'" in str(w.message)]
    assert len(fallback_warnings) == 1 and "not supported by this driver" in str(fallback_warnings[0].message)
    assert trainer.state.global_step == 3 and len(run.train_log()) == 3
    (record,) = json.loads(run.compile_health_path.read_text())["processes"]
    assert "not supported by this driver" in record["fallback"]["reason"] and record["compiled_graphs"] == 0
    if evaluate:
        assert record["fallback"]["where"] == "eval@0" and [e["step"] for e in run.evals()] == [0, 2, 3]
        assert len(hf_calls) == 3 + 3  # every rollout and every evaluation batch, through generate
    else:
        assert record["fallback"] == {**record["fallback"], "where": "rollout", "step": 0}
        assert len(hf_calls) == 3
    # the failure was caught inside TRL's generation context, which turned checkpointing back on
    assert trainer.accelerator.unwrap_model(trainer.model).is_gradient_checkpointing


def test_an_hf_run_writes_no_compile_health_record(tiny_random_model_dir, tmp_path):
    model, tok = load_model_and_tokenizer(str(tiny_random_model_dir))
    args = SAAHGRPOConfig(output_dir=str(tmp_path / "out"), per_device_train_batch_size=4, num_generations=4,
                          max_completion_length=6, report_to="none", use_cpu=True, bf16=False, max_steps=1,
                          logging_steps=1, save_strategy="no", disable_tqdm=True, generation_backend="hf")
    trainer = StudyTrainer(model=model, reward_funcs=list(TRL_REWARD_FUNCS), args=args, processing_class=tok,
                              train_dataset=to_trl_dataset(generate_problems(8, seed=0), tok))
    run = RunDir(tmp_path / "run")
    trainer.add_callback(TrainLogCallback(run, trainer))
    trainer.train()
    assert len(run.train_log()) == 1 and not run.compile_health_path.exists()


@torch._dynamo.register_backend(name="saah_test_oom_at_run")
def oom_backend(gm, example_inputs):
    def run(*args):
        raise torch.OutOfMemoryError("CUDA out of memory (simulated)")

    return run


@torch._dynamo.register_backend(name="saah_test_bug_at_run")
def buggy_backend(gm, example_inputs):
    def run(*args):
        raise KeyError("a bug in the decode step (simulated)")

    return run


@pytest.mark.parametrize("backend,error", [("saah_test_oom_at_run", torch.OutOfMemoryError),
                                           ("saah_test_bug_at_run", KeyError)], ids=["oom", "other-error"])
def test_only_compile_errors_fall_back_out_of_memory_and_bugs_stop_the_run(tiny_random_model_dir, tmp_path,
                                                                         backend, error):
    torch._dynamo.reset()
    trainer, _ = lora_checkpointed_trainer(tiny_random_model_dir, tmp_path, steps=2, backend=backend)
    with pytest.raises(error, match="simulated"):
        trainer.train()
    assert trainer.compile_health.fallback is None


def test_which_errors_count_as_compile_errors():
    from torch._dynamo.exc import BackendCompilerFailed

    from saah_lib.models.compile_health import RecompileError, is_compile_error

    def wrapped(inner):
        try:
            raise BackendCompilerFailed(failing_backend, inner, None) from inner
        except BackendCompilerFailed as error:
            return error

    assert is_compile_error(wrapped(RuntimeError("capture failed")))
    assert is_compile_error(RecompileError("compiled again"))
    assert not is_compile_error(wrapped(torch.OutOfMemoryError("during autotuning")))  # memory, not the compiler
    assert not is_compile_error(torch.OutOfMemoryError("CUDA out of memory"))
    assert not is_compile_error(ValueError("a sampling distribution contained a NaN"))
    assert not is_compile_error(RuntimeError("CUDA error: an illegal memory access"))


def test_a_fallback_is_a_progress_line_and_a_summary_line(capsys):
    from saah_lib.models.compile_health import CompileHealth

    health = CompileHealth()
    assert health.summary() is None
    with pytest.warns(RuntimeWarning, match="continues with generation_backend='hf'"):
        assert health.run_or_fall_back(lambda: (_ for _ in ()).throw(
            torch._dynamo.exc.Unsupported("graph break in the decode step")), "rollout", 7) is None
    assert "FALLBACK: compiled decoding failed in rollout" in capsys.readouterr().out
    assert health.summary().startswith("compiled decoding fell back to hf in rollout at step 7")
    assert health.record()["fallback"]["step"] == 7


def test_the_baseline_gets_the_same_pass_at_1_from_hf_and_compiled_on_qwen_generation_defaults(
        tiny_random_model_dir, tmp_path, monkeypatch):
    """The zero-shot baseline evaluates with the config's backend; on a checkpoint that ships Qwen2.5-Instruct's
    generation defaults (a repetition penalty among them) both backends score the same completions."""
    from saah_lab.training.run import run_baseline

    model, tok = load_model_and_tokenizer(str(tiny_random_model_dir))
    with torch.no_grad():
        g = torch.Generator().manual_seed(4)
        for p in model.parameters():
            if p.dim() == 2:
                p.copy_(torch.randn(p.shape, generator=g) * 0.5)
    folder = tmp_path / "qwen_defaults"
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    config_path = folder / "generation_config.json"
    config_path.write_text(json.dumps({**json.loads(config_path.read_text()), "do_sample": True, "temperature": 0.7,
                                       "top_p": 0.8, "top_k": 20, "repetition_penalty": 1.05}))
    problems = generate_problems(6, seed=5)
    results = {backend: run_baseline(str(folder), problems, tmp_path / backend, config={"name": backend},
                                     max_new_tokens=16, batch_size=4, progress=False, generation_backend=backend)
               for backend in ("hf", "compiled")}
    assert results["hf"]["pass_at_1"] == results["compiled"]["pass_at_1"]
    samples = {b: [r["completion"] for r in read_jsonl(RunDir(tmp_path / b).samples_path(0))] for b in results}
    assert samples["hf"] == samples["compiled"] and len(set(samples["hf"])) > 1
    # had hf taken the checkpoint's penalty (as plain generate does), the two would differ: the check can fail
    monkeypatch.setattr(evaluate, "run_generation_config", lambda model: contextlib.nullcontext(model))
    run_baseline(str(folder), problems, tmp_path / "leaky", config={"name": "leaky"}, max_new_tokens=16,
                 batch_size=4, progress=False, generation_backend="hf")
    assert [r["completion"] for r in read_jsonl(RunDir(tmp_path / "leaky").samples_path(0))] != samples["hf"]
