"""Attention time per path (the seed article's grouping): per gridX of FA2 split-KV, summed over its grid rows,
in the capture window and in the accepted forwards; `evidence trace` prints it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import ROOT, skip_unless_ci
from trace_fixtures import ATTN_DECODE_NS, ATTN_MIXED_NS, REAL, ForwardSpec, vllm_scenario, write_kineto_json

from evidence.traces.analyses import analyze_trace
from evidence.traces.analyses.geometry import path_totals
from evidence.traces.load import load_trace

LAYERS = 36


def _scenario(tmp_path: Path) -> tuple[Path, list[ForwardSpec]]:
    # mixed forwards of 215-219 sequences: gridX=9 spread over five (gridX, gridY, gridZ) rows
    fws = [ForwardSpec(200, 1, True, (0, 0, 200, 200)) for _ in range(3)]
    fws += [ForwardSpec(n, 9, False, (2, 2042, n - 2, n - 2)) for n in (215, 216, 217, 218, 219, 217)]
    fws += [ForwardSpec(180, 1, True, (0, 0, 180, 180))]
    return write_kineto_json(tmp_path / "t.json", vllm_scenario(fws, n_layers=LAYERS)), fws


def test_per_path_totals_sum_the_grid_rows_in_the_window_and_the_forwards(tmp_path: Path) -> None:
    path, fws = _scenario(tmp_path)
    tokens = 4321
    res = analyze_trace(load_trace(path), n_layers=LAYERS, output_tokens=tokens)
    p = path_totals(res)
    n_mixed = sum(1 for f in fws if f.grid_x == 9)
    n_dec = len(fws) - n_mixed
    win = {r["grid_x"]: r for r in p["window"]}
    assert sorted(win) == [1, 9]
    assert win[9]["launches"] == LAYERS * n_mixed and win[9]["grid_groups"] == 5
    assert win[9]["total_ns"] == LAYERS * n_mixed * ATTN_MIXED_NS and win[9]["mean_ns"] == ATTN_MIXED_NS
    assert win[1]["launches"] == LAYERS * n_dec and win[1]["total_ns"] == LAYERS * n_dec * ATTN_DECODE_NS
    assert win[9]["per_token_ns"] == win[9]["total_ns"] / tokens
    assert "mixed/prefill" in win[9]["path"] and "decode" in win[1]["path"]
    # the window's rows are the geometry groups regrouped, nothing more
    groups = [x for g in res["geometry"] if g["select"] == win[9]["rule"] for x in g["groups"]]
    assert sum(x["total_ns"] for x in groups if x["grid"][0] == 9) == win[9]["total_ns"]
    fwd = {r["grid_x"]: r for r in p["forwards"]}
    assert fwd[9]["forwards"] == n_mixed and fwd[9]["launches"] == LAYERS * n_mixed
    assert fwd[9]["total_ns"] == win[9]["total_ns"] and fwd[1]["forwards"] == n_dec


def test_evidence_trace_prints_the_per_path_table(tmp_path: Path) -> None:
    path, fws = _scenario(tmp_path)
    run = [sys.executable, "-m", "evidence.cli", "trace", str(path), "--layers", str(LAYERS), "--tokens", "1000"]
    p = subprocess.run(run, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "Attention by path in the capture window" in p.stdout
    assert "Attention by path in the accepted forwards" in p.stdout
    n_mixed = sum(1 for f in fws if f.grid_x == 9)
    line = next((ln for ln in p.stdout.splitlines() if "gridX=9 mixed" in ln), p.stdout)
    assert f"{LAYERS * n_mixed:,}" in line and f"{LAYERS * n_mixed * ATTN_MIXED_NS / 1e6:,.3f}" in line
    p = subprocess.run(run + ["--json"], capture_output=True, text=True, cwd=ROOT, timeout=300)
    doc = json.loads(p.stdout)
    assert [r["grid_x"] for r in doc["paths"]["window"]] == [1, 9]


def test_real_h200_trace_paths_come_from_the_steps() -> None:
    f = REAL / "trace-c256.pt.trace.json.gz"
    if not f.is_file():
        skip_unless_ci(f"shared trace data not found at {REAL}")
    res = analyze_trace(load_trace(f), n_layers=LAYERS)
    p = path_totals(res)
    assert p["window"] == [] and "FA2" in p["window_absent"]  # FA3 is persistent: its grid carries no path
    acc = res["forwards"]["forwards"]
    assert {r["path"] for r in p["forwards"]} == {"decode", "mixed/prefill-containing"}
    assert sum(r["launches"] for r in p["forwards"]) == sum(f["launches"] for f in acc)
    assert sum(r["total_ns"] for r in p["forwards"]) == sum(f["total_kernel_ns"] for f in acc)
    for r in p["forwards"]:
        want = "mixed" if r["path"].startswith("mixed") else "decode"
        assert r["forwards"] == sum(1 for f in acc if f["path"] == want)
