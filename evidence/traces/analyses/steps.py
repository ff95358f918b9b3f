"""f. vLLM engine steps: scheduler composition per step and the kernels each step launched."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import numpy as np

from evidence.traces.analyses.window import Window, resolve_window, select_kernels, union_length
from evidence.traces.model import KernelTable, Step, place_kernels_in_steps

__all__ = ["StepRow", "StepReport", "distribution", "step_analysis"]


def distribution(values: Iterable[float]) -> dict[str, Any]:
    """n, min, p50, mean, max of a list (None for an empty one). p50 is the lower median."""
    v = sorted(values)
    if not v:
        return {"n": 0, "min": None, "p50": None, "mean": None, "max": None}
    return {"n": len(v), "min": v[0], "p50": v[(len(v) - 1) // 2], "mean": float(sum(v) / len(v)), "max": v[-1]}


@dataclass(frozen=True)
class StepRow:
    index: int
    n_prefill: int
    prefill_tokens: int
    n_decode: int
    decode_tokens: int
    tokens: int
    kernels: int
    kernel_ns: int
    gpu_window_ns: int
    gpu_window_source: str  # "gpu annotation" | "kernel extent" | "cpu range (no kernels)"
    active_ns: int
    active_fraction: float | None


@dataclass(frozen=True)
class StepReport:
    steps: int
    steps_in_window: int
    steps_partly_outside: int
    steps_with_prefill: int
    decode_only_steps: int
    prefill_requests: dict[str, Any]  # per prefill step
    prefill_tokens: dict[str, Any]
    decode_requests: dict[str, Any]  # per step (all steps)
    decode_population_decode_only: dict[str, Any]
    decode_population_with_prefill: dict[str, Any]
    tokens: dict[str, Any]  # T + G per step
    budget: int | None
    budget_reason: str | None
    prefill_steps_at_budget: int | None
    prefill_steps_below_budget: int | None
    steps_over_budget: int | None
    below_budget: tuple[dict[str, int], ...]
    kernels_placed: int
    kernels_unplaced: int
    unplaced_kernel_ns: int
    kernel_ns_per_step_prefill: dict[str, Any]
    kernel_ns_per_step_decode: dict[str, Any]
    active_fraction_per_step: dict[str, Any]
    rows: tuple[StepRow, ...]


def step_analysis(
    kernels: KernelTable, steps: Sequence[Step], *, budget: int | None = None,
    window: tuple[int | None, int | None] | Window | None = None, step_of: np.ndarray | None = None,
) -> StepReport:
    """Scheduler composition per engine step, and the kernels each step launched.

    A step's GPU span is its GPU-side annotation when the trace has one, else the
    extent of the kernels it launched (its CPU range only if it launched none: a
    graph replay's CPU range closes before its kernels even start). A step is in
    the window when that span overlaps it; steps_partly_outside counts those the
    window cuts. Kernels are placed under the step whose CPU range holds their
    launch; kernel-active within a step is the union of its kernels over its span.
    """
    w = resolve_window(kernels, window)
    if step_of is None:
        step_of = place_kernels_in_steps(kernels, steps)
    st_all, en_all = kernels["start_ns"], kernels["end_ns"]
    order = np.argsort(step_of, kind="stable")  # kernels grouped by step, time order kept
    sorted_steps = step_of[order]

    inw: list[Step] = []
    rows = []
    partial = 0
    for s in steps:
        lo, hi = np.searchsorted(sorted_steps, [s.index, s.index + 1])
        k = order[lo:hi]
        ks, ke = st_all[k], en_all[k]
        if s.gpu_start_ns is not None:
            ga, gb, src = s.gpu_start_ns, s.gpu_end_ns, "gpu annotation"
        elif len(k):
            ga, gb, src = int(ks.min()), int(ke.max()), "kernel extent"
        else:
            ga, gb, src = s.start_ns, s.end_ns, "cpu range (no kernels)"
        if not (gb > w.start_ns and ga < w.end_ns):
            continue
        inw.append(s)
        partial += not (ga >= w.start_ns and gb <= w.end_ns)
        active = union_length(ks, ke, ga, gb)
        gw = gb - ga
        rows.append(StepRow(s.index, s.n_prefill, s.prefill_tokens, s.n_decode, s.decode_tokens, s.tokens, len(k),
                            int((ke - ks).sum()), gw, src, active, active / gw if gw > 0 else None))
    pre = [s for s in inw if s.has_prefill]
    dec = [s for s in inw if not s.has_prefill]
    row_of = {r.index: r for r in rows}
    if budget is None:
        budget_reason = "no token budget given (--budget); budget use not checked"
        at = below = over = None
        below_list: tuple[dict[str, int], ...] = ()
    else:
        budget_reason = None
        at = sum(1 for s in pre if s.tokens == budget)
        below = sum(1 for s in pre if s.tokens < budget)
        over = sum(1 for s in inw if s.tokens > budget)
        below_list = tuple({"step": s.index, "N": s.n_prefill, "T": s.prefill_tokens, "M": s.n_decode,
                            "G": s.decode_tokens, "tokens": s.tokens} for s in pre if s.tokens != budget)
    # Kernels in the window that no step launched (samplers run after the step annotation closes).
    un = (step_of < 0) & select_kernels(kernels, w)
    return StepReport(
        steps=len(steps), steps_in_window=len(inw), steps_partly_outside=partial, steps_with_prefill=len(pre), decode_only_steps=len(dec),
        prefill_requests=distribution(s.n_prefill for s in pre), prefill_tokens=distribution(s.prefill_tokens for s in pre),
        decode_requests=distribution(s.n_decode for s in inw),
        decode_population_decode_only=distribution(s.n_decode for s in dec),
        decode_population_with_prefill=distribution(s.n_decode for s in pre),
        tokens=distribution(s.tokens for s in inw), budget=budget, budget_reason=budget_reason,
        prefill_steps_at_budget=at, prefill_steps_below_budget=below, steps_over_budget=over, below_budget=below_list,
        kernels_placed=sum(r.kernels for r in rows), kernels_unplaced=int(un.sum()),
        unplaced_kernel_ns=int((en_all[un] - st_all[un]).sum()),
        kernel_ns_per_step_prefill=distribution(row_of[s.index].kernel_ns for s in pre),
        kernel_ns_per_step_decode=distribution(row_of[s.index].kernel_ns for s in dec),
        active_fraction_per_step=distribution(r.active_fraction for r in rows if r.active_fraction is not None),
        rows=tuple(rows),
    )

