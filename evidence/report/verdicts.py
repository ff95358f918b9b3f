"""The report's verdict tables: comparisons (unit, n, df and scope), arms, the looks of --until-decided,
variance components, side-by-side points, the latency intervals per point and dominance; rows of formatted
strings for the templates (evidence.report.context places them)."""

from __future__ import annotations


from evidence.analysis.analyze import METHODS
from evidence.analysis.findings import p_text
from evidence.analysis.model import Analysis, VariancePoint, as_analysis
from evidence.analysis.tables import latency_stats
from evidence.analysis.numbers import label
from evidence.metrics import REPORTED_METRICS
from evidence.report.format import join_flags, num, pct, table


def comparison_tables(res: Analysis | dict) -> list[dict]:
    out = []
    for c in as_analysis(res).comparisons:
        A, B = label(c.a), label(c.b)
        rows = [
            (
                f"repeat {r.repeat}" + (f" (session {r.session})" if c.unit == "session" else ""),
                num(r.a),
                num(r.b),
                pct(r.diff, signed=True),
                {"a": A, "b": B, "tie": "tie", None: "n/a"}[r.winner],
                join_flags(r.flags),
            )
            for r in c.repeats
        ]
        rows.append(
            (
                "mean",
                "",
                "",
                pct(c.mean_diff, signed=True),
                f"{A} {c.wins_a}, {B} {c.wins_b}" + (f", ties {c.ties}" if c.ties else ""),
                "",
            )
        )
        ci, cj, ss = c.ci95, c.ci_adjusted, c.sessions
        df = c.df
        stats = [
            ("verdict", c.verdict),
            (
                "unit of the test",
                f"{c.unit}: n = {c.n_units}"
                + (f", {df} df" if df is not None else "")
                + f" ({c.pairs} paired repeats)",
            ),
        ]
        if c.scope:
            stats.append(("scope", c.scope + (f" ({c.scope_note})" if c.scope_note else "")))
        stats += [
            ("effect (mean of (a - b) / b)", pct(c.effect, signed=True, d=2)),
            ("95% interval", f"{pct(ci[0], signed=True, d=2)} to {pct(ci[1], signed=True, d=2)}" if ci else "n/a"),
            ("p (paired t on ln a/b)", p_text(c.p_value)),
            (
                "Holm over the declared comparisons",
                f"{c.family} comparison(s): adjusted p {p_text(c.p_adjusted)}"
                + (
                    f", {pct(c.ci_adjusted_level, d=2)} interval {pct(cj[0], signed=True, d=2)} to "
                    f"{pct(cj[1], signed=True, d=2)}"
                    if cj and c.family > 1
                    else ""
                ),
            ),
            (
                (
                    "smallest effect found with 80% power at this level (MDE)"
                    if "halfwidth" not in c.unset
                    else "smallest detectable effect (MDE)"
                ),
                pct(c.mde, d=2),
            ),
            (
                "exact sign p / permutation p",
                f"{p_text(c.sign_p)} / {p_text(c.perm_p)}" + (f" ({c.sign_note})" if c.sign_note else ""),
            ),
            ("noise: CV " + c.noise.cv_kind, f"{A} {pct(c.noise.a_cv)}, {B} {pct(c.noise.b_cv)}"),
        ]
        if c.margin is not None:
            stats.append(
                (
                    "equivalence (two one-sided tests)",
                    f"margin +-{pct(c.margin, d=2)}: p {p_text(c.tost_p)}, "
                    + ("equivalent" if c.equivalent else "not shown equivalent"),
                )
            )
        if ss:
            ci_w, ci_b = ss.sd_within_log_ci95, ss.sd_between_log_ci95
            stats.append(
                (
                    "server starts: sd of ln(a/b) within / between",
                    f"{ss.sessions} sessions: {num(ss.sd_within_log, 4)}"
                    + (f" ({num(ci_w[0], 4)} to {num(ci_w[1], 4)})" if ci_w else "")
                    + f" / {num(ss.sd_between_log, 4)}"
                    + (f" ({num(ci_b[0], 4)} to {num(ci_b[1], 4)})" if ci_b else "")
                    + f" (F-test p {p_text(ss.f_p)})"
                    + (f"; {ss.note}" if ss.note else ""),
                )
            )
        note = f"{c.statement}. Paired difference = (T_{A} - T_{B}) / T_{B}. Test: {c.test}."
        out.append(
            table(
                f"Paired comparison {A} vs {B} (output throughput, tok/s)",
                ["repeat", A, B, "paired difference", "winner", "flags"],
                rows,
                "lrrrll",
                note,
            )
        )
        out.append(table(f"{A} vs {B}: the stated procedure", ["item", "value"], stats, "ll"))
    return out


