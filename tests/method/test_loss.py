"""The method's math against hand-computed values and against plain GRPO."""

import math

import pytest
import torch

from saah_lib.method.loss import (
    advantage_factors,
    horizon_weights,
    method_weights,
    normalised_entropy,
    normalised_entropy_from_hidden,
    selective_weights,
)
from tests.method.reference_loss import saah_policy_loss


def exact_entropy_reference(logits):
    p = torch.softmax(logits.double(), -1)
    return -(p * torch.log(p)).sum(-1)


# ---------------------------------------------------------------- entropy


def test_uniform_distribution_has_normalised_entropy_one():
    assert normalised_entropy(torch.zeros(3, 7), top_k=None).tolist() == pytest.approx([1.0] * 3)


def test_peaked_distribution_has_entropy_near_zero():
    logits = torch.tensor([[100.0, 0.0, 0.0, 0.0]])
    assert normalised_entropy(logits, top_k=None).item() == pytest.approx(0.0, abs=1e-6)


def test_top_k_renormalises_over_k_and_divides_by_log_v():
    # top-2 of [1, 1, 0, 0] is uniform over two tokens: log 2 nats, / log 4 = 0.5
    logits = torch.tensor([[1.0, 1.0, 0.0, 0.0]])
    assert normalised_entropy(logits, top_k=2).item() == pytest.approx(0.5, abs=1e-6)


def test_top_k_equal_to_vocab_is_the_exact_entropy():
    logits = torch.randn(2, 5, 50, generator=torch.Generator().manual_seed(0))
    exact = exact_entropy_reference(logits) / math.log(50)
    torch.testing.assert_close(normalised_entropy(logits, top_k=50).double(), exact, atol=1e-6, rtol=0)
    torch.testing.assert_close(normalised_entropy(logits, top_k=None).double(), exact, atol=1e-6, rtol=0)


def test_vocab_size_argument_sets_the_normaliser():
    logits = torch.zeros(1, 4)  # log 4 nats
    assert normalised_entropy(logits, vocab_size=16, top_k=None).item() == pytest.approx(0.5)


def test_chunking_does_not_change_the_result():
    logits = torch.randn(3, 11, 40, generator=torch.Generator().manual_seed(1))
    whole = normalised_entropy(logits, top_k=8)
    torch.testing.assert_close(normalised_entropy(logits, top_k=8, chunk_size=1), whole)
    torch.testing.assert_close(normalised_entropy(logits, top_k=8, chunk_size=5), whole)


def test_entropy_from_hidden_states_matches_entropy_of_the_logits():
    g = torch.Generator().manual_seed(2)
    hidden, weight, bias = torch.randn(2, 6, 8, generator=g), torch.randn(30, 8, generator=g), torch.randn(30, generator=g)
    logits = (hidden @ weight.T + bias) / 0.7
    expected = normalised_entropy(logits, top_k=10)
    got = normalised_entropy_from_hidden(hidden, weight, bias, top_k=10, temperature=0.7, chunk_size=4)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_bf16_logits_are_measured_in_float32():
    logits = torch.randn(4, 64, generator=torch.Generator().manual_seed(3))
    got = normalised_entropy(logits.bfloat16(), top_k=None)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, normalised_entropy(logits.bfloat16().float(), top_k=None))


# ---------------------------------------------------------------- weights


def test_horizon_weights_hand_computed():
    h = torch.tensor([[0.5, 0.2, 0.3]])
    mask = torch.tensor([[1, 1, 0]])
    w = horizon_weights(h, mask, alpha=1.0)
    # cumulative entropy over completion tokens: 0.5, 0.7, 0.7 (the masked 0.3 adds nothing)
    assert w[0].tolist() == pytest.approx([math.exp(-0.5), math.exp(-0.7), math.exp(-0.7)])


def test_horizon_weights_alpha_half():
    h = torch.tensor([[0.2, 0.2, 0.2, 0.2]])
    w = horizon_weights(h, torch.ones(1, 4), alpha=0.5)
    assert w[0].tolist() == pytest.approx([math.exp(-0.1), math.exp(-0.2), math.exp(-0.3), math.exp(-0.4)])


def test_alpha_zero_gives_exactly_one():
    h = torch.rand(3, 9)
    assert torch.equal(horizon_weights(h, torch.ones(3, 9), 0.0), torch.ones(3, 9))


def test_horizon_weights_are_detached():
    h = torch.rand(2, 4, requires_grad=True)
    assert not horizon_weights(h, torch.ones(2, 4), 0.5).requires_grad


def test_negative_alpha_grows_weights_without_overflow():
    h = torch.ones(2, 4096)  # the worst case: maximal entropy at every position
    w = horizon_weights(h, torch.ones(2, 4096), alpha=-2.0)
    assert torch.isfinite(w).all()
    assert w[0, 0].item() == pytest.approx(math.exp(2.0))
    assert (w[:, 1:] >= w[:, :-1]).all()


