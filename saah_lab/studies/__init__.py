"""The studies: plans (:mod:`.plans`, :mod:`.mini`, :mod:`.extended`) run by one runner (:mod:`.runner`) on Ray
(:mod:`.engine`, :mod:`.grid`), the paper-matched alpha (:mod:`.matched_alpha`), the top-K ablation
(:mod:`.topk`), the real-model discount (:mod:`.real_model`), reproduction checks (:mod:`.verify`), the
step-time benchmark (:mod:`.bench`, the rollout profiler :mod:`.profiling`) and the GPU preflight
(:mod:`.preflight`).

Every study result is computed under the pinned CPU numerics: importing this package applies them,
before any study module imports torch (so ``python -m saah_lab.studies.X`` and the workers it spawns
are pinned).
"""

from saah_lib.numerics import apply_once

apply_once()
