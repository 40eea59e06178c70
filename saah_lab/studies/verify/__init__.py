"""Does a rerun of a study reproduce the committed one?  One check in two levels.

Level 1, :mod:`~saah_lab.studies.verify.bits`: every logged number, evaluation and completion of every run,
bit for bit.  Level 2, :mod:`~saah_lab.studies.verify.conclusions`, asked only where the bits differ (another
CPU's kernels round differently): do the study's conclusions still hold?  The verdict states both.
"""
