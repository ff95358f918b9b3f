"""Where the time goes outside the GPU: a bottleneck reading per trial, from the host telemetry.

On the H200 both effects that decided the verdicts lived on the host (notes/h200.md): at the A100 settings
vLLM's engine core used 0.84-0.99 of one core while the GPU was 51-84% busy; at the H200's defaults, C256, the
API server was the busy process and output came at about one token per SSE chunk. This module reads, per
trial, over its plateau window (the measured interval without its first and last PLATEAU_TRIM, as the
telemetry plateau): each engine process role's CPU in cores, the client's, the GPU's busy fraction, tokens
per SSE chunk, the host's CPU split, pressure and the speed probe; then applies RULES, whose thresholds are all
in THRESHOLDS. A number that could not be measured is None with the reason in `absent`, never 0.

`bottleneck_reading(data)` is None for a run without host telemetry (recorded before it existed), so such a
run's derived files are unchanged.
"""

from __future__ import annotations

from typing import Any

from evidence.analysis.load import RunData, TrialData
from evidence.analysis.numbers import mean_of, median_of
from evidence.analysis.telemetry import PLATEAU_TRIM

SCHEMA = "evidence.bottleneck/1"

#: Every threshold the readings use, in one place.
THRESHOLDS = {
    # A process at >= this many cores is busy: its main thread can use one core at most, and on the H200 the
    # processes that limited throughput ran at 0.78-0.97 of a core over the plateau window (the engine core at the
    # A100 settings, the API server at the defaults, C256: tests/analysis/test_bottleneck_h200.py reads them).
    "core_busy": 0.75,
    "gpu_underfed": 0.8,  # GPU busy below this while the engine core is busy: the host is not feeding it
    "gpu_bound": 0.95,  # GPU busy at or above this: the GPU is the limit
    "tokens_per_chunk_front_end": 1.2,  # below this the API server sends about one token per SSE chunk
    "probe_move": 0.25,  # a comparison whose trials' probe medians differ by more than this fraction gets a caveat
}

T = THRESHOLDS
RULES = (
    ("GPU-bound", f"the GPU >= {T['gpu_bound']:.0%} busy"),
    (
        "host-bound (engine core)",
        f"the engine core at >= {T['core_busy']:g} of one core while the GPU is "
        f"< {T['gpu_underfed']:.0%} busy or its busy fraction is not measured",
    ),
    (
        "front-end-bound (API server)",
        f"the API server at >= {T['core_busy']:g} of one core and < "
        f"{T['tokens_per_chunk_front_end']:g} tokens per SSE chunk",
    ),
    ("client-bound", f"the load generator at >= {T['core_busy']:g} of one core"),
)
NOT_DECIDED = "not decided"

METHOD = (
    f"Per trial, over its plateau window (the measured interval, first send to last completion, without its "
    f"first and last {int(PLATEAU_TRIM * 100)}%): CPU of each engine process role and of the client in cores "
    "(the sum of the non-negative increments of its cumulative user + system seconds between consecutive "
    "samples, over the time those samples span; CPU seconds come in clock ticks of 1/100 s, so over a "
    "window of one second a rate below about 0.02 cores can read 0); the host's CPU split as fractions of all "
    "CPU time "
    "(/proc/stat), PSI stall as a fraction of the time, context switches per second, mean load and CPU "
    "frequency; GPU busy = mean NVML utilization.gpu / 100 of the samples, idle = 1 - busy; tokens per SSE "
    "chunk = completion tokens / token-bearing chunks of the trial's completed requests; the speed probe's "
    "median. The reading is the first rule that holds, in this order: "
    + "; ".join(f"'{n}': {r}" for n, r in RULES)
    + f"; else '{NOT_DECIDED}'. Every rule that held is listed."
)

ENGINE_ROLES_ORDER = ("api_server", "engine_core", "worker", "dp_coordinator", "other")


def has_host_telemetry(data: RunData) -> bool:
    return any(t.present and isinstance((t.meta or {}).get("telemetry", {}).get("host"), dict) for t in data.trials)


def _window(td: TrialData) -> tuple[float, float] | None:
    measured = [r for r in td.records if r.phase == "measure"]
    ends = [r.end_s for r in measured if r.end_s is not None]
    if not measured or not ends:
        return None
    start, end = min(r.send_s for r in measured), max(ends)
    span = end - start
    return start + PLATEAU_TRIM * span, end - PLATEAU_TRIM * span


