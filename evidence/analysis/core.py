"""Run directory -> analysis tables: a pure function of the raw files.

`analyze_run(run_dir)` reads only raw inputs (spec.resolved.json, plan.json,
run.json, provenance.json, engine/resolved.json, trials/*/{requests.jsonl,
telemetry.jsonl, meta.json, summary.json}); it never reads analysis/,
figures/ or report/, never the clock, uses no randomness, and writes no
absolute path. Built twice from the same raw files, the same bytes.

Every metric comes from `evidence.metrics` (one definition per metric); this
module only aggregates. The methods, as recorded in analysis.json "methods":

- Per trial: `metrics.trial_metrics` on the trial's measured records, with the
  spec's percentiles (numpy linear interpolation, vLLM's).
- Per point, throughput: mean over the repeats whose throughput was measured;
  std with the spec's `analysis.cv` (population: / n; sample: / (n - 1));
  CV = std / mean; relative range = (max - min) / mean. One measured repeat:
  std, CV and range are null ("single measured repeat"), never 0.
- Per point, latency, two methods side by side:
  "mean_over_repeats": each statistic (mean, median, pXX) computed within a
  trial (pooling that trial's requests), then averaged over the repeats;
  "pooled": all repeats' records pooled into one distribution.
  The article's numbers follow "mean_over_repeats"; tables name the method.
- Paired comparison a vs b: per repeat d_r = (T_a - T_b) / T_b over repeats
  where both trials have a measured throughput; mean, min, max of d_r; wins.
- Spread of a comparison: S = max(RR_a, RR_b) where RR_p = (max - min) / mean
  of point p's measured throughputs over its repeats (all measured repeats,
  not only the paired ones). CVs are shown next to it. See `verdict_for`.
- Dominance, ordering, telemetry plateau, SLO goodput: see their functions.

Numbers: analysis.json stores floats rounded to 9 decimal places (so the last
bits of a summation never change the bytes); relative values there are
fractions. CSVs use fixed decimals per column kind (see CSV_DECIMALS) and show
relative values in percent (columns ending in _pct). An empty CSV cell is a
value that could not be measured; the row's flags/absent column says why.
"""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from evidence.canon import dumps, write_atomic
from evidence.metrics import LATENCY_METRICS, METRIC_DOCS, PERCENTILE_METHOD, pct_key, trial_metrics
from evidence.spec.plan import make_plan
from evidence.records import RequestRecord
from evidence.spec.model import Spec, spec_from_json

SCHEMA = "evidence.analysis/1"
REPORTED_METRICS = ("ttft", "tpot", "itl", "e2el")  # latency metrics given for every point and trial
PLATEAU_TRIM = 0.2  # telemetry plateau: drop the first and last 20% of the measured interval
PLATEAU_MIN_SAMPLES = 3
JSON_DECIMALS = 9
CLIENT_CPU_WARN = 0.9  # flag a trial whose load generator used >= 90% of one core (meta.json client_cpu_util)

# Fixed decimals per column kind (CSV). "count" columns are integers.
CSV_DECIMALS = {
    "tok_s": 2,  # output throughput, tok/s
    "req_s": 4,  # request throughput / goodput, req/s
    "ms": 3,  # latencies
    "pct": 3,  # relative values, in percent
    "s": 3,  # seconds
    "gauge": 2,  # telemetry request counts (medians can be x.5)
    "frac": 4,  # KV cache usage as the server reports it (vLLM: a fraction 0-1)
    "tokens": 2,  # mean token counts
}

GAUGES = (("num_requests_running", "running"), ("num_requests_waiting", "waiting"),
          ("kv_cache_usage_perc", "kv_cache_usage"))
COUNTERS = (("generation_tokens_total", "generation_tokens"), ("prompt_tokens_total", "prompt_tokens"),
            ("num_preemptions_total", "preemptions"))

METHODS = {
    "trial_metrics": "each trial's measured requests (phase 'measure') through evidence.metrics.trial_metrics; "
                     f"percentiles by numpy '{PERCENTILE_METHOD}' interpolation (vLLM's)",
    "throughput_over_repeats": "mean over the repeats whose output throughput was measured; std per spec.analysis.cv "
                               "(population divides by n, sample by n - 1); CV = std / mean; relative range = "
                               "(max - min) / mean; with one measured repeat std, CV and range are null, never 0",
    "latency_mean_over_repeats": "each statistic (mean, median, percentiles) computed within a trial by pooling that "
                                 "trial's requests, then the arithmetic mean of that statistic over the point's repeats",
    "latency_pooled": "all of a point's repeats pooled into one distribution, then the statistic",
    "paired_difference": "per repeat r with both trials measured: d_r = (T_a - T_b) / T_b on output throughput; "
                         "mean, min and max over those repeats; a wins repeat r when d_r > 0, b when d_r < 0",
    "spread": "S = max(RR_a, RR_b), RR_p = (max - min) / mean of point p's measured output throughputs over all "
              "its repeats (the run-to-run relative range); the two CVs are shown beside it",
    "verdict": "0 paired repeats: 'no data'; 1: 'single repeat: no claim possible'; |mean d| <= S: 'no finding "
               "(inside run-to-run spread of S)'; |mean d| > S and every d_r of one sign: 'Ca > Cb in every repeat' "
               "(or Cb > Ca); otherwise 'no finding (sign not consistent ...)'. Missing or failed trials are named "
               "in the verdict's flags, and a finding over fewer repeats than planned says so",
    "latency_change": "relative change going from a to b: (value_b - value_a) / value_a",
    "dominance": "criteria: mean output throughput (higher is better) and, for every spec.analysis.latency_metrics, "
                 "its mean and each spec.analysis.percentiles value (mean over repeats; lower is better). Q dominates P "
                 "when Q is >= P on throughput, <= P on every latency criterion, and strictly better on at least one; "
                 "equal on all criteria is a tie (neither dominates); a point with an unmeasured criterion is not "
                 "compared. 'held_in_repeats' checks the same rule on each repeat's own trials",
    "ordering": "adjacent points in ascending concurrency compared on mean output throughput ('<', '>' or '='); "
                "each repeat's statement is built from that repeat's trials; 'supported' replaces a symbol by '~' "
                "where the paired verdict between the two points is not a finding",
    "telemetry_plateau": f"measured interval = first send to last completion of the trial; the plateau drops the first "
                         f"and last {int(PLATEAU_TRIM * 100)}% of it (ramp-up and drain); sustained value = median of "
                         f"the samples inside the plateau (needs >= {PLATEAU_MIN_SAMPLES}); max over all samples; "
                         "counters: last sample minus first sample of the trial's telemetry",
    "goodput": "a measured request meets the SLOs when it completed and, for every metric in spec.analysis.slos_ms, "
               "its value(s) from evidence.metrics are all <= the bound (ITL: every gap of the request); a request "
               "with no value for an SLO metric does not count as meeting it (counted as undetermined); goodput = "
               "meeting requests / trial duration; attainment = meeting / measured requests (failed ones included)",
    "numbers": f"analysis.json floats rounded to {JSON_DECIMALS} decimals, relative values as fractions; CSV fixed "
               "decimals per column kind (CSV_DECIMALS), relative values in percent (_pct); empty = not measured",
}


