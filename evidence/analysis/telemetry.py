"""Server telemetry per trial (plateau window, sustained and max gauges, counter deltas) and the within-trial view
(steady-state window, trend, waves; regimes across repeats)."""

from __future__ import annotations

import warnings

from typing import Any

from evidence.analysis.load import TrialData
from evidence.analysis.numbers import mean_of, median_of
from evidence.analysis.timeseries import Series, regimes, steady_state, trial_series, waves


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


# ------------------------------------------------------------ within a trial ----
# The per-interval view (evidence.analysis.timeseries): one number per trial hides warm-up, drift,
# waves and regimes; these rows name them with their numbers.

SERIES_BIN_S = 0.25


def trial_series_of(td: TrialData) -> tuple[Series | None, str | None]:
    """The trial's per-bin series, or None and why."""
    if not td.present:
        return None, "trial missing"
    try:
        return trial_series(td.records, td.telemetry, bin_s=SERIES_BIN_S), None
    except ValueError as e:
        return None, str(e)


def within_trial_row(td: TrialData) -> dict:
    """Steady-state window (MSER-5), trend test and waves of one trial."""
    base = {"trial": td.id, "repeat": td.repeat, "point": td.point, "position": td.position, "session": td.session}
    series, why = trial_series_of(td)
    if series is None:
        return {**base, "status": "absent", "absent": why}
    with warnings.catch_warnings():  # a constant window: scipy warns, the trend test reads it as no trend
        warnings.simplefilter("ignore")
        st = steady_state(series)
        wv = waves(series, st)
    return {**base, "status": "present", "absent": None, "bin_s": series.bin_s, "bins": len(series.t),
            "duration_s": series.duration_s, "series_absent": dict(sorted(series.absent.items())),
            "steady": st.as_dict(), "waves": wv,
            "series": {"t": list(series.t), "output_tps": list(series.output_tps), "in_flight": list(series.in_flight),
                       "running": list(series.running) if series.running is not None else None,
                       "waiting": list(series.waiting) if series.waiting is not None else None}}


def within_point_rows(points: list[int], rows: list[dict], trial_tput: dict[tuple[int, int], float | None]) -> list[dict]:
    """Per point: steady-state throughput over the repeats that have a window, and regimes across repeats."""
    out = []
    for P in points:
        rs = [r for r in rows if r["point"] == P and r["status"] == "present"]
        vals = [r["steady"]["throughput"] for r in rs if r["steady"]["throughput"] is not None]
        tps = [v for (rep, p), v in sorted(trial_tput.items()) if p == P and v is not None]
        out.append({"point": P, "steady_throughput_mean": mean_of(vals), "n": len(vals),
                    "steady_trials": sum(1 for r in rs if r["steady"]["steady"]), "trials": len(rs),
                    "wave_trials": sum(1 for r in rs if r["waves"]), "regimes": regimes(tps)})
    return out
