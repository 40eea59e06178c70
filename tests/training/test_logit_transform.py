"""The top-K entropy measures the policy's own distribution on models whose forward transforms ``lm_head(h)``
(Cohere's ``logit_scale``, Granite's ``logits_scaling``, Gemma2's final softcap): with K = V it equals the
exact entropy of the model's output logits over the temperature, and TRL's fused exact entropy."""

import math

import pytest
import torch
from transformers import AutoTokenizer, CohereConfig, Gemma2Config, GraniteConfig, Qwen2Config

from saah_lib.method.loss import normalised_entropy, normalised_entropy_from_hidden
from saah_lib.training.trainer import SAAHGRPOConfig, SAAHGRPOTrainer, logit_transform
from tests.training.test_trainer import build_trainer, fake_batch

TEMPERATURE = 0.7
SHAPE = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
             head_dim=16, initializer_range=0.5)  # large weights: peaked logits, where the transforms matter
# Settings far from 1 (and a small softcap) so that a missing transform moves the entropy well past tolerance
TRANSFORMED = {
    "gemma2": (Gemma2Config, dict(final_logit_softcapping=2.0)),
    "cohere": (CohereConfig, dict(logit_scale=4.0)),
    "granite": (GraniteConfig, dict(logits_scaling=0.25)),
}


@pytest.fixture(scope="module", params=sorted(TRANSFORMED))
def transformed_model_dir(request, tiny_random_model_dir, tmp_path_factory):
    """A tiny random model of the family with the tiny tokenizer, saved as a model folder."""
    from transformers import AutoModelForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(tiny_random_model_dir)
    config_cls, extra = TRANSFORMED[request.param]
    config = config_cls(vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id,
                        eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.eos_token_id, **SHAPE, **extra)
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp(request.param)
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def exact_from_logits(model, ids):
    """The normalised exact entropy of the model's own output logits over the temperature."""
    with torch.no_grad():
        return normalised_entropy(model(input_ids=ids).logits / TEMPERATURE, top_k=None)


def test_top_k_with_k_v_is_the_model_entropy(transformed_model_dir):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(transformed_model_dir).eval()
    head = model.get_output_embeddings()
    ids = torch.randint(3, head.weight.size(0), (3, 9), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        hidden = model.base_model(input_ids=ids).last_hidden_state
    exact = exact_from_logits(model, ids)
    estimate = normalised_entropy_from_hidden(hidden, head.weight, head.bias, top_k=head.weight.size(0),
                                              temperature=TEMPERATURE, **logit_transform(model.config))
    torch.testing.assert_close(estimate, exact, atol=1e-6, rtol=0)
    # the transform is what makes them equal: without it the estimate is another distribution's entropy
    untransformed = normalised_entropy_from_hidden(hidden, head.weight, head.bias, top_k=head.weight.size(0),
                                                   temperature=TEMPERATURE)
    assert (untransformed - exact).abs().max() > 1e-3


def test_the_trainer_applies_the_models_transform(transformed_model_dir, tmp_path):
    """The trainer's top-K entropy from the loss's own forward (hooked hidden states) equals the exact entropy of
    the model's logits and TRL's fused exact entropy of that forward."""
    trainer = build_trainer(SAAHGRPOTrainer, SAAHGRPOConfig, transformed_model_dir, tmp_path, method="sa",
                            alpha=0.5, temperature=TEMPERATURE, entropy_top_k=None)
    vocab = len(trainer.processing_class)
    trainer.args.entropy_top_k = vocab  # K = V; set after construction, which takes the estimate's K as given
    batch = fake_batch(vocab, seed=2)
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], 1)
    attention = torch.ones_like(ids)
    t = batch["completion_ids"].size(1)
    with trainer._capture_final_hidden(trainer.model, t) as captured:
        _, entropies, _ = trainer._get_per_token_logps_and_entropies(trainer.model, ids, attention, t,
                                                                      compute_entropy=True)
    top_k = trainer._normalised_entropy(trainer.model, entropies, captured)
    torch.testing.assert_close(top_k, exact_from_logits(trainer.model, ids)[:, -t - 1:-1], atol=1e-6, rtol=0)
    # TRL's kernel sums the entropy online, tile by tile: the same value up to float32 rounding of that order
    torch.testing.assert_close(top_k, entropies.float() / math.log(vocab), atol=1e-5, rtol=0)


def test_models_without_a_transform_read_as_none():
    for config in (Qwen2Config(), GraniteConfig()):
        assert logit_transform(config) == {"logit_scale": 1.0, "final_logit_softcapping": None}
    assert logit_transform(GraniteConfig(logits_scaling=8.0))["logit_scale"] == 1 / 8.0


def test_no_transform_is_bit_identical_to_the_plain_product():
    """Models without a transform: the defaults compute exactly what the plain ``head(h) / temperature`` does."""
    g = torch.Generator().manual_seed(0)
    hidden, weight = torch.randn(2, 5, 8, generator=g), torch.randn(40, 8, generator=g)
    plain = normalised_entropy(torch.nn.functional.linear(hidden, weight) / TEMPERATURE, top_k=7)
    assert torch.equal(normalised_entropy_from_hidden(hidden, weight, top_k=7, temperature=TEMPERATURE), plain)
