"""Several processes (``accelerate launch``): how a step's completions are split between them.

A step always trains on ``prompts_per_step x num_generations`` completions, whatever the number of processes: N
processes run ``N x per_device_batch_size x gradient_accumulation_steps``, the accumulation steps shrinking first,
then the per-device batch.  The objective is one process's only where the loss's normaliser does not depend on the
split: ``grpo``/``sapo`` (per completion), ``dr_grpo``/``luspo`` (no token count) and, with every weight 1,
``dapo``/``cispo``/``vespo`` (TRL counts the window's tokens over all processes; with weights on, their weighted
fraction is measured per micro-batch).  Not ``bnpo``, the paper's loss: each process divides by its own micro-batch's
weighted token count, so another split weights the completions differently (tests/training/test_distributed.py).
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class BatchLayout:
    num_processes: int
    per_device_batch_size: int
    gradient_accumulation_steps: int

    @property
    def completions_per_step(self) -> int:
        return self.num_processes * self.per_device_batch_size * self.gradient_accumulation_steps


def world_size() -> int:
    """Processes in this launch: ``accelerate launch`` / ``torchrun`` set WORLD_SIZE; 1 otherwise."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def is_main_process() -> bool:
    """The process that writes a run's logs: rank 0 of a launch (``RANK``, set by ``accelerate launch`` /
    ``torchrun``), or the only process."""
    return int(os.environ.get("RANK", "0")) == 0


def batch_layout(completions_per_step: int, num_generations: int, gradient_accumulation_steps: int,
                 num_processes: int = 1) -> BatchLayout:
    """Per-process batch and accumulation that give ``completions_per_step`` per optimiser step.

    One process gives back the config's own split. Raises a ValueError naming the
    setting when the completions cannot be split evenly, or when a generation
    batch would not hold whole groups of ``num_generations`` (TRL's requirement).
    """
    if num_processes < 1:
        raise ValueError(f"num_processes must be >= 1, got {num_processes}")
    if completions_per_step % num_processes:
        raise ValueError(f"{completions_per_step} completions per step cannot be split over {num_processes} "
                         "processes; change prompts_per_step or num_generations, or launch fewer processes")
    per_process = completions_per_step // num_processes
    accumulation = max(1, gradient_accumulation_steps // num_processes)
    while per_process % accumulation:
        accumulation -= 1
    layout = BatchLayout(num_processes, per_process // accumulation, accumulation)
    # TRL generates steps_per_generation (= accumulation) micro-batches at once on every process
    generation_batch = layout.completions_per_step
    if generation_batch % num_generations:
        raise ValueError(f"num_generations={num_generations} does not divide the generation batch of "
                         f"{generation_batch} completions")
    return layout
