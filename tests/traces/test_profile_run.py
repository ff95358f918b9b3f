"""A run's profile/ goes through the trace analyses, joined to the client's records by the
clock bridge (client perf_counter t0 + wall clock -> trace wall-clock ns)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evidence.analysis import analyze_run
from evidence.canon import read_json, write_json
from evidence.records import RequestRecord, write_records
from evidence.report.context import render_report

from rundir_fixtures import build_run  # noqa: E402
from trace_fixtures import ForwardSpec, T0_REL_NS, abs_ns, vllm_scenario, write_kineto_json


def _profile(run: Path, *, t0_unix: float, chunk_s: list[list[float]]) -> Path:
    """profile/ as evidence.run.profiling writes it: profile.json + c4/{trace, requests.jsonl, meta.json}."""
    folder = run / "profile" / "c4"
    folder.mkdir(parents=True)
    fw = [ForwardSpec(nseq=4, grid_x=1, graph=True, step=(0, 0, 4, 4)) for _ in range(6)]
    write_kineto_json(folder / "rank0.1.pt.trace.json.gz", vllm_scenario(fw, n_layers=4), gz=True)
    recs = [RequestRecord(i=i, phase="profile", prompt_len=8, max_tokens=len(c), intended_s=0.0, slot_wait_s=0.0,
                          send_s=0.0, first_chunk_s=c[0], chunk_s=c, end_s=c[-1], prompt_tokens=8,
                          completion_tokens=len(c), chunk_count=len(c), finish_reason="length", status=200, ok=True)
            for i, c in enumerate(chunk_s)]
    write_records(folder / "requests.jsonl", recs)
    write_json(folder / "meta.json", {"point": 4, "prompts": len(recs), "client": {"t0_unix": t0_unix},
                                      "window": {}, "trace_files": []})
    write_json(run / "profile" / "profile.json", {"tool": "torch", "settings": [], "window": {},
                                                  "points": [{"point": 4, "files": ["rank0.1.pt.trace.json.gz"]}],
                                                  "note": "diagnostic"})
    return folder


def test_profile_analysis_with_clock_bridge(tmp_path):
    run = build_run(tmp_path)
    start_ns = abs_ns(T0_REL_NS)  # the first kernel of the synthetic trace starts here (wall-clock ns)
    t0_unix = start_ns / 1e9 - 1.0  # the client's t0 one second before the first kernel
    # request 0: 3 chunks inside the window (1.0005 .. 1.0007 s after t0) and 1 long after it;
    # request 1: 1 chunk before the window, 2 inside
    chunks = [[1.0005, 1.0006, 1.0007, 50.0], [0.5, 1.0006, 1.0008]]
    _profile(run, t0_unix=t0_unix, chunk_s=chunks)
    analyze_run(run)
    prof = read_json(run / "analysis" / "profile.json")
    (tr,) = prof["points"]["4"]["traces"]
    a = tr["analysis"]
    assert a["clock_bridge"]["output_tokens_in_window"] == 5  # counted by hand above
    assert a["trace"]["path"] == "rank0.1.pt.trace.json.gz"  # never an absolute path
    assert a["steps"]["steps"] == 6
    fams = {f["family"]: f for f in a["families"]["families"]}
    assert fams["attention"]["per_token_ns"] == fams["attention"]["total_ns"] / 5
    assert (run / "analysis" / "profile_summary.csv").read_text().startswith("file,point,")
    md = render_report(run)[0].read_text(encoding="utf-8")
    assert "## Profiling (diagnostic)" in md and "Kernel families per output token" in md
    assert "Profiling is diagnostic only" in md
    # a pure function of raw data: analysing again gives the same bytes
    before = (run / "analysis" / "profile.json").read_bytes()
    analyze_run(run)
    assert (run / "analysis" / "profile.json").read_bytes() == before


def test_cpu_trace_without_kernels_is_reported_absent_not_failed(tmp_path):
    from trace_fixtures import cpu_only_kineto

    run = build_run(tmp_path)
    folder = _profile(run, t0_unix=0.0, chunk_s=[[0.1, 0.2]])
    (folder / "rank0.1.pt.trace.json.gz").unlink()
    cpu_only_kineto(folder / "rank0.2.pt.trace.json")
    analyze_run(run)
    prof = read_json(run / "analysis" / "profile.json")
    (tr,) = prof["points"]["4"]["traces"]
    assert tr["analysis"]["kernel_active"]["absent"].startswith("no GPU kernels")
    md = render_report(run)[0].read_text(encoding="utf-8")
    assert "no GPU kernels" in md
