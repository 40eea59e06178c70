"""Analysis of run folders: one reading of a results root (:mod:`.runs`), per-run summaries (:mod:`.summaries`),
DataFrames (:mod:`.frames`), seeds aggregated (:mod:`.resultset`), the paper's numbers (:mod:`.reported`), the
(model, method, alpha) groups (:mod:`.groups`), quantities and their decimals (:mod:`.quantities`), statistics
(:mod:`.significance`), paired comparisons (:mod:`.evidence`; their paragraph is the report's,
:mod:`saah_lab.report.texts`), the study plan and its primary comparison (:mod:`.plan`), run health
(:mod:`.health`) and runs shared between studies (:mod:`.overlap`)."""
