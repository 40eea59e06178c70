"""Analysis of run folders: per-run summaries (:mod:`.summaries`), DataFrames (:mod:`.frames`), seeds
aggregated (:mod:`.resultset`), the paper's numbers (:mod:`.reported`), labels (:mod:`.labels`) and
statistics (:mod:`.significance`, :mod:`.evidence`, :mod:`.evidence_sentence`, :mod:`.evidence_summary`),
the study plan and its primary comparison (:mod:`.plan`), run health (:mod:`.health`) and runs shared
between studies (:mod:`.overlap`)."""
