"""The report: LaTeX cells (:mod:`.latex`), tables (:mod:`.tables`), figures (:mod:`.plots`), the
evidence outputs (:mod:`.evidence_report`), texts across studies (:mod:`.closing`), and everything at
once (:mod:`.render`)."""
