"""What a rollout does per sampled token outside its compiled graph, counted with torch's profiler.

Counted inside the ``rollout.decode`` region of :meth:`StaticRollout.generate` (sampling every
token after the prefill; the prefill and the final copy to the host happen once per rollout and
are counted apart, under ``whole_call``), per token position (one per decode step, whatever the
batch size):

``host_syncs``  ops that make the host wait for the device: ``aten::_local_scalar_dense`` (behind
                every ``.item()``, ``bool()``, ``int()`` of a tensor) and ops whose output size depends
                on tensor values (``nonzero``, ``masked_select``, ``unique``), at any depth.
``eager_ops``   ATen ops called from Python outside any ``Torch-Compiled Region``, each counted
                once at its outermost level (the sub-ops an op calls are not counted again);
                ``eager_non_view_ops`` leaves out views (``select``, ``slice``, ``view``, ...), which
                launch no kernel.

On CPU these are the same calls a GPU run makes (the Python code does not branch on the device
in the decode loop), so the counts carry over; their cost does not.
"""

from __future__ import annotations

from collections import Counter

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
    """Host syncs and eager ops per token position among profiler ``events`` (inside ``region``, or all)."""
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
