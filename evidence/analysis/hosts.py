"""The same spec on N hosts: did the ordering survive, and how much do nominally identical hosts differ?

Input: the run directories of one replication (`evidence run SPEC --executor slurm --hosts N`
writes them under one parent). For every host, each point's output throughput per repeat
(from the trial summaries, i.e. from the raw records through evidence.metrics). Then:
- per host: the declared comparisons as paired tests over that host's server starts (or, with one
  start, its repeats: scope "this server start"), as in evidence.analysis.stats;
- across hosts, with the host as the unit: each host's mean per point forms one pair, so the
  paired test asks whether the difference holds across hosts (n = hosts, scope "these N hosts"),
  beside the count of hosts whose own comparison agrees in sign and whose own verdict is a finding;
- variance at the level where it lives: per point, the within-host variance (of repeats) and the
  between-host variance component (one-way random effects, method of moments:
  var(host means) - within / repeats, floored at 0), both as a CV of the grand mean.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

import numpy as np

from evidence.analysis.load import NotARunDir, RunData, load_run
from evidence.analysis.stats import holm, paired

METRIC = "output_throughput"


def _throughputs(run: RunData) -> dict[int, dict[int, float]]:
    """point -> {repeat: output tok/s} for present trials that measured it."""
    out: dict[int, dict[int, float]] = {}
    for t in run.trials:
        v = (t.summary or {}).get(METRIC) if t.present else None
        if isinstance(v, (int, float)) and v > 0:
            out.setdefault(t.point, {})[t.repeat] = float(v)
    return out


def _sessions(run: RunData) -> dict[int, int]:
    """repeat -> its server start (engine session)."""
    return {t.repeat: int(t.session or 1) for t in run.trials}


def _pairs(tp: dict[int, dict[int, float]], a: int, b: int, sess: dict[int, int] | None = None
           ) -> tuple[list[float], list[float], list[int] | None]:
    common = sorted(set(tp.get(a, {})) & set(tp.get(b, {})))
    s = [sess.get(r, 1) for r in common] if sess is not None else None
    return [tp[a][r] for r in common], [tp[b][r] for r in common], s


def lost_hosts(execution: dict, parent: Path) -> list[dict]:
    """Every slot of a replication whose run is not complete, with what the scheduler and the runner said
    (execution.json's last attempt): a lost host is named, never silently left out of the count."""
    from evidence.canon import read_json

    out = []
    for name, slot in sorted((execution.get("slots") or {}).items()):
        rj = Path(parent) / name / "run.json"
        try:
            status = read_json(rj).get("status") if rj.is_file() else None
        except (OSError, ValueError):
            status = "unreadable"
        if status == "complete":
            continue
        last = (slot.get("attempts") or [{}])[-1]
        out.append({"host": name, "state": last.get("state", "not run"), "run_status": status,
                    "attempts": len(slot.get("attempts") or []),
                    "error": (str(last.get("error")).strip().splitlines() or [None])[-1] if last.get("error") else None})
    return out


def compare_hosts(run_dirs: Sequence[Path], names: Sequence[str] | None = None,
                  lost: Sequence[dict] = ()) -> dict:
    """Across hosts; `lost` (lost_hosts): the hosts the replication asked for whose run is not complete,
    named in the result (lost_hosts) and in every statement they are missing from."""
    if len(run_dirs) < 2:
        raise NotARunDir("a comparison across hosts needs at least two host runs.")
    runs = [load_run(Path(p)) for p in run_dirs]
    names = list(names or [Path(p).name for p in run_dirs])
    specs = {r.spec.model_dump_json() for r in runs}
    if len(specs) != 1:
        raise NotARunDir("the host runs do not share one spec; a replication compares the same spec on each host.")
    spec = runs[0].spec
    tps = [_throughputs(r) for r in runs]
    comps = [(c.a, c.b) for c in spec.analysis.comparisons]
    hosts = []
    for name, run, tp in zip(names, runs, tps):
        per = []
        for a, b in comps:
            xa, xb, ss = _pairs(tp, a, b, _sessions(run))
            per.append(paired(xa, xb, a=a, b=b, metric=METRIC, sessions=ss if ss and len(set(ss)) > 1 else None))
        per = holm(per) if len(per) > 1 else per
        node = ((run.provenance or {}).get("host") or {}).get("hostname")
        hosts.append({"host": name, "hostname": node, "status": (run.run_info or {}).get("status"),
                      "means": {str(p): float(np.mean(list(v.values()))) for p, v in sorted(tp.items())},
                      "comparisons": [x.as_dict() for x in per]})
    tests, rows = [], []
    for i, (a, b) in enumerate(comps):
        ok = [h for h, tp in zip(hosts, tps) if tp.get(a) and tp.get(b)]
        tests.append(paired([h["means"][str(a)] for h in ok], [h["means"][str(b)] for h in ok], a=a, b=b,
                            metric=f"{METRIC} (host means)", unit="host"))
        rows.append((i, a, b, ok))
    tests = holm(tests) if len(tests) > 1 else tests  # the family is the declared comparisons
    across = []
    for res, (i, a, b, ok) in zip(tests, rows):
        effects = [h["comparisons"][i]["effect"] for h in ok if h["comparisons"][i]["effect"] is not None]
        same = sum(1 for e in effects if res.effect is not None and e != 0 and (e > 0) == (res.effect > 0))
        findings = sum(1 for h in ok if h["comparisons"][i]["verdict"] == "finding")
        # lost hosts that gave nothing to this comparison: counted in its denominator, and named
        gone = [h for h in lost if h["host"] not in {x["host"] for x in ok}]
        lost_s = (f" ({len(gone)} of {len(ok) + len(gone)} hosts lost: "
                  + ", ".join(f"{h['host']} {h['state']}" for h in gone) + ")") if gone else ""
        across.append({**res.as_dict(), "hosts": len(ok), "hosts_same_direction": same,
                       "hosts_with_finding": findings,
                       "statement": (f"C{a} vs C{b}: same direction on {same} of {len(ok)} hosts{lost_s}, a finding on "
                                     f"{findings}; across hosts (the host as the unit): {res.verdict}; scope: "
                                     f"{res.scope} (n {res.n_units}"
                                     + (f", {res.df} df)" if res.df is not None else ")")
                                     + (f"; {res.scope_note}" if res.scope_note else ""))})
    variance = []
    points = sorted({p for tp in tps for p in tp})
    for p in points:
        per_host = [list(tp[p].values()) for tp in tps if tp.get(p)]
        means = [float(np.mean(v)) for v in per_host]
        grand = float(np.mean(means)) if means else math.nan
        within = [float(np.var(v, ddof=1)) for v in per_host if len(v) > 1]
        w = float(np.mean(within)) if within else None
        k = float(np.mean([len(v) for v in per_host])) if per_host else 0.0
        if len(means) > 1:
            between_raw = float(np.var(means, ddof=1)) - ((w or 0.0) / k if k else 0.0)
            b = max(0.0, between_raw)
        else:
            b = None
        variance.append({"point": p, "hosts": len(means), "grand_mean": grand,
                         "within_host_cv": (math.sqrt(w) / grand) if w is not None and grand else None,
                         "between_host_cv": (math.sqrt(b) / grand) if b is not None and grand else None,
                         "method": "one-way random effects, method of moments (between floored at 0)"})
    out = {"schema": "evidence.hosts/1", "spec": spec.name, "metric": METRIC, "hosts": hosts,
           "across_hosts": across, "variance": variance}
    if lost:
        out["lost_hosts"] = list(lost)
    return out


def summary_lines(res: dict) -> list[str]:
    lost = res.get("lost_hosts") or []
    lines = [f"{len(res['hosts'])} hosts of spec {res['spec']}"
             + (f" ({len(lost)} more lost: {', '.join(h['host'] for h in lost)})" if lost else "")]
    for h in lost:
        lines.append(f"  LOST {h['host']}: {h['state']}, run {h['run_status'] or 'never created'} after "
                     f"{h['attempts']} attempt(s)" + (f": {h['error']}" if h.get("error") else ""))
    for h in res["hosts"]:
        means = ", ".join(f"C{p} {v:,.1f}" for p, v in h["means"].items())
        lines.append(f"  {h['host']} ({h.get('hostname') or '?'}, {h.get('status') or '?'}): {means} tok/s")
    for c in res["across_hosts"]:
        ci = c.get("ci95")
        ci_s = f" [{ci[0]:+.1%}, {ci[1]:+.1%}]" if ci else ""
        eff = f" effect {c['effect']:+.1%}{ci_s}" if c.get("effect") is not None else ""
        lines.append(f"  {c['statement']}{eff}")
    for v in res["variance"]:
        w = f"{v['within_host_cv']:.1%}" if v["within_host_cv"] is not None else "n/a"
        b = f"{v['between_host_cv']:.1%}" if v["between_host_cv"] is not None else "n/a"
        lines.append(f"  C{v['point']}: within-host CV {w}, between-host CV {b}")
    return lines
