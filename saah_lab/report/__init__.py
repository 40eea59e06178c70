"""The report, by kind of output: LaTeX cells (:mod:`.latex`), tables (:mod:`.tables`), figures (:mod:`.plots`),
texts (:mod:`.texts`, their words in ``templates/``), and every output of every source at once, checked, made and
written (:mod:`.render`)."""
