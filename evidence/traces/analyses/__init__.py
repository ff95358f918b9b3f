"""The trace analyses, each a function of a kernel table (and steps): pure functions, plain results.

Every analysis returns a frozen dataclass; `as_dict()` turns any result into
JSON-ready dicts/lists with a fixed order. Times are integer nanoseconds; a value
that cannot be computed is None with a reason next to it, never zero.

The analyses follow notes/profiling.md, one module each:
  window     a. kernel_active: union of kernel intervals over a window (not a sum of durations)
  families   b. ordered regex rules, first match wins, optional per-token cost
  geometry   c. geometry_split: a family by launch grid, graph replays apart from eager launches
  forwards   d. reconstruct_forwards: per-layer attention launches grouped into model forwards;
             e. sustained_regime: the plateau of forward population and attention duration
  steps      f. step_analysis: vLLM engine steps, scheduler composition and kernels under each
  registry   what each needs, and analyze_trace, which runs them all on one trace
"""

from evidence.traces.analyses.families import (
    DEFAULT_RULES, GEOMETRY_KINDS, FamilyReport, FamilyRow, FamilyRule, classify, families, load_rules,
)
from evidence.traces.analyses.forwards import (
    Forward, ForwardReport, Regime, RejectedSegment, reconstruct_forwards, sustained_regime,
)
from evidence.traces.analyses.geometry import (
    GeometryGroup, GeometryReport, fa2_sequences, geometry_meaning, geometry_split,
)
from evidence.traces.analyses.registry import ANALYSES, Absent, TraceAnalysis, analyze_trace, as_dict
from evidence.traces.analyses.steps import StepReport, StepRow, distribution, step_analysis
from evidence.traces.analyses.window import KernelActive, Window, kernel_active, resolve_window, select_kernels, union_length

__all__ = [
    "Window", "KernelActive", "FamilyRule", "DEFAULT_RULES", "GEOMETRY_KINDS",
    "FamilyRow", "FamilyReport", "GeometryGroup", "GeometryReport",
    "Forward", "RejectedSegment", "ForwardReport", "Regime", "StepRow", "StepReport",
    "resolve_window", "select_kernels", "union_length", "kernel_active",
    "load_rules", "classify", "families", "geometry_split", "geometry_meaning",
    "fa2_sequences", "reconstruct_forwards", "sustained_regime", "step_analysis",
    "ANALYSES", "Absent", "TraceAnalysis", "analyze_trace", "as_dict", "distribution",
]
