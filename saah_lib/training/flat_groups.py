"""The paper's flat-group rule as an opt-in layer of ``SAAHGRPOTrainer``: ``reward_std_threshold``.

TRL divides a group's advantages by (std + 1e-4), so a group of nearly equal rewards turns noise-level
differences into unit-size advantages; the paper zeroes the advantages of groups whose reward standard
deviation is below a threshold (0.15 in its table of hyperparameters). TRL has no public hook between its
advantages and its loss, so this layer overrides ``_calculate_rewards`` (to keep every process's rewards) and
``_generate_and_score_completions`` (to zero the flat groups); tests/training/test_trl_surface.py checks both.
"""

from __future__ import annotations

import torch
from trl.trainer.utils import nanstd


class FlatGroupsMixin:
    """Zero the advantages of groups whose reward std is below ``args.reward_std_threshold`` (training only)."""

    zeroes_flat_groups = True

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._last_rewards_per_func = rewards_per_func  # all processes' rewards, for the threshold below
        return rewards_per_func

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        if self.model.training and self.args.reward_std_threshold > 0:
            output["advantages"] = self._zero_flat_groups(output["advantages"])
        return output

    def _zero_flat_groups(self, advantages: torch.Tensor) -> torch.Tensor:
        """Zero the advantage of groups whose reward spread is below the threshold; groups are the
        ``num_generations`` consecutive completions of one prompt."""
        weights = self.reward_weights.to(self._last_rewards_per_func.device)
        rewards = (self._last_rewards_per_func * weights).nansum(dim=1)
        group_std = nanstd(rewards.view(-1, self.num_generations), dim=1)
        keep = (group_std >= self.args.reward_std_threshold).repeat_interleave(self.num_generations)
        n_local = advantages.size(0)
        start = self.accelerator.process_index * n_local
        self._metrics["train"]["saah/frac_groups_below_threshold"].append(1.0 - keep.float().mean().item())
        return advantages * keep[start : start + n_local].to(advantages.dtype).to(advantages.device)
