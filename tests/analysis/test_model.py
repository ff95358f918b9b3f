"""The typed analysis (evidence.analysis.model): built where analysis.json is written, read back exactly.

Checked: the analysis.json of a run is the canonical JSON of build_analysis's `to_dict()`, and reading it
back with `Analysis.from_dict` gives the same dict (every key, typed or not); nested sections are typed
(a reader gets attributes, not dicts); an older analysis.json (sections and keys missing) reads with
defaults and writes back as it was, never with keys it did not have; the tables of the typed analysis
equal those of its dict.
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evidence.analysis.analyze import build_analysis, compute_analysis, write_analysis
from evidence.analysis.dataframes import csv_tables
from evidence.analysis.load import load_run
from evidence.analysis.model import (
    Analysis,
    CaveatKind,
    GoodputPoint,
    Interval,
    PairedRepeat,
    Pin,
    SessionSpread,
    Steady,
    Throughput,
    as_analysis,
)
from evidence.canon import dumps
from rundir_fixtures import build_run, demo_spec  # noqa: E402


def _sessions_run(root: Path) -> Path:
    # 6 repeats in 3 server starts, two comparisons and SLOs: session spreads, intervals, goodput
    spec = demo_spec(repeats=6, comparisons=[(1, 4), (4, 16)], slos_ms={"ttft": 500})
    spec = spec.model_copy(update={"sweep": spec.sweep.model_copy(update={"sessions": 3})})
    ratio = [1.10, 1.11, 1.20, 1.21, 1.02, 1.03]
    return build_run(
        root,
        spec=spec,
        run_id="typed",
        missing=("r2-c16",),
        throughput=lambda r, p: {1: 50.0, 4: 100.0 * ratio[r - 1], 16: 100.0}[p],
    )


def test_analysis_json_is_the_typed_analysis_and_reads_back_exactly(tmp_path: Path) -> None:
    data = load_run(_sessions_run(tmp_path))
    a = build_analysis(data)
    assert isinstance(a, Analysis)
    d = a.to_dict()
    assert d == compute_analysis(data)
    write_analysis(a, tmp_path / "out")
    written = (tmp_path / "out" / "analysis.json").read_text(encoding="utf-8")
    assert written == dumps(d)
    back = Analysis.from_dict(json.loads(written))
    assert dumps(back.to_dict()) == written
    assert back == a  # the typed fields agree too (extra/unset are not compared)


def test_nested_sections_are_typed(tmp_path: Path) -> None:
    a = build_analysis(load_run(_sessions_run(tmp_path)))
    p = a.point(4)
    assert p is not None and isinstance(p.output_throughput, Throughput)
    assert [v.repeat for v in p.output_throughput.values] == [1, 2, 3, 4, 5, 6]
    ivs = p.latency["ttft"].intervals
    assert ivs and all(isinstance(iv, Interval) for iv in ivs.values())
    c = a.comparison(1, 4)
    assert c is not None and c.unit == "session" and isinstance(c.sessions, SessionSpread)
    assert c.sessions.sessions == 3 and all(isinstance(r, PairedRepeat) for r in c.repeats)
    assert c.latency_side_by_side and c.latency_side_by_side[0].metric == "output_throughput"
    assert a.adjacent and all(x.latency_side_by_side is None for x in a.adjacent)
    assert all(isinstance(w.steady, Steady) for w in a.within.trials if w.status == "present")
    assert a.completeness.missing == ["r2-c16"] and a.caution
    assert a.goodput.absent is None and a.goodput.trials
    assert a.goodput.points and all(isinstance(g, GoodputPoint) for g in a.goodput.points)
    assert len(a.caveat_kinds) == len(a.caveats) and all(isinstance(k, CaveatKind) for k in a.caveat_kinds)
    assert [w.trials for w in a.within.points] == [6, 6, 5]  # r2-c16 is missing
    assert a.setup.pins and all(isinstance(p, Pin) and p.ok for p in a.setup.pins)  # the fixture's pins hold
    assert a.arms is None and a.sequential is None and a.bottleneck is None
    assert "arms" not in a.to_dict() and "sequential" not in a.to_dict() and "bottleneck" not in a.to_dict()


def test_an_older_analysis_reads_with_defaults_and_writes_back_as_it_was(tmp_path: Path) -> None:
    new = compute_analysis(load_run(_sessions_run(tmp_path)))
    old = copy.deepcopy(new)
    for k in ("variance_components", "scope", "caveat_kinds", "files"):
        old.pop(k)
    for c in old["comparisons"]:
        c.pop("halfwidth")
        c.pop("scope")
    for p in old["points"]:
        for lat in p["latency"].values():
            lat.pop("intervals", None)
    for w in old["within"]["points"]:
        w.pop("trials")
    for w in old["within"]["trials"]:
        if w.get("steady"):
            w["steady"].pop("detectable_drift", None)
    a = Analysis.from_dict(old)
    assert a.variance_components is None and a.files == [] and a.scope.scope == ""
    assert a.comparisons[0].halfwidth is None and a.comparisons[0].scope == ""
    assert all(lat.intervals is None for p in a.points for lat in p.latency.values())
    assert a.caveat_kinds == [] and all(w.trials == 0 for w in a.within.points)
    assert all(w.steady.detectable_drift is None for w in a.within.trials if w.steady)
    assert a.to_dict() == old  # no key it did not have
    assert as_analysis(old).to_dict() == old and as_analysis(a) is a


def test_tables_of_the_typed_analysis_equal_those_of_its_dict(tmp_path: Path) -> None:
    a = build_analysis(load_run(_sessions_run(tmp_path)))
    assert csv_tables(a) == csv_tables(a.to_dict())
