"""The report's reading order: the headline (verdict lines and the few caveats that matter most), latency against
concurrency (with intervals), and the collapsing of rows nobody can read (kernel-geometry groups with no declared
meaning).

Pure functions of the typed analysis (evidence.analysis.model; analysis.json's dict is read into it) and of the
profile rows; every string is formatted here. `comparison_line` formats a comparison as a dict: it also takes
compare's rows and older analyses' shapes.
"""

from __future__ import annotations

from typing import Any

from evidence.analysis.caveats import pair_about
from evidence.analysis.latency import absent_short, shown_keys
from evidence.analysis.model import Analysis, ArmComparison, ArmVerdict, CaveatKind, as_analysis
from evidence.analysis.numbers import label
from evidence.metrics import METRICS
from evidence.report.format import num, pct, table

HEADLINE_LINES = 5  # "the verdicts in about five lines"; the rest are in the Paired comparisons section
HEADLINE_CAVEATS = 4  # the caveats a first screen holds beside the figure; all of them follow in All caveats
# Which caveats the headline shows first (analysis caveat_kinds): the data is incomplete; the answer is undecided;
# the test's unit is the engine session; not the real model; the setup moved between sessions; one number per trial
# hides a shape; then the rest. A kind not listed comes after these, in analysis order.
CAVEAT_PRIORITY = ("run_status", "missing_trials", "failed_requests", "zero_completed",
                   "single_repeat", "comparison_verdict",
                   "session_variance",
                   "dummy_weights",
                   "engine_restart_values", "pins_drift", "session_split", "sessions_not_restarted", "bottleneck",
                   "no_steady_state", "waves", "regimes",
                   "sign_only", "fixed_order", "output_len_mismatch", "prompt_lengths", "too_short_steady",
                   "unexpected_trials", "plan_mismatch", "dominance_verdict", "dominance_repeats", "ordering_repeats",
                   "sessions_same", "profile_diagnostic")
UNINTERPRETED = "no declared meaning"


def _stats(c: dict) -> dict:
    """The stated procedure's numbers of one comparison (effect, ci95, p_value, mde...), where the analysis has them."""
    st = c.get("stats")
    if isinstance(st, dict):
        return st
    return {k: c[k] for k in ("effect", "ci95", "p_value", "p_adjusted", "mde", "n_pairs", "test") if k in c}


def _p(x: Any) -> str:
    if not isinstance(x, (int, float)):
        return "n/a"
    return "< 0.001" if x < 0.001 else f"{x:.3f}"


def comparison_line(c: dict, *, named: bool = True, scoped: bool = True) -> str:
    """One comparison in one sentence: verdict first, then the effect with its interval, p and MDE (or the wins).
    named=False leaves out the leading "Ca vs Cb: " (for a table whose row already names it); scoped=False leaves
    out its scope (where one line above states the scope of every verdict, as the run's headline does)."""
    A, B = label(c["a"]), label(c["b"])
    st = _stats(c)
    name = (c.get("name") or f"{A} vs {B}") + ": " if named else ""
    verdict = st.get("verdict") if isinstance(st.get("verdict"), str) else c.get("verdict", "")
    n = st.get("n_pairs", c.get("pairs", 0))
    if not n:
        return f"{name}{verdict or 'no paired repeats'}."
    # the wins count paired repeats; when sessions differ, the test's unit is the session (fewer, wider)
    wins = f"{A} won {c.get('wins_a', st.get('wins_a', 0))} of {n} paired repeat(s)"
    scope = st.get("scope", c.get("scope"))
    if scope:  # analysis.json with scope: what it is about, with the unit's n and df
        k, df = st.get("n_units", c.get("n_units")), st.get("df", c.get("df"))
        wins += (f"; {scope}, n = {k}" + (f", {df} df" if df is not None else "") if scoped else
                 f" ({scope}" + (f", {df} df)" if df is not None else ")"))
    elif c.get("unit") == "session" or st.get("unit") == "session":
        k = st.get("n_units", c.get("n_units"))
        wins += f"; the test's unit is the engine session{f' (n = {k})' if isinstance(k, int) else ''}"
    effect = st.get("effect", c.get("mean_diff"))
    ci = st.get("ci95")
    if isinstance(ci, (list, tuple)) and len(ci) == 2 and None not in ci:
        p = st.get("p_adjusted", st.get("p_value"))
        ptxt = ("p (Holm) " if "p_adjusted" in st and st.get("p_adjusted") != st.get("p_value") else "p ")
        ptxt += _p(p) if _p(p).startswith("<") else "= " + _p(p)
        mde = (f"; {'MDE' if 'scope' in st or 'scope' in c else 'smallest detectable'} "
               f"{pct(st['mde'], d=1)}" if isinstance(st.get("mde"), (int, float)) else "")
        return (f"{name}{verdict}; {A} {pct(effect, signed=True, d=1)} against {B} (95% CI "
                f"{pct(ci[0], signed=True, d=1)} to {pct(ci[1], signed=True, d=1)}; {ptxt}{mde}); {wins}.")
    spread = c.get("spread")
    spread = spread.get("value") if isinstance(spread, dict) else spread  # analysis.json: a dict; compare: the value
    return (f"{name}{verdict}; mean paired advantage of {A} {pct(effect, signed=True, d=1)}; {wins}"
            + (f"; run-to-run spread {pct(spread, d=1)}" if isinstance(spread, (int, float)) else "") + ".")


