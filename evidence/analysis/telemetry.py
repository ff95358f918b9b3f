"""Server telemetry per trial: the plateau window, sustained (median) and max gauges, counter deltas."""

from __future__ import annotations

from typing import Any

from evidence.analysis.load import TrialData
from evidence.analysis.numbers import median_of


PLATEAU_TRIM = 0.2  # telemetry plateau: drop the first and last 20% of the measured interval


PLATEAU_MIN_SAMPLES = 3


GAUGES = (("num_requests_running", "running"), ("num_requests_waiting", "waiting"),
          ("kv_cache_usage_perc", "kv_cache_usage"))


COUNTERS = (("generation_tokens_total", "generation_tokens"), ("prompt_tokens_total", "prompt_tokens"),
            ("num_preemptions_total", "preemptions"))


def telemetry_row(td: TrialData, row: dict) -> dict:
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
                           "sample_interval_s": median_of(gaps), "interval_s": [start, end], "plateau_s": [w0, w1],
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
            out["sustained"][name] = median_of(plat)
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
