"""Every table of an analysis as a typed pandas DataFrame, and the one writer of their CSV files.

`frames(res)` takes the analysis (typed, evidence.analysis.model; or the dict analysis.json holds) and gives
each table as a DataFrame: measured quantities as float64 with NaN where a value could not be
measured (the row's flags/absent column says why), counts as Int64 and yes/no columns as boolean
with <NA>, text as string. Relative values are in percent (columns ending in _pct), as the CSVs
show them. `df.attrs["kinds"]` names each column's kind, which fixes its CSV decimals
(CSV_DECIMALS).

`csv_text(df)` is the only CSV writer: fixed decimals per kind, "\\n" line ends, the frame's
column order, no index. It formats each cell with Python's own float formatting, so the same
frame gives the same bytes in every process, whatever the hash seed.
"""

from __future__ import annotations

from typing import Any, Sequence

import pandas as pd

from evidence.analysis.model import Analysis, Comparison, Steady, as_analysis
from evidence.analysis.numbers import label
# the table names (tables.table_names, csv_names) live beside the rows, where naming the files needs no pandas
from evidence.analysis.tables import CSV_DECIMALS, UNIT_KIND, latency_stats, table_names
from evidence.metrics import METRICS, REPORTED_METRICS

Column = tuple[str, str]  # (name, kind): a CSV_DECIMALS key, or count, text, bool, or BY_UNIT

# latency_side_by_side holds tok/s and ms values in the same columns: decimals by the row's unit column
BY_UNIT = "by_unit"


def _series(vals: list[Any], kind: str) -> pd.Series:
    if kind == "count":
        return pd.Series([None if v is None else int(v) for v in vals], dtype="Int64")
    if kind == "text":
        return pd.Series([None if v is None else str(v) for v in vals], dtype="string")
    if kind == "bool":
        return pd.Series([None if v is None else bool(v) for v in vals], dtype="boolean")
    # relative values are fractions in analysis.json and percent in the tables
    scale = 100 if kind == "pct" else 1
    return pd.Series([float("nan") if v is None else float(v * scale) for v in vals], dtype="float64")


def _frame(cols: Sequence[Column], rows: Sequence[Sequence[Any]]) -> pd.DataFrame:
    for r in rows:
        if len(r) != len(cols):  # a table's row and header out of step is a bug, never a short row
            raise ValueError(f"table row of {len(r)} values for {len(cols)} columns: {list(r)!r}")
    df = pd.DataFrame({name: _series([r[i] for r in rows], kind) for i, (name, kind) in enumerate(cols)})
    df.attrs["kinds"] = dict(cols)
    return df


def _cell(v: Any, kind: str) -> str:
    if pd.isna(v):
        return ""
    if kind == "count":
        return str(int(v))
    if kind == "text":
        return str(v)
    if kind == "bool":
        return "yes" if v else "no"
    s = f"{float(v):.{CSV_DECIMALS[kind]}f}"
    return s[1:] if s.startswith("-") and float(s) == 0 else s  # no "-0.000"


def csv_text(df: pd.DataFrame, kinds: dict[str, str] | None = None) -> str:
    """The CSV bytes of one table (kinds: column -> kind; default the frame's attrs["kinds"])."""
    kinds = kinds if kinds is not None else df.attrs.get("kinds", {})
    unknown = [c for c in df.columns if c not in kinds]
    if unknown:
        raise ValueError(f"no column kind (and so no CSV decimals) for {unknown}")

    def cells(c: str) -> list[str]:
        if kinds[c] == BY_UNIT:
            return [_cell(v, UNIT_KIND.get(u, "ms")) for v, u in zip(df[c], df["unit"])]
        return [_cell(v, kinds[c]) for v in df[c]]

    text = pd.DataFrame({c: pd.Series(cells(c), dtype=object) for c in df.columns}, columns=list(df.columns))
    return text.to_csv(index=False, lineterminator="\n")


def csv_tables(res: Analysis | dict) -> dict[str, str]:
    """File name -> CSV text of every table of the analysis."""
    return {f"{name}.csv": csv_text(df) for name, df in frames(res).items()}


