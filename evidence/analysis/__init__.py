"""Analysis: pure functions of a run's raw records.

`evidence.analysis.analyze_run` is named in published release.json files; it stays importable here.
"""

from evidence.analysis.core import analyze_run

__all__ = ["analyze_run"]
