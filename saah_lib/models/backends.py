"""How rollouts and greedy evaluations are generated: the backend names, and what ``auto`` means.

Light on purpose (torch is imported only to look for a GPU), so that the
config can check a backend name without loading torch.

=============  ==================================================================
``auto``       ``compiled`` on CUDA, ``hf`` elsewhere
``hf``         TRL's own ``model.generate`` path, untouched
``compiled``   :mod:`saah_lib.models.rollout` (static shapes, compiled decode step)
``vllm``       TRL's vLLM integration (needs the ``vllm`` package)
=============  ==================================================================
"""

from __future__ import annotations

import importlib.util

BACKENDS = ("auto", "hf", "compiled", "vllm")
VLLM_MODES = ("colocate", "server")


def check_backend(name) -> str:
    if name not in BACKENDS:
        raise ValueError(f"generation_backend must be one of {', '.join(BACKENDS)}, got {name!r}")
    return name


def resolve_backend(name: str, device=None) -> str:
    """The backend that runs: ``auto`` becomes ``compiled`` on CUDA and ``hf`` elsewhere.

    ``device`` (a ``torch.device`` or string) is where the model is; None asks whether CUDA is available.
    """
    if check_backend(name) != "auto":
        return name
    if device is not None:
        on_cuda = str(device).startswith("cuda")
    else:
        import torch

        on_cuda = torch.cuda.is_available()
    return "compiled" if on_cuda else "hf"


def evaluation_backend(name: str, device=None) -> str:
    """The backend of greedy evaluation: evaluation runs on the trainer's own model, so ``vllm`` means ``auto``."""
    return resolve_backend("auto" if name == "vllm" else name, device)


def require_vllm() -> None:
    """A clear error when the vllm backend is asked for without the package."""
    if importlib.util.find_spec("vllm") is None:
        raise ImportError(
            "generation_backend='vllm' (TRL's use_vllm=True) needs the 'vllm' package, which is not installed. "
            "Install it (pip install -e '.[vllm]', the version TRL 1.16 supports) or use generation_backend='compiled' "
            "or 'hf'."
        )
