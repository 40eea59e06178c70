"""LoRA dropout on a CPU with its mask drawn by gaps: the same Bernoulli distribution for a twentieth of the draws.

Why: ``nn.Dropout`` on a CPU draws one Bernoulli trial per element (``bernoulli_``), and LoRA's dropout of 0.05 runs
on the input of every adapted projection, in every forward and every checkpoint recompute: in the SmolLM2 step it
was the third most expensive operation (docs/reproducing.md). The dropped elements of independent Bernoulli(p) trials
are a renewal process whose gaps (kept elements before the next drop) are geometric, P(gap = k) = (1 - p)^k p, so
:func:`dropped_positions` draws about ``p * numel`` gaps by inverse CDF, ``floor(log(1 - U) / log(1 - p))``, instead
of ``numel`` trials. The kept elements are what ``torch.dropout`` computes (times ``1 / (1 - p)`` rounded to the
input's dtype as ATen rounds it), a dropped one is +0 (torch's ``x * 0`` is -0 for a negative x), and no mask is
kept for the backward. The draws come from torch's generator, so a checkpoint's recompute, which replays the
generator's state, draws the same mask. Other devices, in-place dropout and p outside (0, 1) keep ``nn.Dropout``.
"""

from __future__ import annotations

import math

import torch
from peft.tuners.lora import LoraLayer
from torch import nn

#: Gaps drawn beyond the expected count, in standard deviations of the count (more are drawn in the rare case
#: that these do not reach the end).
_MARGIN_SD = 6


def dropped_positions(numel: int, p: float, generator: torch.Generator | None = None) -> torch.Tensor:
    """Flat indices, ascending, of the elements that ``numel`` independent Bernoulli(p) trials drop."""
    per_log_keep = 1 / math.log1p(-p)
    found, start = [torch.empty(0, dtype=torch.float64)], 0
    while start < numel:
        expected = (numel - start) * p
        count = int(expected + _MARGIN_SD * math.sqrt(expected) + 16)
        # 1 - U lies in (0, 1]: a gap is finite; float64 holds every end below 2**53 exactly
        gaps = torch.rand(count, dtype=torch.float64, generator=generator).neg_().log1p_().mul_(per_log_keep).floor_()
        ends = gaps.add_(1).cumsum_(0).add_(start - 1)
        found.append(ends)
        start = int(ends[-1]) + 1
    positions = torch.cat(found)
    return positions[positions < numel].long()


class GapDropout(nn.Dropout):
    """``nn.Dropout`` whose CPU mask comes from :func:`dropped_positions`."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not (self.training and 0 < self.p < 1) or self.inplace or x.device.type != "cpu":
            return super().forward(x)
        # ATen's CPU dropout multiplies by 1 / (1 - p) rounded to x's dtype; the product by that number is the same
        # here, and no mask is kept for the backward (the zeros are written in place, so their gradient is 0)
        scale = torch.ones((), dtype=x.dtype).div_(1 - self.p).item()
        out = x.contiguous() * scale  # flat positions index row-major order
        out.view(-1)[dropped_positions(x.numel(), self.p)] = 0
        return out


def use_gap_dropout(model: nn.Module) -> int:
    """Replace every ``nn.Dropout`` of every LoRA layer of ``model`` by a :class:`GapDropout` of the same p;
    returns how many."""
    changed = 0
    for layer in (m for m in model.modules() if isinstance(m, LoraLayer)):
        for adapter, dropout in layer.lora_dropout.items():
            if type(dropout) is nn.Dropout:
                layer.lora_dropout[adapter] = GapDropout(dropout.p).train(dropout.training)
                changed += 1
    return changed
