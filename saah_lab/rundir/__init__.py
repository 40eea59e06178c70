"""Run folders in the lab: strict reading (:mod:`.reader`) and what the logs must mean (:mod:`.checks`), one
writer at a time (:mod:`.lock`), checkpoints (:mod:`.checkpoints`), provenance (:mod:`.provenance`) and the
integrity manifest of a results root (:mod:`.manifest`)."""
