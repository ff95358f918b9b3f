"""Paired comparisons and their verdicts, latency side by side, dominance and the ordering of points."""

from __future__ import annotations

import warnings

from typing import Any, Sequence

from evidence.analysis.load import TrialData
from evidence.analysis.numbers import interval_text, label, mean_of, pct_text, rel_of, round_floats
from evidence.analysis.stats import Paired, holm, paired
from evidence.metrics import METRICS, pct_key
from evidence.spec.model import Spec

ALPHA = 0.05
METRIC = "output_throughput"


def paired_units(rows: list[dict], *, a: Any, b: Any, metric: str = METRIC, higher_is_better: bool = True,
                 margin: float | None = None) -> Paired:
    """The stated procedure over per-repeat rows {"a", "b", "session"}: rows with an unmeasured side are left
    out of the pair; with 2 or more server starts (engine sessions) stats.paired makes the start the unit."""
    # ln(a/b) needs both sides > 0; a zero throughput is a failed trial and is flagged, not tested.
    u = [r for r in rows if r["a"] is not None and r["b"] is not None and r["a"] > 0 and r["b"] > 0]
    sessions = [int(r.get("session") or 1) for r in u]
    with warnings.catch_warnings():  # near-identical ratios: scipy warns about precision; the limit is used
        warnings.simplefilter("ignore", RuntimeWarning)
        return paired([r["a"] for r in u], [r["b"] for r in u], a=a, b=b, metric=metric,
                      higher_is_better=higher_is_better, alpha=ALPHA,
                      sessions=sessions if len(set(sessions)) > 1 else None, margin=margin)


def ci_text(r: dict | Paired) -> str:
    """'95% CI -5.9% to +34.2%' (the level is the one the interval is at, e.g. 97.5% after Holm)."""
    d = r.as_dict() if isinstance(r, Paired) else r
    ci, lvl = d.get("ci95"), d.get("ci_level") or 0.95
    if not ci:
        return "no interval"
    return f"{lvl * 100:.4g}% CI {interval_text(ci)}"


def p_text(p: float | None) -> str:
    return "n/a" if p is None else (f"{p:.3g}" if p >= 0.001 else "< 0.001")


def scope_text(r: Paired) -> str:
    """'scope: these 2 server starts (n 2, 1 df; ...why not a claim about the configuration)'."""
    units = {"repeat": "repeats", "session": "server starts", "host": "hosts", "block": "blocks of server starts"
             }.get(r.unit, r.unit + "s")
    df = f", {r.df} df" if r.df is not None else ""
    return (f"scope: {r.scope} (unit: {units}, n {r.n_units}{df})"
            + (f"; {r.scope_note}" if r.scope_note else ""))


def verdict_statement(r: Paired, a: int, b: int, unit: str, family: int, alone: Paired | None = None) -> str:
    """One sentence no stronger than the interval: the verdict, the effect, its 95% interval, p and the MDE
    (and, in a family of several, the Holm-adjusted p with the interval at its Holm step), then its scope."""
    A, B = label(a), label(b)
    alone = alone or r
    n = r.n_units
    word = {"repeat": "repeat", "session": "server start", "host": "host"}.get(unit, unit)
    units = f"{n} paired {word}{'s' if n != 1 else ''}"
    if r.verdict == "no claim":
        return (f"no claim: {A} vs {B} has {units}; an interval needs at least 2"
                + (f" (mean paired difference {pct_text(r.effect, 1, signed=True)})" if r.effect is not None else "")
                + f"; {scope_text(r)}")
    holm_txt = (f"; Holm over {family} comparisons: adjusted p {p_text(r.p_adjusted)}, {ci_text(r)}"
                if family > 1 else "")
    body = (f"{pct_text(r.effect, 1, signed=True)} ({ci_text(alone)}; p {p_text(alone.p_value)}{holm_txt}; "
            f"{A} better in {r.wins_a} of {r.n_pairs} repeats)")
    mde = f"smallest effect found with 80% power at this level (MDE) {pct_text(r.mde, 1)}"
    if r.verdict == "finding":
        hi, lo = (A, B) if r.better == a else (B, A)
        return f"finding: {hi} > {lo}, {A} vs {B} {body}; {scope_text(r)}"
    if r.verdict == "equivalent":
        return (f"equivalent: {A} vs {B} within +-{pct_text(r.margin, 1)} {body}; both one-sided tests at the "
                f"margin reject (p {p_text(r.tost_p)}); {scope_text(r)}")
    return f"not significant: {A} vs {B} {body}; {mde}; {scope_text(r)}"