def _flags(xs: Sequence[str]) -> str:
    return "; ".join(xs)


def _labels(points: Sequence[int]) -> str:
    return " ".join(label(q) for q in points)


def frames(res: Analysis | dict) -> dict[str, pd.DataFrame]:
    """Table name (the CSV file's stem) -> DataFrame, for every table of the analysis `res` (table_names(res))."""
    a = as_analysis(res)
    stats = latency_stats(a.spec.percentiles)
    build = {"trials": lambda: _trials(a, stats), "points": lambda: _points(a),
             "timeseries": lambda: _timeseries(a), "point_latency": lambda: _point_latency(a, stats),
             "point_latency_intervals": lambda: _point_latency_intervals(a, stats),
             "comparisons": lambda: _comparisons(a), "paired": lambda: _paired(a),
             "latency_side_by_side": lambda: _side_by_side(a), "dominance": lambda: _dominance(a),
             "ordering": lambda: _ordering(a), "telemetry": lambda: _telemetry(a), "goodput": lambda: _goodput(a)}
    return {name: build[name]() for name in table_names(a)}


def _trials(a: Analysis, stats: list[str]) -> pd.DataFrame:
    lat_cols = [(f"{m}_{s}_ms", UNIT_KIND[METRICS[m].unit]) for m in REPORTED_METRICS for s in stats]
    h = [("index", "count"), ("trial", "text"), ("repeat", "count"), ("point", "count"), ("position", "count"),
         ("status", "text"), ("requests_planned", "count"), ("requests", "count"), ("completed", "count"),
         ("failed", "count"), ("duration_s", "s"), ("output_throughput_tok_s", "tok_s"),
         ("request_throughput_req_s", "req_s"), ("output_tokens", "count"), ("output_len_mismatches", "count"),
         ("chunk_usage_mismatches", "count"), ("prompt_len_nominal_mean", "tokens"),
         ("prompt_tokens_server_mean", "tokens"), ("client_cpu_util_pct", "pct"),
         ("dispatch_lag_max_s", "s"), ("steady_throughput_tok_s", "tok_s"), ("steady_start_s", "s"),
         ("steady_end_s", "s"), ("steady", "bool"), ("trend_rho", "frac"), ("trend_p", "p"), ("waves", "text")] \
        + lat_cols + [("flags", "text")]
    within = {w.trial: w for w in a.within.trials}
    rows = []
    for t in a.trials:
        w = within[t.id]
        st = w.steady or Steady()
        r = [t.index, t.id, t.repeat, t.point, t.position, t.status, t.requests_planned,
             t.requests, t.completed, t.failed, t.duration_s, t.output_throughput,
             t.request_throughput, t.total_output_tokens, t.output_len_mismatches,
             t.chunk_usage_mismatches, t.prompt_len_nominal_mean, (t.prompt_tokens_server or {}).get("mean"),
             t.client_cpu_util, t.dispatch_lag_max_s, st.throughput, st.start_s, st.end_s,
             st.steady if w.steady else None, st.trend_rho, st.trend_p, (w.waves or {}).get("note", "")]
        for m in REPORTED_METRICS:
            d = t.latency.get(m) or {}
            r += [d.get(s) for s in stats]
        r.append(_flags(t.flags + [f"{k}: {v}" for k, v in sorted(t.absent.items()) if k != "trial"]))
        rows.append(r)
    return _frame(h, rows)


