"""Per-trial and per-point rows of the analysis, and the column kinds of its tables.

The tables themselves (DataFrames, and the CSVs written from them) are built in
evidence.analysis.dataframes. CSVs use fixed decimals per column kind (CSV_DECIMALS) and show
relative values in percent (columns ending in _pct). An empty cell is a value that could not be
measured; the row's flags/absent column says why.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from evidence.analysis.load import TrialData
from evidence.analysis.model import Analysis, as_analysis
from evidence.analysis.numbers import as_num, label, mean_of, rel_of, std_of
from evidence.metrics import LATENCY_METRICS, METRICS, pct_key, trial_metrics
from evidence.spec.model import Spec


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


# meta.json key of a trial that has a results file's aggregates and no request records (`evidence import
# vllm-bench` of a file saved without --save-detailed): its summary.json, in trial_metrics' shape with the
# file's own numbers, is used where a trial-level value suffices; the key's value says so in the trial's flags.
AGGREGATE_ONLY = "aggregate_only"


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
    tm = trial_metrics(td.records, pcts)
    measured = [r for r in td.records if r.phase == "measure"]
    agg = (td.meta or {}).get(AGGREGATE_ONLY) if not td.records and isinstance(td.summary, dict) else None
    if agg:
        tm = td.summary  # the file's own aggregates, in trial_metrics' shape (no records to compute them from)
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
    if agg:
        row[AGGREGATE_ONLY] = str(agg)
        flags.append(f"aggregate-only: {agg}")
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
    agg = [t.id for t in present if rows[t.id].get(AGGREGATE_ONLY)]
    # pooling only the trials that have records would pass a part for the whole
    pooled_tm = trial_metrics(pooled_records, list(spec.analysis.percentiles)) if pooled_records and not agg else None
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
    if agg:
        absent["latency_pooled"] = (f"{', '.join(agg)}: aggregate-only (no request records to pool); "
                                    "mean_over_repeats averages each file's own statistics")
    counts = {}
    for k in ("requests", "completed", "failed", "output_len_mismatches", "chunk_usage_mismatches"):
        vs = [rows[t.id][k] for t in present]
        counts[k] = sum(vs) if present and None not in vs else None  # None: an aggregate-only trial lacks it
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


# every table (the CSV file's stem); goodput only when the spec sets SLOs
TABLES = ("comparisons", "dominance", "goodput", "latency_side_by_side", "ordering", "paired", "point_latency",
          "point_latency_intervals", "points", "telemetry", "timeseries", "trials")


def table_names(res: Analysis | dict) -> list[str]:
    """The names of the tables frames(res) gives, in its (sorted) order: goodput only when the spec sets SLOs
    (its goodput has no `absent`)."""
    absent = as_analysis(res).goodput.absent
    return [n for n in sorted(TABLES) if n != "goodput" or absent is None]


def csv_names(res: Analysis | dict) -> list[str]:
    """The CSV file names csv_tables(res) gives, sorted, without building or formatting any table."""
    return sorted(f"{name}.csv" for name in table_names(res))
