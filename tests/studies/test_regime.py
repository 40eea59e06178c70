"""saah_lab.studies.regime: the warm-up pilot's measurement leaves the trained weights alone, its problems are
held out by content, and its numbers are shares of what was sampled."""

import torch

from saah_lab.studies import regime
from saah_lib.models.loading import load_model_and_tokenizer
from saah_lib.tasks.held_out import check_held_out_by_content
from saah_lib.tasks.synthetic import generate_problems

HELD_OUT = dict(partition="eval", held_out_by="chain")


def test_measuring_leaves_the_float32_weights_as_trained_and_gives_shares(tiny_random_model_dir):
    model, tokenizer = load_model_and_tokenizer(tiny_random_model_dir, "float32")
    before = {name: p.detach().clone() for name, p in model.state_dict().items()}
    probe = generate_problems(2, regime.PROBE_SEED, id_prefix="probe", **HELD_OUT)
    greedy = generate_problems(3, regime.GREEDY_SEED, id_prefix="greedy", **HELD_OUT)
    row = regime.measure(model, tokenizer, probe, greedy, temperature=0.7)
    # a bfloat16 copy samples: rounding the model itself would change the weights training goes on from
    assert all(p.dtype == torch.float32 and torch.equal(p, before[n]) for n, p in model.state_dict().items())
    assert row["completions"] == 2 * regime.PER_PROMPT and row["greedy_problems"] == 3
    assert row["tokens"] == round(row["mean_tokens"] * row["completions"])
    assert 0 < row["mean_normalised_entropy"] <= 1
    for share in ("full_format", "exact", "truncated", "greedy_pass_at_1"):
        assert 0 <= row[share] <= 1
    assert regime.measure(model, tokenizer, probe, greedy, temperature=0.7)["mean_normalised_entropy"] == \
        row["mean_normalised_entropy"]  # seeded


def test_the_pilots_problems_are_held_out_from_its_warm_ups_by_content(gsm8k_dir):
    probe = generate_problems(16, regime.PROBE_SEED, id_prefix="probe", **HELD_OUT)
    greedy = generate_problems(64, regime.GREEDY_SEED, id_prefix="greedy", **HELD_OUT)
    warm_ups = {source: regime.sft_problems(source, 240, gsm8k_dir) for source in ("synthetic", "gsm8k")}
    assert check_held_out_by_content(probe + greedy, **warm_ups) == {"evaluation": 80, "synthetic": 240, "gsm8k": 240}
