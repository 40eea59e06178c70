"""The opt-in rollout layer of ``SAAHGRPOTrainer``: compiled static-cache sampling, and one sampling policy.

``CompiledRolloutMixin`` goes before ``SAAHGRPOTrainer`` in a subclass's bases. With
``generation_backend="compiled"`` (or ``auto`` on CUDA) rollouts go through :mod:`saah_lib.models.rollout`
(static KV cache, compiled decode step, LoRA unmerged; ``hf`` if the step fails to compile, recorded in
``compile_health``). Every backend samples the model in eval mode with this config's settings only, never the
checkpoint's ``generation_config.json`` (docs/gpu.md). TRL has no public hook for either: its generation is
``_generate_single_turn``, so this layer overrides it (tests/training/test_trl_surface.py checks its signature).
"""

from __future__ import annotations

import torch
from trl.models.utils import unwrap_model_for_generation

from saah_lib.models.backends import resolve_backend
from saah_lib.models.compile_health import CompileHealth
from saah_lib.models.evaluate import run_generation_config
from saah_lib.models.rollout import StaticRollout, build_engine, drop_orphaned_input_grad_hooks, eval_mode
from saah_lib.models.sampling import SamplingSettings


class CompiledRolloutMixin:
    """Rollouts through the compiled static-cache engine, every backend in eval mode with the config's sampling."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._rollout_engine = None
        self.compile_health = CompileHealth()  # shared by the rollout and evaluation engines
        if self.generation_backend == "compiled":
            SamplingSettings.from_generation_kwargs(self.generation_kwargs)  # a setting it lacks: an error now

    def _resolve_generation_backend(self) -> str:
        return "vllm" if self.use_vllm else resolve_backend(self.args.generation_backend)

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        static = (self.generation_backend == "compiled" and not self.compile_health.fell_back
                  and images is None and not multimodal_fields)
        rollout = self._static_rollout(prompt_ids) if static else None
        if rollout is not None:
            return rollout
        if self.use_vllm:
            return super()._generate_single_turn(prompt_ids, images, multimodal_fields, num_generations,
                                                 has_tool_images)
        # TRL's generate path (hf, or compiled decoding that failed to compile): the same policy as the engine's
        with eval_mode(self.model), run_generation_config(self.accelerator.unwrap_model(self.model)):
            return super()._generate_single_turn(prompt_ids, images, multimodal_fields, num_generations,
                                                 has_tool_images)

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        # TRL re-enabled gradient checkpointing twice; transformers left the old input hooks behind
        drop_orphaned_input_grad_hooks(self.accelerator.unwrap_model(self.model))
        return output

    def train(self, *args, **kwargs):
        """TRL's training; the static engines' caches are freed when it ends, however it ends."""
        try:
            return super().train(*args, **kwargs)
        finally:
            self.release_static_states()

    def release_static_states(self) -> int:
        """Free the rollout engine's KV caches and decode buffers (its compiled step is kept); returns bytes."""
        return self._rollout_engine.release() if self._rollout_engine is not None else 0

    def rollout_engine(self) -> StaticRollout:
        if self._rollout_engine is None:
            self._rollout_engine = self._static_engine(self.max_completion_length, self.eos_token_ids)
            longest = self.longest_train_prompt()
            if longest is not None:
                self._rollout_engine.reserve(longest)  # one cache length for the run: one graph
        return self._rollout_engine

    def longest_train_prompt(self, chunk: int = 256) -> int | None:
        """Tokens of the longest training prompt, tokenised as TRL tokenises it for generation; None when
        that cannot be known up front (no sized data set with a ``prompt`` column, or per-sample tools)."""
        data = self.train_dataset
        if (data is None or not hasattr(data, "__len__") or "prompt" not in getattr(data, "column_names", ())
                or self.environment_factories is not None):
            return None
        prompts = list(data["prompt"])
        return max((len(ids) for start in range(0, len(prompts), chunk)
                    for ids in self._tokenize_prompts(prompts[start:start + chunk])[0]), default=None)

    def evaluation_engine(self, max_new_tokens: int) -> StaticRollout:
        """A static engine for greedy evaluation with the rollouts' compile settings and health record."""
        return self._static_engine(max_new_tokens, self._tokenizer.eos_token_id, "evaluation")

    def _static_engine(self, max_new_tokens: int, eos_token_ids, name: str = "rollout") -> StaticRollout:
        return build_engine(max_new_tokens=max_new_tokens, pad_token_id=self._tokenizer.pad_token_id,
                            eos_token_ids=eos_token_ids, device=self.accelerator.device,
                            compile=self.args.rollout_compile, compile_backend=self.args.rollout_compile_backend,
                            health=self.compile_health, name=name)

    def _static_rollout(self, prompt_ids):
        """TRL's generation path with the static-shape engine in place of ``model.generate``.

        Sampling settings come from TRL's ``generation_kwargs`` (one the engine lacks is an error naming it).
        Returns None when the decode step failed to compile; the failure is caught inside TRL's context, which
        turns gradient checkpointing back on only when its body did not raise.
        """
        sampling = SamplingSettings.from_generation_kwargs(self.generation_kwargs)
        engine = self.rollout_engine()
        with (
            unwrap_model_for_generation(
                self.model_wrapped, self.accelerator,
                gather_deepspeed3_params=self.args.ds3_gather_for_generation,
                gradient_checkpointing_kwargs=self.args.gradient_checkpointing_kwargs,
            ) as unwrapped_model,
            torch.no_grad(),
            self._dist.summon_full_params(self.model_wrapped, recurse=False),
        ):
            return self.compile_health.run_or_fall_back(
                lambda: engine.generate(unwrapped_model, prompt_ids, sampling), "rollout", self.state.global_step)
