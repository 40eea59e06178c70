"""The prompt sampler resumes in the epoch a run was interrupted in (hand-checked against TRL's own sampler)."""

import pytest
from trl.trainer.utils import RepeatSampler

from saah_lib.training.sampler import ResumableRepeatSampler

ARGS = dict(data_source=list(range(12)), mini_repeat_count=2, batch_size=3, repeat_count=1, shuffle=True, seed=7)


def _epochs(sampler, n, set_epoch=False):
    out = []
    for epoch in range(n):
        if set_epoch:
            sampler.set_epoch(epoch)
        out.append(list(sampler))
    return out


def test_an_uninterrupted_run_draws_what_trls_sampler_draws():
    assert _epochs(ResumableRepeatSampler(**ARGS), 4, set_epoch=True) == _epochs(RepeatSampler(**ARGS), 4)


@pytest.mark.parametrize("resume_epoch", [1, 2, 3])
def test_a_fresh_sampler_put_at_an_epoch_draws_that_epochs_order(resume_epoch):
    reference = _epochs(RepeatSampler(**ARGS), 4)
    assert reference[0] != reference[resume_epoch]  # otherwise the test could not fail
    fresh = ResumableRepeatSampler(**ARGS)
    fresh.set_epoch(resume_epoch)
    assert list(fresh) == reference[resume_epoch]
    fresh.set_epoch(resume_epoch + 1)  # and it goes on from there
    if resume_epoch + 1 < 4:
        assert list(fresh) == reference[resume_epoch + 1]


def test_trls_sampler_alone_would_replay_the_first_epoch():
    # what the class fixes: a fresh TRL sampler starts at epoch 0's order whatever the epoch
    fresh = RepeatSampler(**ARGS)
    assert list(fresh) == _epochs(RepeatSampler(**ARGS), 2)[0]


def test_an_unseeded_shuffled_sampler_cannot_be_put_back():
    sampler = ResumableRepeatSampler(**{**ARGS, "seed": None})
    with pytest.raises(ValueError, match="without a seed"):
        sampler.set_epoch(2)
