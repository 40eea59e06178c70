"""The trainer of the artifact's runs: ``SAAHGRPOTrainer`` with every opt-in layer (compiled rollouts, the
paper's flat-group rule) plus the lab's own: LoRA dropout's CPU mask drawn by gaps (:mod:`saah_lib.models.dropout`),
a prompt sampler that resumes within an epoch (TRL's ``_get_train_sampler`` alone chooses it) and a full disk at a
checkpoint reported as such.
tests/training/test_trl_surface.py checks the signatures of every method overridden here.
"""

from __future__ import annotations

from pathlib import Path

from saah_lib.jsonio import disk_full_error, is_disk_full
from saah_lib.models.dropout import use_gap_dropout
from saah_lib.models.rollout_trainer import CompiledRolloutMixin
from saah_lib.training.flat_groups import FlatGroupsMixin
from saah_lib.training.sampler import ResumableRepeatSampler
from saah_lib.training.trainer import SAAHGRPOTrainer


class StudyTrainer(CompiledRolloutMixin, FlatGroupsMixin, SAAHGRPOTrainer):
    """``SAAHGRPOTrainer`` as the studies, notebooks and benchmarks run it."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        use_gap_dropout(self.model)

    def _get_train_sampler(self, dataset=None) -> ResumableRepeatSampler:
        # TRL's arguments, unchanged; only the class differs
        sampler = super()._get_train_sampler(dataset)
        return ResumableRepeatSampler(
            data_source=sampler.data_source, mini_repeat_count=sampler.mini_repeat_count,
            batch_size=sampler.batch_size, repeat_count=sampler.repeat_count, shuffle=sampler.shuffle,
            seed=sampler.seed)

    def _save_checkpoint(self, model, trial) -> None:
        """transformers' checkpoint save; a full disk is reported as such, naming the run and the folder.

        The interrupted save has no ``trainer_state.json`` (written last), so the next launch resumes from
        the previous checkpoint (:func:`saah_lab.rundir.checkpoints.resume_checkpoint`).
        """
        try:
            super()._save_checkpoint(model, trial)
        except Exception as error:  # torch and safetensors wrap the OSError in their own types
            folder = Path(self._get_output_dir(trial=trial)) / f"checkpoint-{self.state.global_step}"
            if is_disk_full(error, folder):
                raise disk_full_error(f"saving the checkpoint of run {self.args.run_name!r} into", folder) from error
            raise
