"""Run folders in the lab: strict reading and what the logs must mean (:mod:`.reader`), one writer at a time
(:mod:`.lock`), checkpoints (:mod:`.checkpoints`), provenance (:mod:`.provenance`), the study roots a command may
touch (:mod:`.roots`) and the integrity manifest of a results root (:mod:`.manifest`)."""
