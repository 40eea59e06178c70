"""``python -m saah_lab.studies.bench``: the step-time benchmark against stock TRL (:mod:`saah_lab.studies.bench`)."""

from saah_lab.studies.bench import main

if __name__ == "__main__":
    main()
