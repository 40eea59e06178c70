"""A whole training run with the compiled rollout backend: LoRA, gradient checkpointing, evaluations.

TRL switches gradient checkpointing off for every generation and back on afterwards, which (for a
PEFT-wrapped model) leaves one more forward hook on the input embeddings each time. A compiled decode
step that guards on the model's hooks then recompiles at every step until dynamo's recompile limit,
after which it silently runs uncompiled. These tests run long enough to see that.
"""

from collections import Counter

import torch
import torch._dynamo
from peft import LoraConfig
from torch._dynamo.utils import counters

from saah_lib.method.reward import TRL_REWARD_FUNCS
from saah_lib.models.loading import load_model_and_tokenizer
from saah_lib.rundir.folder import RunDir
from saah_lib.tasks.prompts import to_trl_dataset
from saah_lib.tasks.synthetic import generate_problems
from saah_lib.training.callbacks import PassAtOneCallback
from saah_lib.training.config import LORA_TARGETS
from saah_lib.training.trainer import SAAHGRPOConfig, SAAHGRPOTrainer

#: One entry per graph compiled through the counting backend: the shapes of the graph's tensor inputs.
COMPILED: list[tuple] = []


@torch._dynamo.register_backend(name="saah_test_counting_eager")
def counting_eager(gm, example_inputs):
    COMPILED.append(tuple(tuple(x.shape) for x in example_inputs if isinstance(x, torch.Tensor)))
    return gm.forward


def lora_checkpointed_trainer(model_dir, tmp_path, steps):
    model, tok = load_model_and_tokenizer(str(model_dir))
    lora = LoraConfig(r=4, lora_alpha=8, lora_dropout=0.05, target_modules=list(LORA_TARGETS), task_type="CAUSAL_LM")
    args = SAAHGRPOConfig(
        output_dir=str(tmp_path / "out"), per_device_train_batch_size=4, num_generations=4, max_completion_length=12,
        report_to="none", use_cpu=True, bf16=False, logging_steps=1, max_steps=steps, seed=0, beta=0.0,
        save_strategy="no", disable_tqdm=True, gradient_checkpointing=True,
        generation_backend="compiled", rollout_compile=True, rollout_compile_backend="saah_test_counting_eager",
    )
    trainer = SAAHGRPOTrainer(model=model, reward_funcs=list(TRL_REWARD_FUNCS), args=args,
                              train_dataset=to_trl_dataset(generate_problems(64, seed=0), tok), processing_class=tok,
                              peft_config=lora)
    return trainer, tok


def test_twelve_steps_and_three_evaluations_compile_one_graph_per_shape(tiny_random_model_dir, tmp_path):
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
    trainer.train()

    assert trainer.state.global_step == 12 and [e["step"] for e in run.evals()] == [0, 6, 12]
    shapes = trainer.rollout_engine().compiled_steps_seen | evaluation.engine.compiled_steps_seen
    per_graph = Counter(COMPILED)
    assert sum(counters["graph_break"].values()) == 0
    assert max(per_graph.values()) == 1, f"a shape was compiled again: {per_graph}"
    assert len(per_graph) == len(shapes)  # one graph per (batch, bucket), no partial graphs
