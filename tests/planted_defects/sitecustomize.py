"""Plants one defect into saah_lib in every Python process that has this folder on PYTHONPATH.

For the power tests of the reproduction check (tests/studies/verify/test_planted_defects.py): with
``SAAH_PLANTED_DEFECT=<name>`` set, each process (the study driver, its Ray workers, a training
subprocess) patches the named function as soon as its module has loaded, before any other module
binds it, so the defect reaches every caller.  Nothing happens without the variable.  The defects
are those of :data:`planted.DEFECTS`.
"""

import os

if os.environ.get("SAAH_PLANTED_DEFECT"):
    import planted

    planted.install(os.environ["SAAH_PLANTED_DEFECT"])
