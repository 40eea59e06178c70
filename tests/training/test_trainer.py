"""SAAHGRPOTrainer against TRL's own GRPOTrainer, on a tiny random Qwen2 model."""

import copy

import pytest
import torch
from trl import GRPOConfig, GRPOTrainer

from saah_lab.training.study_trainer import StudyTrainer
from saah_lib.method.loss import normalised_entropy
from saah_lib.method.reward import TRL_REWARD_FUNCS
from saah_lib.models.loading import load_model_and_tokenizer
from saah_lib.tasks.prompts import to_trl_dataset
from saah_lib.tasks.synthetic import generate_problems
from saah_lib.training.trainer import SAAHGRPOConfig, SAAHGRPOTrainer

COMMON = dict(
    per_device_train_batch_size=4, num_generations=4, max_completion_length=8, beta=0.04, epsilon=0.2,
    report_to="none", use_cpu=True, bf16=False, logging_steps=1, max_steps=1, seed=0,
)


def build_trainer(cls, config_cls, model_dir, tmp_path, **args):
    model, tokenizer = load_model_and_tokenizer(str(model_dir))
    problems = generate_problems(8, seed=0)
    trainer = cls(
        model=model,
        reward_funcs=list(TRL_REWARD_FUNCS),
        args=config_cls(output_dir=str(tmp_path / cls.__name__), **{**COMMON, **args}),
        train_dataset=to_trl_dataset(problems, tokenizer),
        processing_class=tokenizer,
    )
    trainer.current_gradient_accumulation_steps = 2
    trainer.model.train()
    return trainer


def fake_batch(vocab, seed=0, b=4, p=5, t=7):
    """A scored batch as TRL's generation step would hand it to the loss."""
    g = torch.Generator().manual_seed(seed)
    prompt_mask = torch.ones(b, p, dtype=torch.long)
    prompt_mask[0, :2] = 0  # left padding
    lengths = torch.tensor([t, 3, 5, 1])
    completion_mask = (torch.arange(t)[None] < lengths[:, None]).long()
    return {
        "prompt_ids": torch.randint(3, vocab, (b, p), generator=g),
        "prompt_mask": prompt_mask,
        "completion_ids": torch.randint(3, vocab, (b, t), generator=g),
        "completion_mask": completion_mask,
        "advantages": torch.tensor([1.2, -0.7, 0.4, -0.9]),
        # off-policy old log-probs so that clipping is active
        "old_per_token_logps": -torch.rand(b, t, generator=g) * 6,
        "ref_per_token_logps": -torch.rand(b, t, generator=g) * 6,
        "num_items_in_batch": completion_mask.sum(),
    }


def loss_and_grads(trainer, inputs):
    trainer.model.zero_grad()
    loss = trainer._compute_loss(trainer.model, copy.deepcopy(inputs))
    loss.backward()
    grads = {n: p.grad.clone() for n, p in trainer.model.named_parameters() if p.grad is not None}
    return loss.detach(), grads


@pytest.mark.parametrize("method", ["grpo", "ah", "sa"])
def test_alpha_zero_equals_trl_bnpo_loss_and_gradients(method, tiny_random_model_dir, tmp_path):
    ours = build_trainer(SAAHGRPOTrainer, SAAHGRPOConfig, tiny_random_model_dir, tmp_path,
                         method=method, alpha=0.0, entropy_top_k=None, loss_type="bnpo", use_bias_correction_kl=False)
    trl = build_trainer(GRPOTrainer, GRPOConfig, tiny_random_model_dir, tmp_path,
                        loss_type="bnpo", use_bias_correction_kl=False)
    inputs = fake_batch(len(ours.processing_class))
    loss_ours, grads_ours = loss_and_grads(ours, inputs)
    loss_trl, grads_trl = loss_and_grads(trl, inputs)
    torch.testing.assert_close(loss_ours, loss_trl, atol=1e-6, rtol=1e-5)
    assert grads_ours.keys() == grads_trl.keys() and grads_ours
    for name in grads_trl:
        torch.testing.assert_close(grads_ours[name], grads_trl[name], atol=1e-6, rtol=1e-4, msg=name)
    # TRL's own metrics survive the override
    assert ours._metrics["train"]["kl"] and ours._metrics["train"]["entropy"]
    torch.testing.assert_close(torch.tensor(ours._metrics["train"]["kl"]), torch.tensor(trl._metrics["train"]["kl"]))


def test_positive_alpha_changes_the_loss(tiny_random_model_dir, tmp_path):
    ah = build_trainer(SAAHGRPOTrainer, SAAHGRPOConfig, tiny_random_model_dir, tmp_path,
                       method="ah", alpha=1.0, entropy_top_k=None, loss_type="bnpo")
    grpo = build_trainer(SAAHGRPOTrainer, SAAHGRPOConfig, tiny_random_model_dir, tmp_path,
                         method="grpo", entropy_top_k=None, loss_type="bnpo")
    inputs = fake_batch(len(ah.processing_class))
    assert not torch.allclose(loss_and_grads(ah, inputs)[0], loss_and_grads(grpo, inputs)[0])
    assert ah._metrics["train"]["saah/weight_mean"][0] < 1.0
    assert grpo._metrics["train"]["saah/weight_mean"][0] == 1.0