class NotARunDir(ValueError):
    """The path is not a run directory (one paragraph, for the user)."""


# ----------------------------------------------------------------- loading ----


@dataclass
class TrialData:
    id: str
    index: int
    repeat: int
    point: int
    position: int
    prompts: int
    present: bool
    records: list[RequestRecord] = field(default_factory=list)
    telemetry: list[dict] | None = None
    telemetry_absent: str | None = None
    meta: dict | None = None
    summary: dict | None = None
    load_problems: list[str] = field(default_factory=list)


@dataclass
class RunData:
    spec: Spec
    plan: dict
    run_info: dict | None
    provenance: dict | None
    provenance_files: list[str]
    engine_resolved: dict | None
    engine_resolved_files: list[str]
    engine_resolved_later: list[dict]
    trials: list[TrialData]
    unexpected_trials: list[str]
    profile_files: list[str]
    load_problems: list[str]

    @property
    def run_id(self) -> str:
        return str((self.run_info or {}).get("run_id") or "")


def _read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def _numbered(folder: Path, stem: str) -> list[Path]:
    """stem.json, stem-2.json, stem-3.json ... in numeric order (the runner's numbering)."""
    out = []
    if (folder / f"{stem}.json").is_file():
        out.append((1, folder / f"{stem}.json"))
    if folder.is_dir():
        for p in folder.glob(f"{stem}-*.json"):
            tail = p.stem[len(stem) + 1:]
            if tail.isdigit():
                out.append((int(tail), p))
    return [p for _, p in sorted(out)]