def counter_rate(rows: list[dict], key: str, w0: float, w1: float) -> tuple[float | None, str | None]:
    """Per-second rate of a cumulative key over the samples inside [w0, w1] (with fewer than two inside, over the
    samples that bracket it): non-negative increments only (a process that left lowers the sum)."""
    pts = [
        (r["t_s"], float(r[key]))
        for r in rows
        if isinstance(r.get(key), (int, float)) and not isinstance(r.get(key), bool)
    ]
    if len(pts) < 2:
        return None, f"{key} was not sampled" if not pts else f"{key} has one sample only"
    sel = [p for p in pts if w0 <= p[0] <= w1]
    if len(sel) < 2:  # a short window: the samples that bracket it
        before = [p for p in pts if p[0] < w0]
        after = [p for p in pts if p[0] > w1]
        sel = before[-1:] + sel + after[:1]
    if len(sel) < 2 or sel[-1][0] <= sel[0][0]:
        return None, f"fewer than two samples of {key} around the plateau window"
    inc = sum(max(0.0, b[1] - a[1]) for a, b in zip(sel, sel[1:]))
    return inc / (sel[-1][0] - sel[0][0]), None


def rate_series(rows: list[dict], key: str) -> tuple[list[float], list[float]]:
    """A cumulative key as a per-second rate between consecutive samples, at each interval's midpoint (an
    interval where the key fell, a process having left, is left out)."""
    pts = [(r["t_s"], float(r[key])) for r in rows if isinstance(r.get(key), (int, float))]
    t, v = [], []
    for (ta, a), (tb, b) in zip(pts, pts[1:]):
        if tb > ta and b >= a:
            t.append((ta + tb) / 2)
            v.append((b - a) / (tb - ta))
    return t, v


def _gauge_mean(rows: list[dict], key: str, w0: float, w1: float) -> float | None:
    v = [float(r[key]) for r in rows if w0 <= r["t_s"] <= w1 and isinstance(r.get(key), (int, float))]
    return mean_of(v)


def trial_reading(td: TrialData) -> dict[str, Any]:
    base = {"trial": td.id, "repeat": td.repeat, "point": td.point, "position": td.position, "session": td.session}
    if td.arm is not None:  # only a run with arms carries the key (other analyses keep their bytes)
        base["arm"] = td.arm
    absent: dict[str, str] = {}
    if not td.present:
        return {**base, "status": "missing", "reading": NOT_DECIDED, "absent": {"trial": "trial missing"}}
    tmeta = (td.meta or {}).get("telemetry") or {}
    host = tmeta.get("host") if isinstance(tmeta.get("host"), dict) else None
    rows = td.telemetry or []
    win = _window(td)
    out: dict[str, Any] = {**base, "status": "present"}
    if win is None:
        out["window_s"] = None
        absent["window"] = "no completed request: the measured interval is undefined"
        w0 = w1 = 0.0
    else:
        w0, w1 = win
        out["window_s"] = [w0, w1]
    # the engine's processes, by role
    cores: dict[str, float | None] = {}
    proc_meta = (host or {}).get("processes") or {}
    roles_seen = sorted(
        {k[len("proc_") : -len("_cpu_s")] for r in rows for k in r if k.startswith("proc_") and k.endswith("_cpu_s")}
        - {"client"},
        key=lambda r: (ENGINE_ROLES_ORDER.index(r) if r in ENGINE_ROLES_ORDER else 99, r),
    )
    if host is None:
        absent["processes"] = tmeta.get("reason") or "no host telemetry in this trial"
    elif not proc_meta.get("enabled"):
        absent["processes"] = proc_meta.get("reason") or "the engine's processes were not read"
    for role in roles_seen if win else []:
        v, why = counter_rate(rows, f"proc_{role}_cpu_s", w0, w1)
        cores[role] = v
        if why:
            absent[f"cores.{role}"] = why
    for role in ("api_server", "engine_core"):
        if role not in cores and "processes" not in absent:
            cores[role] = None
            absent[f"cores.{role}"] = f"no process with the role {role} was found in the engine's process tree"
    out["cores"] = cores
    states: dict[str, dict[str, int]] = {}
    for role in roles_seen:
        c: dict[str, int] = {}
        for r in rows:
            if win and w0 <= r["t_s"] <= w1 and isinstance(r.get(f"proc_{role}_state"), str):
                for s in r[f"proc_{role}_state"].split(","):
                    c[s] = c.get(s, 0) + 1
        states[role] = dict(sorted(c.items()))
    out["states"] = states
    # the client: sampled when host telemetry exists, else the trial's own process_time over the whole trial
    client, why = counter_rate(rows, "proc_client_cpu_s", w0, w1) if win else (None, "no window")
    if client is None:
        client = (td.meta or {}).get("client_cpu_util")
        out["client_cores_source"] = "meta.json client_cpu_util (whole trial)" if client is not None else None
        if client is None:
            absent["client_cores"] = why or "not recorded"
    else:
        out["client_cores_source"] = "sampled (plateau window)"
    out["client_cores"] = client
    # the GPU
    gpu_meta = tmeta.get("gpu") or {}
    busy = _gauge_mean(rows, "gpu_util_pct", w0, w1) if win else None
    out["gpu_busy"] = busy / 100.0 if busy is not None else None
    out["gpu_idle"] = 1.0 - busy / 100.0 if busy is not None else None
    if busy is None:
        absent["gpu_busy"] = absent["gpu_idle"] = (
            gpu_meta.get("reason") or "no GPU utilization sample in the plateau window"
        )
    # tokens per SSE chunk
    ok = [r for r in td.records if r.phase == "measure" and r.ok and r.completion_tokens and r.chunk_count]
    out["tokens_per_chunk"] = (sum(r.completion_tokens for r in ok) / sum(r.chunk_count for r in ok)) if ok else None
    if not ok:
        absent["tokens_per_chunk"] = "no completed request with usage.completion_tokens and token-bearing chunks"
    # the host
    out["host"] = _host_figures(rows, w0, w1, host, absent) if win and host else None
    if host is not None:
        probe = ((host.get("probe") or {}).get("ms")) or {}
        allv = [v for k in sorted(probe) for v in probe[k]]
        out["probe_ms_median"] = median_of(allv)
        if not allv:
            absent["probe_ms_median"] = "the speed probe did not run"
    else:
        out["probe_ms_median"] = None
        absent["probe_ms_median"] = absent.get("processes", "no host telemetry")
    held = _rules(cores, client, out["gpu_busy"], out["tokens_per_chunk"])
    out["reading"] = held[0] if held else NOT_DECIDED
    out["rules_held"] = held
    out["absent"] = dict(sorted(absent.items()))
    return out


