"""What the compiled decode step did over a run: graphs, recompiles, graph breaks, syncs, and a fallback.

One :class:`CompileHealth` is shared by the engines of a run (rollouts and greedy evaluation). Graphs are counted per
engine key, ``(engine, batch, cache length)``: the rollout engine samples and the evaluation engine decodes greedily,
so they are different graphs even at the same shape. Each engine has one cache length, so a run compiles one graph per
engine and batch size. Whether a graph came from inductor's on-disk caches (an earlier run of the grid) is counted
too. Compiles, graph breaks and CUDA-graph skips are read from ``torch._dynamo``'s counters around each compiled call,
so they count what torch did, not what we expected it to do.

Only a failure to compile falls back to ``hf`` (``run_or_fall_back``): a second compile of a key
(:class:`RecompileError`, e.g. something changed the model's hooks), dynamo or inductor refusing the step, and a
CUDA-graph skip (inductor's ``cudagraph_or_error`` turns it into a compile error). Out-of-memory, NaN probabilities
and every other error propagate: they would fail on ``hf`` too, or hide a bug. A fallback is loud: a warning, a
progress line, and the record.
"""

from __future__ import annotations

import time
import warnings
from contextlib import contextmanager

import torch
import torch._dynamo
import torch._inductor.config
from torch._dynamo.exc import FailOnRecompileLimitHit, TorchDynamoException
from torch._dynamo.utils import counters, guard_failures

from saah_lib.models.compile_record import recorded_fallback
from saah_lib.progress import say

#: Graphs one process may compile for the decode step (every engine, shape and sampling setting
#: together: dynamo counts them against one limit per function); above it dynamo raises.
MAX_GRAPHS = 64


class RecompileError(RuntimeError):
    """The decode step was compiled a second time for a key it already had a graph for."""


def is_compile_error(error: BaseException) -> bool:
    """True for a failure of compilation itself; never when running out of memory caused it."""
    chain, cause = [], error
    while cause is not None and len(chain) < 20:
        chain.append(cause)
        cause = cause.__cause__ or getattr(cause, "inner_exception", None)
    if any(isinstance(e, torch.OutOfMemoryError) for e in chain):
        return False
    return isinstance(error, (RecompileError, TorchDynamoException, FailOnRecompileLimitHit))


def _dynamo_counts() -> tuple[int, int, int]:
    return (counters["stats"]["unique_graphs"], sum(counters["graph_break"].values()),
            counters["inductor"]["cudagraph_skips"])


def _disk_cache_counts() -> dict[str, int]:
    """Inductor's FX graph cache and AOTAutograd's cache: lookups that found compiled code on disk or not."""
    return {"fx_graph_cache_hits": counters["inductor"]["fxgraph_cache_hit"],
            "fx_graph_cache_misses": counters["inductor"]["fxgraph_cache_miss"],
            "autograd_cache_hits": counters["aot_autograd"]["autograd_cache_hit"],
            "autograd_cache_misses": counters["aot_autograd"]["autograd_cache_miss"]}


