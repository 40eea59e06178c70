"""Pinned CPU numerics: the one owner of the environment that decides how torch rounds on a CPU.

Why: torch's CPU kernels are built once per x86 vector instruction set and a process runs the widest its CPU
has; the builds add floats in different orders, and over thousands of training steps of a tiny model the
last-bit differences grow into other models (the warm start's held-out Pass@1 with each:
docs/reproducibility.md). The committed studies ran the AVX2 kernels, so every process of a study asks for those
(:data:`PINNED_SETTINGS`), in the environment before torch loads.

Importing ``saah_lib`` changes nothing; the entry points that produce or verify study results apply the pin (the
Makefile, ``saah_lab.studies`` on import via :func:`apply_once`, ``saah_lab.training.launch``, the Jupyter
kernel of ``python -m saah_lib.numerics kernelspec``). ``SAAH_CPU_NUMERICS=native`` switches it off; every
result records the mode in force (:func:`cpu_numerics_record`). Where the pin cannot hold (no AVX2) nothing is
set and a :class:`CPUNumericsWarning` says so. This module must never import torch: it runs before torch loads.
What each setting does, and what is measured not to matter: docs/reproducibility.md, "The pin".
"""

from __future__ import annotations

import ctypes
import os
import platform
import sys
import warnings
from typing import MutableMapping

#: The field under which a result (run config, build record, timings) records its CPU numerics.
RECORD_KEY = "cpu_numerics"
MODE_VARIABLE = "SAAH_CPU_NUMERICS"
#: Names the variables the pin set, so that a native child of a pinned process (``SAAH_CPU_NUMERICS=native
#: make mini`` started from a pinned ``make``) drops them instead of inheriting them as if the user had set them.
SET_BY_PIN_VARIABLE = "SAAH_CPU_NUMERICS_SET"
PINNED, NATIVE = "pinned", "native"
MODES = (PINNED, NATIVE)
#: what a record says of a process that no entry point pinned (see cpu_numerics_record)
UNPINNED = "unpinned"
#: The environment every process of a study runs under: ATen's AVX2 kernels (element-wise maths, reductions,
#: softmax, sampling, optimizer updates), and MKL's AVX2 kernels for the matrix products on Intel CPUs (on AMD
#: MKL runs one generic path whatever this says). Both are read once per process, at torch's first CPU
#: operation and MKL's first call; why each is there: docs/reproducibility.md, "The pin".
PINNED_SETTINGS = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2"}
#: The capability torch reports when the pin holds.
PINNED_CAPABILITY = "AVX2"
#: The CPU vendor on which MKL runs its own (Intel) kernels instead of its generic ones.
MKL_OWN_KERNELS_VENDOR = "GenuineIntel"
#: Variables that can change CPU rounding or thread counts; a record lists those that are set.
RECORDED_VARIABLES = ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "MKL_ENABLE_INSTRUCTIONS", "ONEDNN_MAX_CPU_ISA",
                      "DNNL_MAX_CPU_ISA", "OMP_NUM_THREADS", "MKL_NUM_THREADS", MODE_VARIABLE)
# x86 flags ATen needs for its AVX2 kernels (it checks both before choosing them itself).
_AVX2_FLAGS = ("avx2", "fma")
# The flags worth recording: which kernels the CPU could run natively.
_RECORDED_FLAGS = ("avx2", "fma", "avx512f", "avx512bw", "avx512dq", "avx512vl")
_X86_64 = ("x86_64", "amd64")

# What apply_cpu_numerics did in this process (read by cpu_numerics_record).
_applied: dict = {}


class CPUNumericsWarning(RuntimeWarning):
    """The pinned CPU numerics do not hold in this process (results may differ from the committed studies)."""


def numerics_mode(environ: MutableMapping[str, str] = os.environ) -> str:
    """``pinned`` (the default) or ``native``, from ``SAAH_CPU_NUMERICS``; any other value is an error."""
    value = environ.get(MODE_VARIABLE, "").strip().lower() or PINNED
    if value not in MODES:
        raise ValueError(f"{MODE_VARIABLE}={environ[MODE_VARIABLE]!r}: expected one of {', '.join(MODES)} "
                         f"(unset means {PINNED})")
    return value


