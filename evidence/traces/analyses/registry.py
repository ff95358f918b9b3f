"""The registry of trace analyses, and `analyze_trace`, which runs each on one trace.

Each analysis declares what it needs ("kernels": a non-empty kernel table;
"layers": a layer count; "steps": engine-step annotations) and returns its
report, or `Absent(reason)` when it cannot say anything. A need the trace or the
options do not meet makes the analysis absent with the need's reason, without
running it. The registry's order is the order of the keys in the output, and of the
text `evidence trace` prints: each analysis carries its renderer (evidence.traces.analyses.text), lines and
tables of text from its part of the JSON-ready result.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from evidence.traces.analyses.families import DEFAULT_RULES, FamilyRule, classify, families
from evidence.traces.analyses.forwards import reconstruct_forwards, sustained_regime
from evidence.traces.analyses.geometry import geometry_split
from evidence.traces.analyses.steps import step_analysis
from evidence.traces.analyses import text
from evidence.traces.analyses.text import Block
from evidence.traces.analyses.window import Window, kernel_active, resolve_window, select_kernels
from evidence.traces.model import KernelTable, Trace, place_kernels_in_steps

__all__ = ["Absent", "TraceAnalysis", "Context", "ANALYSES", "analyze_trace", "as_dict"]


def as_dict(obj: Any) -> Any:
    """Dataclasses, tuples and numpy scalars to plain JSON-ready values (order kept)."""
    names = getattr(type(obj), "__dataclass_fields__", None)
    if names is not None and not isinstance(obj, type):
        return {n: as_dict(getattr(obj, n)) for n in names}
    if isinstance(obj, dict):
        return {str(k): as_dict(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [as_dict(v) for v in obj]
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        obj = float(obj)
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


@dataclass(frozen=True)
class Absent:
    """An analysis that could not run on this trace, and why."""

    reason: str


@dataclass
class Context:
    """What the analyses read: the trace, the options, and what earlier analyses found."""

    trace: Trace
    n_layers: int | None
    rules: Sequence[FamilyRule]
    output_tokens: int | None
    budget: int | None
    heads: int | None
    gap_factor: float
    rel_tol: float
    min_forwards: int
    device: int | None
    pid: int | None
    num_sms: int | None
    window: Window | None = None  # None only when the table is empty
    step_of: np.ndarray | None = None
    results: dict[str, Any] = field(default_factory=dict)  # key -> the analysis's own result object

    @property
    def kernels(self) -> KernelTable:
        return self.trace.kernels


@dataclass(frozen=True)
class TraceAnalysis:
    key: str
    needs: tuple[str, ...]
    run: Callable[[Context], Any]
    doc: str
    # its text, from analyze_trace's whole result (an analysis may print beside another's, as geometry the paths)
    render: Callable[[dict[str, Any]], list[Block]] | None = None


def _no_kernels(ctx: Context) -> str:
    return next((n for n in ctx.trace.notes if n.startswith("no GPU kernels")), "no GPU kernels in the trace")


def _no_layers(ctx: Context) -> str:
    hint = _layers_hint(ctx.kernels, ctx.rules, ctx.step_of) if ctx.step_of is not None else ""
    return "no layer count given (--layers); forwards not reconstructed" + hint


def _no_steps(ctx: Context) -> str:
    if len(ctx.kernels) == 0:
        return "no engine-step annotations in the trace"
    return "no engine-step annotations (execute_context_N(T)_generation_M(G)) in the trace"


# need -> (is it met?, why not)
NEEDS: dict[str, tuple[Callable[[Context], bool], Callable[[Context], str]]] = {
    "kernels": (lambda ctx: len(ctx.kernels) > 0, _no_kernels),
    "layers": (lambda ctx: bool(ctx.n_layers), _no_layers),
    "steps": (lambda ctx: bool(ctx.trace.steps), _no_steps),
}


def _layers_hint(kernels: KernelTable, rules: Sequence[FamilyRule], step_of: np.ndarray) -> str:
    rule_idx, all_rules = classify(kernels, rules)
    markers = [i for i, r in enumerate(all_rules) if r.layer_marker]
    m = np.isin(rule_idx, markers) & (step_of >= 0)
    if not m.any():
        return ""
    per_step = set(np.bincount(step_of[m]).tolist()) - {0}
    if len(per_step) == 1:
        return f" (every engine step launched {per_step.pop()} attention kernels: try --layers with that number)"
    return ""


def _streams(k: KernelTable) -> list[tuple[int, int]]:
    """Distinct (device, stream) pairs, without a Python loop over rows."""
    out = []
    dev, st = k["device"], k["stream"]
    for d in np.unique(dev).tolist():
        out += [(int(d), int(x)) for x in np.unique(st[dev == d]).tolist()]
    return out


def _geometry(ctx: Context) -> list:
    """Geometry for each rule with a declared meaning, plus every attention rule seen."""
    k, w = ctx.kernels, ctx.window
    rule_idx, all_rules = classify(k, ctx.rules)
    present = set(np.unique(rule_idx[select_kernels(k, w, device=ctx.device, pid=ctx.pid)]).tolist())
    return [geometry_split(k, r.name, ctx.rules, w, output_tokens=ctx.output_tokens, device=ctx.device, pid=ctx.pid,
                           heads=ctx.heads, num_sms=ctx.num_sms)
            for i, r in enumerate(all_rules)
            if i in present and (r.geometry != "opaque" or r.family_name == "attention" or r.layer_marker)]


def _forwards(ctx: Context) -> Any:
    return reconstruct_forwards(ctx.kernels, ctx.n_layers, ctx.rules, ctx.window, steps=ctx.trace.steps,
                                step_of=ctx.step_of, device=ctx.device, pid=ctx.pid, gap_factor=ctx.gap_factor,
                                heads=ctx.heads)


def _sustained(ctx: Context) -> Any:
    fr = ctx.results["forwards"]
    return {p: sustained_regime(fr.forwards, path=p, rel_tol=ctx.rel_tol, min_forwards=ctx.min_forwards)
            for p in ("mixed", "decode")}


def _steps(ctx: Context) -> Any:
    if len(ctx.kernels) == 0:  # the steps still say what the scheduler did; window them by their own span
        steps = ctx.trace.steps
        sw = Window(min(s.start_ns for s in steps), max(s.end_ns for s in steps),
                    "default: first to last step annotation (no kernels)")
        return step_analysis(ctx.kernels, steps, budget=ctx.budget, window=sw)
    return step_analysis(ctx.kernels, ctx.trace.steps, budget=ctx.budget, window=ctx.window, step_of=ctx.step_of)


ANALYSES: tuple[TraceAnalysis, ...] = (
    TraceAnalysis("window", ("kernels",), lambda ctx: ctx.window, "the window every analysis below is clipped to",
                  text.window_text),
    TraceAnalysis("kernel_active", ("kernels",),
                  lambda ctx: kernel_active(ctx.kernels, ctx.window, device=ctx.device, pid=ctx.pid),
                  "union of kernel intervals over the window", text.kernel_active_text),
    TraceAnalysis("families", ("kernels",),
                  lambda ctx: families(ctx.kernels, ctx.rules, ctx.window, output_tokens=ctx.output_tokens,
                                       device=ctx.device, pid=ctx.pid),
                  "kernel time per family (ordered regex rules)", text.families_text),
    TraceAnalysis("geometry", ("kernels",), _geometry, "launch grids of attention and declared-geometry rules",
                  text.geometry_text),
    TraceAnalysis("forwards", ("kernels", "layers"), _forwards, "model forwards from per-layer attention launches",
                  text.forwards_text),
    TraceAnalysis("sustained", ("kernels", "layers"), _sustained, "plateau of forward population and duration",
                  text.sustained_text),
    TraceAnalysis("steps", ("steps",), _steps, "vLLM engine steps and the kernels under each", text.steps_text),
)


def analyze_trace(
    trace: Trace, *, n_layers: int | None = None, window: tuple[int | None, int | None] | None = None,
    rules: Sequence[FamilyRule] = DEFAULT_RULES, output_tokens: int | None = None, budget: int | None = None,
    heads: int | None = None, gap_factor: float = 5.0, rel_tol: float = 0.05, min_forwards: int = 5,
    device: int | None = None, pid: int | None = None,
) -> dict[str, Any]:
    """Run every registered analysis on one trace; a JSON-ready dict with a fixed layout."""
    k = trace.kernels
    num_sms = None
    for dp in trace.meta.get("deviceProperties") or []:
        if isinstance(dp, dict) and dp.get("numSms"):
            num_sms = int(dp["numSms"])
            break
    out: dict[str, Any] = {
        "trace": {
            "path": trace.path, "format": trace.format, "kernels": len(k), "steps": len(trace.steps),
            "ranges": len(trace.ranges), "graph_kernels": int(k["is_graph"].sum()) if len(k) else 0,
            "streams": _streams(k),
            "num_sms": num_sms, "notes": list(trace.notes),
        },
    }
    ctx = Context(trace, n_layers, rules, output_tokens, budget, heads, gap_factor, rel_tol, min_forwards, device, pid,
                  num_sms)
    if len(k):
        # The default window spans the kernels being analysed (after the device/pid filter).
        scope = k if device is None and pid is None else k.filter(select_kernels(k, device=device, pid=pid))
        if len(scope) == 0:
            raise ValueError(f"no kernels match device={device} pid={pid}")
        ctx.window = resolve_window(scope, window)
        ctx.step_of = place_kernels_in_steps(k, trace.steps)
    for a in ANALYSES:
        unmet = next((n for n in a.needs if not NEEDS[n][0](ctx)), None)
        res = Absent(NEEDS[unmet][1](ctx)) if unmet else a.run(ctx)
        ctx.results[a.key] = res
        out[a.key] = {"absent": res.reason} if isinstance(res, Absent) else as_dict(res)
    return out
