"""The fallback line of a run's ``compile_health.json``, read without torch.

:class:`saah_lib.models.compile_health.CompileHealth` writes the record while a run trains; the report reads it
back for every run of a root, so reading it must not import torch's compiler, as ``compile_health`` does.
"""

from __future__ import annotations


def recorded_fallback(record: dict | None) -> str | None:
    """From a run folder's ``compile_health.json`` (one record per training process): the fallback line of the
    first process that fell back to ``hf``, or None.  What the run's summary and the report's run table show."""
    for process in (record or {}).get("processes") or []:
        f = process.get("fallback") if isinstance(process, dict) else None
        if f:
            at = f" at step {f['step']}" if f.get("step") is not None else ""
            return f"compiled decoding fell back to hf in {f.get('where')}{at}: {' '.join(str(f.get('reason')).split())[:200]}"
    return None
