"""Analysis: pure functions of a run's raw records.

Rooms: load (raw files -> RunData), tables (trial and point rows), dataframes (every table as a
pandas DataFrame, and the CSV writer), findings (paired comparisons, dominance, ordering),
telemetry, goodput, caveats, analyze (the whole pass and analysis.json), model (a typed reading of
analysis.json), compare (two runs), anchor.

`evidence.analysis.analyze_run` is named in published release.json files; it stays importable here.
`frames(res)` gives the tables of an analysis (computed, or analysis.json read back) as DataFrames.
"""

from evidence.analysis.analyze import analyze_run
from evidence.analysis.dataframes import csv_text, frames

__all__ = ["analyze_run", "csv_text", "frames"]