def verdict_lines(res: Analysis | dict, limit: int = HEADLINE_LINES) -> list[str]:
    """The headline: throughput per point, each declared comparison, the ordering, dominance (about `limit` lines)."""
    return _verdicts(as_analysis(res), limit)[0]


def _verdicts(a: Analysis, limit: int) -> tuple[list[str], set[tuple[str | None, str | None]]]:
    """The verdict lines and the (kind, about) of every caveat they restate (analysis caveat_kinds)."""
    out = []
    covered: set[tuple[str | None, str | None]] = set()
    c = a.completeness
    if c.run_status != "complete" or c.missing or c.with_failures:
        out.append(f"Run {c.run_status or 'status unknown'}: {c.trials_present} of {c.trials_planned} "
                   "planned trials recorded" + (f", failed requests in {', '.join(c.with_failures)}"
                                                if c.with_failures else "") + ".")
    pts = "; ".join(f"{p.label} {num(p.output_throughput.mean, 0)} (CV {pct(p.output_throughput.cv, d=1)}, "
                    f"n={p.repeats_measured})" for p in a.points)
    scoped = not a.scope.scope
    out.append(f"Mean output throughput, tok/s: {pts}.")
    if a.arms is not None and a.arms.within:
        # spec.arms: the declared comparisons inside each arm and the interaction are the answer; the pooled
        # comparison, ordering and dominance mix the arms, so their caveats stay out of the headline (never hidden:
        # every caveat is in the All caveats section)
        covered |= {("comparison_verdict", x.name or None) for x in a.comparisons} | {("ordering_repeats", None)}
        covered |= {(k, pair_about(d)) for d in a.dominance.pairs if "dominant" not in d.unset
                    for k in ("dominance_verdict", "dominance_repeats")}
        lines = [x.statement[:1].upper() + x.statement[1:] + "." for x in a.arms.within + a.arms.interaction]
        return out + lines, covered
    comps = [(x.name or None, comparison_line(x.to_dict(), scoped=scoped)) for x in a.comparisons]
    o = a.ordering
    tail = []
    if o.statement:
        tail.append(f"Ordering of means {o.statement} (held in {o.held_in_repeats} of {o.repeats_planned} "
                    f"repeats); where the paired verdict is not a finding it reads {o.supported_statement}.")
        covered.add(("ordering_repeats", None))
    dom = a.dominance.pairs
    if dom:
        # the paired verdict leads, so a dominance on the means is never read as more than its intervals allow
        dline = ("; ".join((d.statement if "verdict_statement" in d.unset else d.verdict_statement)
                              + f" ({d.held_in_repeats} of {d.repeats_planned} repeats)" for d in dom) + ".")
        tail.append(dline[:1].upper() + dline[1:])
        covered |= {(k, pair_about(d)) for d in dom if "dominant" not in d.unset
                    for k in ("dominance_verdict", "dominance_repeats")}
    room = max(3, limit - len(out) - len(tail))  # the comparisons are the answer: never fewer than 3 lines of them
    if len(comps) > room:
        more = len(comps) - (room - 1)
        comps = comps[: room - 1] + [(None, f"{more} more comparison(s): see Paired comparisons.")]
    covered |= {("comparison_verdict", name) for name, _ in comps if name}
    lines = [line for _, line in comps] or ["The spec declares no comparison (analysis.comparisons)."]
    return out + lines + tail, covered


