"""TRL's prompt sampler, made to resume in the epoch it was interrupted in.

TRL's ``RepeatSampler`` draws one permutation per epoch from a generator seeded once, so epoch ``e``'s order
is the ``e``-th draw.  transformers 5 does not replay the earlier epochs on resume (it calls
``set_epoch`` on the sampler instead), and ``RepeatSampler`` has no ``set_epoch``: a run resumed after its
first epoch would train on epoch 0's order again.  ``set_epoch`` here replays the missing draws, so a resumed
run sees the prompts an uninterrupted one sees; in an uninterrupted run it does nothing (same bits).
"""

from __future__ import annotations

import torch
from trl.trainer.utils import RepeatSampler


class ResumableRepeatSampler(RepeatSampler):
    """``RepeatSampler`` whose ``set_epoch(e)`` puts the generator where an uninterrupted run has it at epoch e."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.epochs_drawn = 0  # permutations drawn from the generator so far

    def set_epoch(self, epoch: int) -> None:
        if not self.shuffle or epoch == self.epochs_drawn:
            return
        if self.seed is None:
            raise ValueError("a shuffled sampler without a seed cannot be put back at an epoch")
        self.generator.manual_seed(self.seed)
        for _ in range(epoch):
            torch.randperm(self.num_samples, generator=self.generator)
        self.epochs_drawn = epoch

    def __iter__(self):
        self.epochs_drawn += 1  # the parent draws this epoch's permutation when iteration starts
        yield from super().__iter__()