def _points(a: Analysis) -> pd.DataFrame:
    h = [("point", "count"), ("repeats_planned", "count"), ("repeats_present", "count"),
         ("repeats_measured", "count"), ("output_throughput_mean_tok_s", "tok_s"),
         ("output_throughput_std_tok_s", "tok_s"), ("std_kind", "text"), ("cv_pct", "pct"),
         ("output_throughput_min_tok_s", "tok_s"), ("output_throughput_max_tok_s", "tok_s"),
         ("rel_range_pct", "pct"), ("request_throughput_mean_req_s", "req_s"), ("requests", "count"),
         ("completed", "count"), ("failed", "count"), ("output_len_mismatches", "count"),
         ("chunk_usage_mismatches", "count"), ("input_len_nominal", "count"), ("prompt_tokens_server_min", "count"),
         ("prompt_tokens_server_max", "count"), ("prompt_tokens_server_mean", "tokens"),
         ("running_sustained_mean", "gauge"), ("waiting_sustained_mean", "gauge"),
         ("kv_cache_usage_sustained_mean", "frac"), ("steady_throughput_mean_tok_s", "tok_s"),
         ("steady_trials", "count"), ("wave_trials", "count"), ("regimes", "text"), ("missing_trials", "text"),
         ("flags", "text")]
    wp = {w.point: w for w in a.within.points}
    rows = []
    for p in a.points:
        w = wp[p.point]
        tp = p.output_throughput
        srv = p.prompt_tokens.server or {}
        tele = p.telemetry_sustained_mean
        rows.append([p.point, p.repeats_planned, p.repeats_present, p.repeats_measured, tp.mean,
                     tp.std, tp.std_kind, tp.cv, tp.min, tp.max, tp.rel_range,
                     p.request_throughput.mean, p.requests, p.completed, p.failed,
                     p.output_len_mismatches, p.chunk_usage_mismatches, p.prompt_tokens.input_len_nominal,
                     srv.get("min"), srv.get("max"), srv.get("mean"), tele.get("running"), tele.get("waiting"),
                     tele.get("kv_cache_usage"), w.steady_throughput_mean, w.steady_trials, w.wave_trials,
                     (w.regimes or {}).get("note", ""), " ".join(p.missing),
                     _flags(p.flags + [f"{k}: {v}" for k, v in sorted(p.absent.items())])])
    return _frame(h, rows)


def _timeseries(a: Analysis) -> pd.DataFrame:
    h = [("trial", "text"), ("t_s", "s"), ("output_tok_s", "tok_s"), ("in_flight", "gauge"), ("running", "gauge"),
         ("waiting", "gauge"), ("in_steady_window", "bool")]
    rows = []
    for w in a.within.trials:
        if w.status != "present" or not w.series.get("t"):
            continue
        se, st = w.series, w.steady or Steady()
        n = len(se["t"])
        rows += zip([w.trial] * n, se["t"], se["output_tps"], se["in_flight"], se["running"] or [None] * n,
                    se["waiting"] or [None] * n, [st.start_s <= t0 < st.end_s for t0 in se["t"]])  # type: ignore[operator]
    return _frame(h, rows)


def _point_latency(a: Analysis, stats: list[str]) -> pd.DataFrame:
    h = [("point", "count"), ("metric", "text"), ("method", "text"), ("n", "count")] + \
        [(f"{s}_ms", "ms") for s in stats] + [("flags", "text")]
    rows = []
    for p in a.points:
        for m in REPORTED_METRICS:
            lat = p.latency[m]
            for method, d, key in (("mean_over_repeats", lat.mean_over_repeats, "n_trials"), ("pooled", lat.pooled, "n")):
                d = d or {}
                rows.append([p.point, m, method, d.get(key)] + [d.get(s) for s in stats] + [_flags(p.flags)])
    return _frame(h, rows)


def _point_latency_intervals(a: Analysis, stats: list[str]) -> pd.DataFrame:
    """Long form of points[].latency[m].intervals (evidence.analysis.latency): one row per point, metric and
    statistic; value_ms is the mean over repeats, geometric_mean_ms the interval's centre (exp of the mean ln over
    the units), the interval the back-transformed t interval on ln. No interval: empty bounds and `absent` says why.
    An analysis.json from before the intervals: value_ms from mean_over_repeats where it has one, no interval."""
    h = [("point", "count"), ("metric", "text"), ("stat", "text"), ("value_ms", "ms"), ("geometric_mean_ms", "ms"),
         ("ci_low_ms", "ms"), ("ci_high_ms", "ms"), ("n", "count"), ("unit", "text"), ("level", "frac"),
         ("absent", "text")]
    rows = []
    for p in a.points:
        lat = p.latency
        for m in [m for m in REPORTED_METRICS if m in lat] + sorted(set(lat) - set(REPORTED_METRICS)):
            ivs = lat[m].intervals
            for st in stats:
                iv = (ivs or {}).get(st)
                if iv is None:
                    mean = lat[m].mean_over_repeats
                    why = ("no interval in this analysis.json (written before the intervals)" if ivs is None and
                           mean else "not measured in any trial of the point")
                    rows.append([p.point, m, st, (mean or {}).get(st) if ivs is None else None] + [None] * 6
                                + [why])
                    continue
                rows.append([p.point, m, st, iv.value, iv.geometric_mean, iv.ci_low, iv.ci_high, iv.n, iv.unit,
                             iv.level, iv.absent])
    return _frame(h, rows)


