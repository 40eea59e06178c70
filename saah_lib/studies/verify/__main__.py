"""``python -m saah_lib.studies.verify``: one run against its twin (:mod:`saah_lib.studies.verify.compare`)."""

import sys

from saah_lib.studies.verify.compare import main

if __name__ == "__main__":
    sys.exit(main())