def load_run(run_dir: Path) -> RunData:
    """Read the raw files of a run directory (and nothing it derived)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise NotARunDir(f"{run_dir} is not a folder. Give a run directory (runs/<run-id>/) that `evidence run` created; "
                         "it holds spec.resolved.json, plan.json and trials/.")
    missing = [n for n in ("spec.resolved.json", "plan.json") if not (run_dir / n).is_file()]
    if missing:
        raise NotARunDir(f"{run_dir} is not a run directory: it has no {' and no '.join(missing)}. Give a folder under "
                         "runs/ that `evidence run` created (for a release, its run is under data/raw/<run-id>/).")
    problems: list[str] = []
    try:
        spec = spec_from_json((run_dir / "spec.resolved.json").read_text(encoding="utf-8"))
    except Exception as e:  # pydantic ValidationError or bad JSON: the run dir is unusable
        raise NotARunDir(f"{run_dir}/spec.resolved.json could not be read as a spec ({str(e).splitlines()[0]}); "
                         "the run directory is damaged or was written by an incompatible version.") from None
    try:
        plan = _read_json(run_dir / "plan.json")
        plan_trials = plan["trials"]
    except Exception as e:
        raise NotARunDir(f"{run_dir}/plan.json is not a readable plan ({e}); the run directory is damaged.") from None
    run_info = _read_json(run_dir / "run.json") if (run_dir / "run.json").is_file() else None
    if run_info is None:
        problems.append("run.json is missing: run id and status unknown")
    prov_files = _numbered(run_dir, "provenance")
    provenance = _read_json(prov_files[0]) if prov_files else None
    res_files = _numbered(run_dir / "engine", "resolved")
    engine_resolved = _read_json(res_files[0]) if res_files else None
    later = [_read_json(p) for p in res_files[1:]]

    trials: list[TrialData] = []
    planned_ids = set()
    for t in plan_trials:
        tid = str(t["id"])
        planned_ids.add(tid)
        td = TrialData(tid, int(t["index"]), int(t["repeat"]), int(t["point"]), int(t["position"]), int(t["prompts"]),
                       present=False)
        d = run_dir / "trials" / tid
        if (d / "summary.json").is_file():
            td.present = True
            _load_trial(td, d)
        trials.append(td)
    unexpected = []
    tdir = run_dir / "trials"
    if tdir.is_dir():
        unexpected = sorted(p.name for p in tdir.iterdir()
                            if p.is_dir() and not p.name.startswith(".") and (p / "summary.json").is_file()
                            and p.name not in planned_ids)
    profile_files = []
    if (run_dir / "profile").is_dir():
        profile_files = sorted(p.relative_to(run_dir).as_posix() for p in (run_dir / "profile").rglob("*") if p.is_file())
    return RunData(spec, plan, run_info, provenance, [p.relative_to(run_dir).as_posix() for p in prov_files],
                   engine_resolved, [p.relative_to(run_dir).as_posix() for p in res_files], later,
                   trials, unexpected, profile_files, problems)


def _load_trial(td: TrialData, d: Path) -> None:
    td.summary = _read_json(d / "summary.json")
    if (d / "meta.json").is_file():
        td.meta = _read_json(d / "meta.json")
    else:
        td.load_problems.append("meta.json is missing")
    rq = d / "requests.jsonl"
    if rq.is_file():
        for n, line in enumerate(rq.read_text(encoding="utf-8").splitlines(), start=1):
            if not line.strip():
                continue
            try:
                td.records.append(RequestRecord.from_dict(json.loads(line)))
            except (ValueError, TypeError) as e:
                td.load_problems.append(f"requests.jsonl line {n} unreadable ({type(e).__name__})")
    else:
        td.load_problems.append("requests.jsonl is missing")
    tl = d / "telemetry.jsonl"
    tmeta = (td.meta or {}).get("telemetry")
    why = tmeta.get("reason") if isinstance(tmeta, dict) and tmeta.get("reason") else None
    if not tl.is_file():
        td.telemetry_absent = "no telemetry.jsonl in the trial" + (f" ({why})" if why else
                                                                   " (the server's metrics were not sampled)")
        return
    rows = []
    for line in tl.read_text(encoding="utf-8").splitlines():
        if line.strip():
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if isinstance(obj, dict) and isinstance(obj.get("t_s"), (int, float)):
                rows.append(obj)
    rows.sort(key=lambda r: r["t_s"])
    td.telemetry = rows
    if not rows:
        td.telemetry_absent = "telemetry.jsonl holds no samples" + (f" ({why})" if why else "")


# ------------------------------------------------------------- arithmetic ----


def _mean(xs: Sequence[float]) -> float | None:
    return math.fsum(xs) / len(xs) if xs else None


def _std(xs: Sequence[float], kind: str) -> float | None:
    n = len(xs)
    if n < 2:
        return None
    m = math.fsum(xs) / n
    ss = math.fsum((x - m) ** 2 for x in xs)
    return math.sqrt(ss / (n if kind == "population" else n - 1))


def _median(xs: Sequence[float]) -> float | None:
    s = sorted(xs)
    n = len(s)
    if n == 0:
        return None
    return float(s[n // 2]) if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2.0


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) else None


def _rel(num: float | None, den: float | None) -> float | None:
    if num is None or den is None or den == 0:
        return None
    return num / den


def _round(obj: Any) -> Any:
    if isinstance(obj, bool) or obj is None:
        return obj
    if isinstance(obj, float):
        if not math.isfinite(obj):
            return None
        v = round(obj, JSON_DECIMALS)
        return 0.0 if v == 0 else v
    if isinstance(obj, dict):
        return {k: _round(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_round(v) for v in obj]
    return obj


def pct_text(x: float | None, decimals: int = 3, signed: bool = False) -> str:
    """A fraction as percent text, e.g. 0.04664 -> '4.664%' (signed: '+4.664%'); None -> 'n/a'."""
    if x is None:
        return "n/a"
    v = x * 100
    if round(v, decimals) == 0:
        v = 0.0
        signed = False
    return (f"{v:+.{decimals}f}%" if signed else f"{v:.{decimals}f}%")


def label(point: int) -> str:
    return f"C{point}"


# ----------------------------------------------------------------- trials ----


def _trial_row(td: TrialData, spec: Spec) -> dict:
    pcts = list(spec.analysis.percentiles)
    row: dict[str, Any] = {
        "id": td.id, "index": td.index, "repeat": td.repeat, "point": td.point, "position": td.position,
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
        "prompt_len_nominal_mean": _mean([float(r.prompt_len) for r in measured]),
        "prompt_tokens_server": tm["prompt_tokens_server"],
        "latency": {m: tm[m + "_ms"] for m in LATENCY_METRICS},
        "absent": dict(tm["absent"]),
        "client_cpu_util": _num((td.meta or {}).get("client_cpu_util")),
        "dispatch_lag_max_s": _num(((td.meta or {}).get("dispatch_lag_s") or {}).get("max")
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


# ----------------------------------------------------------------- points ----


def latency_stats(percentiles: Sequence[float]) -> list[str]:
    """Statistics shown per latency metric: mean, median (unless p50 is asked for anyway), the percentiles."""
    pcts = list(percentiles)
    return ["mean"] + ([] if 50 in pcts else ["median"]) + [pct_key(p) for p in pcts]


def _latency_stats(spec: Spec) -> list[str]:
    return latency_stats(spec.analysis.percentiles)


def _point_row(point: int, trials: list[TrialData], rows: dict[str, dict], spec: Spec) -> dict:
    trials = sorted(trials, key=lambda t: t.repeat)
    cv_kind = spec.analysis.cv
    present = [t for t in trials if t.present]
    missing = [t.id for t in trials if not t.present]
    vals = [(t.repeat, rows[t.id]["output_throughput"]) for t in present if rows[t.id]["output_throughput"] is not None]
    xs = [v for _, v in vals]
    absent: dict[str, str] = {}
    mean = _mean(xs)
    std = _std(xs, cv_kind)
    if not xs:
        absent["output_throughput"] = "no repeat of this point has a measured output throughput"
    elif len(xs) == 1:
        absent["output_throughput_spread"] = "single measured repeat: std, CV and range cannot be estimated"
    tput = {
        "values": [{"repeat": r, "value": v} for r, v in vals],
        "n": len(xs), "mean": mean, "std": std, "std_kind": cv_kind, "cv": _rel(std, mean),
        "min": min(xs) if xs else None, "max": max(xs) if xs else None,
        "rel_range": _rel(max(xs) - min(xs), mean) if len(xs) >= 2 else None,
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
                mor[st] = _mean([d[st] for d in per])
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
        "request_throughput": {"n": len(rts), "mean": _mean(rts)},
        "latency": latency,
        **counts,
        "prompt_tokens": {"input_len_nominal": spec.workload.input_len,
                          "nominal_mean": _mean(nominal_lens),
                          "server": pts},
        "flags": flags, "absent": absent,
    }


# -------------------------------------------------------------- comparisons ----


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


def _comparison(a: int, b: int, points: dict[int, dict], by_rp: dict[tuple[int, int], dict], repeats: int) -> dict:
    """Paired comparison from point rows and trial rows keyed by (repeat, point)."""
    pa, pb = points[a], points[b]
    per = []
    diffs = []
    flags: list[str] = []
    for r in range(1, repeats + 1):
        ta, tb = by_rp.get((r, a)), by_rp.get((r, b))
        va = ta["output_throughput"] if ta and ta["status"] == "present" else None
        vb = tb["output_throughput"] if tb and tb["status"] == "present" else None
        d = _rel(va - vb, vb) if (va is not None and vb is not None) else None
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
        "mean_diff": _mean(diffs), "min_diff": min(diffs) if diffs else None, "max_diff": max(diffs) if diffs else None,
        "wins_a": sum(1 for d in diffs if d > 0), "wins_b": sum(1 for d in diffs if d < 0),
        "ties": sum(1 for d in diffs if d == 0),
        "spread": {"value": spread, "a_rel_range": ra, "b_rel_range": rb,
                   "a_cv": pa["output_throughput"]["cv"], "b_cv": pb["output_throughput"]["cv"],
                   "cv_kind": pa["output_throughput"]["std_kind"], "definition": METHODS["spread"]},
        "verdict_kind": kind, "verdict": text, "flags": flags,
    }


def paired_comparison(res: dict, a: int, b: int) -> dict:
    """The paired comparison of any two points of an analysis (as in res["comparisons"], without latency)."""
    points = {p["point"]: p for p in res["points"]}
    if a not in points or b not in points:
        raise KeyError(f"point {a if a not in points else b} is not a point of this run")
    by_rp = {(t["repeat"], t["point"]): t for t in res["trials"]}
    return _round(_comparison(a, b, points, by_rp, res["spec"]["repeats"]))


def _side_by_side(comp: dict, points: dict[int, dict], spec: Spec) -> list[dict]:
    a, b = comp["a"], comp["b"]
    pa, pb = points[a], points[b]
    out = []
    ta, tb = pa["output_throughput"]["mean"], pb["output_throughput"]["mean"]
    flags = pa["flags"] + pb["flags"]
    out.append({"metric": "output_throughput", "stat": "mean", "unit": "tok/s", "a": ta, "b": tb,
                "change": _rel(tb - ta, ta) if (ta is not None and tb is not None) else None,
                "better": _better(ta, tb, higher=True), "pooled_a": None, "pooled_b": None, "pooled_change": None,
                "flags": flags})
    for m in spec.analysis.latency_metrics:
        for st in ["mean"] + [pct_key(p) for p in spec.analysis.percentiles]:
            la, lb = pa["latency"][m]["mean_over_repeats"], pb["latency"][m]["mean_over_repeats"]
            qa, qb = pa["latency"][m]["pooled"], pb["latency"][m]["pooled"]
            va, vb = (la or {}).get(st), (lb or {}).get(st)
            wa, wb = (qa or {}).get(st), (qb or {}).get(st)
            out.append({"metric": m, "stat": st, "unit": "ms", "a": va, "b": vb,
                        "change": _rel(vb - va, va) if (va is not None and vb is not None) else None,
                        "better": _better(va, vb, higher=False),
                        "pooled_a": wa, "pooled_b": wb,
                        "pooled_change": _rel(wb - wa, wa) if (wa is not None and wb is not None) else None,
                        "flags": flags})
    return out


def _better(va: float | None, vb: float | None, higher: bool) -> str | None:
    if va is None or vb is None:
        return None
    if va == vb:
        return "tie"
    return ("a" if va > vb else "b") if higher else ("a" if va < vb else "b")


# --------------------------------------------------------------- dominance ----


def _criteria(spec: Spec) -> list[tuple[str, str]]:
    out = [("output_throughput", "mean")]
    for m in spec.analysis.latency_metrics:
        for st in ["mean"] + [pct_key(p) for p in spec.analysis.percentiles]:
            out.append((m, st))
    return out


def dominates(q: Sequence[float], p: Sequence[float]) -> str:
    """Compare criterion vectors (first: throughput, higher better; rest: latencies, lower better).

    Returns 'dominates' (q dominates p), 'tie' (equal on all), or 'no'.
    """
    if list(q) == list(p):
        return "tie"
    if q[0] < p[0]:
        return "no"
    if any(qv > pv for qv, pv in zip(q[1:], p[1:])):
        return "no"
    return "dominates"  # >= everywhere and not all equal, so strictly better on one


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


def _dominance(points: list[dict], trials_by: dict[tuple[int, int], TrialData], rows: dict[str, dict],
               spec: Spec) -> dict:
    crit = _criteria(spec)
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
            rel = dominates(vecs[Q], vecs[P])
            if rel == "dominates":
                entry["dominated_by"].append(Q)
            elif rel == "tie":
                entry["tied_with"].append(Q)
            if dominates(vecs[P], vecs[Q]) == "dominates":
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
                held += dominates(vq, vp) == "dominates"
            pairs.append({"dominant": Q, "dominated": e["point"],
                          "statement": f"{label(e['point'])} is dominated by {label(Q)}",
                          "held_in_repeats": held, "repeats_compared": of, "repeats_planned": spec.sweep.repeats})
    return {"criteria": [f"{m} {st}" for m, st in crit],
            "points": out_points, "pairs": pairs,
            "frontier": [e["point"] for e in out_points if e["dominated"] is False]}


# ---------------------------------------------------------------- ordering ----


def _symbol(lo: float, hi: float) -> str:
    return "<" if lo < hi else ">" if lo > hi else "="


def _statement(pts: list[int], vals: dict[int, float | None]) -> str | None:
    if any(vals.get(p) is None for p in pts):
        return None
    s = label(pts[0])
    for lo, hi in zip(pts, pts[1:]):
        s += f" {_symbol(vals[lo], vals[hi])} {label(hi)}"
    return s


def _ordering(points: list[dict], trials_by, rows, comps_adj: list[dict], spec: Spec) -> dict:
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


# ---------------------------------------------------------------- telemetry ----


def _telemetry_row(td: TrialData, row: dict) -> dict:
    base = {"trial": td.id, "repeat": td.repeat, "point": td.point, "position": td.position}
    if not td.present:
        return {**base, "status": "missing", "absent": "trial missing"}
    if td.telemetry_absent:
        return {**base, "status": "absent", "absent": td.telemetry_absent}
    measured = [r for r in td.records if r.phase == "measure"]
    ends = [r.end_s for r in measured if r.end_s is not None]
    if not measured or not ends:
        return {**base, "status": "absent", "absent": "no completed request: the measured interval is undefined"}
    start, end = min(r.send_s for r in measured), max(ends)
    span = end - start
    w0, w1 = start + PLATEAU_TRIM * span, end - PLATEAU_TRIM * span
    rows = td.telemetry or []
    ts = [x["t_s"] for x in rows]
    gaps = [b - a for a, b in zip(ts, ts[1:])]
    out: dict[str, Any] = {**base, "status": "present", "absent": None, "samples": len(rows),
                           "sample_interval_s": _median(gaps), "interval_s": [start, end], "plateau_s": [w0, w1],
                           "sustained": {}, "max": {}, "delta": {}, "absent_keys": {}}
    for key, name in GAUGES:
        allv = [float(x[key]) for x in rows if isinstance(x.get(key), (int, float))]
        plat = [float(x[key]) for x in rows if w0 <= x["t_s"] <= w1 and isinstance(x.get(key), (int, float))]
        if not allv:
            out["sustained"][name] = out["max"][name] = None
            out["absent_keys"][name] = f"the server did not expose {key}"
            continue
        out["max"][name] = max(allv)
        if len(plat) >= PLATEAU_MIN_SAMPLES:
            out["sustained"][name] = _median(plat)
        else:
            out["sustained"][name] = None
            out["absent_keys"][name] = (f"only {len(plat)} sample(s) inside the plateau window "
                                        f"(needs {PLATEAU_MIN_SAMPLES}); the trial is short for the sampling interval")
    for key, name in COUNTERS:
        v = [float(x[key]) for x in rows if isinstance(x.get(key), (int, float))]
        if len(v) < 2:
            out["delta"][name] = None
            out["absent_keys"][name] = f"the server did not expose {key}" if not v else "only one sample"
        elif v[-1] < v[0]:
            out["delta"][name] = None
            out["absent_keys"][name] = f"{key} went down during the trial (counter reset: engine restart?)"
        else:
            out["delta"][name] = v[-1] - v[0]
    return out


# ----------------------------------------------------------------- goodput ----


def _request_meets(r: RequestRecord, slos: dict[str, float]) -> bool | None:
    """True/False; None when a metric with an SLO has no value for this request."""
    if not r.ok:
        return False
    for m, bound in sorted(slos.items()):
        vals = LATENCY_METRICS[m].samples([r])
        if not vals:
            return None
        if max(vals) * 1000.0 > bound:
            return False
    return True


def _goodput(data: RunData, rows: dict[str, dict], spec: Spec) -> dict:
    slos = dict(spec.analysis.slos_ms)
    if not slos:
        return {"slos_ms": {}, "trials": [], "points": [],
                "absent": "spec.analysis.slos_ms is not set: no SLO was declared, so no goodput or SLO-qualified "
                          "capacity is computed"}
    trows = []
    for td in data.trials:
        row = rows[td.id]
        base = {"trial": td.id, "repeat": td.repeat, "point": td.point, "position": td.position,
                "flags": list(row["flags"])}
        if not td.present:
            trows.append({**base, "requests": None, "meeting": None, "undetermined": None, "attainment": None,
                          "goodput_rps": None, "absent": "trial missing"})
            continue
        measured = [r for r in td.records if r.phase == "measure"]
        res = [_request_meets(r, slos) for r in measured]
        meeting = sum(1 for x in res if x is True)
        und = sum(1 for x in res if x is None)
        dur = row["duration_s"]
        trows.append({**base, "requests": len(measured), "meeting": meeting, "undetermined": und,
                      "attainment": _rel(float(meeting), float(len(measured))) if measured else None,
                      "goodput_rps": (meeting / dur) if dur else None,
                      "absent": None if dur else "trial duration undefined (no completed request)"})
    prows = []
    for P in spec.sweep.points:
        ts = [t for t in trows if t["point"] == P]
        gs = [t["goodput_rps"] for t in ts if t["goodput_rps"] is not None]
        at = [t["attainment"] for t in ts if t["attainment"] is not None]
        prows.append({"point": P, "n": len(gs), "goodput_rps_mean": _mean(gs), "attainment_mean": _mean(at),
                      "flags": [f for t in ts for f in ([f"{t['trial']}: missing"] if t["requests"] is None else [])]})
    return {"slos_ms": {k: slos[k] for k in sorted(slos)}, "trials": trows, "points": prows, "absent": None}


# ------------------------------------------------------------------ setup ----


def _setup(data: RunData) -> dict:
    prov = data.provenance or {}
    pins = prov.get("pins") if isinstance(prov.get("pins"), list) else []
    later_diff = []
    base = data.engine_resolved or {}
    for i, other in enumerate(data.engine_resolved_later, start=2):
        for k in sorted(set(base) | set(other)):
            if base.get(k) != other.get(k):
                later_diff.append({"file": data.engine_resolved_files[i - 1], "name": k,
                                   "first": base.get(k), "this": other.get(k)})
    return {
        "engine_resolved": data.engine_resolved,
        "engine_resolved_files": data.engine_resolved_files,
        "engine_resolved_changes": later_diff,
        "pins": pins,
        "provenance_files": data.provenance_files,
        "profile_files": data.profile_files,
    }


# ------------------------------------------------------------------ caveats ----


def _caveats(data: RunData, res: dict) -> list[str]:
    spec = data.spec
    out: list[str] = []
    status = (data.run_info or {}).get("status")
    if status != "complete":
        out.append(f"The run's status is {status!r}, not 'complete'." if status else "The run's status is unknown (no run.json).")
    comp = res["completeness"]
    if comp["missing"]:
        out.append(f"{len(comp['missing'])} planned trial(s) are missing: {', '.join(comp['missing'])}; every table "
                   "they affect says so and the affected means use fewer repeats.")
    if comp["with_failures"]:
        out.append("Trials with failed requests: " + ", ".join(comp["with_failures"]) + "; their throughput counts only "
                   "completed requests and is flagged wherever it is used.")
    if comp["zero_completed"]:
        out.append("Trials with no completed request (no throughput): " + ", ".join(comp["zero_completed"]) + ".")
    if comp["unexpected_trials"]:
        out.append("Trial folders not in the plan were ignored: " + ", ".join(comp["unexpected_trials"]) + ".")
    if not comp["plan_matches_spec"]:
        out.append("plan.json differs from the plan the spec gives (make_plan); the recorded plan was used.")
    if spec.sweep.repeats == 1:
        out.append("Single repeat: run-to-run spread is unknown, so no difference between points is a finding.")
    if spec.sweep.order == "fixed":
        out.append("Fixed point order in every repeat: position effects (warm-up, thermal, caches) are confounded "
                   "with the concurrency point.")
    for c in res["comparisons"]:
        if c["verdict_kind"] != "finding":
            out.append(f"{c['name']}: {c['verdict']}; the mean paired difference {pct_text(c['mean_diff'], signed=True)} "
                       "is not a finding.")
    if spec.model.load_format == "dummy":
        note = spec.model.dummy_weights_note or "random weights: timings reflect the architecture, the text is meaningless"
        out.append(f"Dummy weights (--load-format dummy): {note}. Not a measurement of the real model's weights.")
    mism = sum(p["output_len_mismatches"] or 0 for p in res["points"])
    if mism:
        out.append(f"{mism} completed request(s) returned a different number of tokens than max_tokens.")
    for p in res["points"]:
        srv = (p["prompt_tokens"]["server"] or {})
        if srv and (srv.get("min") != spec.workload.input_len or srv.get("max") != spec.workload.input_len):
            rng = f"{srv['min']}" if srv["min"] == srv["max"] else f"{srv['min']}-{srv['max']} (mean {srv['mean']:.2f})"
            out.append(f"Prompt lengths: nominal {spec.workload.input_len} tokens; the server reported {rng} at "
                       f"{p['label']} (templating/tokenization); see the prompt-token table for every point.")
            break
    bad = [p for p in res["setup"]["pins"] if isinstance(p, dict) and p.get("ok") is False]
    if bad:
        out.append("Pins that did not hold (run with drift allowed): " + "; ".join(
            f"{p.get('pin')}: requested {p.get('requested')!r}, effective {p.get('effective')!r}" for p in bad) + ".")
    if res["setup"]["engine_resolved_changes"]:
        out.append("The engine was restarted and resolved some settings differently: "
                   + ", ".join(sorted({d['name'] for d in res['setup']['engine_resolved_changes']})) + ".")
    if data.profile_files or spec.profile.enabled:
        out.append("Profiling is diagnostic only: traces come from a separate, shorter workload under a profiler, "
                   "never from the measured trials; their numbers do not reconstruct the throughput tables.")
    for d in res["dominance"]["pairs"]:
        if d["held_in_repeats"] < d["repeats_planned"]:
            out.append(f"{d['statement']} on the means, but per repeat only in {d['held_in_repeats']} of "
                       f"{d['repeats_planned']} planned repeat(s).")
    if res["ordering"]["statement"] and not res["ordering"]["held_in_every_repeat"]:
        out.append(f"The ordering {res['ordering']['statement']} (from means) held in {res['ordering']['held_in_repeats']} "
                   f"of {res['ordering']['repeats_planned']} repeats.")
    return out


# --------------------------------------------------------------- top level ----


def compute_analysis(data: RunData) -> dict:
    """Everything analysis.json holds, from loaded raw data (no I/O)."""
    spec = data.spec
    # Rows are rounded first (JSON_DECIMALS) so that every later comparison (ties in dominance, '=' in
    # the ordering, paired differences) sees exactly the numbers analysis.json publishes.
    rows = {t.id: _round(_trial_row(t, spec)) for t in data.trials}
    trials_by = {(t.repeat, t.point): t for t in data.trials}
    by_point: dict[int, list[TrialData]] = {}
    for t in data.trials:
        by_point.setdefault(t.point, []).append(t)
    points_l = [_round(_point_row(P, by_point.get(P, []), rows, spec)) for P in spec.sweep.points]
    points = {p["point"]: p for p in points_l}
    repeats = spec.sweep.repeats
    by_rp = {(t.repeat, t.point): rows[t.id] for t in data.trials}
    comps = [_comparison(c.a, c.b, points, by_rp, repeats) for c in spec.analysis.comparisons]
    for c in comps:
        c["latency_side_by_side"] = _side_by_side(c, points, spec)
    adj = [_comparison(lo, hi, points, by_rp, repeats) for lo, hi in zip(spec.sweep.points, spec.sweep.points[1:])]
    telemetry = [_telemetry_row(t, rows[t.id]) for t in data.trials]
    tele_by_point: dict[int, dict[str, float | None]] = {}
    for P in spec.sweep.points:
        d: dict[str, float | None] = {}
        for _, name in GAUGES:
            vs = [x["sustained"][name] for x in telemetry if x["point"] == P and x["status"] == "present"
                  and x["sustained"].get(name) is not None]
            d[name] = _mean(vs)
        tele_by_point[P] = d
    for p in points_l:
        p["telemetry_sustained_mean"] = tele_by_point[p["point"]]
    try:
        plan_ok = json.loads(dumps(make_plan(spec).as_dict())) == data.plan
    except Exception:
        plan_ok = False
    completeness = {
        "trials_planned": len(data.trials),
        "trials_present": sum(1 for t in data.trials if t.present),
        "missing": [t.id for t in data.trials if not t.present],
        "with_failures": [t.id for t in data.trials if t.present and rows[t.id]["failed"]],
        "zero_completed": [t.id for t in data.trials if t.present and rows[t.id]["completed"] == 0],
        "unexpected_trials": data.unexpected_trials,
        "plan_matches_spec": plan_ok,
        "run_status": (data.run_info or {}).get("status"),
        "load_problems": data.load_problems,
    }
    ri = data.run_info or {}
    res: dict[str, Any] = {
        "schema": SCHEMA,
        "run": {k: ri.get(k) for k in ("run_id", "spec_name", "spec_sha256", "status", "created_unix")},
        "spec": {
            "name": spec.name, "title": spec.title, "points": list(spec.sweep.points), "repeats": repeats,
            "order": spec.sweep.order, "plan_note": data.plan.get("note"),
            "comparisons": [{"a": c.a, "b": c.b} for c in spec.analysis.comparisons],
            "latency_metrics": list(spec.analysis.latency_metrics), "percentiles": list(spec.analysis.percentiles),
            "cv": spec.analysis.cv, "slos_ms": dict(sorted(spec.analysis.slos_ms.items())),
            "input_len": spec.workload.input_len, "output_len": spec.workload.output_len,
        },
        "methods": {**METHODS, "metric_definitions": dict(sorted(METRIC_DOCS.items())),
                    "percentile_method": PERCENTILE_METHOD, "csv_decimals": CSV_DECIMALS},
        "completeness": completeness,
        "trials": [rows[t.id] for t in sorted(data.trials, key=lambda t: t.index)],
        "points": points_l,
        "comparisons": comps,
        "adjacent": adj,
        "dominance": _dominance(points_l, trials_by, rows, spec),
        "telemetry": telemetry,
        "goodput": _goodput(data, rows, spec),
        "setup": _setup(data),
    }
    res["ordering"] = _ordering(points_l, trials_by, rows, adj, spec)
    res["caveats"] = _caveats(data, res)
    res = _round(res)
    res["files"] = ["analysis.json"] + sorted(csv_tables(res))
    return res


# --------------------------------------------------------------------- CSV ----


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

    lat_cols = [(f"{m}_{s}_ms", "ms") for m in REPORTED_METRICS for s in stats]
    h = [("index", "count"), ("trial", "text"), ("repeat", "count"), ("point", "count"), ("position", "count"),
         ("status", "text"), ("requests_planned", "count"), ("requests", "count"), ("completed", "count"),
         ("failed", "count"), ("duration_s", "s"), ("output_throughput_tok_s", "tok_s"),
         ("request_throughput_req_s", "req_s"), ("output_tokens", "count"), ("output_len_mismatches", "count"),
         ("chunk_usage_mismatches", "count"), ("prompt_len_nominal_mean", "tokens"),
         ("prompt_tokens_server_mean", "tokens"), ("client_cpu_util_pct", "pct"),
         ("dispatch_lag_max_s", "s")] + lat_cols + [("flags", "text")]
    rows = []
    for t in res["trials"]:
        r = [t["index"], t["id"], t["repeat"], t["point"], t["position"], t["status"], t["requests_planned"],
             t["requests"], t["completed"], t["failed"], t["duration_s"], t["output_throughput"],
             t["request_throughput"], t["total_output_tokens"], t["output_len_mismatches"],
             t["chunk_usage_mismatches"], t["prompt_len_nominal_mean"], (t["prompt_tokens_server"] or {}).get("mean"),
             t["client_cpu_util"], t["dispatch_lag_max_s"]]
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
         ("kv_cache_usage_sustained_mean", "frac"), ("missing_trials", "text"), ("flags", "text")]
    rows = []
    for p in res["points"]:
        tp = p["output_throughput"]
        srv = p["prompt_tokens"]["server"] or {}
        tele = p["telemetry_sustained_mean"]
        rows.append([p["point"], p["repeats_planned"], p["repeats_present"], p["repeats_measured"], tp["mean"],
                     tp["std"], tp["std_kind"], tp["cv"], tp["min"], tp["max"], tp["rel_range"],
                     p["request_throughput"]["mean"], p["requests"], p["completed"], p["failed"],
                     p["output_len_mismatches"], p["chunk_usage_mismatches"], p["prompt_tokens"]["input_len_nominal"],
                     srv.get("min"), srv.get("max"), srv.get("mean"), tele["running"], tele["waiting"],
                     tele["kv_cache_usage"], " ".join(p["missing"]),
                     _flags(p["flags"] + [f"{k}: {v}" for k, v in sorted(p["absent"].items())])])
    out["points.csv"] = _csv(h, rows)

    h = [("point", "count"), ("metric", "text"), ("method", "text"), ("n", "count")] + \
        [(f"{s}_ms", "ms") for s in stats] + [("flags", "text")]
    rows = []
    for p in res["points"]:
        for m in REPORTED_METRICS:
            for method, key in (("mean_over_repeats", "n_trials"), ("pooled", "n")):
                d = p["latency"][m][method] or {}
                rows.append([p["point"], m, method, d.get(key)] + [d.get(s) for s in stats] + [_flags(p["flags"])])
    out["point_latency.csv"] = _csv(h, rows)

    h = [("comparison", "text"), ("a", "count"), ("b", "count"), ("repeats_planned", "count"), ("pairs", "count"),
         ("mean_diff_pct", "pct"), ("min_diff_pct", "pct"), ("max_diff_pct", "pct"), ("wins_a", "count"),
         ("wins_b", "count"), ("ties", "count"), ("a_rel_range_pct", "pct"), ("b_rel_range_pct", "pct"),
         ("a_cv_pct", "pct"), ("b_cv_pct", "pct"), ("cv_kind", "text"), ("spread_pct", "pct"),
         ("verdict_kind", "text"), ("verdict", "text"), ("flags", "text")]
    rows = []
    for c in res["comparisons"]:
        s = c["spread"]
        rows.append([c["name"], c["a"], c["b"], c["repeats_planned"], c["pairs"], c["mean_diff"], c["min_diff"],
                     c["max_diff"], c["wins_a"], c["wins_b"], c["ties"], s["a_rel_range"], s["b_rel_range"],
                     s["a_cv"], s["b_cv"], s["cv_kind"], s["value"], c["verdict_kind"], c["verdict"],
                     _flags(c["flags"])])
    out["comparisons.csv"] = _csv(h, rows)

    h = [("comparison", "text"), ("repeat", "count"), ("trial_a", "text"), ("trial_b", "text"),
         ("a_tok_s", "tok_s"), ("b_tok_s", "tok_s"), ("diff_pct", "pct"), ("winner", "text"), ("flags", "text")]
    rows = []
    for c in res["comparisons"]:
        for r in c["repeats"]:
            rows.append([c["name"], r["repeat"], r["trial_a"], r["trial_b"], r["a"], r["b"], r["diff"], r["winner"],
                         _flags(r["flags"])])
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
         ("dominated_by", "text"), ("held_in_repeats", "text"), ("dominates", "text"), ("tied_with", "text"),
         ("not_compared", "text"), ("note", "text"), ("flags", "text")]
    rows = []
    for e in dom["points"]:
        hr = " ".join(f"{label(q)}:{held[(q, e['point'])]['held_in_repeats']}/{held[(q, e['point'])]['repeats_planned']}"
                      for q in e["dominated_by"])
        rows.append([e["point"], pmap[e["point"]]["output_throughput"]["mean"], e["dominated"],
                     " ".join(label(q) for q in e["dominated_by"]), hr, " ".join(label(q) for q in e["dominates"]),
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


def default_out_dir(run_dir: Path) -> Path:
    return Path(run_dir) / "analysis"


def write_analysis(res: dict, out_dir: Path) -> list[Path]:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tables = csv_tables(res)
    written = []
    for name in sorted(tables):
        write_atomic(out_dir / name, tables[name])
        written.append(out_dir / name)
    write_atomic(out_dir / "analysis.json", dumps(res))
    written.insert(0, out_dir / "analysis.json")
    return written


def analyze_run(run_dir: Path, out_dir: Path | None = None) -> dict:
    """Read the raw run, compute every table, write analysis.json and the CSVs; return the analysis.

    Beside them, when the run has them: profile.json + profile_*.csv (the diagnostic trace
    analyses, evidence.profile_run) and anchor.json (our client against an interleaved
    anchor client, evidence.anchor). Each is a pure function of the raw files.
    """
    data = load_run(Path(run_dir))
    res = compute_analysis(data)
    out = Path(out_dir if out_dir is not None else default_out_dir(run_dir))
    write_analysis(res, out)
    write_extras(Path(run_dir), out)
    return res


def write_extras(run_dir: Path, out: Path) -> list[Path]:
    """profile.json + profile_*.csv and anchor.json, when the run has the raw data for them."""
    from evidence.analysis.anchor import anchor_comparison
    from evidence.traces.profile import analyze_profile, profile_csvs

    written = []
    prof = analyze_profile(Path(run_dir))
    if prof is not None:
        write_atomic(out / "profile.json", dumps(_round(prof)))
        written.append(out / "profile.json")
        for name, text in sorted(profile_csvs(prof).items()):
            write_atomic(out / name, text)
            written.append(out / name)
    anchor = anchor_comparison(Path(run_dir))
    if anchor is not None:
        write_atomic(out / "anchor.json", dumps(_round(anchor)))
        written.append(out / "anchor.json")
    return written
