"""c. Launch geometry: a rule or family grouped by (grid, graph replay or eager launch).

What a grid means is declared per rule (FamilyRule.geometry): FA2 split-KV's gridX is
the longest query chunk; a persistent kernel's grid is the SM count and says nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from evidence.traces.analyses.families import DEFAULT_RULES, FamilyRule, classify, per_token, token_reason
from evidence.traces.analyses.window import Window, clipped_ns, resolve_window, select_kernels
from evidence.traces.model import KernelTable

__all__ = ["GeometryGroup", "GeometryReport", "fa2_sequences", "geometry_meaning", "infer_heads", "geometry_split",
           "path_totals"]


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


def infer_heads(kernels: KernelTable, mask: np.ndarray) -> int | None:
    """Attention heads read from FA2 split-KV grids (None when no launch tells)."""
    # Non-split launches have grid_z == heads and split ones batch*heads, so the
    # smallest grid_z seen is the head count (when any launch was unsplit).
    gz = kernels["grid_z"][mask]
    gz = gz[gz > 0]
    return int(gz.min()) if len(gz) else None


def _groups(cols: tuple[np.ndarray, ...]) -> tuple[list[tuple[int, ...]], np.ndarray]:
    """Distinct rows of the columns in lexicographic order, and each row's group: what
    np.unique(np.stack(cols, 1), axis=0, return_inverse=True) gives, without its copies."""
    order = np.lexsort(cols[::-1])
    ordered = [c[order] for c in cols]
    new = np.zeros(len(order), bool)
    if len(order):
        new[0] = True
    for c in ordered:
        new[1:] |= c[1:] != c[:-1]
    inv = np.empty(len(order), np.int64)
    inv[order] = np.cumsum(new) - 1
    firsts = np.flatnonzero(new)
    uniq = list(zip(*(c[firsts].astype(np.int64).tolist() for c in ordered)))
    return uniq, inv


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
        heads = infer_heads(kernels, base & np.isin(rule_idx, fa2))
        heads_source = "inferred: smallest grid_z of the split-KV launches" if heads else None

    groups = []
    gx, gy, gz = kernels["grid_x"], kernels["grid_y"], kernels["grid_z"]
    for i in chosen:
        m = base & (rule_idx == i)
        if not m.any():
            continue
        dur = clipped_ns(kernels, m, w)
        uniq, inv = _groups((gx[m], gy[m], gz[m], kernels["is_graph"][m]))
        cnt = np.bincount(inv, minlength=len(uniq))
        tot = np.bincount(inv, weights=dur, minlength=len(uniq))
        for j, (x, y, z, g) in enumerate(uniq):
            t = int(round(tot[j]))
            grid = (int(x), int(y), int(z))
            groups.append(GeometryGroup(all_rules[i].name, grid, "graph" if g else "eager", int(cnt[j]), t,
                                        t / int(cnt[j]), per_token(t, tokens),
                                        geometry_meaning(all_rules[i], grid, num_sms, heads)))
    return GeometryReport(select, tuple(all_rules[i].name for i in chosen),
                          {all_rules[i].name: all_rules[i].geometry for i in chosen}, heads, heads_source,
                          w, output_tokens, token_reason(output_tokens), tuple(groups))



def _path_label(grid_x: int | None, path: str | None) -> str:
    if grid_x is not None:
        return f"gridX={grid_x} " + ("decode-oriented" if grid_x == 1 else "mixed/prefill-containing")
    return {"decode": "decode", "mixed": "mixed/prefill-containing"}.get(path or "", "path unknown")


def path_totals(analysis: dict) -> dict:
    """Attention time per path, the seed article's grouping: one row per gridX of an FA2 split-KV rule (gridX=1 the
    decode-oriented path, gridX>1 the mixed/prefill-containing one) summed over its grid_y/grid_z/replay groups,
    for the capture window (every launch in it) and for the accepted forwards (whole forwards only; a persistent
    kernel's grid carries no path, so there the forward's path comes from the step annotation). Each row: launches,
    total and mean kernel time (ns) and ns per output token of the window (the same denominator for every path,
    as the article divides). A pure function of analyze_trace's dict, so analysis.json and its bytes are unchanged."""
    window = []
    for g in analysis.get("geometry") or []:
        if not isinstance(g, dict) or (g.get("geometry") or {}).get(g.get("select")) != "fa2_splitkv":
            continue
        tokens = g.get("output_tokens") if (g.get("output_tokens") or 0) > 0 else None
        by_x: dict[int, list[int]] = {}
        for x in g.get("groups") or []:
            acc = by_x.setdefault(int(x["grid"][0]), [0, 0, 0])
            acc[0] += int(x["count"])
            acc[1] += int(x["total_ns"])
            acc[2] += 1
        for gx, (n, tot, groups) in sorted(by_x.items()):
            window.append({"rule": g["select"], "grid_x": gx, "path": _path_label(gx, None), "launches": n,
                           "grid_groups": groups, "total_ns": tot, "mean_ns": tot / n,
                           "per_token_ns": per_token(tot, tokens)})
    fw = analysis.get("forwards") or {}
    forwards: list[dict] = []
    tokens = next((g.get("output_tokens") for g in analysis.get("geometry") or [] if isinstance(g, dict)), None)
    tokens = tokens if tokens and tokens > 0 else None
    absent = fw.get("absent") if isinstance(fw, dict) else "no forward analysis"
    if not absent:
        fa2 = fw.get("geometry") == "fa2_splitkv"
        by_p: dict[tuple, list[int]] = {}
        for f in fw.get("forwards") or []:
            key = (int(f["grid"][0]) if fa2 else -1, f.get("path") or "")
            acc = by_p.setdefault(key, [0, 0, 0])
            acc[0] += 1
            acc[1] += int(f["launches"])
            acc[2] += int(f["total_kernel_ns"])
        for (gx, path), (nf, n, tot) in sorted(by_p.items()):
            forwards.append({"rule": fw.get("rule"), "grid_x": gx if fa2 else None, "path": _path_label(
                gx if fa2 else None, path), "forwards": nf, "launches": n, "total_ns": tot, "mean_ns": tot / n,
                "per_token_ns": per_token(tot, tokens)})
    return {"window": window, "forwards": forwards, "output_tokens": tokens,
            "per_token_reason": token_reason(tokens),
            "window_absent": None if window else "no FA2 split-KV rule in the window: no grid encodes the path",
            "forwards_absent": absent or (None if forwards else "no accepted forward")}
