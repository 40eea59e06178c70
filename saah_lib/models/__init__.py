"""Models: what a model name means (:mod:`.names`), loading (:mod:`.loading`), generation backends
(:mod:`.backends`, :mod:`.rollout`), greedy evaluation (:mod:`.evaluate`) and the tiny CPU model with its
warm start (:mod:`.tiny`, :mod:`.warmstart`, :mod:`.warmstart_targets`). The profiler of the rollout engine is
the benchmark's (``bench.profiling``)."""