def captured_entropy(trainer, inputs):
    """The normalised entropy the trainer used, recovered from its logged mean."""
    loss_and_grads(trainer, inputs)
    return trainer._metrics["train"]["saah/entropy_norm"][-1]


def reference_entropy(trainer, inputs, top_k):
    """Entropy from a separate full forward through the unpatched model."""
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1)
    attn = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1)
    with torch.no_grad():
        logits = trainer.model(input_ids=ids, attention_mask=attn).logits
    t = inputs["completion_ids"].size(1)
    h = normalised_entropy(logits[:, -t - 1 : -1], top_k=top_k)
    mask = inputs["completion_mask"].float()
    return ((h * mask).sum() / mask.sum()).item()


def vocabulary(model_dir) -> int:
    return load_model_and_tokenizer(str(model_dir))[0].get_output_embeddings().weight.size(0)


@pytest.mark.parametrize("loss_type", ["bnpo", "dapo"])  # the paper's arithmetic, and TRL's loss
@pytest.mark.parametrize("top_k", [None, 5, "V"])
def test_entropy_from_the_training_forward_matches_a_separate_forward(top_k, loss_type, tiny_random_model_dir,
                                                                      tmp_path):
    top_k = vocabulary(tiny_random_model_dir) if top_k == "V" else top_k
    trainer = build_trainer(SAAHGRPOTrainer, SAAHGRPOConfig, tiny_random_model_dir, tmp_path,
                            method="sa", alpha=0.5, entropy_top_k=top_k, loss_type=loss_type)
    inputs = fake_batch(len(trainer.processing_class), seed=1)
    expected = reference_entropy(trainer, inputs, top_k)
    assert captured_entropy(trainer, inputs) == pytest.approx(expected, rel=1e-4)
    # the hook is removed after the forward
    backbone = trainer._causal_lm(trainer.model).base_model
    assert not backbone._forward_hooks


def test_top_k_with_k_equal_to_v_equals_exact(tiny_random_model_dir, tmp_path):
    exact = build_trainer(SAAHGRPOTrainer, SAAHGRPOConfig, tiny_random_model_dir, tmp_path,
                          method="ah", alpha=0.5, entropy_top_k=None)
    topk = build_trainer(SAAHGRPOTrainer, SAAHGRPOConfig, tiny_random_model_dir, tmp_path,
                         method="ah", alpha=0.5, entropy_top_k=vocabulary(tiny_random_model_dir))
    inputs = fake_batch(len(exact.processing_class), seed=2)
    l1, g1 = loss_and_grads(exact, inputs)
    l2, g2 = loss_and_grads(topk, inputs)
    torch.testing.assert_close(l1, l2, atol=1e-6, rtol=1e-5)


def test_groups_with_flat_rewards_get_zero_advantage(tiny_random_model_dir, tmp_path):
    trainer = build_trainer(StudyTrainer, SAAHGRPOConfig, tiny_random_model_dir, tmp_path,
                            method="sa", reward_std_threshold=0.15)
    # two groups of four: rewards of the first differ by 0.1 (std 0.058), of the second by 4 (std 2.3)
    trainer._last_rewards_per_func = torch.tensor([[7.4], [7.5], [7.5], [7.5], [0.0], [4.0], [4.0], [0.0]])
    trainer.reward_weights = torch.ones(1)
    advantages = torch.tensor([-1.5, 0.5, 0.5, 0.5, -0.87, 0.87, 0.87, -0.87])
    out = trainer._zero_flat_groups(advantages)
    assert out.tolist() == pytest.approx([0, 0, 0, 0, -0.87, 0.87, 0.87, -0.87])
    assert trainer._metrics["train"]["saah/frac_groups_below_threshold"] == [0.5]


@pytest.mark.parametrize("setting,layer", [({"reward_std_threshold": 0.15}, "FlatGroupsMixin"),
                                           ({"generation_backend": "compiled"}, "CompiledRolloutMixin")])
def test_the_core_trainer_refuses_a_setting_only_an_opt_in_layer_acts_on(setting, layer, tiny_random_model_dir,
                                                                         tmp_path):
    with pytest.raises(ValueError, match=f"'{next(iter(setting))}'.*opt-in.*{layer}"):
        build_trainer(SAAHGRPOTrainer, SAAHGRPOConfig, tiny_random_model_dir, tmp_path, method="sa", **setting)
    with_layers = build_trainer(StudyTrainer, SAAHGRPOConfig, tiny_random_model_dir, tmp_path, method="sa",
                                **setting)
    assert with_layers.args.reward_std_threshold == setting.get("reward_std_threshold", 0.0)


def test_a_top_k_above_the_vocabulary_is_refused(tiny_random_model_dir, tmp_path):
    with pytest.raises(ValueError, match="'entropy_top_k': .* larger than the model's vocabulary"):
        build_trainer(SAAHGRPOTrainer, SAAHGRPOConfig, tiny_random_model_dir, tmp_path, method="sa",
                      entropy_top_k=vocabulary(tiny_random_model_dir) + 1)