def comparison_rows(a: int, b: int, by_rp: dict[tuple[int, int], dict], repeats: int) -> tuple[list[dict], list[str]]:
    """Per-repeat rows of a paired comparison (values, difference, winner) and the flags of its trials."""
    per = []
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
        flags.extend(notes)
        session = (ta or tb or {}).get("session", 1)
        per.append({"repeat": r, "session": session, "trial_a": ta["id"] if ta else None,
                    "trial_b": tb["id"] if tb else None, "a": va, "b": vb, "diff": d,
                    "winner": None if d is None else ("a" if d > 0 else "b" if d < 0 else "tie"), "flags": notes})
    return per, flags


def comparison(a: int, b: int, points: dict[int, dict], by_rp: dict[tuple[int, int], dict], repeats: int,
               result: Paired | None = None, family: int = 1, margin: float | None = None) -> dict:
    """Paired comparison from point rows and trial rows keyed by (repeat, point).

    `result` is the Holm-adjusted test when the caller ran it over a family; the comparison's own test
    (tested alone) gives `ci95` and `p_value`; the family's gives the verdict, `p_adjusted` and `ci_adjusted`.
    """
    pa, pb = points[a], points[b]
    per, flags = comparison_rows(a, b, by_rp, repeats)
    alone = paired_units(per, a=a, b=b, margin=margin)
    r = result if result is not None else alone
    diffs = [x["diff"] for x in per if x["diff"] is not None]
    text = verdict_statement(r, a, b, r.unit, family, alone)
    if r.verdict == "finding" and flags:
        text += " (caveat: " + "; ".join(flags) + ")"
    if r.sign_note and r.verdict != "no claim":
        text += f"; {r.sign_note}"
    return {
        "name": f"{label(a)} vs {label(b)}", "a": a, "b": b, "metric": METRIC,
        "repeats": per, "repeats_planned": repeats, "pairs": len(diffs), "unit": r.unit, "n_pairs": r.n_pairs,
        "n_units": r.n_units, "sessions": _sessions(r),
        "mean_diff": mean_of(diffs), "min_diff": min(diffs) if diffs else None, "max_diff": max(diffs) if diffs else None,
        "wins_a": r.wins_a, "wins_b": r.wins_b, "ties": r.ties,
        "effect": r.effect, "ci95": list(alone.ci95) if alone.ci95 else None, "p_value": alone.p_value,
        "p_adjusted": r.p_adjusted, "ci_adjusted": list(r.ci95) if r.ci95 else None,
        "ci_adjusted_level": r.ci_level if r.ci95 else None, "family": family, "test": r.test, "mde": r.mde,
        "sign_p": r.sign_p, "perm_p": r.perm_p, "sign_note": r.sign_note, "ratio_effect": r.ratio_effect,
        "sd_log": r.sd_log, "better": r.better, "verdict": r.verdict, "statement": text,
        "df": r.df, "scope": r.scope, "scope_note": r.scope_note, "halfwidth": r.halfwidth, "margin": r.margin,
        "tost_p": r.tost_p, "equivalent": r.equivalent,
        "noise": {"a_cv": pa["output_throughput"]["cv"], "b_cv": pb["output_throughput"]["cv"],
                  "cv_kind": pa["output_throughput"]["std_kind"], "a_rel_range": pa["output_throughput"]["rel_range"],
                  "b_rel_range": pb["output_throughput"]["rel_range"]},
        "flags": flags,
    }


def _sessions(r: Paired) -> dict | None:
    """Within- and between-session spread of ln(a/b) when the pairs came from several engine sessions."""
    c = r.components
    if not c:
        return None
    return {"sessions": c["sessions"], "repeats": c["repeats"], "sd_within_log": c["sd_within"],
            "sd_between_log": c["sd_between"], "sd_within_log_ci95": c["sd_within_ci"],
            "sd_between_log_ci95": c["sd_between_ci"], "f_p": c["f_p"], "unit": r.unit, "note": r.note}


def comparison_family(pairs: Sequence[tuple[int, int]], points: dict[int, dict], by_rp: dict[tuple[int, int], dict],
                      repeats: int, margins: Sequence[float | None] | None = None) -> list[dict]:
    """Several comparisons tested as one family: Holm-adjusted p, verdicts and step-level intervals (and, where a
    margin is declared, equivalence at the same level)."""
    margins = list(margins) if margins is not None else [None] * len(pairs)
    tests = []
    for (a, b), mg in zip(pairs, margins):
        per, _ = comparison_rows(a, b, by_rp, repeats)
        tests.append(paired_units(per, a=a, b=b, margin=mg))
    adjusted = holm(tests)
    m = sum(1 for t in tests if t.p_value is not None)
    return [comparison(a, b, points, by_rp, repeats, result=r, family=m, margin=mg)
            for (a, b), r, mg in zip(pairs, adjusted, margins)]


def paired_comparison(res: dict, a: int, b: int) -> dict:
    """The paired comparison of any two points of an analysis, tested alone (as in res["comparisons"], without latency)."""
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
            pairs.append(_dominance_pair(Q, e["point"], crit, hb, vecs, trials_by, rows, spec))
    return {"criteria": [f"{m} {st}" for m, st in crit],
            "points": out_points, "pairs": pairs,
            "frontier": [e["point"] for e in out_points if e["dominated"] is False]}


