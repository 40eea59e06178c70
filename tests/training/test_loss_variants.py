"""The weights in every TRL loss type: at alpha 0 SAAHGRPOTrainer's loss and gradients are TRL's own; at
alpha > 0 they are the documented formula (saah_lib.method.loss), recomputed here from the model's logits
with plain tensor operations."""

import copy
import inspect
import math

import pytest
import torch
from trl import GRPOConfig, GRPOTrainer

from saah_lib.method.loss import method_weights
from saah_lib.method.methods import LOSS_TYPES
from saah_lib.training.trainer import SAAHGRPOConfig, SAAHGRPOTrainer
from tests.method.reference_loss import saah_policy_loss
from tests.training.test_trainer import build_trainer, fake_batch

# (loss_type, importance_sampling_level): every loss type per token, and those GSPO keeps meaningful
VARIANTS = [(t, "token") for t in LOSS_TYPES] + [("luspo", "sequence"), ("dapo", "sequence")]
EXTRAS = dict(epsilon_high=0.28, delta=1.6, use_bias_correction_kl=True)
ALL_OPTIONS = dict(top_entropy_quantile=0.5, entropy_coef=0.01, off_policy_mask_threshold=0.05, **EXTRAS)


def with_old_logps(trainer, inputs, seed=3):
    """Old log-probs near the model's own, so that ratios straddle the clip range (and VESPO's weights live)."""
    logps = plain_logps_and_entropy(trainer.model, inputs)[0].detach()
    g = torch.Generator().manual_seed(seed)
    return {**inputs, "old_per_token_logps": logps + 0.3 * torch.randn(logps.shape, generator=g)}


def plain_logps_and_entropy(model, inputs):
    """Per-token log-probs (with gradient) and exact entropies of the completion tokens, from the logits."""
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1)
    attn = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1)
    t = inputs["completion_ids"].size(1)
    logits = model(input_ids=ids, attention_mask=attn).logits[:, -t - 1:-1].float()
    logp_all = torch.log_softmax(logits, -1)
    logps = logp_all.gather(-1, inputs["completion_ids"].unsqueeze(-1)).squeeze(-1)
    entropy = -(logp_all.exp() * logp_all).sum(-1)  # with gradient: the entropy bonus trains through it
    return logps, entropy, logits.size(-1)


def with_vllm_sampling(trainer_pair, inputs, seed=11):
    """What a vLLM rollout adds: the sampler's log-probs and TRL's importance-sampling ratios."""
    for trainer in trainer_pair:
        trainer.use_vllm = True  # read by the loss only: the correction below applies
    g = torch.Generator().manual_seed(seed)
    shape = inputs["completion_mask"].shape
    return {**inputs, "sampling_per_token_logps": inputs["old_per_token_logps"] + 0.1 * torch.randn(shape, generator=g),
            "importance_sampling_ratio": 0.5 + torch.rand(shape, generator=g)}


