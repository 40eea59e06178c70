"""The rollout sampler against ``torch.multinomial`` and transformers' warpers.

What is claimed (saah_lib.models.sampling): run eagerly or compiled with the eager/aot_eager
backends, ``race_sample`` gives ``torch.multinomial``'s tokens and generator state for a seed;
compiled with inductor it gives the same distribution (other tokens). The inductor claim is a
chi-square test with a fixed seed, so it is deterministic; p > 1e-3 is what a correct sampler passes
for all but 0.1% of seeds, and the same test rejects samplers off by a plausible bug.
"""

import pytest
import torch
from scipy.stats import chisquare
from transformers.generation.logits_process import (
    LogitsProcessorList,
    MinPLogitsWarper,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from saah_lib.models.rollout import align_inductor_cpu_isa
from saah_lib.models.sampling import SamplingSettings, invalid_probabilities, process_logits, race_sample

N = 40_000
#: A fixed distribution with a long tail and two impossible tokens (probability 0).
PROBS = torch.tensor([0.30, 0.20, 0.15, 0.10, 0.08, 0.07, 0.05, 0.03, 0.015, 0.005, 0.0, 0.0])
P_MIN = 1e-3


def draw(sampler, probs: torch.Tensor, seed: int = 0) -> torch.Tensor:
    torch.manual_seed(seed)
    return torch.bincount(sampler(probs.expand(N, -1).contiguous()).flatten(), minlength=probs.numel())


def goodness_of_fit(observed: torch.Tensor, probs: torch.Tensor) -> float:
    possible = probs > 0
    p = probs[possible].double()
    return chisquare(observed[possible].double().numpy(), (p / p.sum() * observed.sum()).numpy()).pvalue


@pytest.mark.parametrize("backend", [None, "eager", "aot_eager"])
def test_race_gives_multinomials_tokens_and_generator_state(backend):
    sampler = race_sample if backend is None else torch.compile(race_sample, backend=backend, fullgraph=True)
    logits = torch.randn(64, 500, generator=torch.Generator().manual_seed(0)) * 3
    probs = logits.softmax(-1)
    torch.manual_seed(7)
    ours, after_ours = sampler(probs), torch.rand(4)
    torch.manual_seed(7)
    theirs, after_theirs = torch.multinomial(probs, 1).squeeze(1), torch.rand(4)
    assert torch.equal(ours, theirs) and len(set(ours.tolist())) > 10
    assert torch.equal(after_ours, after_theirs)


@pytest.mark.slow
def test_race_compiled_by_inductor_draws_the_fixed_distribution():
    """Inductor draws through its own random kernel (other tokens): the distribution must still be exact."""
    align_inductor_cpu_isa()  # as the rollout engine does before compiling on a CPU (see its docstring)
    compiled = torch.compile(race_sample, backend="inductor", fullgraph=True, dynamic=False)
    observed = draw(compiled, PROBS)
    assert observed[PROBS == 0].sum() == 0
    assert goodness_of_fit(observed, PROBS) > P_MIN
    torch.manual_seed(0)
    assert not torch.equal(compiled(PROBS.expand(64, -1).contiguous()), race_sample(PROBS.expand(64, -1).contiguous()))


def test_the_chi_square_test_accepts_multinomial_and_rejects_a_wrong_distribution():
    assert goodness_of_fit(draw(lambda p: torch.multinomial(p, 1), PROBS), PROBS) > P_MIN
    hotter = (PROBS.log() / 1.15).softmax(-1)  # a temperature of 1.15 ignored
    swapped = PROBS[[1, 0, *range(2, PROBS.numel())]]  # two tokens' probabilities exchanged
    for wrong in (hotter, swapped):
        assert goodness_of_fit(draw(race_sample, wrong), PROBS) < 1e-6


@pytest.mark.parametrize("settings,warpers", [
    (SamplingSettings(temperature=0.7, top_k=6, top_p=0.85),
     [TemperatureLogitsWarper(0.7), TopKLogitsWarper(6), TopPLogitsWarper(0.85)]),
    (SamplingSettings(temperature=1.3, min_p=0.2), [TemperatureLogitsWarper(1.3), MinPLogitsWarper(0.2)]),
])
def test_process_logits_equals_transformers_warpers(settings, warpers):
    logits = torch.log(torch.tensor([[0.22, 0.2, 0.16, 0.12, 0.1, 0.08, 0.06, 0.04, 0.02]]))
    expected = LogitsProcessorList(warpers)(None, logits.clone())
    ours = process_logits(logits, settings)
    assert 0 < torch.isinf(expected).sum() < 8  # the filters removed something, not everything
    torch.testing.assert_close(ours, expected)


def test_invalid_probabilities_flags_what_multinomial_refuses():
    assert not invalid_probabilities(PROBS[None])
    for bad in (torch.tensor([[0.5, float("nan")]]), torch.tensor([[1.5, -0.5]])):
        assert invalid_probabilities(bad)
        with pytest.raises(RuntimeError):
            torch.multinomial(bad, 1)


def test_inductor_is_told_the_pinned_vector_width_and_a_users_choice_is_kept(monkeypatch):
    import torch._inductor.config as inductor_config

    # inductor's own patch(), not monkeypatch: undoing a monkeypatch deletes the config entry for later tests
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    with inductor_config.patch({"cpp.simdlen": None}):
        align_inductor_cpu_isa()
        assert inductor_config.cpp.simdlen == 256
    with inductor_config.patch({"cpp.simdlen": 512}):  # set by the user: left alone
        align_inductor_cpu_isa()
        assert inductor_config.cpp.simdlen == 512
    monkeypatch.delenv("ATEN_CPU_CAPABILITY")  # native numerics: inductor picks as it always does
    with inductor_config.patch({"cpp.simdlen": None}):
        align_inductor_cpu_isa()
        assert inductor_config.cpp.simdlen is None

