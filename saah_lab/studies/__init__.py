"""The studies: plans (:mod:`.plans`, :mod:`.mini`, :mod:`.extended`) run by one runner (:mod:`.runner`) on Ray
(:mod:`.engine`, :mod:`.grid`), the paper-matched alpha (:mod:`.matched_alpha`), the top-K ablation
(:mod:`.topk`), the real-model discount (:mod:`.real_model`) and reproduction checks (:mod:`.verify`). The
benchmarks, the rollout profiler and the GPU preflight are the top-level package ``bench``.

Every study result is computed under the pinned CPU numerics: importing this package applies them,
before any study module imports torch (so ``python -m saah_lab.studies.X`` and the workers it spawns
are pinned).
"""

from saah_lib.numerics import apply_once

apply_once()
