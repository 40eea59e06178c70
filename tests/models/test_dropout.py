"""LoRA dropout by gaps: Bernoulli(p) masks (checked both ways), torch.dropout's values, the same mask on a
checkpoint's recompute, and the trainer's LoRA layers switched to it."""

import math

import numpy as np
import pytest
import torch
from peft import LoraConfig, get_peft_model
from scipy import stats
from torch import nn
from torch.utils.checkpoint import checkpoint

from saah_lib.models.dropout import GapDropout, dropped_positions, use_gap_dropout

#: Significance of each of the three checks of a mask: over 100 seeds, about 0.3 masks flagged are expected.
ALPHA = 1e-3
SEEDS = range(100)


def bernoulli_misfit(positions: torch.Tensor, numel: int, p: float) -> float:
    """The smallest p-value of three checks that ``positions`` are the drops of ``numel`` Bernoulli(p) trials:
    the count (binomial), the gaps between drops (geometric, chi-square) and adjacent pairs (both dropped, binomial
    with p**2)."""
    if len(np.unique(positions.numpy())) != len(positions):
        return 0.0
    mask = np.zeros(numel, dtype=bool)
    mask[positions.numpy()] = True
    count = stats.binomtest(int(mask.sum()), numel, p).pvalue
    gaps = np.diff(np.concatenate([[-1], np.flatnonzero(mask)])) - 1
    # gap lengths 0 .. bins-1 each expect at least 5 gaps (chi-square's rule); longer ones are pooled
    bins = max(1, int(math.log(5 / (len(gaps) * p)) / math.log1p(-p)))
    observed = np.bincount(np.minimum(gaps, bins), minlength=bins + 1)
    pmf = stats.geom.pmf(np.arange(1, bins + 1), p)  # scipy's geometric counts trials: gap k is k + 1
    shape = stats.chisquare(observed, np.append(pmf, 1 - pmf.sum()) * len(gaps)).pvalue
    pairs = stats.binomtest(int((mask[1:] & mask[:-1]).sum()), numel - 1, p * p).pvalue
    return min(count, shape, pairs)


def _planted_no_adjacent(numel, p, generator):
    """A planted defect: gaps one too long (``gaps + 2``), so no drop directly follows another."""
    positions = dropped_positions(numel, p, generator)
    positions = positions + torch.arange(positions.numel())
    return positions[positions < numel]


def _planted_rate(numel, p, generator):
    """A planted defect: the rate off by a fifth."""
    return dropped_positions(numel, 1.2 * p, generator)


@pytest.mark.parametrize("p", [0.05, 0.3])
def test_gap_masks_are_bernoulli_masks_and_planted_defects_are_caught(p):
    numel = 200_000
    clean = [bernoulli_misfit(dropped_positions(numel, p, torch.Generator().manual_seed(s)), numel, p)
             for s in SEEDS]
    assert sum(v < ALPHA for v in clean) <= 2, clean
    for planted in (_planted_no_adjacent, _planted_rate):
        caught = [bernoulli_misfit(planted(numel, p, torch.Generator().manual_seed(s)), numel, p) < ALPHA
                  for s in SEEDS[:20]]
        assert all(caught), planted.__name__


def test_torch_dropout_itself_passes_the_check():
    numel, p = 200_000, 0.05
    torch.manual_seed(0)
    kept = torch.nn.functional.dropout(torch.ones(numel), p, training=True)
    assert bernoulli_misfit(torch.nonzero(kept == 0).flatten(), numel, p) > ALPHA


@pytest.mark.parametrize("numel", [0, 1, 7, 1000])
def test_positions_are_sorted_unique_and_in_range(numel):
    positions = dropped_positions(numel, 0.5, torch.Generator().manual_seed(1))
    assert positions.dtype == torch.long
    assert torch.equal(positions, torch.unique(positions))
    assert positions.numel() == 0 or (0 <= positions.min() and positions.max() < numel)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_values_are_torch_dropouts_for_the_same_mask(dtype):
    torch.manual_seed(0)
    x = torch.randn(64, 96, dtype=dtype)
    scale = torch.nn.functional.dropout(torch.ones(4096, dtype=dtype), 0.05, training=True).max()
    out = GapDropout(0.05).train()(x)
    kept = out != 0
    assert kept.float().mean().item() == pytest.approx(0.95, abs=0.02)
    assert torch.equal(out[kept], (x * scale)[kept])  # the same products, bit for bit
    assert GapDropout(0.05).eval()(x) is x


def test_dropped_elements_get_no_gradient_and_strides_do_not_matter():
    torch.manual_seed(0)
    x = torch.randn(48, 40).t().requires_grad_()  # not contiguous
    out = GapDropout(0.3).train()(x)
    out.sum().backward()
    kept = out.detach() != 0
    assert torch.equal(x.grad, torch.where(kept, torch.tensor(1 / 0.7), torch.tensor(0.0)))
    assert torch.equal(out[kept], (x * (1 / 0.7))[kept])


def test_a_checkpoint_recompute_draws_the_same_mask():
    torch.manual_seed(0)
    weight = torch.randn(32, 32, requires_grad=True)
    x = torch.randn(16, 32)
    dropout = GapDropout(0.05).train()

    def grad(use_checkpoint):
        torch.manual_seed(7)
        weight.grad = None
        f = (lambda t: dropout(t) @ weight)
        (checkpoint(f, x, use_reentrant=False) if use_checkpoint else f(x)).square().sum().backward()
        return weight.grad.clone()

    assert torch.equal(grad(True), grad(False))


def test_lora_layers_get_gap_dropout_with_their_p():
    base = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8))
    model = get_peft_model(base, LoraConfig(r=2, lora_dropout=0.05, target_modules=["0", "2"]))
    assert use_gap_dropout(model) == 2
    dropouts = [m for m in model.modules() if isinstance(m, nn.Dropout)]
    assert [type(m) for m in dropouts] == [GapDropout, GapDropout] and {m.p for m in dropouts} == {0.05}
    assert use_gap_dropout(model) == 0  # already switched
    plain = get_peft_model(nn.Sequential(nn.Linear(8, 8)), LoraConfig(r=2, lora_dropout=0.0, target_modules=["0"]))
    assert use_gap_dropout(plain) == 0  # no dropout: PEFT's identity stays
