"""``python -m saah_lab.studies.verify``: one run against its twin (:mod:`saah_lab.studies.verify.compare`)."""

import sys

from saah_lab.studies.verify.compare import main

if __name__ == "__main__":
    sys.exit(main())
