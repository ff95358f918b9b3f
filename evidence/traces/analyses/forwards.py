"""d. Forward reconstruction and e. the sustained regime.

Per-layer attention launches on the compute stream, cut where the grid, the engine
step or an outsized gap says a forward ended, accepted only as exactly n_layers (or
split from an exact multiple); everything rejected is counted with why. The sustained
regime is the plateau of the accepted forwards' sequence counts.
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from evidence.traces.analyses.families import DEFAULT_RULES, FamilyRule, classify
from evidence.traces.analyses.geometry import fa2_sequences, infer_heads
from evidence.traces.analyses.window import Window, resolve_window, select_kernels
from evidence.traces.model import KernelTable, Step, place_kernels_in_steps

__all__ = ["Forward", "RejectedSegment", "ForwardReport", "Regime", "reconstruct_forwards", "sustained_regime"]


@dataclass(frozen=True)
class Forward:
    index: int
    start_ns: int  # first layer's attention start
    end_ns: int  # last layer's attention end
    launches: int
    grid: tuple[int, int, int]
    replay: str  # "graph" | "eager" | "mixed"
    path: str | None  # "decode" | "mixed" | None (unknown)
    path_source: str | None
    sequences: int | None
    sequences_source: str | None
    sequence_check: str  # "identical" | "not applicable: ..."
    mean_kernel_ns: float
    total_kernel_ns: int
    step: int | None
    segment: int
    split: bool  # one of several forwards cut from an exact multiple of n_layers


@dataclass(frozen=True)
class RejectedSegment:
    segment: int
    start_ns: int
    end_ns: int
    launches: int
    grid: tuple[int, int, int]
    code: str  # cut_at_window_start | cut_at_window_end | short | not_multiple | sequence_dim_varies
    reason: str


@dataclass(frozen=True)
class ForwardReport:
    rule: str | None
    geometry: str | None
    n_layers: int
    device: int | None
    stream: int | None
    window: Window
    marker_launches: int
    segments: int
    boundaries: dict[str, int]  # cause -> count
    median_gap_ns: float | None  # idle gap between consecutive layers inside accepted forwards
    gap_factor: float | None  # a gap above this x the run's median gap ends a segment
    heads: int | None
    heads_source: str | None
    forwards: tuple[Forward, ...]
    rejected: tuple[RejectedSegment, ...]
    rejected_by_code: dict[str, int]
    rejected_launches: int
    split_segments: int
    notes: tuple[str, ...]


def _empty_forward_report(n_layers: int, w: Window, note: str, rule: FamilyRule | None = None) -> ForwardReport:
    return ForwardReport(rule.name if rule else None, rule.geometry if rule else None, n_layers, None, None, w, 0, 0,
                         {}, None, None, None, None, (), (), {}, 0, 0, (note,))


def reconstruct_forwards(
    kernels: KernelTable, n_layers: int, rules: Sequence[FamilyRule] = DEFAULT_RULES,
    window: tuple[int | None, int | None] | Window | None = None, *,
    steps: Sequence[Step] = (), step_of: np.ndarray | None = None,
    device: int | None = None, stream: int | None = None, pid: int | None = None,
    gap_factor: float = 5.0, heads: int | None = None, split_on_grid: bool = True,
) -> ForwardReport:
    """Group per-layer attention launches into model forwards of exactly n_layers.

    Launches of the layer-marker rule with the most launches, fully inside the
    window, on the busiest (device, stream) unless one is given, in time order.
    A segment ends where the grid changes (split_on_grid), where the engine step
    changes (steps given), or where the idle gap exceeds gap_factor x the median
    gap between launches of one forward. Segments of exactly n_layers are forwards,
    exact multiples are split, everything else is reported as rejected with why.
    """
    if n_layers <= 0:
        raise ValueError("n_layers must be positive")
    w = resolve_window(kernels, window)
    rule_idx, all_rules = classify(kernels, rules)
    inside = select_kernels(kernels, w, device=device, pid=pid, inside=True)
    markers = [i for i, r in enumerate(all_rules) if r.layer_marker]
    counts = {i: int((inside & (rule_idx == i)).sum()) for i in markers}
    if not markers or not any(counts.values()):
        return _empty_forward_report(n_layers, w, "no per-layer attention launches (no layer_marker rule matched in the window)")
    notes: list[str] = []
    ri = max(markers, key=lambda i: (counts[i], -i))
    rule = all_rules[ri]
    if sum(1 for i in markers if counts[i]) > 1:
        notes.append(f"several layer-marker rules matched; used {rule.name!r} ({counts[ri]} launches), the most frequent")
    m = inside & (rule_idx == ri)
    dev, st = kernels["device"], kernels["stream"]
    if stream is None:
        pairs = Counter(zip(dev[m].tolist(), st[m].tolist()))
        (d0, s0), _ = min(pairs.items(), key=lambda kv: (-kv[1], kv[0]))
        if len(pairs) > 1:
            notes.append(f"attention ran on {len(pairs)} (device, stream) pairs; used the busiest, device {d0} stream {s0}")
    else:
        on = m & (st == stream)
        if not on.any():
            return _empty_forward_report(n_layers, w, f"no {rule.name} launches on stream {stream}", rule)
        d0 = device if device is not None else min(Counter(dev[on].tolist()).items(), key=lambda kv: (-kv[1], kv[0]))[0]
        s0 = stream
    m &= (dev == d0) & (st == s0)
    idx = np.flatnonzero(m)  # table is sorted by start, so this is time order
    n = len(idx)
    if n == 0:
        return _empty_forward_report(n_layers, w, f"no {rule.name} launches on stream {s0}", rule)
    start = kernels["start_ns"][idx]
    end = kernels["end_ns"][idx]
    grid = np.stack([kernels["grid_x"][idx], kernels["grid_y"][idx], kernels["grid_z"][idx]], axis=1)
    graph = kernels["is_graph"][idx]
    dur = end - start

    if step_of is None:
        step_of = place_kernels_in_steps(kernels, steps) if steps else np.full(len(kernels), -1, np.int64)
    sidx = step_of[idx]

    # Boundary causes between launch k-1 and k (index k, k >= 1).
    cause_grid = np.zeros(n, bool)
    cause_step = np.zeros(n, bool)
    if n > 1:
        if split_on_grid:
            cause_grid[1:] = (grid[1:] != grid[:-1]).any(axis=1)
        if steps:
            cause_step[1:] = sidx[1:] != sidx[:-1]
    gaps = np.zeros(n, np.int64)
    gaps[1:] = start[1:] - end[:-1]
    # Gap rule: the median is taken inside each run already delimited by grid and
    # step changes, because eager prefill forwards have far longer layer-to-layer
    # gaps than graph-replayed decode forwards; one global median would cut them.
    # Inside a run most gaps are in-forward (n_layers - 1 of every n_layers).
    cause_gap = np.zeros(n, bool)
    pre = np.flatnonzero(cause_grid | cause_step)
    for a, b in zip(np.concatenate([[0], pre]).tolist(), np.append(pre, n).tolist()):
        if b - a >= 3:
            med = float(np.median(gaps[a + 1:b]))
            cause_gap[a + 1:b] = gaps[a + 1:b] > gap_factor * max(med, 1.0)
    # A gap is the weakest of the three signals: a CPU stall (the profiler flushing
    # its buffers) can open one inside a forward. Where gap-cut pieces of one run
    # are not whole forwards but consecutive pieces add up to a multiple of
    # n_layers, that cut is dropped again (counted as a merge).
    merged = _merge_gap_pieces(cause_gap, cause_grid | cause_step, n, n_layers)
    cause_gap &= ~merged
    boundary = cause_grid | cause_step | cause_gap
    boundary[0] = True
    seg_starts = np.flatnonzero(boundary)
    seg_ends = np.append(seg_starts[1:], n)

    # Was the marker stream cut by the window? (launches straddling or outside it)
    all_on_stream = (rule_idx == ri) & (dev == d0) & (st == s0)
    if pid is not None:
        all_on_stream &= kernels["pid"] == pid
    cut_before = bool((all_on_stream & (kernels["start_ns"] < w.start_ns)).any())
    cut_after = bool((all_on_stream & (kernels["end_ns"] > w.end_ns)).any())

    if heads is None and rule.geometry == "fa2_splitkv":
        heads = infer_heads(kernels, (rule_idx == ri) & (dev == d0) & (st == s0))
        heads_source = "inferred: smallest grid_z of the split-KV launches" if heads else None
    else:
        heads_source = "given" if heads else None
    step_by_index = {s.index: s for s in steps}

    def cause_at(k: int) -> str:
        if k == 0:
            return "window start" if cut_before else "first launch"
        if k >= n:
            return "window end" if cut_after else "last launch"
        names = [c for c, flag in (("grid change", cause_grid[k]), ("step boundary", cause_step[k]),
                                   ("gap", cause_gap[k])) if flag]
        return " + ".join(names)

    forwards: list[Forward] = []
    rejected: list[RejectedSegment] = []
    in_fw = np.zeros(n, bool)
    n_split = 0
    for si, (a, b) in enumerate(zip(seg_starts.tolist(), seg_ends.tolist())):
        length = b - a
        g0 = tuple(int(v) for v in grid[a])
        if length % n_layers:
            if a == 0 and cut_before:
                code = "cut_at_window_start"
            elif b == n and cut_after:
                code = "cut_at_window_end"
            elif length < n_layers:
                code = "short"
            else:
                code = "not_multiple"
            rejected.append(RejectedSegment(
                si, int(start[a]), int(end[b - 1]), length, g0, code,
                f"{length} launches, not a multiple of {n_layers} layers (segment from {cause_at(a)} to {cause_at(b)})"))
            continue
        pieces = length // n_layers
        if pieces > 1:
            n_split += 1
        for p in range(pieces):
            lo, hi = a + p * n_layers, a + (p + 1) * n_layers
            fw = _make_forward(len(forwards), si, pieces > 1, lo, hi, rule, start, end, dur, grid, graph, sidx,
                               heads, step_by_index)
            if isinstance(fw, str):
                rejected.append(RejectedSegment(si, int(start[lo]), int(end[hi - 1]), hi - lo,
                                                tuple(int(v) for v in grid[lo]), "sequence_dim_varies", fw))
            else:
                forwards.append(fw)
                in_fw[lo + 1:hi] = True  # gaps between this forward's layers
    by_code = dict(sorted(Counter(r.code for r in rejected).items()))
    median_gap = float(np.median(gaps[in_fw])) if in_fw.any() else None
    bounds = {
        "grid change": int(cause_grid.sum()), "step boundary": int(cause_step.sum()), "gap": int(cause_gap.sum()),
        "gap merged back": int(merged.sum()),
    }
    return ForwardReport(
        rule.name, rule.geometry, n_layers, int(d0), int(s0), w, n, len(seg_starts), bounds, median_gap, gap_factor,
        heads, heads_source, tuple(forwards), tuple(rejected), by_code, sum(r.launches for r in rejected), n_split,
        tuple(notes),
    )


def _merge_gap_pieces(cause_gap: np.ndarray, hard: np.ndarray, n: int, n_layers: int) -> np.ndarray:
    """Gap cuts to drop: inside each hard-delimited run, walk the gap-cut pieces left to
    right; a piece that is not a multiple of n_layers absorbs the following pieces
    when that reaches a multiple, otherwise it stays as cut."""
    drop = np.zeros(n, bool)
    hard_idx = np.flatnonzero(hard)
    for a, b in zip(np.concatenate([[0], hard_idx]).tolist(), np.append(hard_idx, n).tolist()):
        cuts = [a] + [int(k) for k in np.flatnonzero(cause_gap[a:b]) + a if k > a] + [b]
        sizes = [cuts[i + 1] - cuts[i] for i in range(len(cuts) - 1)]
        i = 0
        while i < len(sizes):
            total, j = sizes[i], i
            while total % n_layers and j + 1 < len(sizes):
                j += 1
                total += sizes[j]
            if total % n_layers == 0 and j > i and sizes[i] % n_layers:
                drop[cuts[i + 1:j + 1]] = True
                i = j + 1
            else:
                i += 1
    return drop


def _make_forward(index, seg, split, lo, hi, rule, start, end, dur, grid, graph, sidx, heads, step_by_index):
    g = grid[lo:hi]
    gr = graph[lo:hi]
    replay = "graph" if gr.all() else "eager" if not gr.any() else "mixed"
    steps_here = set(sidx[lo:hi].tolist())
    step = next(iter(steps_here)) if len(steps_here) == 1 and -1 not in steps_here else None
    st = step_by_index.get(step) if step is not None else None
    path = path_source = None
    seqs = seq_source = None
    check = "identical"
    if rule.geometry == "fa2_splitkv":
        yz = {tuple(r) for r in g[:, 1:].tolist()}
        if len(yz) > 1:
            return f"sequence dimension varies within the forward: (grid_y, grid_z) values {sorted(yz)}"
        seqs = fa2_sequences(*yz.pop(), heads)
        seq_source = "grid (FA2 split-KV: grid_y, or grid_z / heads)" if seqs is not None else None
        gx = {int(v) for v in g[:, 0].tolist()}
        if len(gx) == 1:
            path = "decode" if gx == {1} else "mixed"
            path_source = "gridX"
    else:
        check = "not applicable: grid carries no sequence count" if rule.geometry == "persistent" else "not applicable: grid not interpreted"
    if st is not None:
        if path is None:
            path, path_source = ("mixed" if st.has_prefill else "decode"), "step annotation"
        if seqs is None:
            seqs, seq_source = st.n_prefill + st.n_decode, "step annotation (N + M)"
    return Forward(index, int(start[lo]), int(end[hi - 1]), hi - lo, tuple(int(v) for v in g[0]), replay, path,
                   path_source, seqs, seq_source, check, float(dur[lo:hi].mean()), int(dur[lo:hi].sum()), step, seg, split)


@dataclass(frozen=True)
class Regime:
    path: str
    present: bool
    reason: str | None
    rel_tol: float
    min_forwards: int
    candidates: int  # forwards of this path with a sequence count
    forwards: int  # in the plateau
    first_forward: int | None
    last_forward: int | None
    start_ns: int | None
    end_ns: int | None
    ramp_forwards_before: int | None
    drain_forwards_after: int | None
    mean_sequences: float | None
    min_sequences: int | None
    max_sequences: int | None
    mean_kernel_ns: float | None
    min_kernel_ns: float | None
    max_kernel_ns: float | None


def _longest_stable_run(values: Sequence[float], rel_tol: float) -> tuple[int, int]:
    """Longest [i, j) with max <= min * (1 + rel_tol): two pointers with monotonic deques.

    Ties go to the earliest run.
    """
    best = (0, 0)
    lo = 0
    qmax: deque[int] = deque()
    qmin: deque[int] = deque()
    for hi, v in enumerate(values):
        while qmax and values[qmax[-1]] <= v:
            qmax.pop()
        qmax.append(hi)
        while qmin and values[qmin[-1]] >= v:
            qmin.pop()
        qmin.append(hi)
        while values[qmax[0]] > values[qmin[0]] * (1 + rel_tol):
            lo += 1
            if qmax[0] < lo:
                qmax.popleft()
            if qmin[0] < lo:
                qmin.popleft()
        if hi + 1 - lo > best[1] - best[0]:
            best = (lo, hi + 1)
    return best


def sustained_regime(
    forwards: Sequence[Forward], *, path: str = "mixed", rel_tol: float = 0.05, min_forwards: int = 5,
) -> Regime:
    """The plateau of a path's forwards: the longest run of consecutive forwards whose
    sequence counts stay within rel_tol (max <= min x (1 + rel_tol)), at least
    min_forwards long. The ramp-up before it and the drain after it are counted,
    not used. path: "mixed", "decode" or "all".
    """
    cand = [f for f in forwards if f.sequences is not None and (path == "all" or f.path == path)]
    absent = dict(present=False, forwards=0, first_forward=None, last_forward=None, start_ns=None, end_ns=None,
                  ramp_forwards_before=None, drain_forwards_after=None, mean_sequences=None, min_sequences=None,
                  max_sequences=None, mean_kernel_ns=None, min_kernel_ns=None, max_kernel_ns=None)
    if len(cand) < min_forwards:
        why = (f"only {len(cand)} {path}-path forward(s) with a known sequence count; a plateau needs "
               f"at least {min_forwards}")
        return Regime(path, reason=why, rel_tol=rel_tol, min_forwards=min_forwards, candidates=len(cand), **absent)
    seqs = [float(f.sequences) for f in cand]  # type: ignore[arg-type]
    i, j = _longest_stable_run(seqs, rel_tol)
    if j - i < min_forwards:
        why = (f"no run of {min_forwards} consecutive {path}-path forwards has sequence counts within "
               f"{rel_tol:.0%} of each other (longest: {j - i}, counts {int(min(seqs))}-{int(max(seqs))}); "
               "the window may hold only ramp-up or drain")
        return Regime(path, reason=why, rel_tol=rel_tol, min_forwards=min_forwards, candidates=len(cand), **absent)
    run = cand[i:j]
    s = [f.sequences for f in run]
    d = [f.mean_kernel_ns for f in run]
    return Regime(path, True, None, rel_tol, min_forwards, len(cand), len(run), run[0].index, run[-1].index,
                  run[0].start_ns, run[-1].end_ns, i, len(cand) - j, float(sum(s) / len(s)), int(min(s)), int(max(s)),
                  float(sum(d) / len(d)), float(min(d)), float(max(d)))

