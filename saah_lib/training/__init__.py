"""Training: the run's config (:mod:`.config`: ``SAAHGRPOConfig``, TRL's, and ``RunConfig``; the light
profiles in :mod:`.profiles`), the trainer (:mod:`.trainer`, a TRL ``GRPOTrainer``), its callbacks
(:mod:`.callbacks`) and sampler (:mod:`.sampler`), the batch layout over processes (:mod:`.distributed`)."""
