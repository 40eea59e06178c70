"""The studies, each a plan plus one runner (:mod:`.runner`): the CPU mini study (:mod:`.mini`), the
powered extended study (:mod:`.extended`), the paper-matched alpha (:mod:`.matched_alpha`), the top-K
ablation (:mod:`.topk`), alpha sweeps (:mod:`.sweep`),
reproduction checks (:mod:`.verify`) and the step-time benchmark (:mod:`.bench`)."""
