"""The run folder, its only owner: layout and log keys (:mod:`.layout`), writing (:mod:`.folder`),
strict reading (:mod:`.reader`), checkpoints (:mod:`.checkpoints`), provenance (:mod:`.provenance`)
and the integrity manifest of a results root (:mod:`.manifest`)."""
