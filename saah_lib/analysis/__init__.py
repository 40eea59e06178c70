"""Analysis of run folders: per-run summaries (:mod:`.summaries`), DataFrames (:mod:`.frames`), seeds
aggregated (:mod:`.resultset`), the paper's numbers (:mod:`.reported`), labels (:mod:`.labels`) and
statistics (:mod:`.significance`, :mod:`.evidence`)."""
