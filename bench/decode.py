"""One compiled decode step under torch's profiler: what runs per sampled token, and how busy the device is.

The engine is made as the trainer makes its rollout engine (``build_engine``: the step's batch, its cache
reserved for the longest prompt, full-length completions). One rollout compiles and warms it up (on CUDA it
also records the CUDA graph), a second is timed whole, and a third is profiled over a window of decode calls
in its middle (:class:`ProfiledWindow`): steady steps only, no compile, no prefill, no graph recording.
:func:`bench.profiling.kernel_summary` then sorts what ran into classes.
"""

from __future__ import annotations

import time

import torch
from torch.profiler import ProfilerActivity, profile

from bench.models import device as bench_device
from bench.models import prompts_dataset
from bench.profiling import count_ops, kernel_summary
from bench.trainers import sync, timed
from saah_lib.models.compile_health import CompileHealth
from saah_lib.models.rollout import build_engine
from saah_lib.models.sampling import SamplingSettings
from saah_lib.training.config import RunConfig


def profiler_activities() -> list:
    return [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])]


def prepare_cuda_graph_profiling() -> None:
    """One empty profiler session before any CUDA graph is captured.

    Why: the kernels of a CUDA graph captured before the profiler's first use are not traced when the graph is
    replayed under it (pytorch/pytorch#75504); torch's own workaround (``torch.profiler._utils.
    _init_for_cuda_graphs``) is this empty session. Call it before the first compiled rollout.
    """
    with profile(activities=profiler_activities()):
        pass


class ProfiledWindow(CompileHealth):
    """Compile health that also profiles ``count`` compiled decode calls, from call number ``first`` of the
    next rollout after :meth:`arm` (0: the first call after the prefill).

    The device is synchronised before the profiler starts and before it stops, so the window holds its own
    calls' kernels and all of them: none queued before, none still running after.
    """

    def __init__(self):
        super().__init__()
        self._window: tuple[int, int] | None = None
        self._calls = 0
        self.profiler = None
        self.window_s: float | None = None

    def arm(self, first: int, count: int) -> None:
        if first < 0 or count < 1:
            raise ValueError(f"a profiled window needs first >= 0 and count >= 1, got {first}, {count}")
        self._window, self._calls, self.profiler, self.window_s = (first, count), 0, None, None

    def call(self, key: tuple, fn, *args) -> None:
        if self._window is None:
            return super().call(key, fn, *args)
        first, count = self._window
        if self._calls == first:
            sync()
            self.profiler = profile(activities=profiler_activities())
            self.profiler.start()
            self._start = time.perf_counter()
        super().call(key, fn, *args)
        self._calls += 1
        if self._calls == first + count:
            sync()
            self.window_s = time.perf_counter() - self._start
            self.profiler.stop()
            self._window = None

    def finish(self) -> None:
        """After the rollout: the window was reached and closed, or an error that says how far it got."""
        if self._window is not None:
            if self.profiler is not None:
                self.profiler.stop()
            first, count = self._window
            self._window = None
            raise RuntimeError(f"the profiled window (decode calls {first}..{first + count - 1}) was not reached: "
                               f"the rollout made {self._calls} compiled calls")


def window_of(calls: int, tokens: int) -> tuple[int, int]:
    """(first, count): up to ``tokens`` decode calls in the middle of a rollout of ``calls`` calls."""
    if calls < 2:
        raise ValueError(f"a rollout needs at least 2 decode calls to profile a window in its middle, got {calls}: "
                         "give more completion tokens")
    count = min(tokens, calls // 2)
    return (calls - count) // 2, count


def decode_profile(model, tokenizer, cfg: RunConfig, *, prompt_tokens: int, compile_backend: str,
                   window_tokens: int) -> dict:
    """Compile, time and profile the decode step of ``model`` at the config's rollout shape (see the module)."""
    device = bench_device()
    model = model.to(device).eval()
    prompts = prompts_dataset(cfg.trainer.completions_per_step, tokenizer, prompt_tokens)["prompt"]
    ids = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
    n_new = cfg.trainer.max_completion_length
    health = ProfiledWindow()
    # the end-of-sequence token is live (the finished check runs every 16 tokens) but never sampled: full length
    engine = build_engine(max_new_tokens=n_new, pad_token_id=tokenizer.pad_token_id,
                          eos_token_ids=[tokenizer.eos_token_id], device=device, compile=True,
                          compile_backend=compile_backend, health=health, name="rollout",
                          longest_prompt=max(map(len, ids)))
    sampling = SamplingSettings(do_sample=True, temperature=cfg.trainer.temperature, min_new_tokens=n_new)
    first, count = window_of(n_new - 1, window_tokens)  # the prefill samples token 0; each call one more
    with torch.no_grad():
        first_rollout_s = timed(lambda: engine.generate(model, ids, sampling))
        rollout_s = timed(lambda: engine.generate(model, ids, sampling))
        health.arm(first, count)
        engine.generate(model, ids, sampling)
        health.finish()
    events = health.profiler.events()
    host = count_ops(events, count, region=None)
    host.pop("eager_ops_by_name")
    return {
        "batch": len(ids), "cache_len": engine.cache_len, "new_tokens": n_new, "compile_backend": compile_backend,
        "weight_bytes": sum(p.numel() * p.element_size() for p in model.parameters()),
        "first_rollout_s": first_rollout_s, "rollout_s": rollout_s, "rollout_ms_per_token": 1000 * rollout_s / n_new,
        "window": {"first_call": first, "calls": count, "wall_s": health.window_s,
                   "wall_ms_per_token": 1000 * health.window_s / count},
        "kernels": kernel_summary(events, count), "host": host, "compile_health": health.record(),
    }