def _comparisons(a: Analysis) -> pd.DataFrame:
    h = [("comparison", "text"), ("family", "text"), ("a", "count"), ("b", "count"), ("repeats_planned", "count"),
         ("pairs", "count"), ("unit", "text"), ("n_units", "count"), ("wins_a", "count"), ("wins_b", "count"),
         ("ties", "count"), ("effect_pct", "pct"), ("ci_low_pct", "pct"), ("ci_high_pct", "pct"),
         ("p_value", "p"), ("p_adjusted", "p"), ("ci_adjusted_low_pct", "pct"), ("ci_adjusted_high_pct", "pct"),
         ("ci_adjusted_level_pct", "pct"), ("mde_pct", "pct"), ("sign_p", "p"),
         ("perm_p", "p"), ("verdict", "text"), ("statement", "text"), ("mean_diff_pct", "pct"),
         ("min_diff_pct", "pct"), ("max_diff_pct", "pct"), ("a_cv_pct", "pct"), ("b_cv_pct", "pct"),
         ("cv_kind", "text"), ("a_rel_range_pct", "pct"), ("b_rel_range_pct", "pct"), ("sessions", "count"),
         ("sd_within_session_log", "frac"), ("sd_between_session_log", "frac"), ("test", "text"), ("flags", "text")]
    rows = []
    family: tuple[tuple[str, list[Comparison]], ...] = (("declared", a.comparisons), ("adjacent", a.adjacent))
    for fam, comps in family:
        for c in comps:
            nz, ci, cj = c.noise, c.ci95 or [None, None], c.ci_adjusted or [None, None]
            ss = c.sessions
            rows.append([c.name, fam, c.a, c.b, c.repeats_planned, c.pairs, c.unit, c.n_units,
                         c.wins_a, c.wins_b, c.ties, c.effect, ci[0], ci[1], c.p_value,
                         c.p_adjusted, cj[0], cj[1], c.ci_adjusted_level, c.mde, c.sign_p, c.perm_p,
                         c.verdict, c.statement, c.mean_diff, c.min_diff, c.max_diff, nz.a_cv,
                         nz.b_cv, nz.cv_kind, nz.a_rel_range, nz.b_rel_range, ss.sessions if ss else None,
                         ss.sd_within_log if ss else None, ss.sd_between_log if ss else None, c.test,
                         _flags(c.flags)])
    return _frame(h, rows)


def _paired(a: Analysis) -> pd.DataFrame:
    h = [("comparison", "text"), ("repeat", "count"), ("session", "count"), ("trial_a", "text"),
         ("trial_b", "text"), ("a_tok_s", "tok_s"), ("b_tok_s", "tok_s"), ("diff_pct", "pct"), ("winner", "text"),
         ("flags", "text")]
    rows = [[c.name, r.repeat, r.session, r.trial_a, r.trial_b, r.a, r.b, r.diff, r.winner, _flags(r.flags)]
            for c in a.comparisons for r in c.repeats]
    return _frame(h, rows)


