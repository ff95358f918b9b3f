"""Analysis: pure functions of a run's raw records.

Rooms: load (raw files -> RunData), tables (trial and point rows), dataframes (every table as a
pandas DataFrame, and the CSV writer), findings (paired comparisons, dominance, ordering),
telemetry, goodput, caveats, analyze (the whole pass: build_analysis, and analysis.json written from it),
model and model_rows (the typed analysis, on record's exact dict round trip), compare (two runs), anchor.

`evidence.analysis.analyze_run` is named in published release.json files; it stays importable here.
`frames(res)` gives the tables of an analysis (computed, or analysis.json read back) as DataFrames.
"""

from typing import Any

from evidence.analysis.analyze import analyze_run

__all__ = ["analyze_run", "csv_text", "frames"]


def __getattr__(name: str) -> Any:
    # frames and csv_text need pandas: imported on first use, not by every `import evidence.analysis...`
    if name in ("csv_text", "frames"):
        from evidence.analysis import dataframes

        return getattr(dataframes, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
