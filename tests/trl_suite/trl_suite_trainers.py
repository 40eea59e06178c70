"""``SAAHGRPOTrainer`` and ``SAAHGRPOConfig`` with the defaults of the suite's two configurations, put in place of
TRL's ``GRPOTrainer`` and ``GRPOConfig`` by :mod:`trl_suite_plugin`.

Module-level classes, so that the config pickles (transformers saves it as ``training_args.bin``).
"""

from __future__ import annotations

from dataclasses import dataclass

from saah_lib.training.config import SAAHGRPOConfig
from saah_lib.training.trainer import SAAHGRPOTrainer


@dataclass
class GRPOAlpha0Config(SAAHGRPOConfig):
    """Ours with every weight 1: plain GRPO."""

    method: str = "grpo"
    alpha: float = 0.0


@dataclass
class SAAlphaHalfConfig(SAAHGRPOConfig):
    """Ours with the paper's variant: negative-advantage rollouts discounted with alpha 0.5."""

    method: str = "sa"
    alpha: float = 0.5


class _SuiteTrainer(SAAHGRPOTrainer):
    """``SAAHGRPOTrainer`` whose config, when a test gives none, is the suite's (not SAAHGRPOConfig's defaults)."""

    config_class: type[SAAHGRPOConfig]

    def __init__(self, model=None, reward_funcs=None, args=None, *rest, **kwargs):
        if args is None:
            name = model if isinstance(model, str) else model.config._name_or_path
            args = self.config_class(output_dir=f"{name.split('/')[-1]}-GRPO")
        super().__init__(model, reward_funcs, args, *rest, **kwargs)


class GRPOAlpha0Trainer(_SuiteTrainer):
    config_class = GRPOAlpha0Config


class SAAlphaHalfTrainer(_SuiteTrainer):
    config_class = SAAlphaHalfConfig


#: SAAH_TRL_SUITE_TRAINER -> (trainer, config) put in place of TRL's
SUBSTITUTES = {"grpo": (GRPOAlpha0Trainer, GRPOAlpha0Config), "sa": (SAAlphaHalfTrainer, SAAlphaHalfConfig)}
