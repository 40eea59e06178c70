"""``python -m saah_lib.studies.bench``: the step-time benchmark against stock TRL (:mod:`saah_lib.studies.bench`)."""

from saah_lib.studies.bench import main

if __name__ == "__main__":
    main()