def _side_by_side(a: Analysis) -> pd.DataFrame:
    h = [("comparison", "text"), ("metric", "text"), ("stat", "text"), ("unit", "text"), ("a", BY_UNIT),
         ("b", BY_UNIT), ("change_pct", "pct"), ("better", "text"), ("pooled_a", BY_UNIT), ("pooled_b", BY_UNIT),
         ("pooled_change_pct", "pct"), ("flags", "text")]
    rows = [[c.name, r.metric, r.stat, r.unit, r.a, r.b, r.change, r.better, r.pooled_a, r.pooled_b,
             r.pooled_change, _flags(r.flags)]
            for c in a.comparisons for r in c.latency_side_by_side or []]
    return _frame(h, rows)


def _dominance(a: Analysis) -> pd.DataFrame:
    dom = a.dominance
    h = [("point", "count"), ("output_throughput_mean_tok_s", "tok_s"), ("dominated", "bool"),
         ("dominated_by", "text"), ("held_in_repeats", "text"), ("verdict", "text"), ("dominates", "text"),
         ("tied_with", "text"), ("not_compared", "text"), ("note", "text"), ("flags", "text")]
    rows = []
    for e in dom.points:
        by = [d for q in e.dominated_by if (d := dom.pair(q, e.point)) is not None]
        p = a.point(e.point)
        rows.append([e.point, p.output_throughput.mean if p else None, e.dominated,
                     _labels(e.dominated_by),
                     " ".join(f"{label(d.dominant)}:{d.held_in_repeats}/{d.repeats_planned}" for d in by),
                     " ".join(f"{label(d.dominant)}:{d.verdict}" for d in by), _labels(e.dominates),
                     _labels(e.tied_with), _labels(e.not_compared), e.note or "", _flags(e.flags)])
    return _frame(h, rows)


def _ordering(a: Analysis) -> pd.DataFrame:
    o = a.ordering
    h = [("scope", "text"), ("statement", "text"), ("complete", "bool"), ("matches_mean", "bool")]
    rows = [["mean", o.statement, o.statement is not None, None],
            ["supported (~: not a finding)", o.supported_statement, o.supported_statement is not None, None]]
    rows += [[f"repeat {r.repeat}", r.statement or None, r.complete, r.matches] for r in o.repeats]
    return _frame(h, rows)


def _telemetry(a: Analysis) -> pd.DataFrame:
    h = [("trial", "text"), ("repeat", "count"), ("point", "count"), ("position", "count"), ("status", "text"),
         ("samples", "count"), ("sample_interval_s", "s"), ("plateau_start_s", "s"), ("plateau_end_s", "s"),
         ("running_sustained", "gauge"), ("waiting_sustained", "gauge"), ("kv_cache_usage_sustained", "frac"),
         ("running_max", "gauge"), ("waiting_max", "gauge"), ("kv_cache_usage_max", "frac"),
         ("generation_tokens_delta", "count"), ("prompt_tokens_delta", "count"), ("preemptions_delta", "count"),
         ("absent", "text")]
    rows = []
    for t in a.telemetry:
        head = [t.trial, t.repeat, t.point, t.position, t.status]
        if t.status != "present":
            rows.append(head + [None] * 13 + [t.absent])
            continue
        su, mx, de = t.sustained, t.max, t.delta
        plateau = t.plateau_s or [None, None]
        rows.append(head + [t.samples, t.sample_interval_s, plateau[0], plateau[1],
                            su["running"], su["waiting"], su["kv_cache_usage"], mx["running"], mx["waiting"],
                            mx["kv_cache_usage"], de["generation_tokens"], de["prompt_tokens"], de["preemptions"],
                            _flags([f"{k}: {v}" for k, v in sorted(t.absent_keys.items())])])
    return _frame(h, rows)


def _goodput(a: Analysis) -> pd.DataFrame:
    h = [("trial", "text"), ("repeat", "count"), ("point", "count"), ("position", "count"), ("requests", "count"),
         ("meeting_slos", "count"), ("undetermined", "count"), ("attainment_pct", "pct"),
         ("goodput_req_s", "req_s"), ("flags", "text")]
    rows = [[t.trial, t.repeat, t.point, t.position, t.requests, t.meeting, t.undetermined,
             t.attainment, t.goodput_rps, _flags(t.flags + ([t.absent] if t.absent else []))]
            for t in a.goodput.trials]
    return _frame(h, rows)