def reference_loss(trainer, inputs, method, alpha):
    """The documented loss of ``trainer``'s settings, by hand."""
    a, m = trainer.args, inputs["completion_mask"].float()
    logps, entropy_with_grad, vocab = plain_logps_and_entropy(trainer.model, inputs)
    entropy = entropy_with_grad.detach()
    adv = inputs["advantages"].reshape(-1, 1)
    h = entropy / math.log(vocab) * m
    w = torch.exp(-alpha * torch.cumsum(h, -1))
    if method == "sa":
        w = torch.where(adv < 0, w, torch.ones_like(w))
    if method == "grpo":
        w = torch.ones_like(w)
    old, ref = inputs["old_per_token_logps"], inputs["ref_per_token_logps"]
    log_r = logps - old
    if a.importance_sampling_level == "sequence":
        log_r = ((log_r * m).sum(-1) / m.sum(-1).clamp(min=1)).unsqueeze(-1)
    r = torch.exp(log_r)
    eps_low, eps_high = a.epsilon, a.epsilon_high if a.epsilon_high is not None else a.epsilon
    loss_type = a.loss_type
    if loss_type == "cispo":
        policy = -torch.clamp(r, max=eps_high).detach() * adv * logps
    elif loss_type == "sapo":
        tau = torch.where(adv > 0, a.sapo_temperature_pos, a.sapo_temperature_neg)
        policy = -torch.sigmoid(tau * (r - 1)) * 4 / tau * adv
    elif loss_type == "vespo":
        log_w = torch.clamp((torch.clamp(log_r, -20, 20) * m).sum(-1, keepdim=True), math.log(1e-8), 20.0)
        k = torch.where(adv >= 0, a.vespo_k_pos, a.vespo_k_neg)
        lam = torch.where(adv >= 0, a.vespo_lambda_pos, a.vespo_lambda_neg)
        phi = torch.exp(lam + k * log_w - lam * torch.exp(log_w)).detach()
        policy = -phi * adv * logps
    else:
        first = r if a.delta is None else torch.clamp(r, max=a.delta)
        policy = -torch.min(first * adv, torch.clamp(r, 1 - eps_low, 1 + eps_high) * adv)
    policy = policy.expand_as(m)
    if a.off_policy_mask_threshold is not None:  # drop negative rollouts that drifted from the sampler
        sampler = inputs.get("sampling_per_token_logps", old)
        drift = ((sampler - logps.detach()) * m).sum(-1, keepdim=True) / m.sum(-1, keepdim=True)
        policy = policy * ((adv >= 0) | (drift <= a.off_policy_mask_threshold)).float()
    entropy_mask = torch.ones_like(m)
    if a.top_entropy_quantile < 1.0:  # only the most uncertain tokens train the policy
        entropy_mask = (entropy >= torch.quantile(entropy[m.bool()], 1 - a.top_entropy_quantile)).float() * m
        policy = policy * entropy_mask
    if "importance_sampling_ratio" in inputs:
        policy = policy * inputs["importance_sampling_ratio"]
    kl = torch.exp(ref - logps) - (ref - logps) - 1
    if a.use_bias_correction_kl:
        kl = kl * r
    beta, wm = a.beta, w * m
    accumulation = trainer.current_gradient_accumulation_steps
    if loss_type in ("grpo", "sapo"):
        loss = ((policy * wm).sum(-1) / wm.sum(-1) + beta * (kl * m).sum(-1) / m.sum(-1)).mean()
    elif loss_type == "bnpo":
        loss = (policy * wm).sum() / wm.sum() + beta * (kl * m).sum() / m.sum()
    elif loss_type == "dr_grpo":
        loss = ((policy * wm).sum() + beta * (kl * m).sum()) / (m.size(0) * a.max_completion_length)
    elif loss_type == "luspo":
        loss = ((policy * wm + beta * kl * m).sum(-1)).mean()
    else:  # dapo, cispo, vespo: TRL's window count N, weighted by the micro-batch's weighted fraction rho
        window = inputs["num_items_in_batch"] * accumulation / a.steps_per_generation
        rho = wm.sum() / m.sum()
        loss = ((policy * wm).sum() / rho + beta * (kl * m).sum()) / window * accumulation
    bonus_mask = m * entropy_mask  # the bonus: the plain mean entropy of the tokens that train
    bonus = a.entropy_coef * (entropy_with_grad * bonus_mask).sum() / bonus_mask.sum()
    return (loss - bonus) / accumulation


def loss_and_grads(trainer, inputs, compute):
    trainer.model.zero_grad()
    loss = compute(copy.deepcopy(inputs))
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in trainer.model.named_parameters() if p.grad is not None}


def ours_and_trl(model_dir, tmp_path, loss_type, level, method="sa", alpha=0.0, **extra):
    # float32 on both sides (TRL's GRPOConfig picks bf16 on a CPU, SAAHGRPOConfig float32)
    settings = dict(loss_type=loss_type, importance_sampling_level=level, bf16=False, **extra)
    ours = build_trainer(SAAHGRPOTrainer, SAAHGRPOConfig, model_dir, tmp_path, method=method, alpha=alpha,
                         entropy_top_k=None, **settings)
    trl = build_trainer(GRPOTrainer, GRPOConfig, model_dir, tmp_path, **settings)
    return ours, trl