def _cpuinfo_text() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def cpu_description(cpuinfo: str | None = None, machine: str | None = None) -> dict:
    """The CPU's model name, vendor, architecture and vector flags (from /proc/cpuinfo where there is one).

    ``flags`` is None where they cannot be read (no /proc/cpuinfo: not Linux).
    """
    cpuinfo = _cpuinfo_text() if cpuinfo is None else cpuinfo
    machine = (machine or platform.machine() or "unknown").lower()
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() not in fields:  # the first processor describes them all
            fields[key.strip()] = value.strip()
    flags = set(fields.get("flags", "").split()) if "flags" in fields else None
    model = fields.get("model name") or fields.get("Model") or fields.get("CPU part") or platform.processor() or None
    return {"cpu_model": model, "cpu_vendor": fields.get("vendor_id"), "machine": machine,
            "cpu_flags": None if flags is None else [f for f in _RECORDED_FLAGS if f in flags]}


def pin_obstacle(cpu: dict) -> str | None:
    """Why the AVX2 pin cannot be applied on this CPU, or None when it can."""
    if cpu["machine"] not in _X86_64:
        return (f"this CPU is {cpu['machine']}, not x86-64: torch has no AVX2 kernels here, so results match the "
                "committed studies (computed with AVX2 kernels) only by chance")
    if cpu["cpu_flags"] is None:
        return "cannot read the CPU's flags on this system (no /proc/cpuinfo), so AVX2 cannot be confirmed"
    missing = [f for f in _AVX2_FLAGS if f not in cpu["cpu_flags"]]
    if missing:
        return f"this x86-64 CPU lacks {', '.join(missing)}: torch cannot run its AVX2 kernels here"
    return None


def apply_cpu_numerics(environ: MutableMapping[str, str] = os.environ, cpu: dict | None = None) -> dict:
    """Set :data:`PINNED_SETTINGS` in ``environ`` (unless ``SAAH_CPU_NUMERICS=native``); returns what it did.

    A value the user set differently is replaced, with a warning naming it (their own
    value is kept with ``SAAH_CPU_NUMERICS=native``).  Where the CPU cannot run the
    pinned kernels nothing is set and a :class:`CPUNumericsWarning` says why.
    """
    mode = numerics_mode(environ)
    cpu = cpu_description() if cpu is None else cpu
    state = {"mode": mode, "set": {}, "replaced": {}, "unset": [], "obstacle": None}
    if mode == NATIVE:
        state["unset"] = [name for name in environ.get(SET_BY_PIN_VARIABLE, "").split(",") if name in environ]
        for name in state["unset"] + [SET_BY_PIN_VARIABLE]:
            environ.pop(name, None)
        return state
    state["obstacle"] = pin_obstacle(cpu)
    if state["obstacle"]:
        warnings.warn(f"CPU numerics not pinned: {state['obstacle']}. Results are reproducible on this kind of CPU "
                      "only (docs/reproducibility.md).", CPUNumericsWarning, stacklevel=2)
        return state
    for name, value in PINNED_SETTINGS.items():
        if environ.get(name) == value:
            continue
        if name in environ:
            state["replaced"][name] = environ[name]
            warnings.warn(f"{name}={environ[name]!r} replaced by the pinned {value!r}; set {MODE_VARIABLE}={NATIVE} "
                          "to keep your own", CPUNumericsWarning, stacklevel=2)
        environ[name] = value
        state["set"][name] = value
    pinned_names = sorted(set(environ.get(SET_BY_PIN_VARIABLE, "").split(",")) - {""} | set(state["set"]))
    if pinned_names:
        environ[SET_BY_PIN_VARIABLE] = ",".join(pinned_names)
    return state


def pin_environment(environ: MutableMapping[str, str] = os.environ, cpu: dict | None = None) -> dict[str, str]:
    """The environment variables a child process needs to start pinned, without changing ``environ``.

    Empty in native mode and where the CPU cannot run the pinned kernels (the child then records
    that, as this process does).
    """
    if numerics_mode(environ) == NATIVE or pin_obstacle(cpu_description() if cpu is None else cpu):
        return {}
    return {**PINNED_SETTINGS, SET_BY_PIN_VARIABLE: ",".join(sorted(PINNED_SETTINGS))}


