"""Profile data of a run -> per-point trace analyses (a pure function of profile/).

Joins three things the seed article could not join: the trace (kernels and vLLM's
per-step annotations), the client's records of the same diagnostic workload, and
the clock bridge between them. Kineto's absolute times (baseTimeNanoseconds +
ts) are wall-clock (Unix epoch) nanoseconds, as are nsys session times; the
client recorded its perf_counter t0 together with the wall clock, so each chunk's
arrival maps to trace time as t0_unix + t. The output tokens generated inside the
trace's window are counted from those chunk arrivals (per-token kernel costs
need them); when the mapping cannot be made, per-token costs are absent with the
reason.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evidence.traces import analyses as pa
from evidence.canon import read_json
from evidence.records import read_records
from evidence.spec.model import Spec, spec_from_json
from evidence.traces.load import load_trace
from evidence.traces.model import TraceError
from evidence.rundir import ENGINE, META, PROFILE, PROFILE_JSON, REQUESTS, RESOLVED_GLOB, SPEC_RESOLVED

TRACE_NAMES = (".pt.trace.json", ".pt.trace.json.gz", ".json.gz", ".json", ".sqlite")


def rules_from_spec(spec: Spec) -> tuple[pa.FamilyRule, ...]:
    if not spec.profile.kernel_families:
        return pa.DEFAULT_RULES
    return tuple(pa.FamilyRule(r.name, r.pattern, r.family, geometry=r.geometry, layer_marker=r.layer_marker)
                 for r in spec.profile.kernel_families)


def _budget(run_dir: Path) -> tuple[int | None, str]:
    """The token budget the PROFILING server resolved (the last resolved*.json written)."""
    eng = run_dir / ENGINE
    files = sorted(eng.glob(RESOLVED_GLOB), key=lambda p: (len(p.name), p.name))
    for f in reversed(files):
        v = read_json(f).get("max_num_batched_tokens", {})
        if isinstance(v, dict) and isinstance(v.get("value"), int):
            return v["value"], f"{f.name}: {v.get('source', '')}"
    return None, "no resolved max_num_batched_tokens recorded"


def tokens_in_window(records, t0_unix: float, lo_ns: int, hi_ns: int) -> int:
    """Output tokens whose chunk arrived (client clock, mapped to wall ns) inside [lo, hi]."""
    n = 0
    for r in records:
        for t in r.chunk_s:
            ns = int(round((t0_unix + t) * 1e9))
            if lo_ns <= ns <= hi_ns:
                n += 1
    return n


def _trace_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_file() and p.name.endswith(TRACE_NAMES) and p.name != META)


def profile_of(run_dir: Path, given: Any = ...) -> dict[str, Any] | None:
    """The run's trace analyses: `given` when a caller already has them (a dict, or None for a run without a
    profile), else (`...`, the default) analyze_profile(run_dir). One pass over a run (evidence.derive) hands
    them to the tables and the report, so the traces are read and analysed once."""
    return analyze_profile(run_dir) if given is ... else given


def analyze_profile(run_dir: Path) -> dict[str, Any] | None:
    """Analyses of every profiled point, or None when the run has no profile."""
    pdir = Path(run_dir) / PROFILE
    if not (pdir / PROFILE_JSON).exists():
        return None
    spec = spec_from_json((Path(run_dir) / SPEC_RESOLVED).read_text(encoding="utf-8"))
    info = read_json(pdir / PROFILE_JSON)
    rules = rules_from_spec(spec)
    budget, budget_src = _budget(Path(run_dir))
    points: dict[str, Any] = {}
    for entry in info.get("points", []):
        point = entry["point"]
        folder = pdir / f"c{point}"
        meta = read_json(folder / META)
        records = read_records(folder / REQUESTS)
        files = _trace_files(folder)
        res: dict[str, Any] = {"point": point, "prompts": meta.get("prompts"), "trace_files": [f.name for f in files]}
        if not files:
            res["absent"] = "no trace file was captured for this point"
            points[str(point)] = res
            continue
        analyses = []
        for f in files:
            try:
                tr = load_trace(f)
            except TraceError as e:
                analyses.append({"file": f.name, "absent": str(e)})
                continue
            k = tr.kernels
            tokens, why = None, None
            t0_unix = meta.get("client", {}).get("t0_unix")
            if len(k) and t0_unix is not None:
                lo, hi = int(k["start_ns"].min()), int(k["end_ns"].max())
                tokens = tokens_in_window(records, t0_unix, lo, hi)
                if tokens == 0:
                    tokens, why = None, "no output token arrived inside the trace's window on the bridged clock"
            elif len(k):
                why = "the client's wall-clock t0 was not recorded, so tokens cannot be placed in the trace window"
            a = pa.analyze_trace(tr, n_layers=spec.profile.layers, rules=rules, output_tokens=tokens, budget=budget,
                                 heads=spec.profile.heads)
            a["trace"]["path"] = f.name  # never an absolute path: outputs must not depend on where the run lies
            a["clock_bridge"] = {"output_tokens_in_window": tokens, "absent": why,
                                 "method": "chunk arrival = t0_unix + t (client perf_counter), compared with trace wall-clock ns"}
            analyses.append({"file": f.name, "analysis": a})
        res["traces"] = analyses
        res["budget"] = {"value": budget, "source": budget_src}
        points[str(point)] = res
    return {
        "tool": info.get("tool"),
        "settings": info.get("settings"),
        "note": info.get("note"),
        "rules": [{"name": r.name, "pattern": r.pattern, "family": r.family_name, "geometry": r.geometry,
                   "layer_marker": r.layer_marker} for r in rules],
        "layers": spec.profile.layers,
        "points": points,
    }


def _g(d: Any, *path: str) -> Any:
    for k in path:
        if not isinstance(d, dict):
            return None
        d = d.get(k)
    return d


def _list(x: Any) -> list:
    """An analysis that could not run is {"absent": why}, not a list: iterate nothing then."""
    return x if isinstance(x, list) else []


def profile_rows(res: dict) -> dict[str, list[dict]]:
    """Flat per-point rows for the report and the CSVs: summary, families, geometry."""
    summary, fams, geo = [], [], []
    for key in sorted(res.get("points", {}), key=int):
        pt = res["points"][key]
        for tr in pt.get("traces", []):
            a = tr.get("analysis")
            if a is None:
                summary.append({"point": int(key), "file": tr["file"], "absent": tr.get("absent")})
                continue
            steps = a.get("steps", {})
            sus = a.get("sustained", {}) if isinstance(a.get("sustained"), dict) else {}
            row = {
                "point": int(key), "file": tr["file"],
                "kernels": _g(a, "trace", "kernels"),
                "kernel_active_fraction": _g(a, "kernel_active", "fraction"),
                "kernel_active_absent": _g(a, "kernel_active", "absent"),
                "output_tokens_in_window": _g(a, "clock_bridge", "output_tokens_in_window"),
                "absent_reasons": "; ".join(sorted({str(v["absent"]) for v in a.values()
                                                     if isinstance(v, dict) and v.get("absent")})) or None,
                "steps": steps.get("steps"), "steps_with_prefill": steps.get("steps_with_prefill"),
                "prefill_steps_at_budget": steps.get("prefill_steps_at_budget"), "budget": steps.get("budget"),
                "decode_population_mean": _g(steps, "decode_requests", "mean"),
                "forwards": len(_g(a, "forwards", "forwards") or []) if isinstance(a.get("forwards"), dict) and "forwards" in a["forwards"] else None,
                "forwards_rejected": len(_g(a, "forwards", "rejected") or []) if isinstance(a.get("forwards"), dict) and "rejected" in a["forwards"] else None,
            }
            for path in ("mixed", "decode"):
                s = sus.get(path) if isinstance(sus.get(path), dict) else {}
                row[f"sustained_{path}_sequences"] = s.get("mean_sequences")
                row[f"sustained_{path}_kernel_us"] = (s["mean_kernel_ns"] / 1000.0) if s.get("mean_kernel_ns") is not None else None
                row[f"sustained_{path}_forwards"] = s.get("forwards")
            summary.append(row)
            for f in _list(_g(a, "families", "families")):
                fams.append({"point": int(key), "family": f["family"], "count": f["count"],
                             "total_ms": f["total_ns"] / 1e6, "share": f["share"],
                             "per_token_us": (f["per_token_ns"] / 1000.0) if f.get("per_token_ns") is not None else None})
            for g in _list(a.get("geometry")):
                for grp in _list(g.get("groups")):
                    geo.append({"point": int(key), "rule": grp.get("rule"), "grid": "x".join(str(x) for x in grp.get("grid") or []),
                                "replay": grp.get("replay"), "count": grp.get("count"),
                                "total_ms": (grp.get("total_ns") or 0) / 1e6,
                                "per_token_us": (grp["per_token_ns"] / 1000.0) if grp.get("per_token_ns") is not None else None,
                                "meaning": grp.get("meaning")})
    return {"summary": summary, "families": fams, "geometry": geo}


def profile_csvs(res: dict) -> dict[str, str]:
    """Stable CSVs (fixed columns, fixed decimals; empty = not measured)."""
    import csv
    import io

    out = {}
    for name, rows in profile_rows(res).items():
        if not rows:
            continue
        cols = sorted({k for r in rows for k in r}, key=lambda c: (c not in ("point", "file", "family", "rule"), c))
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(cols)
        for r in rows:
            w.writerow(["" if r.get(c) is None else (f"{r[c]:.6f}" if isinstance(r[c], float) else r[c]) for c in cols])
        out[f"profile_{name}.csv"] = buf.getvalue()
    return out
