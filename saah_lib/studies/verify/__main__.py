import sys

from saah_lib.studies.verify.compare import main

if __name__ == "__main__":
    sys.exit(main())
