"""The paper on top of the application: its tables as data (:mod:`.tables`), their plans and
stores (:mod:`.table_plan`, :mod:`.reproduce`), the committed results and their gaps to the
paper (:mod:`.results`, :mod:`.gaps`), paired comparisons (:mod:`.compare`), figures
(:mod:`.plots`), word probes (:mod:`.probe`) and the tidy CSV (:mod:`.tidy_csv`)."""