def assert_same(got, expected, exact, tolerance=(1e-6, 1e-5)):
    (loss_a, grads_a), (loss_b, grads_b) = got, expected
    assert grads_a.keys() == grads_b.keys() and grads_a
    if exact:
        assert torch.equal(loss_a, loss_b)
        assert all(torch.equal(grads_a[n], grads_b[n]) for n in grads_b)
        return
    atol, rtol = tolerance
    torch.testing.assert_close(loss_a, loss_b, atol=atol, rtol=rtol)
    for name in grads_b:
        torch.testing.assert_close(grads_a[name], grads_b[name], atol=atol, rtol=10 * rtol, msg=name)


@pytest.mark.parametrize("loss_type,level", VARIANTS + [("grpo", "sequence")])
@pytest.mark.parametrize("method", ["grpo", "sa"])
def test_alpha_zero_is_trl_loss_and_gradients(loss_type, level, method, tiny_random_model_dir, tmp_path):
    ours, trl = ours_and_trl(tiny_random_model_dir, tmp_path, loss_type, level, method=method)
    inputs = with_old_logps(ours, fake_batch(len(ours.processing_class)))
    got = loss_and_grads(ours, inputs, lambda x: ours._compute_loss(ours.model, x))
    expected = loss_and_grads(trl, inputs, lambda x: trl._compute_loss(trl.model, x))
    assert_same(got, expected, exact=True)
    for name in ("kl", "entropy", "clip_ratio/region_mean"):
        assert ours._metrics["train"][name] == pytest.approx(trl._metrics["train"][name], rel=1e-5), name


@pytest.mark.parametrize("loss_type,level", VARIANTS)
@pytest.mark.parametrize("method,alpha", [("ah", 0.7), ("sa", 2.0)])
def test_positive_alpha_is_the_documented_formula(loss_type, level, method, alpha, tiny_random_model_dir,
                                                  tmp_path):
    ours, _ = ours_and_trl(tiny_random_model_dir, tmp_path, loss_type, level, method=method, alpha=alpha,
                           **(EXTRAS if loss_type not in ("cispo", "sapo", "vespo") else {}))
    inputs = with_old_logps(ours, fake_batch(len(ours.processing_class), seed=4))
    got = loss_and_grads(ours, inputs, lambda x: ours._compute_loss(ours.model, x))
    expected = loss_and_grads(ours, inputs, lambda x: reference_loss(ours, x, method, alpha))
    assert_same(got, expected, exact=False)
    assert ours._metrics["train"]["saah/weight_mean"][-1] < 1.0


@pytest.mark.parametrize("alpha", [0.0, 1.5])
def test_bnpo_through_trl_agrees_with_the_paper_arithmetic(alpha, tiny_random_model_dir, tmp_path):
    """The paper's configuration (bnpo, plain KL estimator) through TRL's loss with the weighted advantages, and
    the paper's loss written out (tests/method/reference_loss.py): the same loss and gradients."""
    ours, _ = ours_and_trl(tiny_random_model_dir, tmp_path, "bnpo", "token", method="sa", alpha=alpha,
                           use_bias_correction_kl=False)
    inputs = with_old_logps(ours, fake_batch(len(ours.processing_class), seed=5))

    def paper(x):
        logps, entropy, vocab = plain_logps_and_entropy(ours.model, x)
        mask = x["completion_mask"].float()
        weights = method_weights("sa", entropy.detach() / math.log(vocab), mask, x["advantages"], alpha)
        loss, _ = saah_policy_loss(logps, x["old_per_token_logps"], x["ref_per_token_logps"], x["advantages"],
                                   mask, weights, epsilon=ours.epsilon_low, beta=ours.beta)
        return loss / ours.current_gradient_accumulation_steps

    through_trl = loss_and_grads(ours, inputs, lambda x: ours._compute_loss(ours.model, x))
    assert_same(through_trl, loss_and_grads(ours, inputs, paper), exact=False)
    assert_same(through_trl, loss_and_grads(ours, inputs, lambda x: reference_loss(ours, x, "sa", alpha)),
                exact=False)