def headline(res: Analysis | dict, limit: int = HEADLINE_CAVEATS) -> dict:
    """The headline's verdict lines and its few caveats: those that restate no verdict line, by CAVEAT_PRIORITY (then
    in analysis order), at most `limit`, each in its one-line form where it has one; every caveat stays, verbatim, in
    the All caveats section. Selection is by analysis.json's caveat_kinds, never by the sentences' wording."""
    a = as_analysis(res)
    verdicts, covered = _verdicts(a, HEADLINE_LINES)
    texts = list(a.caveats)
    kinds = a.caveat_kinds
    if len(kinds) != len(texts):  # an analysis.json from before caveat_kinds: in its order, none taken as restated
        kinds = [CaveatKind()] * len(texts)
    restated = {i for i, k in enumerate(kinds) if (k.kind, k.about) in covered}
    rank = {k: i for i, k in enumerate(CAVEAT_PRIORITY)}
    top = sorted((i for i in range(len(texts)) if i not in restated),
                 key=lambda i: (rank.get(kinds[i].kind or "", len(rank)), i))[:limit]
    more = len(texts) - len(top)
    link = "" if not texts else f"{more} more caveat{'s' if more != 1 else ''}" if more else \
        f"All {len(texts)} caveats in full"
    note = ((f" ({len(restated)} restate{'s' if len(restated) == 1 else ''} a verdict line above)" if restated else "")
            + f"; all {len(texts)} in full below." if more else " below.")
    return {"verdicts": verdicts, "caveats": [kinds[i].short or texts[i] for i in top] or ["None found in the data."],
            "caveats_more": {"link": link, "note": note}, "caveats_all": texts,
            "restated": [texts[i] for i in sorted(restated)],
            # the same caveats as short items, each with its full text behind a toggle (the HTML's <details>)
            "caveat_items": caveat_items(a, top), "caveat_items_all": caveat_items(a)}


def bottom_line(res: Analysis | dict) -> str:
    """The result in one short line for the page's title: the first declared comparison's verdict on output
    throughput with its interval (at its Holm level) and scope, or "Not decided" and why; an incomplete run says so
    first. The verdict lines below give the p, MDE and df; bottom_line_more how many of several were decided."""
    a = as_analysis(res)
    c0 = a.completeness
    lead = "Incomplete run. " if c0.missing or c0.run_status not in ("complete", None) else ""
    ix = a.arms.interaction if a.arms else []
    if ix:  # spec.arms: the question is whether an arm changes how the points compare (never the arms pooled)
        c1 = next((x for x in ix if x.verdict == "finding"), None)
        pair = next((x for x in a.arms.comparisons if x.verdict in ("finding", "equivalent")), None) if a.arms else None
        if c1 is None and pair is not None:  # no interaction, but the arms themselves differ (or are equivalent)
            iv = _arm_interval(pair)
            if pair.verdict == "equivalent":
                return lead + (f"Arms {pair.a} and {pair.b} equivalent at {label(pair.point)} within "
                               f"±{pct(pair.margin, d=1)} ({iv}).")
            fast, slow = (pair.a, pair.b) if (pair.effect or 0.0) > 0 else (pair.b, pair.a)
            return lead + (f"Arm {fast} beats arm {slow} at {label(pair.point)} by {pct(abs(pair.effect or 0.0), d=1)}"
                           f" in throughput ({iv}).")
        c1 = c1 or ix[0]
        what = f"{label(c1.a)}/{label(c1.b)} throughput, arm {c1.arm_a} against arm {c1.arm_b}"
        iv = _arm_interval(c1)
        if c1.verdict == "finding":
            return lead + f"The arms change the knee: {what} {pct(c1.effect, signed=True, d=1)} ({iv})."
        return lead + f"Not decided: {what} {pct(c1.effect, signed=True, d=1)} ({iv})."
    if not a.comparisons:
        best = max((p for p in a.points if p.output_throughput.mean is not None),
                   key=lambda p: p.output_throughput.mean or 0.0, default=None)
        return lead + "Not decided: the spec declares no comparison" + (
            f"; highest mean output throughput at {best.label} ({num(best.output_throughput.mean, 0)} tok/s)"
            if best else "; no point has a measured throughput") + "."
    c = a.comparisons[0]
    A, B = label(c.a), label(c.b)
    adj = c.family > 1 and bool(c.ci_adjusted) and c.ci_adjusted_level is not None
    ci = c.ci_adjusted if adj else c.ci95
    lvl = f"{100 * c.ci_adjusted_level:.4g}%" if adj else "95%"
    iv = (f"{lvl} CI {pct(ci[0], signed=True, d=1)} to {pct(ci[1], signed=True, d=1)}"
          if ci and None not in ci else "no interval")
    iv += f"; {c.scope}" if c.scope else ""
    if c.verdict == "finding" and isinstance(c.effect, (int, float)):
        line = f"{A} {'beats' if c.effect > 0 else 'trails'} {B} by {pct(abs(c.effect), d=1)} in throughput ({iv})"
    elif c.verdict == "equivalent":
        line = f"{A} and {B} equivalent within ±{pct(c.margin, d=1)} in throughput ({iv})"
    elif c.n_units < 2:
        line = f"Not decided: {A} vs {B} has {c.n_units} unit(s), a test needs 2"
    else:
        line = f"Not decided: {A} vs {B} throughput {pct(c.effect, signed=True, d=1)} ({iv})"
    return lead + line + "."


