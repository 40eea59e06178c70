"""Training: the run's config (:mod:`.config`), the trainer (:mod:`.trainer`, a TRL ``GRPOTrainer``),
its callbacks (:mod:`.callbacks`), one run start to finish (:mod:`.run`) and several processes
(:mod:`.distributed`, :mod:`.launch`)."""
