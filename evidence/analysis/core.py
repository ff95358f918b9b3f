"""Former home of the analysis; its names now live in the rooms of `evidence.analysis`.

Kept only so that code not yet moved to the new modules keeps importing; new code imports
from evidence.analysis.{load,tables,findings,analyze,numbers} directly.
"""

from evidence.analysis.analyze import (METHODS, SCHEMA, analyze_run, compute_analysis, default_out_dir,
                                       write_analysis, write_extras)
from evidence.analysis.findings import dominates, paired_comparison
from evidence.analysis.load import NotARunDir, RunData, TrialData, load_run
from evidence.analysis.numbers import JSON_DECIMALS, label, pct_text
from evidence.analysis.tables import CSV_DECIMALS, csv_tables, fmt, latency_stats

__all__ = ["CSV_DECIMALS", "JSON_DECIMALS", "METHODS", "NotARunDir", "RunData", "SCHEMA", "TrialData", "analyze_run",
           "compute_analysis", "csv_tables", "default_out_dir", "dominates", "fmt", "label", "latency_stats", "load_run",
           "paired_comparison", "pct_text", "write_analysis", "write_extras"]
