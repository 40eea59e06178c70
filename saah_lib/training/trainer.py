"""SA-AH-GRPO on top of TRL's ``GRPOTrainer``: the token weights in TRL's loss, and nothing else.

TRL's own ``_compute_loss`` runs with the ``advantages`` it reads after its forward multiplied per token by
:func:`saah_lib.method.loss.advantage_factors`. The entropies come from that forward
(``_get_per_token_logps_and_entropies``): TRL's exact entropy, or a top-K estimate from the hooked final
hidden states through the LM head and the model's own logit transform. The paper's configuration (``bnpo``,
none of TRL's loss options, text only) is computed by ``saah_policy_loss``, with the arithmetic the committed
studies were recorded with (docs/library.md). TRL has no public hook inside its loss, hence these two private
overrides (tests/training/test_trl_surface.py checks their signatures and every member read).

Opt-in layers, each a mixin placed before this class: compiled rollouts and one sampling policy
(:mod:`saah_lib.models.rollout_trainer`), the paper's flat-group rule (:mod:`saah_lib.training.flat_groups`);
the artifact's runs use :class:`saah_lib.training.study_trainer.StudyTrainer`, which has both.
"""

from __future__ import annotations

import math
from contextlib import contextmanager

import torch
from trl import GRPOTrainer
from trl.trainer.utils import nanmax, nanmin

from saah_lib.method.loss import (
    advantage_factors,
    method_weights,
    normalised_entropy_from_hidden,
    saah_policy_loss,
    weight_statistics,
)
from saah_lib.method.methods import weights_problem
from saah_lib.models.backends import require_vllm
from saah_lib.training.config import SAAHGRPOConfig

#: The batch entries TRL's loss forwards to the model beside the token ids (images and their layout).
MODEL_INPUT_KEYS = ("pixel_values", "image_grid_thw", "num_images", "pixel_attention_mask", "spatial_shapes",
                    "num_tiles", "image_sizes", "token_type_ids", "mm_token_type_ids", "image_position_ids")


class _WeightedAdvantages(dict):
    """TRL's batch, whose ``advantages`` entry is weighted when TRL's loss reads it (after its forward)."""

    def __init__(self, inputs, weigh):
        super().__init__(inputs)
        self._weigh = weigh
        self._weighted = None

    @property
    def was_read(self) -> bool:
        return self._weighted is not None

    def __getitem__(self, key):
        if key != "advantages":
            return super().__getitem__(key)
        if self._weighted is None:
            self._weighted = self._weigh(self, super().__getitem__(key))
        return self._weighted

    def get(self, key, default=None):
        return self[key] if key in self else default


def logit_transform(config) -> dict:
    """What a model's forward applies to ``lm_head(h)`` before the softmax, as
    :func:`normalised_entropy_from_hidden` takes it: read from the config as TRL's fused head reads it
    (``trl.trainer.utils.add_fused_lm_head``), so the top-K estimate and TRL's exact entropy measure the same
    distribution.  Cohere multiplies by ``logit_scale``, Granite divides by ``logits_scaling``, Gemma2/3 cap
    with ``final_logit_softcapping``; a model with none of these gives the defaults (no transform)."""
    text = config.get_text_config()
    scale = next((getattr(text, name) for name in ("logit_scale", "output_multiplier", "lm_head_multiplier")
                  if getattr(text, name, None) is not None), None)
    if scale is None and getattr(text, "logits_scaling", None) is not None:
        scale = text.logits_scaling if text.model_type == "hyperclovax" else 1 / text.logits_scaling
    return {"logit_scale": 1.0 if scale is None else scale,
            "final_logit_softcapping": getattr(text, "final_logit_softcapping", None)}


def _refuse_missing_generation_config(model) -> None:
    """A model object whose ``generation_config`` is None: an error now, naming the field.  transformers' own
    ``generate`` and ``save_pretrained`` (every checkpoint) fail on it, deep in a traceback, steps later."""
    if model is not None and not isinstance(model, str) and hasattr(model, "generation_config") \
            and model.generation_config is None:
        raise ValueError("model.generation_config is None: transformers' generate and save_pretrained (every "
                         "checkpoint) need one; set model.generation_config = GenerationConfig.from_model_config("
                         "model.config), or GenerationConfig() for transformers' defaults")


