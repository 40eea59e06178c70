"""What a rollout does per sampled token outside its compiled graph, counted with torch's profiler.

Counted inside the ``rollout.decode`` region of :meth:`StaticRollout.generate` (sampling every token
after the prefill; the prefill and the final copy to the host are counted apart, under
``whole_call``), per token position: ``host_syncs`` (ops that make the host wait for the device)
and ``eager_ops`` (ATen ops called from Python outside the compiled graph), as :func:`count_ops`
defines them. On CPU these are the same calls a GPU run makes (the Python code does not branch on
the device in the decode loop), so the counts carry over; their cost does not.

:func:`kernel_summary` goes one level down, to what ran: the device kernels of a profiled window
(on CUDA), or the outermost non-view ATen ops (on CPU, where an op is what a kernel is on a GPU),
each sorted into a class by :func:`kernel_class`, with the busy time, the span and the gaps between
them (a GPU idle between kernels waits for the host).
"""

from __future__ import annotations

import re
import statistics
from collections import Counter, defaultdict

from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

DECODE_REGION = "rollout.decode"
COMPILED_REGION = "Torch-Compiled Region"
SYNC_OPS = frozenset({"aten::_local_scalar_dense", "aten::nonzero", "aten::nonzero_static", "aten::masked_select",
                      "aten::_unique", "aten::_unique2", "aten::unique_dim", "aten::unique_consecutive"})
VIEW_OPS = frozenset({"aten::select", "aten::slice", "aten::view", "aten::squeeze", "aten::unsqueeze",
                      "aten::expand", "aten::transpose", "aten::t", "aten::permute", "aten::as_strided",
                      "aten::alias", "aten::detach", "aten::_reshape_alias", "aten::reshape", "aten::narrow",
                      "aten::unbind", "aten::split", "aten::chunk", "aten::lift_fresh", "aten::detach_",
                      "aten::resolve_conj", "aten::resolve_neg", "aten::_unsafe_view", "aten::view_as"})


def _ancestors(event):
    parent = event.cpu_parent
    while parent is not None:
        yield parent
        parent = parent.cpu_parent


def count_ops(events, token_steps: int, region: str | None = DECODE_REGION) -> dict:
    """Host syncs and eager ops per token position among profiler ``events`` (inside ``region``, or all).

    Per token position means one per decode step, whatever the batch size.

    ``host_syncs``  ops that make the host wait for the device: ``aten::_local_scalar_dense`` (behind
                    every ``.item()``, ``bool()``, ``int()`` of a tensor) and ops whose output size depends
                    on tensor values (``nonzero``, ``masked_select``, ``unique``), at any depth.
    ``eager_ops``   ATen ops called from Python outside any ``Torch-Compiled Region``, each counted
                    once at its outermost level (the sub-ops an op calls are not counted again);
                    ``eager_non_view_ops`` leaves out views (``select``, ``slice``, ``view``, ...), which
                    launch no kernel.
    """
    syncs, eager = 0, Counter()
    for event in events:
        if not event.name.startswith("aten::"):
            continue
        above = [a.name for a in _ancestors(event)]
        if region is not None and region not in above:
            continue
        if event.name in SYNC_OPS:
            syncs += 1
        outermost = not any(name.startswith("aten::") for name in above)
        if outermost and not any(name.startswith(COMPILED_REGION) for name in above):
            eager[event.name] += 1
    non_view = sum(n for name, n in eager.items() if name not in VIEW_OPS)
    return {
        "token_steps": token_steps,
        "host_syncs": syncs, "host_syncs_per_token": syncs / token_steps,
        "eager_ops": sum(eager.values()), "eager_ops_per_token": sum(eager.values()) / token_steps,
        "eager_non_view_ops_per_token": non_view / token_steps,
        "eager_ops_by_name": dict(eager.most_common()),
    }


def profile_rollout(engine, model, prompt_ids, sampling) -> dict:
    """One profiled ``engine.generate`` call (compile and warm up first: call it once before)."""
    steps_before = engine.health.token_steps
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        engine.generate(model, prompt_ids, sampling)
    steps = engine.health.token_steps - steps_before
    events = prof.events()
    return {**count_ops(events, steps), "whole_call": count_ops(events, steps, region=None)}


# ---------------------------------------------------------------------- kernels by class