def test_trl_options_around_the_loss_pass_through(tiny_random_model_dir, tmp_path):
    """The entropy mask, entropy bonus, off-policy mask, delta, two-sided epsilon and bias-corrected KL: at
    alpha 0 the loss, gradients and metrics are TRL's, bit for bit."""
    ours, trl = ours_and_trl(tiny_random_model_dir, tmp_path, "dapo", "token", method="sa", **ALL_OPTIONS)
    inputs = with_vllm_sampling((ours, trl), with_old_logps(ours, fake_batch(len(ours.processing_class), seed=6)))
    got = loss_and_grads(ours, inputs, lambda x: ours._compute_loss(ours.model, x))
    assert_same(got, loss_and_grads(trl, inputs, lambda x: trl._compute_loss(trl.model, x)), exact=True)
    for name, values in trl._metrics["train"].items():
        assert ours._metrics["train"][name] == values, name


@pytest.mark.parametrize("loss_type", ["bnpo", "grpo", "dapo", "dr_grpo", "luspo"])
def test_trl_options_around_the_weighted_loss_are_the_documented_formula(loss_type, tiny_random_model_dir, tmp_path):
    ours, _ = ours_and_trl(tiny_random_model_dir, tmp_path, loss_type, "token", method="sa", alpha=1.5,
                           **ALL_OPTIONS)
    inputs = with_vllm_sampling((ours,), with_old_logps(ours, fake_batch(len(ours.processing_class), seed=12)))
    got = loss_and_grads(ours, inputs, lambda x: ours._compute_loss(ours.model, x))
    assert_same(got, loss_and_grads(ours, inputs, lambda x: reference_loss(ours, x, "sa", 1.5)), exact=False)


def test_the_entropy_bonus_is_unweighted(tiny_random_model_dir, tmp_path):
    """With weights on, the entropy bonus still subtracts coef * the plain mean entropy, as TRL's does."""
    with_bonus, _ = ours_and_trl(tiny_random_model_dir, tmp_path, "grpo", "token", method="ah", alpha=1.0,
                                 entropy_coef=0.1)
    without, _ = ours_and_trl(tiny_random_model_dir, tmp_path, "grpo", "token", method="ah", alpha=1.0)
    inputs = with_old_logps(without, fake_batch(len(without.processing_class), seed=7))
    entropy = plain_logps_and_entropy(without.model, inputs)[1].detach()
    m = inputs["completion_mask"].float()
    bonus = 0.1 * (entropy * m).sum() / m.sum() / without.current_gradient_accumulation_steps
    loss_bonus = with_bonus._compute_loss(with_bonus.model, copy.deepcopy(inputs)).detach()
    loss_plain = without._compute_loss(without.model, copy.deepcopy(inputs)).detach()
    torch.testing.assert_close(loss_plain - loss_bonus, bonus, atol=1e-6, rtol=1e-4)


@pytest.mark.parametrize("loss_type", ["dapo", "luspo"])
@pytest.mark.parametrize("level", ["sequence", "token"])
def test_gspo_sees_only_each_completions_weighted_length(loss_type, level, tiny_random_model_dir, tmp_path,
                                                         monkeypatch):
    """Under sequence-level sampling a weight profile falling along each completion and a flat one of the same
    weighted length give the same loss and gradients (the horizon shaping is gone); per token they differ."""
    ours, _ = ours_and_trl(tiny_random_model_dir, tmp_path, loss_type, level, method="ah", alpha=1.0)
    inputs = with_old_logps(ours, fake_batch(len(ours.processing_class), seed=13))
    m = inputs["completion_mask"].float()
    falling = torch.linspace(1.0, 0.2, m.size(1)).expand_as(m)
    flat = ((falling * m).sum(-1, keepdim=True) / m.sum(-1, keepdim=True)).expand_as(m)
    results = []
    for weights in (falling, flat):
        monkeypatch.setattr("saah_lib.training.trainer.method_weights", lambda *args, w=weights: w.clone())
        results.append(loss_and_grads(ours, inputs, lambda x: ours._compute_loss(ours.model, x)))
    if level == "sequence":
        assert_same(*results, exact=False)
    else:
        with pytest.raises(AssertionError):
            assert_same(*results, exact=False)


