"""One run start to finish with its run folder (:mod:`.run`), its command (:mod:`.launch`), the notebooks'
parameters (:mod:`.notebook_params`, bounded on papermill's command line by :mod:`.papermill_bounds`) and the
lab's trainer (:mod:`.study_trainer`)."""
