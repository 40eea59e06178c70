"""The first code cell of every notebook: work from the repository root.

Papermill starts a notebook in the folder it is given (``make`` passes the
repository root); Jupyter starts it in ``notebooks/``.  Paths in the
notebooks' parameters (``results``, ``figures``, ...) are relative to the
repository root, so each notebook first moves there.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from saah_lib.config import REPO_ROOT


def run_from_repo_root(log_level: int | None = None) -> Path:
    """Change the working directory to the repository root; optionally show the library's log messages."""
    os.chdir(REPO_ROOT)
    if log_level is not None:
        logging.basicConfig(level=log_level, format="%(levelname)s %(name)s: %(message)s", force=True)
    return REPO_ROOT