@pytest.mark.parametrize("loss_type", ["grpo", "sapo"])
def test_gspo_where_the_weights_cancel_is_refused(loss_type, tmp_path):
    with pytest.raises(ValueError, match="weights cancel"):
        SAAHGRPOConfig(output_dir=str(tmp_path), use_cpu=True, method="sa", alpha=0.5, loss_type=loss_type,
                       importance_sampling_level="sequence")
    SAAHGRPOConfig(output_dir=str(tmp_path), use_cpu=True, method="grpo", loss_type=loss_type,
                   importance_sampling_level="sequence")  # plain GSPO is TRL's


# ---------------------------------------------------------------------------------------------- the hook point
def test_trl_reads_the_advantages_after_its_forward():
    """The point the weights hang on, in TRL's source: a TRL upgrade that moves it fails here first."""
    source = inspect.getsource(GRPOTrainer._compute_loss)
    forward = source.index("self._get_per_token_logps_and_entropies(")
    assert source.count('inputs["advantages"]') == 1 and source.index('inputs["advantages"]') > forward
    assert "advantages" not in source[:forward].replace("# ", "")
    # every policy term multiplies the advantage (linear in it), the KL term never sees it
    for term in ("coef_1 * advantages", "coef_2 * advantages", "-clamped_ratios * advantages * per_token_logps",
                 "-soft_coef_1 * advantages", "-phi_seq * advantages * per_token_logps"):
        assert term in source, term
    assert "advantages" not in source[source.index("per_token_kl = ("):source.index("if self.loss_type == \"cispo\"")]
    assert set(LOSS_TYPES) == {t for t in LOSS_TYPES if f'"{t}"' in source}


def test_a_moved_hook_is_an_error(tiny_random_model_dir, tmp_path, monkeypatch):
    ours = build_trainer(SAAHGRPOTrainer, SAAHGRPOConfig, tiny_random_model_dir, tmp_path, method="sa",
                         alpha=0.5, loss_type="dapo")
    inputs = fake_batch(len(ours.processing_class))
    monkeypatch.setattr(GRPOTrainer, "_compute_loss", lambda self, model, inputs: inputs["advantages"].sum())
    with pytest.raises(RuntimeError, match="before its forward"):
        ours._compute_loss(ours.model, copy.deepcopy(inputs))
    monkeypatch.setattr(GRPOTrainer, "_compute_loss", lambda self, model, inputs: torch.zeros(()))
    with pytest.raises(RuntimeError, match="no longer reads"):
        ours._compute_loss(ours.model, copy.deepcopy(inputs))


# ------------------------------------------------------------------------------- what TRL adds around the loss
@pytest.fixture(scope="module")
def tiny_moe_model_dir(tiny_random_model_dir, tmp_path_factory):
    """A tiny Qwen3-MoE (router auxiliary loss on) with the tiny tokenizer."""
    from transformers import AutoTokenizer, Qwen3MoeConfig, Qwen3MoeForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(tiny_random_model_dir)
    torch.manual_seed(0)
    config = Qwen3MoeConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, moe_intermediate_size=16,
                            num_experts=4, num_experts_per_tok=2, num_hidden_layers=2, num_attention_heads=2,
                            num_key_value_heads=1, head_dim=16, router_aux_loss_coef=0.05,
                            pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
    folder = tmp_path_factory.mktemp("tiny_moe")
    Qwen3MoeForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.mark.parametrize("loss_type", ["bnpo", "dapo"])