def _arm_interval(c: ArmVerdict | ArmComparison) -> str:
    ci, lvl = c.ci, c.ci_level or 0.95
    iv = (f"{100 * lvl:.4g}% CI {pct(ci[0], signed=True, d=1)} to {pct(ci[1], signed=True, d=1)}"
          if ci and None not in ci else "no interval")
    return iv + (f"; {c.scope}" if c.scope else "")


def _within_arm_line(w: ArmVerdict) -> str:
    A, B = label(w.a), label(w.b)
    if w.verdict == "finding":
        return (f"arm {w.arm}: {A} {'beats' if (w.effect or 0.0) > 0 else 'trails'} {B} by "
                f"{pct(abs(w.effect or 0.0), d=1)} ({_arm_interval(w)})")
    if w.verdict == "equivalent":
        return f"arm {w.arm}: {A} and {B} equivalent within ±{pct(w.margin, d=1)} ({_arm_interval(w)})"
    return f"arm {w.arm}: not decided, {A} vs {B} {pct(w.effect, signed=True, d=1)} ({_arm_interval(w)})"


def bottom_line_more(res: Analysis | dict) -> str:
    """What the title's line leaves out: how many of several declared comparisons were decided ("" for one); with
    arms, the declared comparison inside each arm."""
    a = as_analysis(res)
    within = a.arms.within if a.arms else []
    if within:
        return "Inside each arm: " + "; ".join(_within_arm_line(w) for w in within) + "."
    comps = a.comparisons
    if len(comps) < 2:
        return ""
    done = sum(1 for x in comps if x.verdict in ("finding", "equivalent"))
    return (f"The line above is the first of {len(comps)} declared comparisons; {done} of them "
            f"{'is' if done == 1 else 'are'} decided (every verdict is listed below).")


def _first_sentence(text: str, limit: int = 110) -> str:
    """A caveat's short form where the analysis gives none: its first sentence, cut at a word within `limit`."""
    first = text.split(". ")[0].rstrip(".")
    if len(first) <= limit:
        return first + "."
    return first[:limit].rsplit(" ", 1)[0].rstrip(",;:") + " ..."


def caveat_items(res: Analysis | dict, which: list[int] | None = None) -> list[dict]:
    """Caveats as short items with their full text behind a toggle: {'short', 'full'} ('full' is None where the short
    form is the whole caveat). `which`: indices into analysis caveats (default all, in analysis order)."""
    a = as_analysis(res)
    texts, kinds = list(a.caveats), a.caveat_kinds
    out = []
    for i in range(len(texts)) if which is None else which:
        short = (kinds[i].short if len(kinds) == len(texts) else None) or _first_sentence(texts[i])
        out.append({"short": short, "full": None if short.strip() == texts[i].strip() else texts[i]})
    return out


def comparison_summary_table(res: Analysis | dict) -> dict | None:
    """One row per declared comparison: verdict, effect, interval, p, MDE, and what it is about (unit, n, df,
    scope); the per-repeat tables and the full procedure are in an appendix."""
    a = as_analysis(res)
    if not a.comparisons:
        return None
    rows = []
    for c in a.comparisons:
        ci = c.ci95
        rows.append((c.name or f"{label(c.a)} vs {label(c.b)}", c.verdict or "n/a", pct(c.effect, signed=True, d=1),
                     f"{pct(ci[0], signed=True, d=1)} to {pct(ci[1], signed=True, d=1)}" if ci and None not in ci
                     else "n/a", _p(c.p_adjusted if c.p_adjusted is not None else c.p_value),
                     pct(c.mde, d=1) if isinstance(c.mde, (int, float)) else "n/a",
                     f"{c.unit}, n = {c.n_units}" + (f", {c.df} df" if c.df is not None else ""),
                     (c.scope or "n/a") + (f" ({c.scope_note})" if c.scope_note else "")))
    return table("Declared comparisons of output throughput (paired; Holm over the declared comparisons)",
                 ["comparison", "verdict", "effect", "95% CI", "p (Holm)", "MDE (80% power)", "unit", "scope"],
                 rows, "llrrrrll", "effect: mean paired (a - b) / b; every repeat of each comparison and the full "
                 "procedure are in the appendix 'Paired comparisons in full'.")


