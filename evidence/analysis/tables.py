"""Per-trial and per-point rows, and every CSV table of the analysis.

CSVs use fixed decimals per column kind (CSV_DECIMALS) and show relative values in percent
(columns ending in _pct). An empty cell is a value that could not be measured; the row's
flags/absent column says why.
"""

from __future__ import annotations

import csv
import io
import math
from typing import Any, Iterable, Sequence

from evidence.analysis.load import TrialData
from evidence.analysis.numbers import as_num, label, mean_of, rel_of, std_of
from evidence.metrics import LATENCY_METRICS, METRICS, pct_key, trial_metrics
from evidence.spec.model import Spec


REPORTED_METRICS = ("ttft", "tpot", "itl", "e2el")  # latency metrics given for every point and trial


CLIENT_CPU_WARN = 0.9  # flag a trial whose load generator used >= 90% of one core (meta.json client_cpu_util)


# A metric's column kind is its unit's; the metric registry (evidence.metrics) fixes its decimals.
UNIT_KIND = {"tok/s": "tok_s", "req/s": "req_s", "ms": "ms", "s": "s"}
CSV_DECIMALS = {
    "tok_s": METRICS["output_throughput"].decimals,  # output throughput, tok/s
    "req_s": METRICS["request_throughput"].decimals,  # request throughput / goodput, req/s
    "ms": METRICS["ttft"].decimals,  # latencies
    "pct": 3,  # relative values, in percent
    "s": METRICS["duration"].decimals,  # seconds
    "gauge": 2,  # telemetry request counts (medians can be x.5)
    "frac": 4,  # KV cache usage as the server reports it (vLLM: a fraction 0-1)
    "tokens": 2,  # mean token counts
    "p": 6,  # p-values
}


def trial_row(td: TrialData, spec: Spec) -> dict:
    pcts = list(spec.analysis.percentiles)
    row: dict[str, Any] = {
        "id": td.id, "index": td.index, "repeat": td.repeat, "session": td.session, "point": td.point,
        "position": td.position,
        "requests_planned": td.prompts, "status": "present" if td.present else "missing",
    }
    flags: list[str] = []
    if not td.present:
        row.update({"requests": None, "completed": None, "failed": None, "errors": {}, "duration_s": None,
                    "client_cpu_util": None, "dispatch_lag_max_s": None,
                    "output_throughput": None, "request_throughput": None, "total_output_tokens": None,
                    "output_len_mismatches": None, "chunk_usage_mismatches": None, "prompt_len_nominal_mean": None,
                    "prompt_tokens_server": None, "latency": {m: None for m in LATENCY_METRICS},
                    "absent": {"trial": "planned but no complete trial folder (missing)"}})
        row["flags"] = ["missing (planned, not recorded)"]
        return row
    tm = trial_metrics(td.records, pcts, expected_output_len=spec.workload.output_len)
    measured = [r for r in td.records if r.phase == "measure"]
    row.update({
        "requests": tm["requests"], "completed": tm["completed"], "failed": tm["failed"], "errors": tm["errors"],
        "duration_s": tm["duration_s"], "output_throughput": tm["output_throughput"],
        "request_throughput": tm["request_throughput"], "total_output_tokens": tm["total_output_tokens"],
        "output_len_mismatches": tm["output_len_mismatches"], "chunk_usage_mismatches": tm["chunk_usage_mismatches"],
        "prompt_len_nominal_mean": mean_of([float(r.prompt_len) for r in measured]),
        "prompt_tokens_server": tm["prompt_tokens_server"],
        "latency": {m: tm[m + "_ms"] for m in LATENCY_METRICS},
        "absent": dict(tm["absent"]),
        "client_cpu_util": as_num((td.meta or {}).get("client_cpu_util")),
        "dispatch_lag_max_s": as_num(((td.meta or {}).get("dispatch_lag_s") or {}).get("max")
                                   if isinstance((td.meta or {}).get("dispatch_lag_s"), dict) else None),
    })
    if row["client_cpu_util"] is not None and row["client_cpu_util"] >= CLIENT_CPU_WARN:
        flags.append(f"load generator used {row['client_cpu_util'] * 100:.0f}% of a CPU core: the client may be "
                     "the bottleneck")
    if tm["requests"] == 0:
        flags.append("no measured request records")
    if tm["failed"]:
        flags.append(f"{tm['failed']} of {tm['requests']} requests failed")
    if tm["requests"] and tm["completed"] == 0:
        flags.append("no completed request")
    if tm["requests"] != td.prompts:
        flags.append(f"{tm['requests']} measured requests recorded, {td.prompts} planned")
    if tm["output_len_mismatches"]:
        flags.append(f"{tm['output_len_mismatches']} output(s) not of max_tokens length")
    if tm["output_throughput"] is None and tm["requests"]:
        flags.append("output throughput not measured: " + tm["absent"].get("output_throughput", "unknown reason"))
    flags.extend(td.load_problems)
    # The runner's summary.json is checked against the recomputation, never used.
    s = td.summary or {}
    diffs = []
    for k in ("requests", "completed", "failed"):
        if k in s and s[k] != tm[k]:
            diffs.append(k)
    for k in ("output_throughput", "request_throughput"):
        a, b = s.get(k), tm[k]
        if k in s and not ((a is None and b is None) or (a is not None and b is not None and math.isclose(a, b, rel_tol=1e-9))):
            diffs.append(k)
    if diffs:
        flags.append("summary.json disagrees with the records on " + ", ".join(diffs) + " (records used)")
    mt = (td.meta or {}).get("trial")
    if isinstance(mt, dict) and any(mt.get(k) != v for k, v in (("id", td.id), ("point", td.point), ("repeat", td.repeat))):
        flags.append("meta.json names a different trial than the plan")
    row["flags"] = flags
    return row