def test_the_moe_auxiliary_loss_is_trls(loss_type, tiny_moe_model_dir, tmp_path):
    ours, trl = ours_and_trl(tiny_moe_model_dir, tmp_path, loss_type, "token", method="sa")
    assert ours.aux_loss_enabled
    inputs = with_old_logps(ours, fake_batch(len(ours.processing_class), seed=8))
    got = loss_and_grads(ours, inputs, lambda x: ours._compute_loss(ours.model, x))
    assert_same(got, loss_and_grads(trl, inputs, lambda x: trl._compute_loss(trl.model, x)), exact=True)
    assert ours._metrics["train"]["aux_loss"] == trl._metrics["train"]["aux_loss"] != []


def test_the_moe_auxiliary_loss_is_added_unweighted(tiny_moe_model_dir, tmp_path):
    with_aux, _ = ours_and_trl(tiny_moe_model_dir, tmp_path, "dapo", "token", method="ah", alpha=1.0)
    without, _ = ours_and_trl(tiny_moe_model_dir, tmp_path, "dapo", "token", method="ah", alpha=1.0,
                              router_aux_loss_coef=0.0)
    inputs = with_old_logps(without, fake_batch(len(without.processing_class), seed=9))
    difference = (with_aux._compute_loss(with_aux.model, copy.deepcopy(inputs))
                  - without._compute_loss(without.model, copy.deepcopy(inputs))).detach()
    aux = with_aux._metrics["train"]["aux_loss"][-1]
    expected = torch.tensor(0.05 * aux / with_aux.current_gradient_accumulation_steps)
    torch.testing.assert_close(difference, expected, atol=1e-6, rtol=1e-4)


def test_multimodal_inputs_reach_the_forward(tiny_random_model_dir, tmp_path, monkeypatch):
    """An image batch goes through TRL's loss, which forwards its image entries to the model."""
    ours = build_trainer(SAAHGRPOTrainer, SAAHGRPOConfig, tiny_random_model_dir, tmp_path, method="sa",
                         alpha=0.5, loss_type="bnpo", use_bias_correction_kl=False, bf16=False)
    original, seen = GRPOTrainer._get_per_token_logps_and_entropies, {}

    def forward_without_images(self, *args, pixel_values=None, image_grid_thw=None, **kwargs):
        seen.update(pixel_values=pixel_values, image_grid_thw=image_grid_thw)
        return original(self, *args, **kwargs)  # the text model has no vision tower

    monkeypatch.setattr(GRPOTrainer, "_get_per_token_logps_and_entropies", forward_without_images)
    images = {"pixel_values": torch.rand(4, 6), "image_grid_thw": torch.ones(4, 3, dtype=torch.long),
              "num_images": [1, 1, 1, 1]}
    inputs = {**fake_batch(len(ours.processing_class)), **images}
    ours._compute_loss(ours.model, inputs)
    assert seen["pixel_values"] is images["pixel_values"] and seen["image_grid_thw"] is images["image_grid_thw"]


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_evaluation_mode_weights_without_accumulation(loss_type, tiny_random_model_dir, tmp_path):
    """In evaluation TRL neither splits nor accumulates: the reference without the accumulation factor."""
    ours, _ = ours_and_trl(tiny_random_model_dir, tmp_path, loss_type, "token", method="sa", alpha=1.0)
    inputs = with_old_logps(ours, fake_batch(len(ours.processing_class), seed=10))
    ours.model.eval()
    with torch.no_grad():
        got = ours._compute_loss(ours.model, copy.deepcopy(inputs))
        accumulation, ours.current_gradient_accumulation_steps = ours.current_gradient_accumulation_steps, 1
        steps_per_generation, ours.args.steps_per_generation = ours.args.steps_per_generation, 1
        expected = reference_loss(ours, inputs, "sa", 1.0)
    ours.current_gradient_accumulation_steps, ours.args.steps_per_generation = accumulation, steps_per_generation
    torch.testing.assert_close(got, expected, atol=1e-6, rtol=1e-5)
    assert ours._metrics["eval"]["saah/weight_mean"] and not ours._metrics["train"]["saah/weight_mean"]
