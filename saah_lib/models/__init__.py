"""Models: what a model name means (:mod:`.names`), loading (:mod:`.loading`), generation backends
(:mod:`.backends`, :mod:`.rollout`), greedy evaluation (:mod:`.evaluate`) and the tiny CPU model with its
warm start (:mod:`.tiny`, :mod:`.warmstart`, :mod:`.warmstart_targets`). The profiler of the rollout engine is
the benchmark's (``bench.profiling``)."""

from pathlib import Path

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward as _sdpa

#: Under the AVX2 pin on a CPU with AMX, torch's bf16 flash kernel picks its AMX path by the CPU, then refuses it
#: ("pack_vnni2 is only supported when avx512 is supported", sequences of ~100 tokens on): bf16 there uses the math
#: kernel. Other dtypes and CPUs keep their kernels (and bits).
_CPUINFO = Path("/proc/cpuinfo")
AMX_UNDER_PIN = (torch.backends.cpu.get_cpu_capability() == "AVX2" and _CPUINFO.is_file()
                 and "amx_bf16" in _CPUINFO.read_text(errors="replace"))


def sdpa_attention(module, query, *args, **kwargs):
    """transformers' SDPA attention, on the math kernel where :data:`AMX_UNDER_PIN` and it runs in bf16."""
    bf16 = query.dtype == torch.bfloat16 or (torch.is_autocast_enabled("cpu")
                                             and torch.get_autocast_dtype("cpu") == torch.bfloat16)
    if AMX_UNDER_PIN and bf16 and query.device.type == "cpu":
        with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
            return _sdpa(module, query, *args, **kwargs)
    return _sdpa(module, query, *args, **kwargs)


if AMX_UNDER_PIN:
    AttentionInterface.register("sdpa", sdpa_attention)