class SAAHGRPOTrainer(GRPOTrainer):
    """``GRPOTrainer`` whose loss weights tokens by their entropy-adaptive horizon."""

    def __init__(self, *args, **kwargs):
        config = kwargs.get("args", args[2] if len(args) > 2 else None)
        if config is None:  # TRL would build its own GRPOConfig, without the method's fields
            model = kwargs.get("model", args[0] if args else None)
            name = model if isinstance(model, str) else model.config._name_or_path
            config = SAAHGRPOConfig(output_dir=f"{name.split('/')[-1]}-GRPO")
            if len(args) > 2:
                args = (*args[:2], config, *args[3:])
            else:
                kwargs["args"] = config
        if not isinstance(config, SAAHGRPOConfig):
            raise TypeError(f"SAAHGRPOTrainer needs an SAAHGRPOConfig (TRL's GRPOConfig plus the method's fields), "
                            f"got {type(config).__name__}")
        if config.use_vllm:
            require_vllm()  # before TRL tries to import it
        _refuse_missing_generation_config(kwargs.get("model", args[0] if args else None))
        super().__init__(*args, **kwargs)
        self._check_weights_apply()
        self._loss_capture = None
        self.token_entropy_samples: list[dict] = []
        self.generation_backend = self._resolve_generation_backend()
        self._refuse_settings_of_absent_layers()

    def _resolve_generation_backend(self) -> str:
        """TRL's own generation: ``vllm`` or ``hf`` (``auto``); the compiled engine is an opt-in layer."""
        if self.use_vllm:
            return "vllm"
        if self.args.generation_backend == "compiled":
            raise ValueError("config field 'generation_backend': 'compiled' needs the opt-in rollout layer: "
                             "class Trainer(CompiledRolloutMixin, SAAHGRPOTrainer) with CompiledRolloutMixin "
                             "from saah_lib.models.rollout_trainer, or saah_lib.training.study_trainer.StudyTrainer")
        return "hf"

    def _refuse_settings_of_absent_layers(self) -> None:
        """A setting that only an opt-in layer acts on is an error without that layer, not silently ignored."""
        if self.args.reward_std_threshold > 0 and not getattr(self, "zeroes_flat_groups", False):
            raise ValueError("config field 'reward_std_threshold': the paper's flat-group rule is an opt-in layer: "
                             "class Trainer(FlatGroupsMixin, SAAHGRPOTrainer) with FlatGroupsMixin from "
                             "saah_lib.training.flat_groups, or saah_lib.training.study_trainer.StudyTrainer")

    def _check_weights_apply(self) -> None:
        """The weights act in this loss (:func:`weights_problem`), and a top-K estimate has K <= V."""
        a = self.args
        problem = weights_problem(a.method, a.alpha, self.loss_type, self.importance_sampling_level)
        if problem:
            raise ValueError(f"SAAHGRPOTrainer: method={a.method!r}, alpha={a.alpha}: {problem}")
        vocab = self._causal_lm(self.model).get_output_embeddings().weight.size(0)
        if a.entropy_top_k is not None and a.entropy_top_k > vocab:
            raise ValueError(f"config field 'entropy_top_k': {a.entropy_top_k} is larger than the model's "
                             f"vocabulary of {vocab} tokens (the top-K estimate needs K <= V; None gives the "
                             "exact entropy)")

    # ------------------------------------------------------------------ entropy
    def _causal_lm(self, model):
        model = self.accelerator.unwrap_model(model)
        return model.get_base_model() if hasattr(model, "get_base_model") else model

    @contextmanager
    def _capture_final_hidden(self, model, logits_to_keep: int):
        """Keep the final hidden states that predict completion tokens, from TRL's own forward."""
        if self.args.entropy_top_k is None:
            yield None
            return
        captured: list[torch.Tensor] = []

        def hook(module, args, output):
            hidden = output.last_hidden_state if hasattr(output, "last_hidden_state") else output[0]
            captured.append(hidden[:, -(logits_to_keep + 1) : -1].detach())

        handle = self._causal_lm(model).base_model.register_forward_hook(hook)
        try:
            yield captured
        finally:
            handle.remove()

    def _normalised_entropy(self, model, entropies: torch.Tensor, captured) -> torch.Tensor:
        causal_lm = self._causal_lm(model)
        lm_head = causal_lm.get_output_embeddings()
        if captured is None:  # TRL's exact, fused full-vocabulary entropy
            return entropies.detach().float() / math.log(lm_head.weight.size(0))
        return normalised_entropy_from_hidden(
            torch.cat(captured), lm_head.weight, lm_head.bias,
            top_k=self.args.entropy_top_k, temperature=self.temperature, **logit_transform(causal_lm.config),
        )

    # ------------------------------------------------------------------ loss
    def _compute_loss(self, model, inputs):
        """TRL's loss, whichever variant, reading the weighted advantages of :meth:`_weighted_advantages`.

        The one exception is the paper's configuration (:meth:`_paper_loss_applies`), computed by
        :func:`saah_policy_loss`: the same loss, with the arithmetic of the committed studies.
        """
        if self._paper_loss_applies(inputs):
            return self._paper_loss(model, inputs)
        weighted = _WeightedAdvantages(inputs, self._weighted_advantages)
        with self._loss_forward_capture(model, inputs["completion_ids"].size(1)):
            loss = super()._compute_loss(model, weighted)
        if not weighted.was_read:
            raise RuntimeError("TRL's _compute_loss no longer reads inputs['advantages'], where SAAHGRPOTrainer "
                               "applies its weights; this TRL version needs the hook moved")
        return loss

    @contextmanager
    def _loss_forward_capture(self, model, logits_to_keep: int):
        """Keep what the loss's forward gives for the weights: TRL's entropies (through
        :meth:`_get_per_token_logps_and_entropies`) and, for the top-K estimate, the final hidden states."""
        with self._capture_final_hidden(model, logits_to_keep) as hidden:
            self._loss_capture = {"model": model, "hidden": hidden, "entropies": None}
            try:
                yield
            finally:
                self._loss_capture = None

    def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask, logits_to_keep, batch_size=None,
                                           **kwargs):
        # ``forward_batch_size`` caps TRL's own chunking of this forward (its ``batch_size``): each chunk's
        # LM-head tiles are [chunk tokens, 32768] floats and its activations are freed or checkpointed by chunk;
        # None leaves TRL's call as it is (the whole micro-batch at once), and so the recorded bits
        limit = self.args.forward_batch_size
        if limit is not None:
            batch_size = min(batch_size or input_ids.size(0), limit)
        logps, entropies, aux_loss = super()._get_per_token_logps_and_entropies(
            model, input_ids, attention_mask, logits_to_keep, batch_size=batch_size, **kwargs)
        capture = getattr(self, "_loss_capture", None)
        if capture is not None and entropies is not None:
            capture["entropies"] = entropies
        return logps, entropies, aux_loss

    def _weighted_advantages(self, inputs, advantages: torch.Tensor) -> torch.Tensor:
        """The advantages times :func:`advantage_factors` (weight and normaliser correction), logging the
        weights; unchanged when every weight is 1."""
        capture = getattr(self, "_loss_capture", None)
        if capture is None or capture["entropies"] is None:
            raise RuntimeError("TRL's _compute_loss read inputs['advantages'] before its forward pass gave the "
                               "entropies the weights need; this TRL version needs the hook moved")
        mask = inputs["completion_mask"]
        mask = mask if "tool_mask" not in inputs else mask * inputs["tool_mask"]
        norm_entropy = self._normalised_entropy(capture["model"], capture["entropies"], capture["hidden"])
        per_rollout = advantages if advantages.dim() == 1 else advantages[:, 0]  # TRL's (B,) or a subclass's (B, T)
        weights = method_weights(self.args.method, norm_entropy, mask, per_rollout, self.args.alpha)
        self._log_weights(norm_entropy, weights, mask, per_rollout)
        if self.args.method == "grpo" or self.args.alpha == 0:
            return advantages
        factors = advantage_factors(weights, mask, self.loss_type, self._sum_over_processes)
        return (advantages if advantages.dim() == 2 else advantages.unsqueeze(1)) * factors.to(advantages.dtype)

    def _sum_over_processes(self, x: torch.Tensor) -> torch.Tensor:
        return self.accelerator.reduce(x, reduction="sum")

    def _log_weights(self, norm_entropy, weights, mask, advantages) -> None:
        mode = "train" if self.model.training else "eval"
        stats = weight_statistics(norm_entropy, weights, mask, advantages)
        for name, value in stats.items():
            self._metrics[mode][f"saah/{name}"].append(self.accelerator.gather(value.reshape(1)).nanmean().item())
        if mode == "train":
            self._keep_token_entropies(norm_entropy, mask, advantages)

    def _paper_loss_applies(self, inputs) -> bool:
        """Whether this step's loss is the paper's and nothing else: ``bnpo``, token-level ratios, one clip
        range, the plain KL estimator, no option of TRL's that changes the loss, text only.

        TRL's ``bnpo`` sums the same terms in another order (other bits), so this keeps the committed
        studies' runs the bits they were recorded with."""
        a = self.args
        return (self.loss_type == "bnpo" and self.importance_sampling_level == "token"
                and not a.use_bias_correction_kl and self.top_entropy_quantile == 1.0
                and self.off_policy_mask_threshold is None and a.delta is None
                and not self._entropy_bonus_enabled and self.epsilon_high == self.epsilon_low
                and not self.aux_loss_enabled and inputs["advantages"].dim() == 1
                and all(inputs.get(key) is None for key in MODEL_INPUT_KEYS))

    def _paper_loss(self, model, inputs):
        prompt_ids, prompt_mask = inputs["prompt_ids"], inputs["prompt_mask"]
        completion_ids, completion_mask = inputs["completion_ids"], inputs["completion_mask"]
        input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
        attention_mask = torch.cat([prompt_mask, completion_mask], dim=1)
        logits_to_keep = completion_ids.size(1)
        mask = completion_mask if "tool_mask" not in inputs else completion_mask * inputs["tool_mask"]

        with self._capture_final_hidden(model, logits_to_keep) as captured:
            logps, entropies, _ = self._get_per_token_logps_and_entropies(
                model, input_ids, attention_mask, logits_to_keep, compute_entropy=True
            )
        norm_entropy = self._normalised_entropy(model, entropies, captured)

        advantages = inputs["advantages"]
        old_logps = inputs.get("old_per_token_logps")
        old_logps = logps.detach() if old_logps is None else old_logps
        weights = method_weights(self.args.method, norm_entropy, mask, advantages, self.args.alpha)
        vllm_is = self.use_vllm and self.vllm_importance_sampling_correction
        loss, stats = saah_policy_loss(
            logps, old_logps, inputs.get("ref_per_token_logps"), advantages, mask, weights,
            epsilon=self.epsilon_low, beta=self.beta, norm_entropy=norm_entropy,
            token_scale=inputs["importance_sampling_ratio"] if vllm_is else None,
        )

        mode = "train" if self.model.training else "eval"
        self._log_step_statistics(mode, stats, entropies, mask)
        self._log_clip_sides(mode, logps.detach(), old_logps, advantages, mask)
        if mode == "train":
            self._keep_token_entropies(norm_entropy, mask, advantages)
            loss = loss / self.current_gradient_accumulation_steps  # TRL turns off HF's own scaling
        return loss

    def _log_clip_sides(self, mode, logps, old_logps, advantages, mask) -> None:
        """TRL's ``clip_ratio/low_*`` and ``high_*`` metrics, as its own loss logs them."""
        ratio = torch.exp(logps - old_logps)
        adv = advantages.reshape(-1, 1)
        mask = mask.float()
        sides = {"low": (ratio < 1 - self.epsilon_low) & (adv < 0), "high": (ratio > 1 + self.epsilon_high) & (adv > 0)}
        for side, clipped in sides.items():
            clipped = clipped.float()
            totals = self.accelerator.reduce(torch.stack([(clipped * mask).sum(), mask.sum()]), reduction="sum")
            self._metrics[mode][f"clip_ratio/{side}_mean"].append((totals[0] / totals[1].clamp(min=1.0)).item())
            per_rollout = self.accelerator.gather((clipped * mask).sum(-1) / mask.sum(-1))
            extreme = nanmin(per_rollout) if side == "low" else nanmax(per_rollout)
            self._metrics[mode][f"clip_ratio/{side}_{'min' if side == 'low' else 'max'}"].append(extreme.item())

    def _log_step_statistics(self, mode, stats, entropies, mask) -> None:
        def global_mean(x: torch.Tensor) -> float:
            return self.accelerator.gather(x.reshape(1).float()).nanmean().item()

        metrics = self._metrics[mode]
        if self.beta != 0.0:
            metrics["kl"].append(global_mean(stats["kl"]))
        metrics["entropy"].append(global_mean((entropies * mask).sum() / mask.sum().clamp(min=1)))
        metrics["clip_ratio/region_mean"].append(global_mean(stats["clip_frac"]))
        for name in ("entropy_norm", "weight_mean", "weight_neg_mean", "neg_frac"):
            metrics[f"saah/{name}"].append(global_mean(stats[name]))

    def _keep_token_entropies(self, norm_entropy, mask, advantages) -> None:
        """Per-token entropies of one negative and one positive rollout per step, for the weight schematic."""
        room = self.args.log_token_entropies - len(self.token_entropy_samples)
        if room <= 0:
            return
        adv = advantages.reshape(-1)
        picks = (adv < 0).nonzero().flatten()[:1].tolist() + (adv > 0).nonzero().flatten()[:1].tolist()
        for i in picks[:room]:
            n = int(mask[i].sum().item())
            self.token_entropy_samples.append({
                "advantage": adv[i].item(),
                "entropy_norm": [round(v, 6) for v in norm_entropy[i, :n].tolist()],
            })
