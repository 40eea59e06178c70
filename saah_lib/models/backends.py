"""How rollouts and greedy evaluations are generated: the backend names, and what ``auto`` means.

Light on purpose (no torch), so that the config can check a backend name without loading torch.

=============  ==================================================================
``auto``       ``compiled``
``hf``         TRL's own ``model.generate`` path, untouched
``compiled``   :mod:`saah_lib.models.rollout` (static shapes; the decode step compiled on CUDA, eager on CPU)
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


def resolve_backend(name: str) -> str:
    """The backend that runs: ``auto`` becomes ``compiled``, the static engine, on every device.

    On CPU the engine decodes eagerly; in float32 it samples the tokens TRL's ``generate`` samples for a seed
    (tests/models/test_rollout.py) in less time (docs/reproducing.md, "Where a mini run's time goes").
    """
    return "compiled" if check_backend(name) == "auto" else name


def evaluation_backend(name: str) -> str:
    """The backend of greedy evaluation: evaluation runs on the trainer's own model, so ``vllm`` means ``auto``."""
    return resolve_backend("auto" if name == "vllm" else name)


def require_vllm() -> None:
    """A clear error when the vllm backend is asked for without the package."""
    if importlib.util.find_spec("vllm") is None:
        raise ImportError(
            "generation_backend='vllm' (TRL's use_vllm=True) needs the 'vllm' package, which is not installed. "
            "Install it (pip install -e '.[vllm]', the version TRL 1.16 supports) or use generation_backend='compiled' "
            "or 'hf'."
        )
