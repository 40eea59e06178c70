"""The studies, each a plan plus one runner (:mod:`.runner`): the CPU mini study (:mod:`.mini`), the
extended study (:mod:`.extended`), the top-K ablation (:mod:`.topk`), alpha sweeps (:mod:`.sweep`),
reproduction checks (:mod:`.reproduce`) and the step-time benchmark (:mod:`.bench`)."""