def _dominance_pair(Q: int, P: int, crit: list[tuple[str, str]], hb: list[bool], vecs: dict,
                    trials_by: dict[tuple[int, int], TrialData], rows: dict[str, dict], spec: Spec) -> dict:
    """'P is dominated by Q' on the means, tested as the same paired procedure on every criterion where the
    means differ (Holm over those criteria): a finding only when Q is better on each with its interval."""
    held, of = 0, 0
    per: list[dict] = []
    for r in range(1, _repeats(trials_by, spec) + 1):
        tq, tp = trials_by.get((r, Q)), trials_by.get((r, P))
        vq = _trial_vector(rows[tq.id] if tq else None, crit)
        vp = _trial_vector(rows[tp.id] if tp else None, crit)
        if vq is None or vp is None:
            continue
        of += 1
        held += dominates(vq, vp, hb) == "dominates"
        per.append({"repeat": r, "session": (tq.session if tq else 1), "q": vq, "p": vp})
    tested, tests = [], []
    for i, (m, st) in enumerate(crit):
        if vecs[Q][i] == vecs[P][i]:
            continue  # equal means: a tie on this criterion, nothing to claim
        rows_i = [{"repeat": x["repeat"], "session": x["session"], "a": x["q"][i], "b": x["p"][i]} for x in per]
        tested.append((m, st))
        tests.append(paired_units(rows_i, a=Q, b=P, metric=f"{m} {st}", higher_is_better=hb[i]))
    adjusted = holm(tests)
    crit_out = [{"criterion": f"{m} {st}", "unit": t.unit, "n_units": t.n_units, "df": t.df, "scope": t.scope,
                 "effect": t.effect,
                 "ci": list(t.ci95) if t.ci95 else None, "ci_level": t.ci_level if t.ci95 else None,
                 "p_value": t.p_value, "p_adjusted": t.p_adjusted, "verdict": t.verdict,
                 "q_better": t.better == Q if t.verdict == "finding" else None}
                for (m, st), t in zip(tested, adjusted)]
    if not adjusted or any(t.verdict == "no claim" for t in adjusted):
        verdict = "no claim"
    elif all(t.verdict == "finding" and t.better == Q for t in adjusted):
        verdict = "finding"
    else:
        verdict = "not significant"
    weak = [c["criterion"] for c in crit_out if not c["q_better"]]
    text = (f"finding: {label(P)} is dominated by {label(Q)} (better on every criterion where the means differ, "
            "each with its interval)" if verdict == "finding" else
            f"{verdict}: {label(P)} is dominated by {label(Q)} on the means only"
            + (f"; not shown by the paired intervals on {', '.join(weak)}" if weak else "; fewer than 2 pairs"))
    t0 = adjusted[0] if adjusted else None
    return {"dominant": Q, "dominated": P, "statement": f"{label(P)} is dominated by {label(Q)}",
            "held_in_repeats": held, "repeats_compared": of, "repeats_planned": _repeats(trials_by, spec),
            "verdict": verdict, "verdict_statement": text, "criteria": crit_out,
            "unit": t0.unit if t0 else None, "n_units": t0.n_units if t0 else 0, "df": t0.df if t0 else None,
            "scope": t0.scope if t0 else None}


def _repeats(trials_by: dict, spec: Spec) -> int:
    """Every repeat the run's plan holds (--until-decided adds blocks after spec.sweep.repeats)."""
    return max([spec.sweep.repeats] + [r for r, _ in trials_by])


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
    for r in range(1, _repeats(trials_by, spec) + 1):
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
        # the symbol stands only when the paired test (Holm over the adjacent links) finds the same direction
        agrees = comp["verdict"] == "finding" and sym == ("<" if comp["better"] == hi else ">")
        links.append({"lo": lo, "hi": hi, "symbol": sym, "mean_diff_lo_vs_hi": comp["mean_diff"],
                      "effect": comp["effect"], "ci95": comp["ci95"], "ci_adjusted": comp["ci_adjusted"],
                      "ci_adjusted_level": comp["ci_adjusted_level"],
                      "p_value": comp["p_value"], "p_adjusted": comp["p_adjusted"], "mde": comp["mde"],
                      "n_units": comp["n_units"], "unit": comp["unit"], "df": comp["df"], "scope": comp["scope"],
                      "verdict": comp["verdict"], "statement": comp["statement"]})
        if supported is not None:
            supported += f" {sym if agrees else '~'} {label(hi)}"
    if len(pts) < 2:
        supported = stmt
    every = stmt is not None and all(x["matches"] for x in per)
    return {"statement": stmt, "supported_statement": supported, "repeats": per,
            "held_in_repeats": held, "repeats_planned": _repeats(trials_by, spec), "held_in_every_repeat": every,
            "links": links}
