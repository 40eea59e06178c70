"""Training: the run's config (:mod:`.config`: ``SAAHGRPOConfig``, TRL's, and ``RunConfig``; the light
profiles in :mod:`.profiles`), notebook parameters (:mod:`.notebook_params`), the trainer (:mod:`.trainer`, a
TRL ``GRPOTrainer``), its callbacks (:mod:`.callbacks`), one run start to finish (:mod:`.run`) and several
processes (:mod:`.distributed`, :mod:`.launch`)."""
