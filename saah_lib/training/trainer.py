"""SA-AH-GRPO on top of TRL's ``GRPOTrainer``: the token weights in TRL's loss, and nothing else.

TRL's own ``_compute_loss`` runs with the ``advantages`` it reads after its forward multiplied per token by
:func:`saah_lib.method.loss.advantage_factors`. The entropies come from that forward
(``_get_per_token_logps_and_entropies``): TRL's exact entropy, or a top-K estimate from the hooked final
hidden states through the LM head and the model's own logit transform. Every configuration, the paper's
included, takes this one path. TRL has no public hook inside its loss, hence these two private overrides
(tests/training/test_trl_surface.py checks their signatures and every member read).

Opt-in layers, each a mixin placed before this class: compiled rollouts and one sampling policy
(:mod:`saah_lib.models.rollout_trainer`), the paper's flat-group rule (:mod:`saah_lib.training.flat_groups`);
the artifact's runs use :class:`saah_lab.training.study_trainer.StudyTrainer`, which has both.
"""

from __future__ import annotations

import math
from contextlib import contextmanager

import torch
from trl import GRPOTrainer

from saah_lib.method.loss import advantage_factors, method_weights, normalised_entropy_from_hidden, weight_statistics
from saah_lib.models.backends import require_vllm
from saah_lib.training.grpo_config import SAAHGRPOConfig


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
        self.args.check_vocabulary(self._causal_lm(self.model).get_output_embeddings().weight.size(0))
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
                             "from saah_lib.models.rollout_trainer, or saah_lab.training.study_trainer.StudyTrainer")
        return "hf"

    def _refuse_settings_of_absent_layers(self) -> None:
        """A setting that only an opt-in layer acts on is an error without that layer, not silently ignored."""
        if self.args.reward_std_threshold > 0 and not getattr(self, "zeroes_flat_groups", False):
            raise ValueError("config field 'reward_std_threshold': the paper's flat-group rule is an opt-in layer: "
                             "class Trainer(FlatGroupsMixin, SAAHGRPOTrainer) with FlatGroupsMixin from "
                             "saah_lib.training.flat_groups, or saah_lab.training.study_trainer.StudyTrainer")

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

    def _compute_loss(self, model, inputs):
        """TRL's loss, whichever variant, reading the weighted advantages of :meth:`_weighted_advantages`."""
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