def arms_tables(res: Analysis | dict) -> list[dict]:
    """spec.arms: the arms side by side at every point, each pair of arms tested with the block as the unit."""
    ar = as_analysis(res).arms
    if not ar:
        return []
    rows = []
    for c in ar.comparisons:
        ga = (sum(c.a_values) / len(c.a_values)) if c.a_values else None
        gb = (sum(c.b_values) / len(c.b_values)) if c.b_values else None
        ci = c.ci
        rows.append(
            (
                label(c.point),
                f"{c.a} vs {c.b}",
                num(ga) if ga is not None else "n/a",
                num(gb) if gb is not None else "n/a",
                pct(c.effect, signed=True, d=1),
                (f"{pct(ci[0], signed=True, d=1)} to {pct(ci[1], signed=True, d=1)}" if ci else "n/a"),
                f"{c.n_units} ({c.df} df)" if c.df is not None else str(c.n_units),
                c.verdict,
            )
        )
    return [
        table(
            "Arms side by side (output throughput, tok/s; each block's start valued by its geometric mean)",
            ["point", "arms", "a", "b", "effect", "interval", "blocks", "verdict"],
            rows,
            "llrrrrrl",
            ar.method + ". " + " ".join(c.statement + "." for c in ar.comparisons),
        )
    ]


def looks_tables(res: Analysis | dict) -> list[dict]:
    """--until-decided: every look (units, t against its boundary, alpha spent, repeated interval) and the stop."""
    sq = as_analysis(res).sequential
    if not sq:
        return []
    rows = []
    for ln in sq.looks:
        for r in ln.comparisons:
            rci = r.rci
            name = (
                f"{label(r.a)} vs {label(r.b)}"  # type: ignore[arg-type]
                if r.point is None
                else f"arm {r.a} vs arm {r.b} at {label(r.point)}"
            )
            rows.append(
                (
                    str(ln.look) + f" of {ln.max_looks}",
                    num(ln.repeats),
                    name,
                    f"{r.n_units} "
                    + {"session": "server starts", "block": "blocks of starts"}.get(r.unit or "", "repeats"),
                    num(r.t, 3) if r.t is not None else "n/a",
                    num(r.t_boundary, 3) if r.t_boundary is not None else "n/a",
                    num(r.alpha_spent, 5) if r.alpha_spent is not None else "n/a",
                    (
                        f"{pct(rci[0], signed=True, d=1)} to {pct(rci[1], signed=True, d=1)}"
                        if isinstance(rci, list) and None not in rci
                        else "n/a"
                    ),
                    num(r.conditional_power, 3) if r.conditional_power is not None else "",
                    str(r.verdict),
                )
            )
    stop = sq.stop or {}
    note = (
        (f"Stopped after {stop.get('repeats')} repeat(s): {stop.get('stop')}. " if stop else "Not stopped yet. ")
        + f"Rule: {sq.rule or 'n/a'}. The repeated interval stays valid whenever the design stops; the "
        "comparison tables above test every unit the loop added at a fixed 95% level."
    )
    return [
        table(
            "Until decided: the looks",
            [
                "look",
                "repeats",
                "comparison",
                "units",
                "t",
                "|t| boundary",
                "alpha spent",
                "repeated interval",
                "cond. power",
                "decision",
            ],
            rows,
            "lrlrrrrrrl",
            note,
        )
    ]


def variance_tables(res: Analysis | dict) -> list[dict]:
    """Between- and within-server-start sd of ln(throughput) per point, with 95% intervals (analysis.json with
    variance_components; none for an older one)."""
    vc = as_analysis(res).variance_components
    if not vc:
        return []

    def sd(x: float | None, ci: list[float] | None) -> str:
        if x is None:
            return "n/a"
        return num(x, 4) + (f" ({num(ci[0], 4)} to {num(ci[1], 4)})" if ci else "")

    def row(v: VariancePoint) -> tuple:
        return (
            label(v.point),
            num(v.sessions),
            num(v.repeats),
            sd(v.sd_between, v.sd_between_ci),
            sd(v.sd_within, v.sd_within_ci),
            pct(v.share_between, d=0) if v.share_between is not None else "n/a",
            v.absent or "",
        )

    rows = [row(v) for v in vc.points]
    return [
        table(
            "Server starts and repeats: sd of ln(output throughput), 95% intervals",
            ["point", "server starts", "trials", "between starts", "within a start", "share between", "note"],
            rows,
            "lrrrrrl",
            vc.method + ".",
        )
    ]


