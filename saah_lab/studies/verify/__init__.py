"""Does a rerun of a study reproduce the committed one? Level 1 (:mod:`.bits`): every run bit for bit; level 2
(:mod:`.conclusions`), only where bits differ (another CPU rounds differently): do the conclusions still hold?
"""