def _host_figures(rows: list[dict], w0: float, w1: float, host: dict, absent: dict[str, str]) -> dict[str, Any]:
    h: dict[str, Any] = {}
    fields = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
    rates = {f: counter_rate(rows, f"host_cpu_{f}_s", w0, w1)[0] for f in fields}
    total = sum(v for v in rates.values() if v is not None)
    for f in ("user", "system", "idle", "iowait", "steal"):
        h[f"cpu_{f}_frac"] = rates[f] / total if rates[f] is not None and total > 0 else None
        h[f"cpu_{f}_cpus"] = rates[f]  # in CPUs: seconds per second
        if rates[f] is None:
            absent[f"host.cpu_{f}"] = f"host_cpu_{f}_s was not sampled"
    for res, kinds in (("cpu", ("some",)), ("memory", ("some", "full")), ("io", ("some", "full"))):
        why = (host.get("absent") or {}).get(f"host_psi_{res}")
        for k in kinds:
            v, w = counter_rate(rows, f"host_psi_{res}_{k}_us", w0, w1)
            h[f"psi_{res}_{k}"] = v / 1e6 if v is not None else None
            if v is None:
                absent[f"host.psi_{res}_{k}"] = why or w or "not sampled"
    v, w = counter_rate(rows, "host_ctx_switches", w0, w1)
    h["ctx_switches_per_s"] = v
    if v is None:
        absent["host.ctx_switches_per_s"] = w or "not sampled"
    for key, name in (("host_load1", "load1_mean"), ("host_cpu_freq_mhz", "cpu_freq_mhz_mean")):
        h[name] = _gauge_mean(rows, key, w0, w1)
        if h[name] is None:
            absent[f"host.{name}"] = (host.get("absent") or {}).get(key) or "no sample in the plateau window"
    return h


def _rules(
    cores: dict[str, float | None], client: float | None, gpu_busy: float | None, tpc: float | None
) -> list[str]:
    held = []
    ec, api = cores.get("engine_core"), cores.get("api_server")
    if gpu_busy is not None and gpu_busy >= T["gpu_bound"]:
        held.append(RULES[0][0])
    if ec is not None and ec >= T["core_busy"] and (gpu_busy is None or gpu_busy < T["gpu_underfed"]):
        held.append(RULES[1][0])
    if api is not None and api >= T["core_busy"] and tpc is not None and tpc < T["tokens_per_chunk_front_end"]:
        held.append(RULES[2][0])
    if client is not None and client >= T["core_busy"]:
        held.append(RULES[3][0])
    return held


