"""Analysis of run folders: reading a results root, per-run summaries, seeds aggregated, statistics and paired
comparisons, run health, the study plan and the paper's numbers."""
