"""The studies, one job per folder:

    studies/      what each study is and measures: the plans (:mod:`.plans`, :mod:`.mini`, :mod:`.extended`,
                  :mod:`.confirm`, :mod:`.real_study`), the paper-matched alpha (:mod:`.matched_alpha`,
                  :mod:`.discount`), the top-K ablation (:mod:`.topk`), the real-model discount (:mod:`.real_model`)
    execution/    how a plan runs: the runner, the Ray engine and its watchdog, the grid command, stage timings
    verify/       reproduction checks: a run against the committed one

The benchmarks, the rollout profiler and the GPU preflight are the top-level package ``bench``.

Every study result is computed under the pinned CPU numerics: importing this package applies them,
before any study module imports torch (so ``python -m saah_lab.studies.X`` and the workers it spawns
are pinned).
"""

from saah_lib.numerics import apply_once

apply_once()