def latency_concurrency_table(res: Analysis | dict) -> dict:
    """p50 and p99 (or the spec's lowest and highest percentile) of each latency metric per point, each with its
    95% interval across repeats (analysis points[].latency[m].intervals, evidence.analysis.latency)."""
    a = as_analysis(res)
    keys = shown_keys(a.spec.percentiles)
    metrics = list(a.spec.latency_metrics)
    rows, units = [], set()
    for p in a.points:
        row = [p.label, num(p.repeats_measured), ""]
        over = set()
        for m in metrics:
            pl = p.latency.get(m)
            ivs = (pl.intervals if pl else None) or {}
            for k in keys:
                iv = ivs.get(k)
                if not iv or (iv.value is None and not iv.n):  # nothing measured: no reason to give
                    row.append("n/a")
                    continue
                units.add(iv.unit)
                over.add(f"{iv.n} {'engine session' if iv.unit == 'session' else 'repeat'}" + ("s" if iv.n != 1 else ""))
                ci = (f" ({num(iv.ci_low, 1)} to {num(iv.ci_high, 1)})" if iv.ci_low is not None
                      else f" (no interval: {absent_short(iv)})")  # the reason, not only n: a 0 has no log
                row.append((num(iv.value, 1) if iv.value is not None else "n/a") + ci)
        row[2] = ", ".join(sorted(over)) or "n/a"  # the interval's n: what its t has n - 1 df over
        rows.append(row)
    headers = ["point", "repeats", "interval over"] + [f"{m.upper()} {k} ({METRICS[m].unit if m in METRICS else 'ms'})"
                                      for m in metrics for k in keys]
    unit = ("the server start (engine session), each valued by the mean of ln over its repeats" if "session" in units
            else "the repeat, so each interval is about this one server start")
    return table("Latency against concurrency: each trial's percentile, mean over repeats (95% interval)",
                 headers, rows, "lrl" + "r" * (len(headers) - 3),
                 "Each cell is the mean over repeats of the per-trial percentile; in parentheses its 95% t interval "
                 f"(n - 1 df) across repeats, the unit being {unit}, worked out on the logarithm of the percentile "
                 "and back-transformed: it lies around the geometric mean, so it is asymmetric and stays above 0; "
                 "with fewer than 2 units, or a trial's value of 0 or less (no logarithm), there is no interval, "
                 "and the cell says which. "
                 "The figure above shows the same numbers with every trial as a dot beside its bar. TTFT = time to first token; "
                 "TPOT = time per output token after the first; ITL = gap between streamed chunks; E2EL = whole "
                 "request. All repeats pooled, and every other statistic, are in the appendix Latency distributions.")


def geometry_rows(rows: list[dict]) -> tuple[list[list], int]:
    """Geometry groups for the report: interpreted ones as they are; the uninterpreted groups of each
    (point, rule) as one row, since a grid with no declared meaning says nothing per row. Returns the rows and
    the number of groups collapsed (all of them stay in profile.json and profile_geometry.csv)."""
    shown: list[list] = []
    opaque: dict[tuple, list[dict]] = {}
    for r in rows:
        if str(r.get("meaning") or "").startswith(UNINTERPRETED) or not r.get("meaning"):
            opaque.setdefault((r["point"], r["rule"]), []).append(r)
            continue
        shown.append([r["point"], r["rule"], r["grid"], r["replay"], r["count"], _fixed(r.get("total_ms"), 3),
                      _fixed(r.get("per_token_us"), 3), r.get("meaning") or ""])
    collapsed = 0
    for (point, rule), grp in opaque.items():
        collapsed += len(grp)
        tok = [g.get("per_token_us") for g in grp]
        shown.append([point, rule, f"{len(grp)} grid{'s' if len(grp) != 1 else ''}", ", ".join(sorted({str(g['replay']) for g in grp})),
                      sum(g["count"] for g in grp), _fixed(sum(g["total_ms"] for g in grp), 3),
                      _fixed(sum(tok), 3) if None not in tok else "n/a",
                      f"{len(grp)} launch-grid groups with no declared meaning, collapsed into this row "
                      "(each is in analysis/profile.json and profile_geometry.csv)"])
    return shown, collapsed


def _fixed(x: Any, d: int) -> str:
    return "n/a" if x is None else f"{x:,.{d}f}"


__all__ = ["comparison_line", "verdict_lines", "headline", "latency_concurrency_table", "geometry_rows", "bottom_line",
           "bottom_line_more", "caveat_items", "comparison_summary_table"]
