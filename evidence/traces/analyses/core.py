"""Analyses of a kernel table (see evidence.traces): pure functions, plain results.

Every function takes the table (and steps where relevant) and returns a frozen
dataclass; `as_dict()` turns any result into JSON-ready dicts/lists with a fixed
order. Times are integer nanoseconds; a value that cannot be computed is None
with a reason next to it, never zero.

The analyses follow notes/profiling.md:
  a. kernel_active      union of kernel intervals over a window (not a sum of durations)
  b. families           ordered regex rules, first match wins, optional per-token cost
  c. geometry_split     a family by launch grid, graph replays apart from eager launches
  d. reconstruct_forwards  per-layer attention launches grouped into model forwards
  e. sustained_regime   the plateau of forward population and attention duration
  f. step_analysis      vLLM engine steps: scheduler composition and kernels under each
"""

from __future__ import annotations

import math
import re
from collections import Counter, deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from evidence.traces.model import KernelTable, Step, Trace, TraceError, place_kernels_in_steps

__all__ = [
    "Window", "KernelActive", "FamilyRule", "DEFAULT_RULES", "GEOMETRY_KINDS",
    "FamilyRow", "FamilyReport", "GeometryGroup", "GeometryReport",
    "Forward", "RejectedSegment", "ForwardReport", "Regime", "StepRow", "StepReport",
    "resolve_window", "select_kernels", "union_length", "kernel_active",
    "load_rules", "classify", "families", "geometry_split", "geometry_meaning",
    "fa2_sequences", "reconstruct_forwards", "sustained_regime", "step_analysis",
    "analyze_trace", "as_dict", "distribution",
]


# ---------------------------------------------------------------------------
# Result helpers
# ---------------------------------------------------------------------------

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