def test_the_largest_alpha_keeps_weights_finite_and_the_loss_defined():
    # alpha = ALPHA_RANGE[1] at maximal entropy: weights fall to float32 zero far along the completion, but the
    # first token keeps exp(-alpha) > 0, so the weighted token count (the loss denominator) stays positive
    from saah_lib.method.methods import ALPHA_RANGE

    alpha = ALPHA_RANGE[1]
    h, mask = torch.ones(2, 512), torch.ones(2, 512)
    w = horizon_weights(h, mask, alpha)
    assert torch.isfinite(w).all() and (w >= 0).all()
    assert w[0, 0].item() == pytest.approx(math.exp(-alpha), rel=1e-6)
    logps = torch.zeros(2, 512, requires_grad=True)
    loss, _ = saah_policy_loss(logps, logps.detach(), logps.detach(), torch.tensor([1.0, -1.0]), mask, w)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(logps.grad).all()


def test_selective_weights_only_touch_negative_rollouts():
    w = torch.tensor([[0.5, 0.25], [0.4, 0.2], [0.9, 0.8]])
    adv = torch.tensor([-1.0, 0.0, 2.0])
    assert selective_weights(w, adv).tolist() == [[0.5, 0.25], [1.0, 1.0], [1.0, 1.0]]


def test_unknown_method_is_rejected():
    with pytest.raises(ValueError, match="unknown method 'ppo'"):
        method_weights("ppo", torch.rand(1, 2), torch.ones(1, 2), torch.zeros(1), 0.5)


def test_grpo_ignores_alpha():
    w = method_weights("grpo", torch.rand(2, 3), torch.ones(2, 3), torch.tensor([-1.0, 1.0]), 0.9)
    assert torch.equal(w, torch.ones(2, 3))


# ---------------------------------------------------------------- loss


def test_loss_hand_computed_weighted_normalisation():
    logps = torch.zeros(2, 2)
    adv = torch.tensor([1.0, -1.0])
    weights = torch.tensor([[1.0, 1.0], [0.5, 0.25]])
    loss, stats = saah_policy_loss(logps, logps, None, adv, torch.ones(2, 2), weights, beta=0.0)
    # ratio 1: surrogate = A; numerator 1 + 1 - 0.5 - 0.25 = 1.25, denominator 2.75
    assert loss.item() == pytest.approx(-1.25 / 2.75)
    assert stats["weight_mean"].item() == pytest.approx(2.75 / 4)
    assert stats["weight_neg_mean"].item() == pytest.approx(0.375)
    assert stats["neg_frac"].item() == pytest.approx(0.5)


def test_loss_hand_computed_clipping_and_kl():
    logps = torch.tensor([[0.5], [math.log(0.5)]])
    old = torch.zeros(2, 1)
    ref = logps + 0.1
    adv = torch.tensor([1.0, -1.0])
    loss, stats = saah_policy_loss(logps, old, ref, adv, torch.ones(2, 1), torch.ones(2, 1), 0.2, 0.04)
    # row 1: min(e^0.5 * 1, 1.2 * 1) = 1.2; row 2: min(0.5 * -1, 0.8 * -1) = -0.8
    kl = math.exp(0.1) - 0.1 - 1
    assert loss.item() == pytest.approx(-(1.2 - 0.8) / 2 + 0.04 * kl, rel=1e-6)
    assert stats["kl"].item() == pytest.approx(kl, rel=1e-5)
    assert stats["clip_frac"].item() == pytest.approx(1.0)


def bnpo_reference(logps, old, ref, adv, mask, eps, beta):
    """Plain GRPO with token-level normalisation, written independently of the package."""
    ratio = torch.exp(logps - old)
    a = adv[:, None]
    per_token = -torch.min(ratio * a, torch.clamp(ratio, 1 - eps, 1 + eps) * a)
    per_token = per_token + beta * (torch.exp(ref - logps) - (ref - logps) - 1)
    return (per_token * mask).sum() / mask.sum()


def random_batch(seed, b=6, t=7):
    g = torch.Generator().manual_seed(seed)
    logps = (-torch.rand(b, t, generator=g) * 3).requires_grad_()
    old = logps.detach() + 0.3 * torch.randn(b, t, generator=g)
    ref = logps.detach() + 0.3 * torch.randn(b, t, generator=g)
    adv = torch.randn(b, generator=g)
    lengths = torch.randint(1, t + 1, (b,), generator=g)
    mask = (torch.arange(t)[None] < lengths[:, None]).float()
    entropy = torch.rand(b, t, generator=g)
    return logps, old, ref, adv, mask, entropy


@pytest.mark.parametrize("method", ["grpo", "ah", "sa"])
def test_alpha_zero_equals_unweighted_grpo(method):
    logps, old, ref, adv, mask, h = random_batch(0)
    w = method_weights(method, h, mask, adv, 0.0)
    loss, _ = saah_policy_loss(logps, old, ref, adv, mask, w, 0.2, 0.04)
    expected = bnpo_reference(logps, old, ref, adv, mask, 0.2, 0.04)
    torch.testing.assert_close(loss, expected, atol=1e-6, rtol=1e-6)
    (g1,) = torch.autograd.grad(loss, logps)
    (g2,) = torch.autograd.grad(expected, logps)
    torch.testing.assert_close(g1, g2, atol=1e-7, rtol=1e-5)