def latency_stats(percentiles: Sequence[float]) -> list[str]:
    """Statistics shown per latency metric: mean, median (unless p50 is asked for anyway), the percentiles."""
    pcts = list(percentiles)
    return ["mean"] + ([] if 50 in pcts else ["median"]) + [pct_key(p) for p in pcts]


def _latency_stats(spec: Spec) -> list[str]:
    return latency_stats(spec.analysis.percentiles)


def point_row(point: int, trials: list[TrialData], rows: dict[str, dict], spec: Spec) -> dict:
    trials = sorted(trials, key=lambda t: t.repeat)
    cv_kind = spec.analysis.cv
    present = [t for t in trials if t.present]
    missing = [t.id for t in trials if not t.present]
    vals = [(t.repeat, rows[t.id]["output_throughput"]) for t in present if rows[t.id]["output_throughput"] is not None]
    xs = [v for _, v in vals]
    absent: dict[str, str] = {}
    mean = mean_of(xs)
    std = std_of(xs, cv_kind)
    if not xs:
        absent["output_throughput"] = "no repeat of this point has a measured output throughput"
    elif len(xs) == 1:
        absent["output_throughput_spread"] = "single measured repeat: std, CV and range cannot be estimated"
    tput = {
        "values": [{"repeat": r, "value": v} for r, v in vals],
        "n": len(xs), "mean": mean, "std": std, "std_kind": cv_kind, "cv": rel_of(std, mean),
        "min": min(xs) if xs else None, "max": max(xs) if xs else None,
        "rel_range": rel_of(max(xs) - min(xs), mean) if len(xs) >= 2 else None,
    }
    rts = [rows[t.id]["request_throughput"] for t in present if rows[t.id]["request_throughput"] is not None]
    stats = _latency_stats(spec)
    pooled_records = [r for t in present for r in t.records]
    pooled_tm = trial_metrics(pooled_records, list(spec.analysis.percentiles)) if pooled_records else None
    latency: dict[str, Any] = {}
    unmeasured: list[str] = []
    for m in LATENCY_METRICS:
        per = [rows[t.id]["latency"][m] for t in present if rows[t.id]["latency"].get(m)]
        mor = None
        if per:
            mor = {"n_trials": len(per)}
            for st in stats:
                mor[st] = mean_of([d[st] for d in per])
        latency[m] = {"mean_over_repeats": mor, "pooled": pooled_tm[m + "_ms"] if pooled_tm else None}
        if mor is None:
            unmeasured.append(m)
    if unmeasured:
        absent["latency"] = "no trial of this point measured " + ", ".join(unmeasured)
    counts = {}
    for k in ("requests", "completed", "failed", "output_len_mismatches", "chunk_usage_mismatches"):
        counts[k] = sum(rows[t.id][k] for t in present) if present else None
    pts = pooled_tm["prompt_tokens_server"] if pooled_tm else None
    nominal_lens = [float(r.prompt_len) for r in pooled_records if r.phase == "measure"]
    flags = [f"{t}: missing" for t in missing]
    for t in present:
        for f in rows[t.id]["flags"]:
            flags.append(f"{t.id}: {f}")
    return {
        "point": point, "label": label(point),
        "repeats_planned": len(trials), "repeats_present": len(present), "repeats_measured": len(xs),
        "trials": [t.id for t in trials], "missing": missing,
        "output_throughput": tput,
        "request_throughput": {"n": len(rts), "mean": mean_of(rts)},
        "latency": latency,
        **counts,
        "prompt_tokens": {"input_len_nominal": spec.workload.input_len,
                          "nominal_mean": mean_of(nominal_lens),
                          "server": pts},
        "flags": flags, "absent": absent,
    }