#: Kernel classes in the order they are tried: the first whose pattern is found in a kernel's (or op's) name
#: wins. Names are CUDA kernel names (cuBLAS ``gemv``/``nvjet``/``sm90_xmma``, flash/cuDNN/efficient attention,
#: inductor's ``triton_*`` kernels, which are named after the ops they fuse, ATen's ``at::native::*`` kernels,
#: copies) or ATen op names on CPU. Attention comes before gemm (``fmha_cutlass*``, ``cudnn_*_sdpa_*``), sampling
#: before the fused kernels (``triton_red_fused_argmax_div_exponential_...``). A softmax counts as sampling: in a
#: decode step attention's own softmax is inside its SDPA kernel.
KERNEL_CLASSES = (
    ("memcpy", r"memcpy|memset|copy_kernel|aten::copy_|aten::_to_copy|aten::index_copy|aten::clone"),
    ("attention", r"attention|attn|flash|fmha|sdpa"),
    ("gemm", r"gemm|gemv|cublas|cutlass|nvjet|xmma|\bsm[0-9]+_|(^|[_:])(mm|addmm|bmm|baddbmm|matmul|linear)($|[_:])"),
    ("sampling", r"exponential|argmax|multinomial|softmax|topk|sort|cumsum|gather|(^|[_:])(rand|uniform)"),
    ("fused_triton", r"^triton_|^triton::"),
    ("elementwise", r"elementwise|reduce_kernel|vectorized|unrolled|at::native::|^aten::"),
)
OTHER_CLASS = "other"
_CLASS_PATTERNS = [(name, re.compile(pattern, re.IGNORECASE)) for name, pattern in KERNEL_CLASSES]


def kernel_class(name: str) -> str:
    """The class of a kernel or op name (:data:`KERNEL_CLASSES`), ``other`` when none matches."""
    return next((cls for cls, pattern in _CLASS_PATTERNS if pattern.search(name)), OTHER_CLASS)


#: Device-side profiler events that are no kernel: record_function ranges mirrored on the device's timeline,
#: synchronisation events (kineto's activity type names).
DEVICE_NON_KERNELS = frozenset({"gpu_user_annotation", "cuda_sync", "cuda_profiler_range"})


def _is_device_kernel(event) -> bool:
    return (event.device_type != DeviceType.CPU and not getattr(event, "is_user_annotation", False)
            and getattr(event, "activity_type", None) not in DEVICE_NON_KERNELS)


def _outermost_cpu_op(event) -> bool:
    return (event.device_type == DeviceType.CPU and event.name.startswith("aten::") and event.name not in VIEW_OPS
            and not any(a.name.startswith("aten::") for a in _ancestors(event)))


def _merged(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[list[float]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(a, b) for a, b in merged]


def timeline(intervals: list[tuple[float, float]], token_steps: int) -> dict:
    """Busy time, span (first start to last end) and the gaps between ``intervals`` (microseconds)."""
    busy = _merged(intervals)
    if not busy:
        return {"busy_us": 0.0, "span_us": 0.0, "idle_fraction": None, "gaps": None}
    busy_us = sum(b - a for a, b in busy)
    span_us = busy[-1][1] - busy[0][0]
    gaps = [b[0] - a[1] for a, b in zip(busy, busy[1:])]
    return {
        "busy_us": busy_us, "busy_us_per_token": busy_us / token_steps,
        "span_us": span_us, "span_us_per_token": span_us / token_steps,
        "idle_fraction": 1 - busy_us / span_us if span_us > 0 else 0.0,
        "gaps": {"count": len(gaps), "per_token": len(gaps) / token_steps, "total_us": sum(gaps),
                 "median_us": statistics.median(gaps) if gaps else 0.0,
                 "max_us": max(gaps, default=0.0)},
    }


def kernel_summary(events, token_steps: int, top: int = 12) -> dict:
    """What ran in a profiled window of ``token_steps`` decode steps, per class and per token.

    On CUDA the device kernels (copies and sets included, user annotations not); without any device event,
    the outermost non-view ATen ops, the CPU's equivalent (``source`` says which). Each class: count and time,
    in all and per token, and its share of the kernel time; the busy time, span, idle fraction and gaps come
    from :func:`timeline`; ``top`` lists the longest kernels by total time.
    """
    if token_steps < 1:
        raise ValueError(f"token_steps must be >= 1, got {token_steps}")
    events = list(events)
    kernels = [e for e in events if _is_device_kernel(e)]
    source = "device kernels"
    if not kernels:
        kernels, source = [e for e in events if _outermost_cpu_op(e)], "cpu ops"
    by_class, by_name = defaultdict(lambda: [0, 0.0]), defaultdict(lambda: [0, 0.0])
    for k in kernels:
        duration = k.time_range.end - k.time_range.start
        for table, key in ((by_class, kernel_class(k.name)), (by_name, k.name)):
            table[key][0] += 1
            table[key][1] += duration
    total_us = sum(t for _, t in by_class.values())
    classes = {cls: {"count": n, "per_token": n / token_steps, "time_us": t, "time_us_per_token": t / token_steps,
                     "share": t / total_us if total_us > 0 else 0.0}
               for cls, (n, t) in sorted(by_class.items(), key=lambda item: -item[1][1])}
    longest = sorted(by_name.items(), key=lambda item: -item[1][1])[:top]
    return {
        "source": source, "token_steps": token_steps, "kernels": len(kernels),
        "kernels_per_token": len(kernels) / token_steps, "kernel_time_us": total_us,
        "kernel_time_us_per_token": total_us / token_steps, "by_class": classes,
        **timeline([(k.time_range.start, k.time_range.end) for k in kernels], token_steps),
        "longest": [{"name": name[:160], "class": kernel_class(name), "count": n, "time_us": t}
                    for name, (n, t) in longest],
    }
