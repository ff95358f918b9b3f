"""Paired comparisons and their verdicts, latency side by side, dominance and the ordering of points."""

from __future__ import annotations

import math
from typing import Any, Sequence

from evidence.analysis.load import TrialData
from evidence.analysis.numbers import label, mean_of, pct_text, rel_of, round_floats
from evidence.metrics import METRICS, pct_key
from evidence.spec.model import Spec

SPREAD_METHOD = ("S = max(RR_a, RR_b), RR_p = (max - min) / mean of point p's measured output throughputs over all "
                 "its repeats (the run-to-run relative range); the two CVs are shown beside it")


def verdict_for(a: int, b: int, diffs: Sequence[float], spread: float | None, n_planned: int) -> tuple[str, str]:
    """(kind, text) for a paired comparison; see METHODS['verdict']. Never claims more than the data holds."""
    n = len(diffs)
    A, B = label(a), label(b)
    if n == 0:
        return "no_data", "no data: no repeat has both points measured"
    if n == 1:
        return "single_repeat", "single repeat: no claim possible"
    m = math.fsum(diffs) / n
    if spread is None:
        return "no_finding", "no finding (run-to-run spread could not be measured)"
    if abs(m) <= spread:
        return "no_finding", f"no finding (inside run-to-run spread of {pct_text(spread)})"
    if all(d > 0 for d in diffs):
        hi, lo = A, B
    elif all(d < 0 for d in diffs):
        hi, lo = B, A
    else:
        wins = sum(1 for d in diffs if d > 0)
        return "no_finding", f"no finding (sign not consistent: {A} won {wins} of {n} repeats)"
    if n < n_planned:
        return "finding", f"{hi} > {lo} in every measured repeat ({n} of {n_planned} planned)"
    return "finding", f"{hi} > {lo} in every repeat"


def comparison(a: int, b: int, points: dict[int, dict], by_rp: dict[tuple[int, int], dict], repeats: int) -> dict:
    """Paired comparison from point rows and trial rows keyed by (repeat, point)."""
    pa, pb = points[a], points[b]
    per = []
    diffs = []
    flags: list[str] = []
    for r in range(1, repeats + 1):
        ta, tb = by_rp.get((r, a)), by_rp.get((r, b))
        va = ta["output_throughput"] if ta and ta["status"] == "present" else None
        vb = tb["output_throughput"] if tb and tb["status"] == "present" else None
        d = rel_of(va - vb, vb) if (va is not None and vb is not None) else None
        notes = []
        for t, v in ((ta, va), (tb, vb)):
            if t is None:
                continue
            if t["status"] != "present":
                notes.append(f"{t['id']} missing")
            elif v is None:
                notes.append(f"{t['id']} has no measured throughput")
            elif t["failed"]:
                notes.append(f"{t['id']} had {t['failed']} failed request(s)")
        if d is not None:
            diffs.append(d)
        flags.extend(notes)
        per.append({"repeat": r, "trial_a": ta["id"] if ta else None, "trial_b": tb["id"] if tb else None,
                    "a": va, "b": vb, "diff": d,
                    "winner": None if d is None else ("a" if d > 0 else "b" if d < 0 else "tie"), "flags": notes})
    ra, rb = pa["output_throughput"]["rel_range"], pb["output_throughput"]["rel_range"]
    spread = max(ra, rb) if (ra is not None and rb is not None) else None
    kind, text = verdict_for(a, b, diffs, spread, repeats)
    if kind == "finding" and flags:
        text += " (caveat: " + "; ".join(flags) + ")"
    return {
        "name": f"{label(a)} vs {label(b)}", "a": a, "b": b,
        "repeats": per, "repeats_planned": repeats, "pairs": len(diffs),
        "mean_diff": mean_of(diffs), "min_diff": min(diffs) if diffs else None, "max_diff": max(diffs) if diffs else None,
        "wins_a": sum(1 for d in diffs if d > 0), "wins_b": sum(1 for d in diffs if d < 0),
        "ties": sum(1 for d in diffs if d == 0),
        "spread": {"value": spread, "a_rel_range": ra, "b_rel_range": rb,
                   "a_cv": pa["output_throughput"]["cv"], "b_cv": pb["output_throughput"]["cv"],
                   "cv_kind": pa["output_throughput"]["std_kind"], "definition": SPREAD_METHOD},
        "verdict_kind": kind, "verdict": text, "flags": flags,
    }