def side_by_side_tables(res: Analysis | dict) -> list[dict]:
    out = []
    for c in as_analysis(res).comparisons:
        A, B = label(c.a), label(c.b)
        rows = []
        sbs = c.latency_side_by_side or []
        for r in sbs:
            d = 2
            name = "Output throughput" if r.metric == "output_throughput" else f"{r.stat} {r.metric.upper()}"
            if r.stat == "mean" and r.metric != "output_throughput":
                name = f"Mean {r.metric.upper()}"
            unit = " " + r.unit
            rows.append(
                (
                    name,
                    num(r.a, d) + unit if r.a is not None else "n/a",
                    num(r.b, d) + unit if r.b is not None else "n/a",
                    pct(r.change, signed=True, d=2),
                    num(r.pooled_a, d) if r.pooled_a is not None else "",
                    num(r.pooled_b, d) if r.pooled_b is not None else "",
                    pct(r.pooled_change, signed=True, d=2) if r.pooled_change is not None else "",
                )
            )
        flags = sbs[0].flags if sbs else []
        note = (
            "Change = (value at " + B + " - value at " + A + ") / value at " + A + ". Latency: each statistic "
            "within a trial, then the mean over repeats; 'pooled' pools every repeat's requests first."
            + (" Flags: " + join_flags(flags) if flags else "")
        )
        out.append(
            table(
                f"Latency side by side: {A} vs {B}",
                ["metric", A, B, "change", f"pooled {A}", f"pooled {B}", "pooled change"],
                rows,
                "lrrrrrr",
                note,
            )
        )
    return out


def latency_point_table(res: Analysis | dict) -> dict:
    a = as_analysis(res)
    stats = latency_stats(a.spec.percentiles)
    rows = []
    for p in a.points:
        for m in REPORTED_METRICS:
            lat = p.latency[m]
            for method, stat in (("mean_over_repeats", lat.mean_over_repeats), ("pooled", lat.pooled)):
                d = stat or {}
                n = d.get("n_trials") if method == "mean_over_repeats" else d.get("n")
                rows.append(
                    [p.label, m.upper(), "mean over repeats" if method == "mean_over_repeats" else "pooled", num(n)]
                    + [num(d.get(s), 3) for s in stats]
                )
    return table(
        "Latency per point (ms): per-trial statistics averaged over repeats, and all repeats pooled "
        "(n = trials averaged, or samples pooled)",
        ["point", "metric", "method", "n"] + stats,
        rows,
        "llll" + "r" * len(stats),
    )


def dominance_tables(res: Analysis | dict) -> list[dict]:
    a = as_analysis(res)
    dom = a.dominance
    held = {(d.dominant, d.dominated): d for d in dom.pairs}
    pm = {p.point: p for p in a.points}
    rows = []
    for e in dom.points:
        by = ", ".join(
            f"{label(q)} (held in {held[(q, e.point)].held_in_repeats}/"
            f"{held[(q, e.point)].repeats_planned} repeats; paired: {held[(q, e.point)].verdict})"
            for q in e.dominated_by
        )
        rows.append(
            (
                e.label,
                num(pm[e.point].output_throughput.mean),
                "n/a" if e.dominated is None else ("YES" if e.dominated else "no"),
                by or "",
                ", ".join(label(q) for q in e.dominates),
                ", ".join(label(q) for q in e.tied_with),
                (e.note or "") + (" " + join_flags(e.flags) if e.flags else ""),
            )
        )
    t1 = table(
        "Dominance over all points",
        ["point", "mean tok/s", "dominated", "dominated by", "dominates", "tied with", "notes"],
        rows,
        "lrllll" + "l",
        "Criteria: " + ", ".join(dom.criteria) + ". " + METHODS["dominance"],
    )
    o = a.ordering
    rows = [
        ("means", o.statement or "n/a", ""),
        ("paired verdicts ('~' = not a finding)", o.supported_statement or "n/a", ""),
    ]
    for r in o.repeats:
        rows.append(
            (
                f"repeat {r.repeat}",
                r.statement or "incomplete (a trial is missing or unmeasured)",
                "n/a" if r.matches is None else ("yes" if r.matches else "NO"),
            )
        )
    t2 = table(
        f"Ordering of points by output throughput: held in {o.held_in_repeats} of {o.repeats_planned} repeats",
        ["scope", "statement", "same as means"],
        rows,
        "lll",
    )
    rows = [
        (
            f"{label(lk.lo)} vs {label(lk.hi)}",
            lk.symbol or "n/a",
            pct(lk.effect, signed=True, d=1),
            f"{pct(lk.ci95[0], signed=True, d=1)} to {pct(lk.ci95[1], signed=True, d=1)}" if lk.ci95 else "n/a",
            p_text(lk.p_value),
            p_text(lk.p_adjusted),
            pct(lk.mde, d=1),
            lk.verdict,
        )
        for lk in o.links
    ]
    t3 = table(
        "Adjacent points: the paired test behind each ordering symbol",
        ["pair", "symbol (means)", "effect lo vs hi", "95% interval", "p", "p (Holm)", "MDE", "verdict"],
        rows,
        "lcrrrrrl",
        "effect: mean of (T_lo - T_hi) / T_hi over the paired units, where T is a trial's output "
        "throughput and lo / hi the lower / higher concurrency; " + METHODS["multiplicity"] + ".",
    )
    if dom.pairs:
        t1["note"] += " Paired verdicts: " + "; ".join(d.verdict_statement for d in dom.pairs) + "."
    return [t1, t2, t3]
