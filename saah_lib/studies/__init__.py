"""The studies, each a plan plus one runner (:mod:`.runner`): the CPU mini study (:mod:`.mini`), the
powered extended study (:mod:`.extended`), the paper-matched alpha (:mod:`.matched_alpha`), the top-K
ablation (:mod:`.topk`), alpha sweeps (:mod:`.sweep`),
reproduction checks (:mod:`.reproduce`) and the step-time benchmark (:mod:`.bench`).

Every study result is computed under the pinned CPU numerics: importing this package applies them,
before any study module imports torch (so ``python -m saah_lib.studies.X`` and the workers it spawns
are pinned).
"""

from saah_lib.numerics import apply_once

apply_once()