def paired_comparison(res: dict, a: int, b: int) -> dict:
    """The paired comparison of any two points of an analysis (as in res["comparisons"], without latency)."""
    points = {p["point"]: p for p in res["points"]}
    if a not in points or b not in points:
        raise KeyError(f"point {a if a not in points else b} is not a point of this run")
    by_rp = {(t["repeat"], t["point"]): t for t in res["trials"]}
    return round_floats(comparison(a, b, points, by_rp, res["spec"]["repeats"]))


def side_by_side(comp: dict, points: dict[int, dict], spec: Spec) -> list[dict]:
    a, b = comp["a"], comp["b"]
    pa, pb = points[a], points[b]
    out = []
    ta, tb = pa["output_throughput"]["mean"], pb["output_throughput"]["mean"]
    flags = pa["flags"] + pb["flags"]
    out.append({"metric": "output_throughput", "stat": "mean", "unit": METRICS["output_throughput"].unit, "a": ta, "b": tb,
                "change": rel_of(tb - ta, ta) if (ta is not None and tb is not None) else None,
                "better": _better(ta, tb, higher=bool(METRICS["output_throughput"].higher_is_better)), "pooled_a": None, "pooled_b": None, "pooled_change": None,
                "flags": flags})
    for m in spec.analysis.latency_metrics:
        for st in ["mean"] + [pct_key(p) for p in spec.analysis.percentiles]:
            la, lb = pa["latency"][m]["mean_over_repeats"], pb["latency"][m]["mean_over_repeats"]
            qa, qb = pa["latency"][m]["pooled"], pb["latency"][m]["pooled"]
            va, vb = (la or {}).get(st), (lb or {}).get(st)
            wa, wb = (qa or {}).get(st), (qb or {}).get(st)
            out.append({"metric": m, "stat": st, "unit": METRICS[m].unit, "a": va, "b": vb,
                        "change": rel_of(vb - va, va) if (va is not None and vb is not None) else None,
                        "better": _better(va, vb, higher=bool(METRICS[m].higher_is_better)),
                        "pooled_a": wa, "pooled_b": wb,
                        "pooled_change": rel_of(wb - wa, wa) if (wa is not None and wb is not None) else None,
                        "flags": flags})
    return out


def _better(va: float | None, vb: float | None, higher: bool) -> str | None:
    if va is None or vb is None:
        return None
    if va == vb:
        return "tie"
    return ("a" if va > vb else "b") if higher else ("a" if va < vb else "b")


def _criteria(spec: Spec) -> list[tuple[str, str]]:
    """(metric, statistic) pairs; each metric's direction comes from the registry (evidence.metrics)."""
    out = [("output_throughput", "mean")]
    for m in spec.analysis.latency_metrics:
        for st in ["mean"] + [pct_key(p) for p in spec.analysis.percentiles]:
            out.append((m, st))
    return out


def dominates(q: Sequence[float], p: Sequence[float], higher: Sequence[bool] | None = None) -> str:
    """Compare criterion vectors; `higher[i]` says whether criterion i is better when higher
    (default: the first, throughput, higher is better; the rest, latencies, lower is better).

    Returns 'dominates' (q dominates p), 'tie' (equal on all), or 'no'.
    """
    if list(q) == list(p):
        return "tie"
    hb = list(higher) if higher is not None else [True] + [False] * (len(q) - 1)
    if any((qv < pv) if h else (qv > pv) for qv, pv, h in zip(q, p, hb)):
        return "no"
    return "dominates"  # at least as good everywhere and not all equal, so strictly better on one


def _point_vector(pt: dict, crit: list[tuple[str, str]]) -> list[float] | None:
    v = []
    for m, st in crit:
        x = pt["output_throughput"]["mean"] if m == "output_throughput" else (pt["latency"][m]["mean_over_repeats"] or {}).get(st)
        if x is None:
            return None
        v.append(x)
    return v


def _trial_vector(row: dict | None, crit: list[tuple[str, str]]) -> list[float] | None:
    if row is None or row["status"] != "present":
        return None
    v = []
    for m, st in crit:
        x = row["output_throughput"] if m == "output_throughput" else (row["latency"].get(m) or {}).get(st)
        if x is None:
            return None
        v.append(x)
    return v