def test_ah_equals_sa_when_every_advantage_is_negative():
    logps, old, ref, adv, mask, h = random_batch(1)
    adv = -adv.abs() - 0.1
    wa, ws = (method_weights(m, h, mask, adv, 0.5) for m in ("ah", "sa"))
    assert torch.equal(wa, ws)
    la, _ = saah_policy_loss(logps, old, ref, adv, mask, wa)
    ls, _ = saah_policy_loss(logps, old, ref, adv, mask, ws)
    assert torch.equal(la, ls)


def test_sa_equals_grpo_when_no_advantage_is_negative():
    logps, old, ref, adv, mask, h = random_batch(2)
    adv = adv.abs()
    adv[0] = 0.0  # zero advantage counts as non-negative
    ls, _ = saah_policy_loss(logps, old, ref, adv, mask, method_weights("sa", h, mask, adv, 0.5))
    lg, _ = saah_policy_loss(logps, old, ref, adv, mask, method_weights("grpo", h, mask, adv, 0.5))
    assert torch.equal(ls, lg)


def test_weight_neg_mean_is_nan_without_negative_rollouts():
    logps, old, ref, adv, mask, h = random_batch(3)
    _, stats = saah_policy_loss(logps, old, ref, adv.abs(), mask, torch.ones_like(mask))
    assert math.isnan(stats["weight_neg_mean"].item())
    assert stats["neg_frac"].item() == 0.0


def test_entropy_statistic_is_the_masked_mean():
    logps, old, ref, adv, mask, h = random_batch(4)
    _, stats = saah_policy_loss(logps, old, ref, adv, mask, torch.ones_like(mask), norm_entropy=h)
    assert stats["entropy_norm"].item() == pytest.approx(((h * mask).sum() / mask.sum()).item(), rel=1e-6)


@pytest.mark.parametrize("alpha", [-1.0, -0.25, 0.0, 0.5, 2.0])
@pytest.mark.parametrize("method", ["ah", "sa"])
def test_no_nan_for_masked_rows_and_empty_completions(method, alpha):
    logps, old, ref, adv, mask, h = random_batch(5)
    mask[2] = 0.0  # a fully masked row (e.g. a truncated completion)
    h = torch.ones_like(h)
    w = method_weights(method, h, mask, adv, alpha)
    loss, _ = saah_policy_loss(logps, old, ref, adv, mask, w, norm_entropy=h)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(logps.grad).all()
    assert (logps.grad[2] == 0).all()

    empty = torch.zeros(3, 0, requires_grad=True)
    w0 = method_weights(method, empty, empty, torch.tensor([-1.0, 0.0, 1.0]), alpha)
    loss0, _ = saah_policy_loss(empty, empty, empty, torch.tensor([-1.0, 0.0, 1.0]), empty, w0)
    assert loss0.item() == 0.0

    all_masked = torch.zeros_like(mask)
    loss1, _ = saah_policy_loss(logps, old, ref, adv, all_masked, w)
    assert loss1.item() == 0.0


def test_weights_scale_the_gradient_of_each_token():
    logps = torch.zeros(1, 2, requires_grad=True)
    w = torch.tensor([[1.0, 0.5]])
    loss, _ = saah_policy_loss(logps, logps.detach(), None, torch.tensor([1.0]), torch.ones(1, 2), w, beta=0.0)
    loss.backward()
    # d/dlogp of -(w * exp(logp - old) * A) / sum(w) at ratio 1 is -w / 1.5
    assert logps.grad[0].tolist() == pytest.approx([-1 / 1.5, -0.5 / 1.5])


# ---------------------------------------------------------------- what the weights do per normaliser
def test_per_completion_normalisers_keep_each_completions_share():
    """grpo/sapo: a completion's factors average 1 over its tokens whatever the weights, so SA only moves weight
    toward a failed rollout's early tokens; bnpo: the failed rollouts' share falls and the others' rises
    (docs/library.md)."""
    mask = (torch.arange(6)[None] < torch.tensor([6, 4, 5, 3])[:, None]).float()
    adv = torch.tensor([1.0, -1.0, 0.5, -0.5])
    weights = method_weights("sa", torch.rand(4, 6, generator=torch.Generator().manual_seed(0)), mask, adv, 1.0)

    def share(factors):
        return (factors * mask).sum(-1) / mask.sum(-1)

    for loss_type in ("grpo", "sapo"):
        factors = advantage_factors(weights, mask, loss_type)
        torch.testing.assert_close(share(factors), torch.ones(4))
        failed = factors[1, :4]
        assert (failed.diff() < 0).all() and failed[0] > 1  # early tokens gain what late ones lose
    bnpo = share(advantage_factors(weights, mask, "bnpo"))
    assert (bnpo[adv < 0] < 1).all() and (bnpo[adv > 0] > 1).all()