def distribution(values: Iterable[float]) -> dict[str, Any]:
    """n, min, p50, mean, max of a list (None for an empty one). p50 is the lower median."""
    v = sorted(values)
    if not v:
        return {"n": 0, "min": None, "p50": None, "mean": None, "max": None}
    return {"n": len(v), "min": v[0], "p50": v[(len(v) - 1) // 2], "mean": float(sum(v) / len(v)), "max": v[-1]}


# ---------------------------------------------------------------------------
# a. Window and kernel-active fraction
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Window:
    start_ns: int
    end_ns: int
    source: str  # "explicit" or how the default was derived

    @property
    def length_ns(self) -> int:
        return max(self.end_ns - self.start_ns, 0)


def resolve_window(kernels: KernelTable, window: tuple[int | None, int | None] | Window | None = None) -> Window:
    """An explicit [start, end] ns window, or first kernel start .. last kernel end.

    Either side of an explicit window may be None, meaning the default for that side.
    """
    if isinstance(window, Window):
        return window
    lo = int(kernels["start_ns"].min()) if len(kernels) else 0
    hi = int(kernels["end_ns"].max()) if len(kernels) else 0
    if window is None or (window[0] is None and window[1] is None):
        return Window(lo, hi, "default: first kernel start to last kernel end")
    s = lo if window[0] is None else int(window[0])
    e = hi if window[1] is None else int(window[1])
    if e <= s:
        raise ValueError(f"window end {e} is not after its start {s}")
    return Window(s, e, "explicit")


def select_kernels(
    kernels: KernelTable, window: Window | None = None, *, device: int | None = None, pid: int | None = None,
    inside: bool = False,
) -> np.ndarray:
    """Boolean mask: kernels overlapping the window (or fully inside it), on device/pid if given."""
    mask = np.ones(len(kernels), dtype=bool)
    if window is not None:
        s, e = kernels["start_ns"], kernels["end_ns"]
        mask &= (s >= window.start_ns) & (e <= window.end_ns) if inside else (e > window.start_ns) & (s < window.end_ns)
    if device is not None:
        mask &= kernels["device"] == device
    if pid is not None:
        mask &= kernels["pid"] == pid
    return mask


def union_length(starts: np.ndarray, ends: np.ndarray, lo: int | None = None, hi: int | None = None) -> int:
    """Length of the union of [start, end) intervals, clipped to [lo, hi]: sort + merge, vectorized.

    A new merged block starts wherever an interval begins after every earlier
    interval has ended (running maximum of ends); the union is the sum of blocks.
    """
    s = np.asarray(starts, dtype=np.int64)
    e = np.asarray(ends, dtype=np.int64)
    if lo is not None:
        s = np.maximum(s, lo)
        e = np.maximum(e, lo)
    if hi is not None:
        s = np.minimum(s, hi)
        e = np.minimum(e, hi)
    keep = e > s
    s, e = s[keep], e[keep]
    if len(s) == 0:
        return 0
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    run_end = np.maximum.accumulate(e)
    new_block = np.empty(len(s), dtype=bool)
    new_block[0] = True
    new_block[1:] = s[1:] > run_end[:-1]
    block_start = s[new_block]
    # The end of each block is the running max just before the next block starts.
    idx_last = np.append(np.flatnonzero(new_block)[1:] - 1, len(s) - 1)
    return int((run_end[idx_last] - block_start).sum())


@dataclass(frozen=True)
class KernelActive:
    window: Window
    device: int | None
    pid: int | None
    kernels: int
    active_ns: int  # union of kernel intervals inside the window
    sum_kernel_ns: int  # plain sum of clipped durations (counts overlap twice)
    overlap_ns: int  # sum - union: time where two or more kernels ran at once
    fraction: float | None
    reason: str | None = None


def kernel_active(
    kernels: KernelTable, window: tuple[int | None, int | None] | Window | None = None,
    *, device: int | None = None, pid: int | None = None,
) -> KernelActive:
    """Fraction of the window in which at least one kernel ran, across all streams."""
    w = resolve_window(kernels, window)
    m = select_kernels(kernels, w, device=device, pid=pid)
    s, e = kernels["start_ns"][m], kernels["end_ns"][m]
    active = union_length(s, e, w.start_ns, w.end_ns)
    total = int((np.minimum(e, w.end_ns) - np.maximum(s, w.start_ns)).clip(min=0).sum())
    if w.length_ns == 0:
        return KernelActive(w, device, pid, int(m.sum()), active, total, total - active, None,
                            "empty window (no kernels, or start == end)")
    return KernelActive(w, device, pid, int(m.sum()), active, total, total - active, active / w.length_ns)


# ---------------------------------------------------------------------------
# b. Families
# ---------------------------------------------------------------------------

GEOMETRY_KINDS = ("opaque", "fa2_splitkv", "persistent")


@dataclass(frozen=True)
class FamilyRule:
    """One ordered classification rule.

    name      the rule's id (unique); family: the bucket it reports into (default: name)
    pattern   regex searched in the demangled kernel name
    geometry  what the launch grid means for this kernel:
              "fa2_splitkv"  grid = (ceil(max_q_len/64), splits>1 ? splits : batch,
                             splits>1 ? batch*heads : heads) - gridX encodes the query chunk
              "persistent"   grid = SM count: carries no query-length meaning
              "opaque"       no declared meaning; grids are listed, not interpreted
    layer_marker  the kernel runs exactly once per transformer layer per forward
                  (used to reconstruct forwards)
    """

    name: str
    pattern: str
    family: str | None = None
    geometry: str = "opaque"
    layer_marker: bool = False

    def __post_init__(self) -> None:
        if self.geometry not in GEOMETRY_KINDS:
            raise ValueError(f"rule {self.name!r}: geometry must be one of {', '.join(GEOMETRY_KINDS)}, not {self.geometry!r}")
        try:
            re.compile(self.pattern)
        except re.error as e:
            raise ValueError(f"rule {self.name!r}: bad regex {self.pattern!r}: {e}") from None

    @property
    def family_name(self) -> str:
        return self.family or self.name


DEFAULT_RULES: tuple[FamilyRule, ...] = (
    FamilyRule("fa2_splitkv", r"flash_fwd_splitkv", "attention", geometry="fa2_splitkv", layer_marker=True),
    FamilyRule("fa3", r"FlashAttnFwdSm90", "attention", geometry="persistent", layer_marker=True),
    FamilyRule("fa3_combine", r"flash::FlashAttnFwdCombine", "attention"),
    FamilyRule("flash_fwd", r"flash_fwd", "attention"),
    FamilyRule("gemm", r"gemm|nvjet|cutlass(?!.*flash)|gemv|splitKreduce|cublas"),
    FamilyRule("triton", r"^triton_"),
    FamilyRule("kv_cache_write", r"reshape_and_cache"),
)
OTHER = FamilyRule("other", r"", "other")


def load_rules(path: str | Path) -> tuple[FamilyRule, ...]:
    """Rules from YAML or JSON, in order. Accepted shapes:

    - a list of {name, pattern, family?, geometry?, layer_marker?}
    - a list of [name, pattern] pairs
    - a mapping {name: pattern} (file order kept)
    - any of these under a top-level `rules:` key
    Kernels matching none fall into "other".
    """
    import yaml

    p = Path(path)
    try:
        doc = yaml.safe_load(p.read_text(encoding="utf-8"))
    except OSError as e:
        raise TraceError(f"Cannot read the rules file {p}: {e.strerror or e}.") from None
    except yaml.YAMLError as e:
        raise TraceError(f"The rules file {p} is not valid YAML/JSON: {e}".replace("\n", " ")) from None
    if isinstance(doc, dict) and "rules" in doc:
        doc = doc["rules"]
    items: list[Any]
    if isinstance(doc, dict):
        items = [{"name": k, "pattern": v} for k, v in doc.items()]
    elif isinstance(doc, list):
        items = doc
    else:
        raise TraceError(f"The rules file {p} must hold a list of rules (name + pattern) or a name: pattern mapping.")
    rules = []
    for i, it in enumerate(items):
        try:
            if isinstance(it, (list, tuple)) and len(it) == 2:
                rules.append(FamilyRule(str(it[0]), str(it[1])))
            elif isinstance(it, dict):
                extra = set(it) - {"name", "pattern", "family", "geometry", "layer_marker"}
                if extra:
                    raise ValueError(f"unknown key(s) {', '.join(sorted(extra))}")
                rules.append(FamilyRule(str(it["name"]), str(it["pattern"]), it.get("family"),
                                        it.get("geometry", "opaque"), bool(it.get("layer_marker", False))))
            else:
                raise ValueError("expected {name, pattern, ...} or [name, pattern]")
        except (KeyError, ValueError) as e:
            raise TraceError(f"The rules file {p}, rule {i + 1}: {e}.") from None
    names = [r.name for r in rules]
    dup = sorted(n for n, c in Counter(names).items() if c > 1)
    if dup:
        raise TraceError(f"The rules file {p} names rule(s) {', '.join(dup)} more than once; rule names must be unique.")
    return tuple(rules)


def classify(kernels: KernelTable, rules: Sequence[FamilyRule] = DEFAULT_RULES) -> tuple[np.ndarray, tuple[FamilyRule, ...]]:
    """Rule index for each kernel (first match wins); the last index is "other".

    Matching runs once per distinct name, then maps through the name codes.
    """
    all_rules = tuple(rules) + (OTHER,)
    compiled = [re.compile(r.pattern) for r in rules]
    per_name = np.array(
        [next((i for i, c in enumerate(compiled) if c.search(nm)), len(rules)) for nm in kernels.categories("name")],
        dtype=np.int32,
    )
    return per_name[kernels.codes("name")], all_rules


@dataclass(frozen=True)
class FamilyRow:
    family: str
    rules: tuple[str, ...]
    count: int
    total_ns: int
    mean_ns: float | None
    share: float | None  # of all kernel time in the window
    per_token_ns: float | None


@dataclass(frozen=True)
class FamilyReport:
    window: Window
    output_tokens: int | None
    per_token_reason: str | None
    families: tuple[FamilyRow, ...]
    by_rule: tuple[FamilyRow, ...]
    total: FamilyRow


def _clipped(kernels: KernelTable, m: np.ndarray, w: Window) -> np.ndarray:
    return (np.minimum(kernels["end_ns"][m], w.end_ns) - np.maximum(kernels["start_ns"][m], w.start_ns)).clip(min=0)


def _per_token(total_ns: int, tokens: int | None) -> float | None:
    return total_ns / tokens if tokens else None


def _token_reason(tokens: int | None) -> str | None:
    if tokens is None:
        return "no output-token count for the window was given (--tokens); per-token cost not computed"
    if tokens <= 0:
        return f"output-token count {tokens} is not positive; per-token cost not computed"
    return None


def families(
    kernels: KernelTable, rules: Sequence[FamilyRule] = DEFAULT_RULES,
    window: tuple[int | None, int | None] | Window | None = None, *,
    output_tokens: int | None = None, device: int | None = None, pid: int | None = None,
) -> FamilyReport:
    """Summed kernel time per family inside the window (durations clipped to it)."""
    w = resolve_window(kernels, window)
    m = select_kernels(kernels, w, device=device, pid=pid)
    rule_idx, all_rules = classify(kernels, rules)
    ri = rule_idx[m]
    dur = _clipped(kernels, m, w)
    tokens = output_tokens if output_tokens and output_tokens > 0 else None
    grand = int(dur.sum())

    counts = np.bincount(ri, minlength=len(all_rules))
    totals = np.bincount(ri, weights=dur, minlength=len(all_rules))  # float64 exact below 2**53 ns
    by_rule = []
    fam_order: list[str] = []
    fam_acc: dict[str, list] = {}
    for i, r in enumerate(all_rules):
        c, t = int(counts[i]), int(round(totals[i]))
        by_rule.append(FamilyRow(r.family_name, (r.name,), c, t, t / c if c else None,
                                 t / grand if grand else None, _per_token(t, tokens)))
        f = r.family_name
        if f not in fam_acc:
            fam_order.append(f)
            fam_acc[f] = [[], 0, 0]
        fam_acc[f][0].append(r.name)
        fam_acc[f][1] += c
        fam_acc[f][2] += t
    fams = tuple(
        FamilyRow(f, tuple(fam_acc[f][0]), fam_acc[f][1], fam_acc[f][2],
                  fam_acc[f][2] / fam_acc[f][1] if fam_acc[f][1] else None,
                  fam_acc[f][2] / grand if grand else None, _per_token(fam_acc[f][2], tokens))
        for f in fam_order
    )
    n = int(m.sum())
    total = FamilyRow("total", tuple(r.name for r in all_rules), n, grand, grand / n if n else None,
                      1.0 if grand else None, _per_token(grand, tokens))
    return FamilyReport(w, output_tokens, _token_reason(output_tokens), fams, tuple(by_rule), total)


# ---------------------------------------------------------------------------
# c. Launch geometry
# ---------------------------------------------------------------------------

def fa2_sequences(grid_y: int, grid_z: int, heads: int | None) -> int | None:
    """Sequences in an FA2 split-KV launch from its grid.

    grid = (ceil(q/64), splits>1 ? splits : batch, splits>1 ? batch*heads : heads):
    with grid_z == heads the batch is grid_y, otherwise grid_z / heads.
    """
    if heads is None or heads <= 0 or grid_y < 0 or grid_z < 0:
        return None
    if grid_z == heads:
        return int(grid_y)
    if grid_z % heads == 0:
        return int(grid_z // heads)
    return None


def geometry_meaning(rule: FamilyRule, grid: tuple[int, int, int], num_sms: int | None = None,
                     heads: int | None = None) -> str:
    """What a launch grid says about the work, per the rule's declared geometry."""
    gx, gy, gz = grid
    if rule.geometry == "fa2_splitkv":
        lo, hi = 64 * (gx - 1) + 1, 64 * gx
        path = "decode-only path" if gx == 1 else "mixed/prefill-containing path"
        seqs = fa2_sequences(gy, gz, heads)
        seq_txt = f"; {seqs} sequences" if seqs is not None else ""
        if gx == 1:
            return f"gridX=1: longest query chunk <=64 tokens ({path}){seq_txt}"
        return f"gridX={gx}: longest query chunk {lo}-{hi} tokens ({path}){seq_txt}"
    if rule.geometry == "persistent":
        sm = f"; grid_x={gx} equals the SM count" if num_sms and gx == num_sms else ""
        return f"grid carries no query-length meaning (persistent kernel, grid = SM count{sm})"
    return "no declared meaning for this kernel's grid: listed, not interpreted"


@dataclass(frozen=True)
class GeometryGroup:
    rule: str
    grid: tuple[int, int, int]
    replay: str  # "graph" | "eager"
    count: int
    total_ns: int
    mean_ns: float
    per_token_ns: float | None
    meaning: str


@dataclass(frozen=True)
class GeometryReport:
    select: str
    rules: tuple[str, ...]
    geometry: dict[str, str]  # rule -> declared geometry kind
    heads: int | None
    heads_source: str | None
    window: Window
    output_tokens: int | None
    per_token_reason: str | None
    groups: tuple[GeometryGroup, ...]


def _infer_heads(kernels: KernelTable, mask: np.ndarray) -> int | None:
    # Non-split launches have grid_z == heads and split ones batch*heads, so the
    # smallest grid_z seen is the head count (when any launch was unsplit).
    gz = kernels["grid_z"][mask]
    gz = gz[gz > 0]
    return int(gz.min()) if len(gz) else None


def geometry_split(
    kernels: KernelTable, select: str = "attention", rules: Sequence[FamilyRule] = DEFAULT_RULES,
    window: tuple[int | None, int | None] | Window | None = None, *,
    output_tokens: int | None = None, device: int | None = None, pid: int | None = None,
    heads: int | None = None, num_sms: int | None = None,
) -> GeometryReport:
    """Kernels of a rule or family grouped by (rule, grid, graph/eager): count, total, mean, per token."""
    w = resolve_window(kernels, window)
    rule_idx, all_rules = classify(kernels, rules)
    chosen = [i for i, r in enumerate(all_rules) if r.name == select or r.family_name == select]
    if not chosen:
        names = sorted({r.name for r in all_rules} | {r.family_name for r in all_rules})
        raise ValueError(f"no rule or family named {select!r}; known: {', '.join(names)}")
    base = select_kernels(kernels, w, device=device, pid=pid)
    tokens = output_tokens if output_tokens and output_tokens > 0 else None
    heads_source = "given" if heads else None
    fa2 = [i for i in chosen if all_rules[i].geometry == "fa2_splitkv"]
    if heads is None and fa2:
        heads = _infer_heads(kernels, base & np.isin(rule_idx, fa2))
        heads_source = "inferred: smallest grid_z of the split-KV launches" if heads else None

    groups = []
    gx, gy, gz = kernels["grid_x"], kernels["grid_y"], kernels["grid_z"]
    for i in chosen:
        m = base & (rule_idx == i)
        if not m.any():
            continue
        dur = _clipped(kernels, m, w)
        key = np.stack([gx[m], gy[m], gz[m], kernels["is_graph"][m].astype(np.int64)], axis=1)
        uniq, inv = np.unique(key, axis=0, return_inverse=True)
        inv = inv.ravel()
        cnt = np.bincount(inv, minlength=len(uniq))
        tot = np.bincount(inv, weights=dur, minlength=len(uniq))
        for j, (x, y, z, g) in enumerate(uniq.tolist()):
            t = int(round(tot[j]))
            grid = (int(x), int(y), int(z))
            groups.append(GeometryGroup(all_rules[i].name, grid, "graph" if g else "eager", int(cnt[j]), t,
                                        t / int(cnt[j]), _per_token(t, tokens),
                                        geometry_meaning(all_rules[i], grid, num_sms, heads)))
    return GeometryReport(select, tuple(all_rules[i].name for i in chosen),
                          {all_rules[i].name: all_rules[i].geometry for i in chosen}, heads, heads_source,
                          w, output_tokens, _token_reason(output_tokens), tuple(groups))


# ---------------------------------------------------------------------------
# d. Forward reconstruction
# ---------------------------------------------------------------------------

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
        heads = _infer_heads(kernels, (rule_idx == ri) & (dev == d0) & (st == s0))
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


# ---------------------------------------------------------------------------
# e. Sustained regime
# ---------------------------------------------------------------------------

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


# ---------------------------------------------------------------------------
# f. Engine steps
# ---------------------------------------------------------------------------

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


# ---------------------------------------------------------------------------
# Everything on one trace
# ---------------------------------------------------------------------------

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


def analyze_trace(
    trace: Trace, *, n_layers: int | None = None, window: tuple[int | None, int | None] | None = None,
    rules: Sequence[FamilyRule] = DEFAULT_RULES, output_tokens: int | None = None, budget: int | None = None,
    heads: int | None = None, gap_factor: float = 5.0, rel_tol: float = 0.05, min_forwards: int = 5,
    device: int | None = None, pid: int | None = None,
) -> dict[str, Any]:
    """Run every analysis on one trace; a JSON-ready dict with a fixed layout."""
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
    if len(k) == 0:
        reason = next((n for n in trace.notes if n.startswith("no GPU kernels")), "no GPU kernels in the trace")
        for key in ("window", "kernel_active", "families", "geometry", "forwards", "sustained"):
            out[key] = {"absent": reason}
        if trace.steps:  # the steps still say what the scheduler did; window them by their own span
            sw = Window(min(s.start_ns for s in trace.steps), max(s.end_ns for s in trace.steps),
                        "default: first to last step annotation (no kernels)")
            out["steps"] = as_dict(step_analysis(k, trace.steps, budget=budget, window=sw))
        else:
            out["steps"] = {"absent": "no engine-step annotations in the trace"}
        return out
    # The default window spans the kernels being analysed (after the device/pid filter).
    scope = k if device is None and pid is None else k.filter(select_kernels(k, device=device, pid=pid))
    if len(scope) == 0:
        raise ValueError(f"no kernels match device={device} pid={pid}")
    w = resolve_window(scope, window)
    step_of = place_kernels_in_steps(k, trace.steps)
    out["window"] = as_dict(w)
    out["kernel_active"] = as_dict(kernel_active(k, w, device=device, pid=pid))
    out["families"] = as_dict(families(k, rules, w, output_tokens=output_tokens, device=device, pid=pid))
    rule_idx, all_rules = classify(k, rules)
    present = set(np.unique(rule_idx[select_kernels(k, w, device=device, pid=pid)]).tolist())
    # Geometry for each rule with a declared meaning, plus every attention rule seen.
    geo = []
    for i, r in enumerate(all_rules):
        if i in present and (r.geometry != "opaque" or r.family_name == "attention" or r.layer_marker):
            geo.append(as_dict(geometry_split(k, r.name, rules, w, output_tokens=output_tokens, device=device, pid=pid,
                                              heads=heads, num_sms=num_sms)))
    out["geometry"] = geo
    if n_layers:
        fr = reconstruct_forwards(k, n_layers, rules, w, steps=trace.steps, step_of=step_of, device=device, pid=pid,
                                  gap_factor=gap_factor, heads=heads)
        out["forwards"] = as_dict(fr)
        out["sustained"] = {p: as_dict(sustained_regime(fr.forwards, path=p, rel_tol=rel_tol, min_forwards=min_forwards))
                            for p in ("mixed", "decode")}
    else:
        why = "no layer count given (--layers); forwards not reconstructed" + _layers_hint(k, rules, step_of)
        out["forwards"] = {"absent": why}
        out["sustained"] = {"absent": why}
    out["steps"] = (as_dict(step_analysis(k, trace.steps, budget=budget, window=w, step_of=step_of)) if trace.steps
                    else {"absent": "no engine-step annotations (execute_context_N(T)_generation_M(G)) in the trace"})
    return out