def fmt(x: Any, kind: str) -> str:
    """Fixed-decimal text for one CSV cell; None -> '' (not measured)."""
    if x is None:
        return ""
    if kind == "count":
        return str(int(x))
    if kind == "text":
        return str(x)
    if kind == "bool":
        return "yes" if x else "no"
    d = CSV_DECIMALS[kind]
    v = x * 100 if kind == "pct" else x
    s = f"{v:.{d}f}"
    if s.startswith("-") and float(s) == 0:
        s = s[1:]
    return s


def _csv(header: list[tuple[str, str]], rows: Iterable[list[Any]]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow([h for h, _ in header])
    for r in rows:
        w.writerow([fmt(v, k) for v, (_, k) in zip(r, header)])
    return buf.getvalue()


def _flags(xs: Sequence[str]) -> str:
    return "; ".join(xs)


def csv_tables(res: dict) -> dict[str, str]:
    """File name -> CSV text; stable column order."""
    stats = latency_stats(res["spec"]["percentiles"])
    out: dict[str, str] = {}

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
    within = {w["trial"]: w for w in res["within"]["trials"]}
    rows = []
    for t in res["trials"]:
        w = within[t["id"]]
        st = w.get("steady") or {}
        r = [t["index"], t["id"], t["repeat"], t["point"], t["position"], t["status"], t["requests_planned"],
             t["requests"], t["completed"], t["failed"], t["duration_s"], t["output_throughput"],
             t["request_throughput"], t["total_output_tokens"], t["output_len_mismatches"],
             t["chunk_usage_mismatches"], t["prompt_len_nominal_mean"], (t["prompt_tokens_server"] or {}).get("mean"),
             t["client_cpu_util"], t["dispatch_lag_max_s"], st.get("throughput"), st.get("start_s"), st.get("end_s"),
             st.get("steady") if st else None, st.get("trend_rho"), st.get("trend_p"),
             (w.get("waves") or {}).get("note", "")]
        for m in REPORTED_METRICS:
            d = t["latency"].get(m) or {}
            r += [d.get(s) for s in stats]
        r.append(_flags(t["flags"] + [f"{k}: {v}" for k, v in sorted(t["absent"].items()) if k != "trial"]))
        rows.append(r)
    out["trials.csv"] = _csv(h, rows)

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
    wp = {w["point"]: w for w in res["within"]["points"]}
    rows = []
    for p in res["points"]:
        w = wp[p["point"]]
        tp = p["output_throughput"]
        srv = p["prompt_tokens"]["server"] or {}
        tele = p["telemetry_sustained_mean"]
        rows.append([p["point"], p["repeats_planned"], p["repeats_present"], p["repeats_measured"], tp["mean"],
                     tp["std"], tp["std_kind"], tp["cv"], tp["min"], tp["max"], tp["rel_range"],
                     p["request_throughput"]["mean"], p["requests"], p["completed"], p["failed"],
                     p["output_len_mismatches"], p["chunk_usage_mismatches"], p["prompt_tokens"]["input_len_nominal"],
                     srv.get("min"), srv.get("max"), srv.get("mean"), tele["running"], tele["waiting"],
                     tele["kv_cache_usage"], w["steady_throughput_mean"], w["steady_trials"], w["wave_trials"],
                     (w["regimes"] or {}).get("note", ""), " ".join(p["missing"]),
                     _flags(p["flags"] + [f"{k}: {v}" for k, v in sorted(p["absent"].items())])])
    out["points.csv"] = _csv(h, rows)

    h = [("trial", "text"), ("t_s", "s"), ("output_tok_s", "tok_s"), ("in_flight", "gauge"), ("running", "gauge"),
         ("waiting", "gauge"), ("in_steady_window", "bool")]
    rows = []
    for w in res["within"]["trials"]:
        if w["status"] != "present":
            continue
        se, st = w["series"], w["steady"]
        for i, t0 in enumerate(se["t"]):
            rows.append([w["trial"], t0, se["output_tps"][i], se["in_flight"][i],
                         se["running"][i] if se["running"] else None, se["waiting"][i] if se["waiting"] else None,
                         st["start_s"] <= t0 < st["end_s"]])
    out["timeseries.csv"] = _csv(h, rows)

    h = [("point", "count"), ("metric", "text"), ("method", "text"), ("n", "count")] + \
        [(f"{s}_ms", "ms") for s in stats] + [("flags", "text")]
    rows = []
    for p in res["points"]:
        for m in REPORTED_METRICS:
            for method, key in (("mean_over_repeats", "n_trials"), ("pooled", "n")):
                d = p["latency"][m][method] or {}
                rows.append([p["point"], m, method, d.get(key)] + [d.get(s) for s in stats] + [_flags(p["flags"])])
    out["point_latency.csv"] = _csv(h, rows)

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
    for fam, key in (("declared", "comparisons"), ("adjacent", "adjacent")):
        for c in res[key]:
            nz, ci, cj = c["noise"], c["ci95"] or [None, None], c["ci_adjusted"] or [None, None]
            ss = c["sessions"] or {}
            rows.append([c["name"], fam, c["a"], c["b"], c["repeats_planned"], c["pairs"], c["unit"], c["n_units"],
                         c["wins_a"], c["wins_b"], c["ties"], c["effect"], ci[0], ci[1], c["p_value"],
                         c["p_adjusted"], cj[0], cj[1], c["ci_adjusted_level"], c["mde"], c["sign_p"], c["perm_p"], c["verdict"], c["statement"],
                         c["mean_diff"], c["min_diff"], c["max_diff"], nz["a_cv"], nz["b_cv"], nz["cv_kind"],
                         nz["a_rel_range"], nz["b_rel_range"], ss.get("sessions"), ss.get("sd_within_log"),
                         ss.get("sd_between_log"), c["test"], _flags(c["flags"])])
    out["comparisons.csv"] = _csv(h, rows)

    h = [("comparison", "text"), ("repeat", "count"), ("session", "count"), ("trial_a", "text"),
         ("trial_b", "text"), ("a_tok_s", "tok_s"), ("b_tok_s", "tok_s"), ("diff_pct", "pct"), ("winner", "text"),
         ("flags", "text")]
    rows = []
    for c in res["comparisons"]:
        for r in c["repeats"]:
            rows.append([c["name"], r["repeat"], r["session"], r["trial_a"], r["trial_b"], r["a"], r["b"], r["diff"],
                         r["winner"], _flags(r["flags"])])
    out["paired.csv"] = _csv(h, rows)

    h = [("comparison", "text"), ("metric", "text"), ("stat", "text"), ("unit", "text"), ("a", "text"),
         ("b", "text"), ("change_pct", "pct"), ("better", "text"), ("pooled_a", "text"), ("pooled_b", "text"),
         ("pooled_change_pct", "pct"), ("flags", "text")]
    rows = []
    for c in res["comparisons"]:
        for r in c["latency_side_by_side"]:
            k = "tok_s" if r["unit"] == "tok/s" else "ms"
            rows.append([c["name"], r["metric"], r["stat"], r["unit"], fmt(r["a"], k), fmt(r["b"], k), r["change"],
                         r["better"], fmt(r["pooled_a"], k), fmt(r["pooled_b"], k), r["pooled_change"],
                         _flags(r["flags"])])
    out["latency_side_by_side.csv"] = _csv(h, rows)

    dom = res["dominance"]
    pmap = {p["point"]: p for p in res["points"]}
    held = {(d["dominant"], d["dominated"]): d for d in dom["pairs"]}
    h = [("point", "count"), ("output_throughput_mean_tok_s", "tok_s"), ("dominated", "bool"),
         ("dominated_by", "text"), ("held_in_repeats", "text"), ("verdict", "text"), ("dominates", "text"),
         ("tied_with", "text"), ("not_compared", "text"), ("note", "text"), ("flags", "text")]
    rows = []
    for e in dom["points"]:
        hr = " ".join(f"{label(q)}:{held[(q, e['point'])]['held_in_repeats']}/{held[(q, e['point'])]['repeats_planned']}"
                      for q in e["dominated_by"])
        vd = " ".join(f"{label(q)}:{held[(q, e['point'])]['verdict']}" for q in e["dominated_by"])
        rows.append([e["point"], pmap[e["point"]]["output_throughput"]["mean"], e["dominated"],
                     " ".join(label(q) for q in e["dominated_by"]), hr, vd, " ".join(label(q) for q in e["dominates"]),
                     " ".join(label(q) for q in e["tied_with"]), " ".join(label(q) for q in e["not_compared"]),
                     e.get("note", ""), _flags(e["flags"])])
    out["dominance.csv"] = _csv(h, rows)

    o = res["ordering"]
    h = [("scope", "text"), ("statement", "text"), ("complete", "bool"), ("matches_mean", "text")]
    rows = [["mean", o["statement"], o["statement"] is not None, ""],
            ["supported (~: not a finding)", o["supported_statement"], o["supported_statement"] is not None, ""]]
    for r in o["repeats"]:
        rows.append([f"repeat {r['repeat']}", r["statement"] if r["statement"] else "", r["complete"],
                     "" if r["matches"] is None else ("yes" if r["matches"] else "no")])
    out["ordering.csv"] = _csv(h, rows)

    h = [("trial", "text"), ("repeat", "count"), ("point", "count"), ("position", "count"), ("status", "text"),
         ("samples", "count"), ("sample_interval_s", "s"), ("plateau_start_s", "s"), ("plateau_end_s", "s"),
         ("running_sustained", "gauge"), ("waiting_sustained", "gauge"), ("kv_cache_usage_sustained", "frac"),
         ("running_max", "gauge"), ("waiting_max", "gauge"), ("kv_cache_usage_max", "frac"),
         ("generation_tokens_delta", "count"), ("prompt_tokens_delta", "count"), ("preemptions_delta", "count"),
         ("absent", "text")]
    rows = []
    for t in res["telemetry"]:
        if t["status"] != "present":
            rows.append([t["trial"], t["repeat"], t["point"], t["position"], t["status"]] + [None] * 13 + [t["absent"]])
            continue
        su, mx, de = t["sustained"], t["max"], t["delta"]
        rows.append([t["trial"], t["repeat"], t["point"], t["position"], t["status"], t["samples"],
                     t["sample_interval_s"], t["plateau_s"][0], t["plateau_s"][1], su["running"], su["waiting"],
                     su["kv_cache_usage"], mx["running"], mx["waiting"], mx["kv_cache_usage"],
                     de["generation_tokens"], de["prompt_tokens"], de["preemptions"],
                     _flags([f"{k}: {v}" for k, v in sorted(t["absent_keys"].items())])])
    out["telemetry.csv"] = _csv(h, rows)

    g = res["goodput"]
    if g["absent"] is None:
        h = [("trial", "text"), ("repeat", "count"), ("point", "count"), ("position", "count"), ("requests", "count"),
             ("meeting_slos", "count"), ("undetermined", "count"), ("attainment_pct", "pct"),
             ("goodput_req_s", "req_s"), ("flags", "text")]
        rows = [[t["trial"], t["repeat"], t["point"], t["position"], t["requests"], t["meeting"], t["undetermined"],
                 t["attainment"], t["goodput_rps"], _flags(t["flags"] + ([t["absent"]] if t["absent"] else []))]
                for t in g["trials"]]
        out["goodput.csv"] = _csv(h, rows)
    return out