class CompileHealth:
    """Counters of the compiled decode step, and the reason if the run fell back to ``hf``."""

    def __init__(self):
        self.backend: str | None = None
        self.mode: str | None = None
        self.cuda_graphs = False
        self.graphs: dict[tuple, dict] = {}
        self.recompiles = 0
        self.graph_breaks = 0
        self.cudagraph_skips = 0
        self.rollouts = 0
        self.token_steps = 0  # token positions sampled: one per decode step, whatever the batch size
        self.compiled_calls = 0
        self.host_syncs = 0  # device-to-host reads in the decode loops (the finished-batch checks)
        self.disk_cache = dict.fromkeys(_disk_cache_counts(), 0)  # lookups during this record's compiles
        self.compile_caches: dict | None = None  # rollout.enable_compile_caches(): flags and folder in force
        self.fallback: dict | None = None

    def configure(self, backend, mode: str | None, device) -> None:
        self.backend, self.mode = getattr(backend, "__name__", str(backend)), mode
        self.cuda_graphs = str(device).startswith("cuda") and mode == "reduce-overhead"

    @contextmanager
    def watching(self):
        """Dynamo and inductor settings for a decode loop.

        A limit hit is an error, never a silent eager run; so is a CUDA-graph skip when CUDA graphs are
        on (the step would otherwise run without them, at a fraction of the speed). Hooks, modes and
        adapters are not guarded by dynamo (the engine compiles without module guards); the engine
        checks them once per rollout (``rollout.module_state``) and raises :class:`RecompileError`.
        """
        with (torch._dynamo.config.patch(recompile_limit=MAX_GRAPHS, fail_on_recompile_limit_hit=True),
              torch._inductor.config.patch({"triton.cudagraph_or_error": self.cuda_graphs})):
            yield

    def call(self, key: tuple, fn, *args) -> None:
        """Run one compiled call for ``key`` and count what it compiled."""
        before, disk_before = _dynamo_counts(), _disk_cache_counts()
        start = time.perf_counter()
        fn(*args)
        self.compiled_calls += 1
        after = _dynamo_counts()
        if after == before:
            return
        self.graph_breaks += after[1] - before[1]
        self.cudagraph_skips += after[2] - before[2]
        for name, count in _disk_cache_counts().items():
            self.disk_cache[name] += count - disk_before[name]
        if after[0] > before[0]:
            self._note_compile(key, after[0] - before[0], time.perf_counter() - start, fn)

    def _note_compile(self, key: tuple, graphs: int, seconds: float, fn) -> None:
        if key in self.graphs:
            self.recompiles += graphs
            engine, batch, cache_len = key
            raise RecompileError(f"the decode step was compiled again for {engine} batch {batch}, cache length "
                                 f"{cache_len}; last guard failure: {_last_guard_failure(fn)}")
        self.graphs[key] = {"engine": key[0], "batch": key[1], "cache_len": key[2], "graphs": graphs,
                            "compile_s": round(seconds, 3)}
        if graphs > 1:  # fullgraph=True makes a break an error, so this would be a new kind of failure
            self.recompiles += graphs - 1

    @property
    def fell_back(self) -> bool:
        return self.fallback is not None

    def run_or_fall_back(self, fn, where: str, step: int | None = None):
        """``fn()``'s result, or None when it failed to compile (recorded and announced); other errors propagate."""
        try:
            return fn()
        except Exception as error:
            if not is_compile_error(error):
                raise
            self.fall_back(error, where, step)
            return None

    def fall_back(self, error: BaseException, where: str, step: int | None = None) -> None:
        """Record that compiled decoding failed and the run continues with ``hf``; warn and say so once."""
        if self.fell_back:
            return
        reason = f"{type(error).__name__}: {error}".strip()[:2000]
        self.fallback = {"reason": reason, "where": where, "step": step}
        short = " ".join(reason.split())[:400]  # dynamo puts the cause on later lines
        message = (f"compiled decoding failed in {where} ({short}); "
                   "this run continues with generation_backend='hf', at generate's speed")
        say(f"FALLBACK: {message}")
        warnings.warn(message, RuntimeWarning, stacklevel=2)

    def summary(self) -> str | None:
        """One line for a run's summary when it fell back; None otherwise."""
        return recorded_fallback({"processes": [{"fallback": self.fallback}]})

    def record(self) -> dict:
        """JSON-ready: what ``compile_health.json`` of a run folder holds."""
        steps = self.token_steps
        return {
            "backend": self.backend, "mode": self.mode,
            "graphs": list(self.graphs.values()),
            "compiled_graphs": sum(g["graphs"] for g in self.graphs.values()),
            "recompiles": self.recompiles,
            "graph_breaks": self.graph_breaks,
            "cudagraph_skips": self.cudagraph_skips if self.cuda_graphs else None,
            "compile_s": round(sum(g["compile_s"] for g in self.graphs.values()), 3),
            "rollouts": self.rollouts, "token_steps": steps, "compiled_calls": self.compiled_calls,
            "host_syncs": self.host_syncs,
            "host_syncs_per_token": self.host_syncs / steps if steps else None,
            "compile_caches": self.compile_caches, **self.disk_cache,
            "fallback": self.fallback,
        }


def _last_guard_failure(fn) -> str:
    code = getattr(getattr(fn, "_torchdynamo_orig_callable", fn), "__code__", None)
    failures = guard_failures.get(code) or ["unknown"]
    return str(failures[-1])