def _group(rows: list[dict]) -> dict[str, Any]:
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["reading"]] = counts.get(r["reading"], 0) + 1
    if not counts:
        reading = NOT_DECIDED
    elif len(counts) == 1:
        reading = next(iter(counts))
    else:
        reading = "mixed: " + ", ".join(f"{k} {v}/{len(rows)}" for k, v in sorted(counts.items()))
    mean = lambda key: mean_of([r[key] for r in rows if r.get(key) is not None])  # noqa: E731
    roles = sorted(
        {k for r in rows for k in r.get("cores", {})},
        key=lambda r: (ENGINE_ROLES_ORDER.index(r) if r in ENGINE_ROLES_ORDER else 99, r),
    )
    return {
        "reading": reading,
        "readings": dict(sorted(counts.items())),
        "trials": len(rows),
        "cores_mean": {
            role: mean_of([r["cores"][role] for r in rows if r["cores"].get(role) is not None]) for role in roles
        },
        "client_cores_mean": mean("client_cores"),
        "gpu_busy_mean": mean("gpu_busy"),
        "tokens_per_chunk_mean": mean("tokens_per_chunk"),
        "probe_ms_median": median_of([r["probe_ms_median"] for r in rows if r.get("probe_ms_median") is not None]),
    }


def bottleneck_reading(data: RunData) -> dict[str, Any] | None:
    """The readings per trial, per point, per (session, point) when the run has several sessions, and what each
    of the spec's comparisons and adjacent pairs should say about them; None without host telemetry."""
    if not has_host_telemetry(data):
        return None
    spec = data.spec
    trials = [trial_reading(t) for t in sorted(data.trials, key=lambda t: t.index)]
    present = [r for r in trials if r["status"] == "present"]
    points = [{"point": P, **_group([r for r in present if r["point"] == P])} for P in spec.sweep.points]
    sessions = sorted({r["session"] for r in present})
    arms = (
        [
            {"session": s, "point": P, **_group([r for r in present if r["point"] == P and r["session"] == s])}
            for s in sessions
            for P in spec.sweep.points
        ]
        if len(sessions) > 1
        else []
    )
    arm_names = [a.name for a in getattr(spec, "arms", [])]
    per_arm = [
        {"arm": a, "point": P, **_group([r for r in present if r["point"] == P and r.get("arm") == a])}
        for a in arm_names
        for P in spec.sweep.points
    ]
    by_point = {p["point"]: p for p in points}
    pairs = [("comparison", c.a, c.b) for c in spec.analysis.comparisons]
    pairs += [("adjacent", a, b) for a, b in zip(spec.sweep.points, spec.sweep.points[1:])]
    comps = []
    for kind, a, b in pairs:
        pa, pb = by_point.get(a), by_point.get(b)
        if pa is None or pb is None:
            continue
        notes = []
        if pa["reading"] != pb["reading"]:
            notes.append(
                f"the two sides have different bottleneck readings: {a}: {pa['reading']}; {b}: {pb['reading']}"
            )
        probes = [r["probe_ms_median"] for r in present if r["point"] in (a, b) and r.get("probe_ms_median")]
        move = (max(probes) / min(probes) - 1.0) if len(probes) >= 2 and min(probes) > 0 else None
        if move is not None and move > T["probe_move"]:
            notes.append(
                f"the host's speed probe moved by {move:.0%} across the trials of this comparison "
                f"({min(probes):.1f}-{max(probes):.1f} ms; more than {T['probe_move']:.0%}): the host's "
                "per-core speed may explain part of the difference"
            )
        comps.append(
            {
                "kind": kind,
                "a": a,
                "b": b,
                "reading_a": pa["reading"],
                "reading_b": pb["reading"],
                "probe_move": move,
                "notes": notes,
            }
        )
    return {
        "schema": SCHEMA,
        "method": METHOD,
        "thresholds": dict(THRESHOLDS),
        "rules": [{"reading": n, "rule": r} for n, r in RULES] + [{"reading": NOT_DECIDED, "rule": "otherwise"}],
        "trials": trials,
        "points": points,
        "arms": arms,
        **({"per_arm": per_arm} if per_arm else {}),
        "comparisons": comps,
    }
