"""SA-AH-GRPO on GSM8K in one file (cleanrl style): every setting in ``Args``, then the run from top to bottom.

    python examples/saah_grpo.py --model_name_or_path Qwen/Qwen2.5-0.5B-Instruct --max_steps 50

The method lives in two places of ``saah_lib``: the token weights ``w_t = exp(-alpha * sum_{s<=t} H_s / log V)``
(``saah_lib/method/loss.py``: ``horizon_weights``; SA keeps them on negative-advantage rollouts only,
``method_weights``) and the trainer, TRL's ``GRPOTrainer`` with its advantages multiplied by those weights
inside TRL's own loss (``saah_lib/training/trainer.py``: ``SAAHGRPOTrainer._compute_loss``). Everything else
here is plain transformers and TRL. GSM8K comes from ``--gsm8k_dir`` (a folder of the official
``train.jsonl``), else ``$SAAH_GSM8K_DIR``, else the hub (``openai/gsm8k``); the reward is the project's
four-part GSM8K reward. The weights' per-step means end the output.
"""

import math
from dataclasses import dataclass, field

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, HfArgumentParser

from saah_lib import SAAHGRPOConfig, SAAHGRPOTrainer
from saah_lib.method.reward import TRL_REWARD_FUNCS
from saah_lib.tasks.gsm8k import load_gsm8k
from saah_lib.tasks.prompts import to_trl_dataset
from saah_lib.training.flat_groups import FlatGroupsMixin


@dataclass
class Args:
    # --- model and data
    model_name_or_path: str = field(default="Qwen/Qwen2.5-0.5B-Instruct",
                                    metadata={"help": "any causal LM: a hub id or a local model folder"})
    dtype: str = field(default="float32", metadata={"help": "float32 | bfloat16: the weights' dtype (bfloat16 "
                                                            "also turns on bf16 autocast)"})
    gsm8k_dir: str | None = field(default=None, metadata={"help": "folder holding GSM8K's train.jsonl (relative: "
                                                                  "from the repository root); None: $SAAH_GSM8K_DIR, "
                                                                  "then the hub"})
    n_train: int = field(default=800, metadata={"help": "training problems: the first N of GSM8K's train split"})
    # --- the method
    method: str = field(default="sa", metadata={"help": "grpo | ah | sa: no weights, every rollout discounted, "
                                                        "only negative-advantage rollouts discounted"})
    alpha: float = field(default=0.5, metadata={"help": "discount strength: w_t = exp(-alpha * cumulative "
                                                        "normalised entropy)"})
    entropy_top_k: int | None = field(default=None, metadata={"help": "entropy from the top-K logits (the paper: "
                                                                      "500); None: the exact entropy"})
    reward_std_threshold: float = field(default=0.15, metadata={"help": "groups whose reward std is below this "
                                                                        "get zero advantage"})
    # --- GRPO (TRL)
    loss_type: str = field(default="bnpo", metadata={"help": "TRL's loss type (the paper: bnpo)"})
    beta: float = field(default=0.04, metadata={"help": "weight of the KL penalty to the reference model"})
    learning_rate: float = field(default=5e-6, metadata={"help": "AdamW learning rate"})
    max_steps: int = field(default=100, metadata={"help": "optimiser steps"})
    prompts_per_step: int = field(default=4, metadata={"help": "prompts per optimiser step"})
    num_generations: int = field(default=4, metadata={"help": "completions per prompt: the group whose rewards "
                                                              "give the advantages"})
    max_completion_length: int = field(default=512, metadata={"help": "tokens per completion"})
    temperature: float = field(default=1.0, metadata={"help": "sampling temperature of the rollouts"})
    seed: int = field(default=0, metadata={"help": "seed of the prompt order and the sampling"})
    output_dir: str = field(default="saah-grpo-example", metadata={"help": "where the trained model is saved"})
    report_to: str = field(default="none", metadata={"help": "none | tensorboard | wandb | ...: where TRL also "
                                                             "logs the metrics"})


args = HfArgumentParser(Args).parse_args_into_dataclasses()[0]

# 1. the model and its tokenizer
tokenizer = AutoTokenizer.from_pretrained(args.model_name_or_path)
if tokenizer.pad_token is None:
    tokenizer.pad_token = tokenizer.eos_token
model = AutoModelForCausalLM.from_pretrained(args.model_name_or_path, dtype=getattr(torch, args.dtype))

# 2. the prompts: GSM8K questions in the project's answer format (<start_working_out> ... <SOLUTION>n</SOLUTION>),
#    rendered with the tokenizer's chat template; the "answer" column reaches the reward functions by name
problems = load_gsm8k("train", args.gsm8k_dir)[: args.n_train]
dataset = to_trl_dataset(problems, tokenizer)
print(f"{len(dataset)} GSM8K problems; the first prompt:\n{dataset[0]['prompt']}")

# 3. the trainer's settings: TRL's GRPOConfig plus the method's fields
config = SAAHGRPOConfig(
    output_dir=args.output_dir,
    method=args.method,
    alpha=args.alpha,
    entropy_top_k=args.entropy_top_k,
    reward_std_threshold=args.reward_std_threshold,
    loss_type=args.loss_type,
    beta=args.beta,
    learning_rate=args.learning_rate,
    max_steps=args.max_steps,
    prompts_per_step=args.prompts_per_step,  # sets per_device_train_batch_size and gradient_accumulation_steps
    num_generations=args.num_generations,
    max_completion_length=args.max_completion_length,
    temperature=args.temperature,
    seed=args.seed,
    bf16=args.dtype == "bfloat16",
    use_cpu=not torch.cuda.is_available(),  # transformers refuses bf16 without a GPU unless use_cpu says so
    logging_steps=1,
    save_strategy="no",
    report_to=args.report_to,
)

# 4. train: TRL's GRPO loop; the weights enter TRL's loss through the advantages it reads. The paper also zeroes
#    the advantages of groups whose rewards barely differ: an opt-in layer, mixed in before the trainer
class PaperTrainer(FlatGroupsMixin, SAAHGRPOTrainer):
    """SA-AH-GRPO plus the paper's flat-group rule (reward_std_threshold), an opt-in layer of the trainer."""


trainer = PaperTrainer(model=model, reward_funcs=TRL_REWARD_FUNCS, args=config, train_dataset=dataset,
                       processing_class=tokenizer)
trainer.train()
trainer.save_model()  # into output_dir, with the tokenizer

# 5. what the weights did, step by step (TRL's log): the mean normalised entropy, the mean weight over all tokens and
#    over the tokens of negative-advantage rollouts (TRL logs None, printed nan, in a step without one), and the
#    share of such rollouts
columns = ("reward", "saah/entropy_norm", "saah/weight_mean", "saah/weight_neg_mean", "saah/neg_frac")
print("step " + " ".join(f"{name:>20}" for name in columns))
for row in trainer.state.log_history:
    if "saah/weight_mean" in row:
        values = [math.nan if row.get(name) is None else row[name] for name in columns]
        print(f"{row['step']:>4} " + " ".join(f"{value:>20.4f}" for value in values))
