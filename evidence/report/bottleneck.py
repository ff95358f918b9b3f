"""The report's section on the host telemetry and the bottleneck reading (evidence.analysis.bottleneck), for runs
recorded with host telemetry only."""

from __future__ import annotations

from evidence.analysis.model import Analysis, as_analysis
from evidence.report.format import fixed, pct, section, table


def bottleneck_sections(res: Analysis | dict, have: list[str]) -> list[dict]:
    """The host telemetry's reading per trial and per point (runs recorded with host telemetry only)."""
    neck = as_analysis(res).bottleneck
    if neck is None:
        return []
    roles = [
        r
        for r in ("engine_core", "api_server", "worker")
        if any(t.get("cores", {}).get(r) is not None for t in neck["trials"])
    ]
    heads = (
        ["trial", "point", "reading"]
        + [f"{r.replace('_', ' ')} cores" for r in roles]
        + ["client cores", "GPU busy", "tokens / chunk", "probe ms", "steal CPUs", "PSI cpu some"]
    )
    rows = []
    for t in neck["trials"]:
        h = t.get("host") or {}
        rows.append(
            [t["trial"], t["point"], t["reading"]]
            + [fixed(t.get("cores", {}).get(r), 2) for r in roles]
            + [
                fixed(t.get("client_cores"), 2),
                pct(t.get("gpu_busy"), d=1) if t.get("gpu_busy") is not None else "n/a",
                fixed(t.get("tokens_per_chunk"), 2),
                fixed(t.get("probe_ms_median"), 1),
                fixed(h.get("cpu_steal_cpus"), 3),
                pct(h.get("psi_cpu_some"), d=2) if h.get("psi_cpu_some") is not None else "n/a",
            ]
        )
    prow = [
        [p["point"], p["reading"]]
        + [fixed(p["cores_mean"].get(r), 2) for r in roles]
        + [
            fixed(p["client_cores_mean"], 2),
            fixed(p["gpu_busy_mean"], 2),
            fixed(p["tokens_per_chunk_mean"], 2),
            fixed(p["probe_ms_median"], 1),
        ]
        for p in neck["points"]
    ]
    absent = sorted({f"{k}: {v}" for t in neck["trials"] for k, v in (t.get("absent") or {}).items()})
    notes = [f"{c['a']} vs {c['b']} ({c['kind']}): {n}" for c in neck["comparisons"] for n in c["notes"]]
    tables = [
        table("Per trial (n/a: not measured; why below)", heads, rows, "lrl" + "r" * (len(heads) - 3)),
        table(
            "Per point (means over its trials; mixed readings are counted)",
            ["point", "reading"]
            + [f"{r.replace('_', ' ')} cores" for r in roles]
            + ["client cores", "GPU busy", "tokens / chunk", "probe ms"],
            prow,
            "rl" + "r" * (len(roles) + 4),
        ),
    ]
    if neck.get("per_arm"):  # spec.arms: each arm's server starts together (the readings the arms are compared by)
        tables.append(
            table(
                "Per arm and point (means over the arm's trials; mixed readings are counted)",
                ["arm", "point", "reading"]
                + [f"{r.replace('_', ' ')} cores" for r in roles]
                + ["GPU busy", "tokens / chunk"],
                [
                    [a["arm"], a["point"], a["reading"]]
                    + [fixed(a["cores_mean"].get(r), 2) for r in roles]
                    + [fixed(a["gpu_busy_mean"], 2), fixed(a["tokens_per_chunk_mean"], 2)]
                    for a in neck["per_arm"]
                ],
                "lrl" + "r" * (len(roles) + 2),
            )
        )
    if neck["arms"]:
        tables.append(
            table(
                "Per engine session and point",
                ["session", "point", "reading"],
                [[a["session"], a["point"], a["reading"]] for a in neck["arms"]],
                "rrl",
            )
        )
    return [
        section(
            "bottleneck",
            "Where the time goes outside the GPU",
            paragraphs=[neck["method"]],
            tables=tables,
            figures=[n for n in ("host_over_time",) if n in have],
            bullets=notes + [f"Not measured: {a}" for a in absent],
        )
    ]
