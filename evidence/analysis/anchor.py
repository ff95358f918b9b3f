"""Our client against an anchor client on the same server and workload.

`evidence run --interleave 'vllm bench serve ... --save-result --result-dir {out}'`
runs the anchor right after each of our trials, against the same server, with the
same point and prompt count. This module pairs each of our trials with the anchor
run that followed it and reports the ratios (ours / anchor) per trial and per
point. A pure function of the run's raw files.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from evidence.canon import read_json
from evidence.rundir import INTERLEAVED, INTERLEAVED_COMMAND, SUMMARY, TRIALS

# (our summary path, anchor result key, label); latencies in ms, throughput in tok/s
FIELDS = (
    (("output_throughput",), "output_throughput", "output throughput (tok/s)"),
    (("ttft_ms", "mean"), "mean_ttft_ms", "mean TTFT (ms)"),
    (("ttft_ms", "p99"), "p99_ttft_ms", "p99 TTFT (ms)"),
    (("tpot_ms", "mean"), "mean_tpot_ms", "mean TPOT (ms)"),
    (("itl_ms", "mean"), "mean_itl_ms", "mean ITL (ms)"),
    (("e2el_ms", "mean"), "mean_e2el_ms", "mean E2E (ms)"),
)


def _get(d: Any, path: tuple[str, ...]) -> float | None:
    for k in path:
        if not isinstance(d, dict):
            return None
        d = d.get(k)
    return float(d) if isinstance(d, (int, float)) and not isinstance(d, bool) else None


def _anchor_result(folder: Path) -> dict | None:
    # rglob: a relative --result-dir lands below the folder (the anchor runs with the folder as cwd)
    for p in sorted(folder.rglob("*.json")):
        if p.name == INTERLEAVED_COMMAND:
            continue
        try:
            obj = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(obj, dict) and "output_throughput" in obj:
            return obj
    return None


def anchor_comparison(run_dir: Path) -> dict | None:
    """Per-trial and per-point ratios ours/anchor, or None when nothing was interleaved."""
    run_dir = Path(run_dir)
    idir = run_dir / INTERLEAVED
    if not idir.is_dir():
        return None
    rows = []
    for folder in sorted(p for p in idir.iterdir() if p.is_dir()):
        cmd = read_json(folder / INTERLEAVED_COMMAND) if (folder / INTERLEAVED_COMMAND).exists() else {}
        tid = cmd.get("trial", folder.name)
        ours_p = run_dir / TRIALS / tid / SUMMARY
        ours = read_json(ours_p) if ours_p.exists() else None
        anc = _anchor_result(folder)
        point = cmd.get("point")
        if point is None and "-c" in tid:
            point = int(tid.rsplit("-c", 1)[1].split("-")[0])
        row: dict[str, Any] = {"trial": tid, "point": point, "anchor_exit_code": cmd.get("exit_code"),
                               "metrics": {}}
        if ours is None or anc is None:
            row["absent"] = ("our trial is not complete" if ours is None else
                             "the anchor did not finish (no command.json: the run was interrupted during it)"
                             if not cmd else "the anchor wrote no result JSON (see its output.log)")
        else:
            row["anchor_completed"], row["anchor_failed"] = anc.get("completed"), anc.get("failed")
            row["ours_completed"], row["ours_failed"] = ours.get("completed"), ours.get("failed")
            for path, key, label in FIELDS:
                o, a = _get(ours, path), _get(anc, (key,))
                row["metrics"][label] = {"ours": o, "anchor": a,
                                         "ratio": (o / a) if (o is not None and a not in (None, 0)) else None}
        rows.append(row)
    points: dict[str, Any] = {}
    for r in rows:
        if r.get("absent") or r["point"] is None:
            continue
        pt = points.setdefault(str(r["point"]), {})
        for label, m in r["metrics"].items():
            if m["ratio"] is not None:
                pt.setdefault(label, []).append(m["ratio"])
    summary = {p: {label: {"mean_ratio": sum(v) / len(v), "n": len(v), "min": min(v), "max": max(v)}
                   for label, v in sorted(d.items())} for p, d in sorted(points.items(), key=lambda kv: int(kv[0]))}
    return {
        "method": "each of our trials is followed by the anchor client on the same server, point and prompt count; "
                  "ratio = ours / anchor (for throughput above 1 means we measured more; for latency, longer)",
        "trials": rows,
        "points": summary,
    }