def apply_once() -> dict:
    """:func:`apply_cpu_numerics` on this process's environment, remembered for :func:`cpu_numerics_record`."""
    if not _applied:
        torch_loaded = "torch" in sys.modules
        _applied.update(apply_cpu_numerics(), torch_loaded_before=torch_loaded)
        if torch_loaded and (_applied["set"] or _applied["unset"]):
            # torch fixes its kernels at its first CPU operation; the record shows whether that came first.
            warnings.warn("torch was imported before the CPU numerics were pinned: the setting holds only if no "
                          "tensor operation ran yet (results record the capability in use)",
                          CPUNumericsWarning, stacklevel=2)
    return dict(_applied)


def _torch_state() -> tuple[str | None, int | None]:
    """(CPU capability, intra-op threads) of the torch loaded in this process; (None, None) if none is."""
    torch = sys.modules.get("torch")
    if torch is None or not hasattr(torch, "backends"):
        return None, None
    return torch.backends.cpu.get_cpu_capability(), torch.get_num_threads()


def mkl_kernels(cpu: dict) -> str:
    """Which of MKL's kernels this process runs: ``Intel`` or ``generic``.

    MKL asks its own ``mkl_serv_intel_cpu_true`` whether the CPU is an Intel one.  Where a preloaded library
    answers in its place (the Intel emulation of ``bench/cpu_numerics_probe.py`` at commit 089c353), that answer decides;
    otherwise the CPU's vendor does, as it does for MKL.
    """
    try:
        answer = ctypes.CDLL(None).mkl_serv_intel_cpu_true
    except (OSError, AttributeError):  # MKL's own symbol is not global: nothing answers in its place
        return "Intel" if cpu["cpu_vendor"] == MKL_OWN_KERNELS_VENDOR else "generic"
    answer.restype = ctypes.c_int
    return "Intel" if answer() else "generic"


def cpu_numerics_record(environ: MutableMapping[str, str] = os.environ) -> dict:
    """What a result records about the CPU numerics it was computed under.

    ``capability`` and ``torch_threads`` are torch's own answers in this process (None when torch is not
    loaded); ``pin_holds`` is whether the capability is the pinned one (None in native mode, when nothing was
    meant to hold); ``mode`` is ``unpinned`` in a process that asked for no mode and was not pinned by an entry
    point.  ``mkl_kernels`` says which of MKL's kernels the CPU runs (``Intel`` on Intel CPUs, else ``generic``:
    those of the committed studies); ``comparable_bit_for_bit``: the pin holds and MKL runs its generic kernels,
    so results here can match the committed studies bit for bit.
    """
    mode = numerics_mode(environ)
    cpu = cpu_description()
    if mode == PINNED and not pin_obstacle(cpu) and any(environ.get(k) != v for k, v in PINNED_SETTINGS.items()):
        mode = UNPINNED  # no entry point applied the pin here (a script of the user's, say)
    capability, threads = _torch_state()
    if mode == NATIVE:
        holds = None
    else:
        holds = capability == PINNED_CAPABILITY if capability is not None else None
    record = {"mode": mode, "pinned_settings": dict(PINNED_SETTINGS) if mode == PINNED else None,
              "environment": {k: environ[k] for k in RECORDED_VARIABLES if k in environ},
              "capability": capability, "torch_threads": threads, "pin_holds": holds, **cpu,
              "mkl_kernels": mkl_kernels(cpu)}
    record["comparable_bit_for_bit"] = bool(holds) and record["mkl_kernels"] == "generic"
    if mode == PINNED and (obstacle := pin_obstacle(cpu)):
        record["pin_obstacle"] = obstacle
    if _applied.get("replaced"):
        record["replaced_by_pin"] = dict(_applied["replaced"])
    return record


def summary(record: dict | None) -> str:
    """One line for reports: mode, capability in use, threads, CPU."""
    if not record:
        return "not recorded"
    mode = record.get("mode")
    if mode == PINNED:
        settings = ", ".join(f"{k}={v}" for k, v in (record.get("pinned_settings") or {}).items())
        mode = f"pinned ({settings})" + ("" if record.get("pin_holds") is not False else " NOT HOLDING")
    threads = record.get("torch_threads")
    return (f"{mode}; torch CPU capability {record.get('capability') or 'unknown'}, "
            f"{threads if threads is not None else '?'} thread{'s' if threads != 1 else ''}; "
            f"CPU {record.get('cpu_model') or 'unknown'} ({record.get('machine') or '?'})")