def test_config_rejects_unknown_method_and_bad_alpha(tmp_path):
    with pytest.raises(ValueError, match="'method': unknown value"):
        SAAHGRPOConfig(output_dir=str(tmp_path), method="ppo", use_cpu=True, report_to="none")
    with pytest.raises(ValueError, match="alpha"):
        SAAHGRPOConfig(output_dir=str(tmp_path), method="ah", alpha=11.0, use_cpu=True, report_to="none")


def test_without_a_config_the_trainer_builds_its_own(tiny_random_model_dir, tmp_path, monkeypatch):
    """As GRPOTrainer does, with TRL's defaults: here an SAAHGRPOConfig (float32 on this CPU)."""
    monkeypatch.chdir(tmp_path)
    model, tokenizer = load_model_and_tokenizer(str(tiny_random_model_dir))
    trainer = SAAHGRPOTrainer(model, list(TRL_REWARD_FUNCS), processing_class=tokenizer,
                              train_dataset=to_trl_dataset(generate_problems(8, seed=0), tokenizer))
    assert isinstance(trainer.args, SAAHGRPOConfig) and trainer.args.loss_type == "dapo"
    assert trainer.args.bf16 is (False if not torch.cuda.is_available() else True)
    with pytest.raises(TypeError, match="needs an SAAHGRPOConfig"):
        SAAHGRPOTrainer(model, list(TRL_REWARD_FUNCS), args=GRPOConfig(output_dir="x", use_cpu=True),
                        processing_class=tokenizer, train_dataset=to_trl_dataset(generate_problems(8, seed=0), tokenizer))


@pytest.mark.parametrize("loss_type,top_k", [("bnpo", 5), ("bnpo", None), ("dapo", 5)])
def test_forward_batch_size_chunks_the_forward_and_keeps_the_loss(loss_type, top_k, tiny_random_model_dir, tmp_path):
    """forward_batch_size=1: four forwards of one completion in the loss (the paper's path and TRL's), the same
    loss and gradients as one forward of four (up to float rounding), the top-K hidden states kept in order."""
    settings = dict(method="sa", alpha=0.5, entropy_top_k=top_k, loss_type=loss_type, use_bias_correction_kl=False)
    whole = build_trainer(SAAHGRPOTrainer, SAAHGRPOConfig, tiny_random_model_dir, tmp_path / "whole", **settings)
    chunked = build_trainer(SAAHGRPOTrainer, SAAHGRPOConfig, tiny_random_model_dir, tmp_path / "chunked",
                            forward_batch_size=1, **settings)
    forwards = []
    backbone = chunked._causal_lm(chunked.model).base_model
    handle = backbone.register_forward_hook(lambda module, args, out: forwards.append(out.last_hidden_state.size(0)))
    inputs = fake_batch(len(whole.processing_class))
    try:
        loss_chunked, grads_chunked = loss_and_grads(chunked, inputs)
    finally:
        handle.remove()
    loss_whole, grads_whole = loss_and_grads(whole, inputs)
    assert forwards == [1, 1, 1, 1]
    torch.testing.assert_close(loss_chunked, loss_whole, atol=1e-6, rtol=1e-5)
    assert grads_chunked.keys() == grads_whole.keys() and grads_whole
    for name in grads_whole:
        torch.testing.assert_close(grads_chunked[name], grads_whole[name], atol=1e-6, rtol=1e-4, msg=name)
    for metric in ("saah/weight_mean", "saah/entropy_norm"):
        torch.testing.assert_close(torch.tensor(chunked._metrics["train"][metric]),
                                   torch.tensor(whole._metrics["train"][metric]), atol=1e-6, rtol=1e-5)


def test_forward_batch_size_must_be_a_count(tmp_path):
    with pytest.raises(ValueError, match="'forward_batch_size'"):
        SAAHGRPOConfig(output_dir=str(tmp_path), forward_batch_size=0, use_cpu=True, report_to="none")


@pytest.mark.slow  # one training step
@pytest.mark.parametrize("bf16,dtype", [(True, torch.bfloat16), (False, torch.float32)])
def test_bf16_on_a_cpu_trains_in_bf16(bf16, dtype, tiny_random_model_dir, tmp_path):
    """What make_config gives for dtype="bfloat16" on a CPU: the loss's forward runs under bf16 autocast."""
    trainer = build_trainer(SAAHGRPOTrainer, SAAHGRPOConfig, tiny_random_model_dir, tmp_path, bf16=bf16,
                            method="sa", alpha=0.5)
    seen = []
    layer = trainer.accelerator.unwrap_model(trainer.model).model.layers[0].mlp.down_proj
    handle = layer.register_forward_hook(lambda module, args, out: seen.append((torch.is_grad_enabled(), out.dtype)))
    try:
        trainer.train()
    finally:
        handle.remove()
    assert trainer.state.global_step == 1
    assert {d for grad, d in seen if grad} == {dtype}  # the forward that trains
