"""Models: what a model name means (:mod:`.names`), loading (:mod:`.loading`), generation backends
(:mod:`.backends`, :mod:`.rollout`), greedy evaluation (:mod:`.evaluate`) and the tiny CPU model with its
warm start (:mod:`.tiny`, :mod:`.warmstart`, :mod:`.warmstart_targets`). The profiler of the rollout engine is
the benchmark's (``bench.profiling``)."""

from pathlib import Path

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward as _sdpa

#: Under the AVX2 pin on a CPU with AMX, torch's bf16 flash kernel picks its AMX path by the CPU for queries of 64
#: tokens and more, then refuses it ("pack_vnni2 is only supported when avx512 is supported"): there the attention
#: runs the flash kernel on float32 copies (the bf16 math kernel is slower); shorter queries (decoding) keep the bf16
#: flash kernel. Other dtypes and CPUs keep their kernels (and bits).
_CPUINFO = Path("/proc/cpuinfo")
AMX_UNDER_PIN = (torch.backends.cpu.get_cpu_capability() == "AVX2" and _CPUINFO.is_file()
                 and "amx_bf16" in _CPUINFO.read_text(errors="replace"))


def sdpa_attention(module, query, key, value, attention_mask, *args, **kwargs):
    """transformers' SDPA attention; where :data:`AMX_UNDER_PIN` and torch refuses bf16, in float32, cast back."""
    if not (AMX_UNDER_PIN and query.device.type == "cpu"):
        return _sdpa(module, query, key, value, attention_mask, *args, **kwargs)
    try:
        return _sdpa(module, query, key, value, attention_mask, *args, **kwargs)
    except RuntimeError as error:
        if "pack_vnni2" not in str(error):
            raise
    if attention_mask is not None and attention_mask.is_floating_point():
        attention_mask = attention_mask.float()
    with torch.autocast("cpu", enabled=False):
        out, weights = _sdpa(module, query.float(), key.float(), value.float(), attention_mask, *args, **kwargs)
    return out.to(torch.bfloat16), weights


if AMX_UNDER_PIN:
    AttentionInterface.register("sdpa", sdpa_attention)
