"""The verdict a user reads at the end of ``make mini``, ``make extended`` and ``grid run confirm``: the exit
status (:func:`judge`), the CPU and kernels, the bits and why they may differ, and level 2's verdict.
"""

from __future__ import annotations

from pathlib import Path

from saah_lab.studies.verify.bits import BITS_REPRODUCED, CONCLUSIONS, FILES_DIFFER
from saah_lab.studies.verify.conclusions import warm_start_records
from saah_lib.numerics import MODE_VARIABLE, NATIVE, RECORD_KEY, summary

GENERIC = "generic"


def committed_mkl_kernels(root: Path) -> str:
    """Which of MKL's kernels the committed study ran, from its warm-start records (none recorded: generic)."""
    kernels = [(record.get(RECORD_KEY) or {}).get("mkl_kernels") for record in warm_start_records(root).values()]
    return next(filter(None, kernels), GENERIC)


def why_bits_may_differ(numerics: dict, committed_kernels: str = GENERIC) -> str | None:
    """Why this CPU cannot reproduce the committed bits (None where it can)."""
    if numerics.get("mode") == NATIVE:
        return f"{MODE_VARIABLE}={NATIVE}: torch runs this CPU's widest kernels, unpinned"
    if numerics.get("pin_obstacle") or not numerics.get("pin_holds"):
        return numerics.get("pin_obstacle") or "the pin did not hold: torch runs other kernels than the pinned AVX2"
    if numerics.get("mkl_kernels") != committed_kernels:
        vendor = numerics.get("cpu_vendor") or "this CPU's vendor"
        return (f"MKL runs its {numerics.get('mkl_kernels')} kernels on this CPU ({vendor}), the committed study "
                f"ran its {committed_kernels} ones")
    return None


def judge(report: dict, numerics: dict, committed_kernels: str = GENERIC) -> tuple[int, str]:
    """The exit status and its reason, from the report and this process's CPU numerics: 0 when the bits
    reproduce, or differ where they may (native numerics, no pin, MKL's other kernels) and the conclusions
    reproduce; else 1."""
    found = report["outcome"]
    if found == BITS_REPRODUCED:
        return 0, "bits reproduced"
    if found == FILES_DIFFER:
        return 1, "every run is identical, yet a study file differs: a change in the code that writes it"
    if found != CONCLUSIONS[True]:
        return 1, f"{found}: the rerun does not support the committed study's conclusions"
    why = why_bits_may_differ(numerics, committed_kernels)
    if why is None:
        return 1, (f"bits differ although this CPU runs the committed study's kernels ({summary(numerics)}): not "
                   "the CPU; look for other causes (package versions, code; docs/reproducibility.md)")
    return 0, f"bits differ, as expected here ({why}); the conclusions reproduced"


def closing_lines(report: dict, numerics: dict, committed_kernels: str = GENERIC) -> tuple[int, list[str]]:
    """The exit status (:func:`judge`) and the last lines: CPU and kernels, bits, conclusions, the verdict."""
    status, reason = judge(report, numerics, committed_kernels)
    cpu = (f"CPU: {summary(numerics)}; MKL's {numerics.get('mkl_kernels')} kernels (the committed study: "
           f"{committed_kernels})")
    runs, identical = report.get("runs_compared", 0), report.get("runs_identical", 0)
    if identical == runs:
        bits = f"bits: {identical}/{runs} runs identical to the committed ones"
    else:
        why = why_bits_may_differ(numerics, committed_kernels) or "not explained by this CPU"
        bits = f"bits: {runs - identical}/{runs} runs differ from the committed ones ({why})"
    level2 = report.get("conclusions")
    conclusions = ("conclusions: " + level2["line"].removeprefix("conclusions ") if level2
                   else "conclusions: not needed, every run is identical")
    return status, [cpu, bits, conclusions, f"{'ok' if status == 0 else 'FAILED'}: {reason}"]
