"""The studies: what each study is and measures (here), how a plan runs (``execution/``), and the reproduction
checks (``verify/``).

Importing this package pins the CPU numerics before any study module imports torch, so every
``python -m saah_lab.studies.X`` and the workers it spawns compute under them.
"""

from saah_lib.numerics import apply_once

apply_once()