def dominance(points: list[dict], trials_by: dict[tuple[int, int], TrialData], rows: dict[str, dict],
               spec: Spec) -> dict:
    crit = _criteria(spec)
    hb = [bool(METRICS[m].higher_is_better) for m, _ in crit]
    vecs = {p["point"]: _point_vector(p, crit) for p in points}
    out_points = []
    pairs = []
    for p in points:
        P = p["point"]
        entry: dict[str, Any] = {"point": P, "label": p["label"], "dominated": None, "dominated_by": [],
                                 "dominates": [], "tied_with": [], "not_compared": [], "flags": list(p["flags"])}
        if vecs[P] is None:
            entry["note"] = "not compared: a dominance criterion is not measured for this point"
            out_points.append(entry)
            continue
        for q in points:
            Q = q["point"]
            if Q == P:
                continue
            if vecs[Q] is None:
                entry["not_compared"].append(Q)
                continue
            rel = dominates(vecs[Q], vecs[P], hb)
            if rel == "dominates":
                entry["dominated_by"].append(Q)
            elif rel == "tie":
                entry["tied_with"].append(Q)
            if dominates(vecs[P], vecs[Q], hb) == "dominates":
                entry["dominates"].append(Q)
        entry["dominated"] = bool(entry["dominated_by"])
        entry["note"] = ""
        out_points.append(entry)
    for e in out_points:
        for Q in e["dominated_by"]:
            held, of = 0, 0
            for r in range(1, spec.sweep.repeats + 1):
                tq, tp = trials_by.get((r, Q)), trials_by.get((r, e["point"]))
                vq = _trial_vector(rows[tq.id] if tq else None, crit)
                vp = _trial_vector(rows[tp.id] if tp else None, crit)
                if vq is None or vp is None:
                    continue
                of += 1
                held += dominates(vq, vp, hb) == "dominates"
            pairs.append({"dominant": Q, "dominated": e["point"],
                          "statement": f"{label(e['point'])} is dominated by {label(Q)}",
                          "held_in_repeats": held, "repeats_compared": of, "repeats_planned": spec.sweep.repeats})
    return {"criteria": [f"{m} {st}" for m, st in crit],
            "points": out_points, "pairs": pairs,
            "frontier": [e["point"] for e in out_points if e["dominated"] is False]}


def _symbol(lo: float, hi: float) -> str:
    return "<" if lo < hi else ">" if lo > hi else "="


def _statement(pts: list[int], vals: dict[int, float | None]) -> str | None:
    if any(vals.get(p) is None for p in pts):
        return None
    s = label(pts[0])
    for lo, hi in zip(pts, pts[1:]):
        s += f" {_symbol(vals[lo], vals[hi])} {label(hi)}"
    return s


def ordering(points: list[dict], trials_by, rows, comps_adj: list[dict], spec: Spec) -> dict:
    pts = [p["point"] for p in points]
    means = {p["point"]: p["output_throughput"]["mean"] for p in points}
    stmt = _statement(pts, means)
    per = []
    for r in range(1, spec.sweep.repeats + 1):
        vals = {}
        for P in pts:
            t = trials_by.get((r, P))
            vals[P] = rows[t.id]["output_throughput"] if t and t.present else None
        s = _statement(pts, vals)
        per.append({"repeat": r, "statement": s, "complete": s is not None,
                    "matches": (s == stmt) if (s is not None and stmt is not None) else None})
    held = sum(1 for x in per if x["matches"])
    links = []
    supported = label(pts[0]) if stmt is not None else None
    for (lo, hi), comp in zip(zip(pts, pts[1:]), comps_adj):
        sym = _symbol(means[lo], means[hi]) if (means[lo] is not None and means[hi] is not None) else None
        finding = comp["verdict_kind"] == "finding"
        links.append({"lo": lo, "hi": hi, "symbol": sym, "mean_diff_lo_vs_hi": comp["mean_diff"],
                      "spread": comp["spread"]["value"], "verdict": comp["verdict"], "verdict_kind": comp["verdict_kind"]})
        if supported is not None:
            supported += f" {sym if finding else '~'} {label(hi)}"
    if len(pts) < 2:
        supported = stmt
    every = stmt is not None and all(x["matches"] for x in per)
    return {"statement": stmt, "supported_statement": supported, "repeats": per,
            "held_in_repeats": held, "repeats_planned": spec.sweep.repeats, "held_in_every_repeat": every,
            "links": links}
