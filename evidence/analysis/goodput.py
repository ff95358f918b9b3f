"""SLO goodput: which measured requests meet every declared SLO, per trial and per point."""

from __future__ import annotations

from evidence.analysis.load import RunData
from evidence.analysis.numbers import mean_of, rel_of
from evidence.metrics import LATENCY_METRICS
from evidence.records import RequestRecord
from evidence.spec.model import Spec


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


def goodput(data: RunData, rows: dict[str, dict], spec: Spec) -> dict:
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
                      "attainment": rel_of(float(meeting), float(len(measured))) if measured else None,
                      "goodput_rps": (meeting / dur) if dur else None,
                      "absent": None if dur else "trial duration undefined (no completed request)"})
    prows = []
    for P in spec.sweep.points:
        ts = [t for t in trows if t["point"] == P]
        gs = [t["goodput_rps"] for t in ts if t["goodput_rps"] is not None]
        at = [t["attainment"] for t in ts if t["attainment"] is not None]
        prows.append({"point": P, "n": len(gs), "goodput_rps_mean": mean_of(gs), "attainment_mean": mean_of(at),
                      "flags": [f for t in ts for f in ([f"{t['trial']}: missing"] if t["requests"] is None else [])]})
    return {"slos_ms": {k: slos[k] for k in sorted(slos)}, "trials": trows, "points": prows, "absent": None}
