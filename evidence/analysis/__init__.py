"""Analysis: pure functions of a run's raw records.

Rooms: load (raw files -> RunData), tables (trial and point rows, CSVs), findings (paired
comparisons, dominance, ordering), telemetry, goodput, caveats, analyze (the whole pass and
analysis.json), model (a typed reading of analysis.json), compare (two runs), anchor.

`evidence.analysis.analyze_run` is named in published release.json files; it stays importable here.
"""

from evidence.analysis.analyze import analyze_run

__all__ = ["analyze_run"]
