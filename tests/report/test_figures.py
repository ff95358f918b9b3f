"""Figures: byte-identical PNG and SVG across processes and hash seeds."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rundir_fixtures import build_run, demo_spec, read_text_tree  # noqa: E402

from evidence.figures import FIGURE_NAMES, render_environment  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
RENDER = "import sys; from pathlib import Path; from evidence.figures import render_figures; " \
         "render_figures(Path(sys.argv[1]), Path(sys.argv[2]))"


def _render_in_subprocesses(run: Path, jobs: list[tuple[Path, str]]) -> None:
    """Render in one fresh interpreter per (out dir, PYTHONHASHSEED), concurrently."""
    procs = []
    for out, hashseed in jobs:
        env = dict(os.environ, PYTHONHASHSEED=hashseed)
        env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
        procs.append(subprocess.Popen([sys.executable, "-c", RENDER, str(run), str(out)], env=env, cwd=str(REPO)))
    for p in procs:
        assert p.wait(timeout=120) == 0


def test_figures_byte_identical_across_processes_and_hash_seeds(tmp_path: Path) -> None:
    # small (2 points x 2 repeats) to keep the test quick; a missing and a failed trial exercise the notes
    spec = demo_spec(points=[4, 16], repeats=2, comparisons=[(4, 16)])
    run = build_run(tmp_path, spec=spec, missing=("r2-c16",), failed={"r1-c4": 2})
    _render_in_subprocesses(run, [(tmp_path / "f1", "1"), (tmp_path / "f2", "4242")])
    a, b = read_text_tree(tmp_path / "f1"), read_text_tree(tmp_path / "f2")
    expected = sorted([f"{n}.png" for n in FIGURE_NAMES] + [f"{n}.svg" for n in FIGURE_NAMES] + ["render.json"])
    assert sorted(a) == expected
    assert a.keys() == b.keys()
    for name in sorted(a):
        assert a[name] == b[name], f"{name} differs between processes"
    for n in FIGURE_NAMES:
        png, svg = a[f"{n}.png"], a[f"{n}.svg"]
        assert png.startswith(b"\x89PNG") and b"Software" not in png
        assert b"<dc:date>" not in svg and b"Matplotlib v" not in svg
        assert str(tmp_path).encode() not in svg
    manifest = json.loads(a["render.json"])
    assert manifest["environment"] == render_environment()
    assert set(manifest["files"]) == {k for k in a if k != "render.json"}


def test_render_environment_keys() -> None:
    env = render_environment()
    assert set(env) == {"matplotlib", "numpy", "freetype", "pillow", "backend"}
    assert env["backend"] == "agg" and all(env.values())


# ---- issue 15: latency against concurrency with intervals, the curve in concurrency order, readable log ticks ----

from evidence.analysis.analyze import compute_analysis  # noqa: E402
from evidence.analysis.load import load_run  # noqa: E402
from evidence.figures import build_figure, concurrency_path, figure_bytes  # noqa: E402


@pytest.fixture(scope="module")
def knee_dir(tmp_path_factory) -> Path:
    # C4 out-produces C16 (300 vs 280 tok/s) at a higher latency: the curve turns back at the knee. TTFT spans
    # 50x across the points (10 ms to 500 ms), so the ECDF's axis is logarithmic. C16 keeps one repeat.
    root = tmp_path_factory.mktemp("knee")
    return build_run(root, spec=demo_spec(comparisons=[(4, 16)]), missing=("r2-c16", "r3-c16"),
                     latency={1: (0.01, 0.005), 4: (0.05, 0.008), 16: (0.5, 0.02)})


@pytest.fixture(scope="module")
def knee_run(knee_dir: Path) -> tuple:
    data = load_run(knee_dir)
    return data, compute_analysis(data)


def test_latency_vs_concurrency_bars_are_the_analysis_intervals(knee_run: tuple) -> None:
    data, res = knee_run
    fig = build_figure("latency_vs_concurrency", data, res)
    ax = fig.axes[0]  # TTFT
    assert ax.get_xscale() == "log" and [t.get_text() for t in ax.get_xticklabels()] == ["1", "4", "16"]
    by = {p["point"]: p["latency"]["ttft"]["intervals"] for p in res["points"]}
    bars = [c for c in ax.containers if c.has_yerr]
    assert len(bars) == 2  # p50 and p99
    for cont, key in zip(bars, ("p50", "p99")):
        seg = cont.lines[2][0].get_segments()  # one vertical segment per point that has an interval
        assert len(seg) == 2, "C1 and C4 have 3 repeats; C16 has one and no bar"
        for (x0, lo), (_, hi) in seg:
            P = 1 if x0 < 2 else 4
            assert (lo, hi) == pytest.approx((by[P][key]["ci_low"], by[P][key]["ci_high"]))
    assert by[16]["p99"]["ci_low"] is None
    hollow = [c for c in ax.collections if (c.get_gid() or "").startswith("no-interval-ttft-")]
    assert [len(c.get_offsets()) for c in hollow] == [1, 1] and all(c.get_offsets()[0][0] > 10 for c in hollow), \
        "C16's single repeat: a hollow marker, no bar"


def test_throughput_latency_curve_joined_in_concurrency_order(knee_run: tuple) -> None:
    data, res = knee_run
    fig = build_figure("latency_vs_throughput", data, res)
    ax = fig.axes[0]
    tput = {p["point"]: p["output_throughput"]["mean"] for p in res["points"]}
    lat = {p["point"]: p["latency"]["ttft"]["mean_over_repeats"]["mean"] for p in res["points"]}
    line = next(ln for ln in ax.get_lines() if ln.get_gid() == "concurrency-path-ttft")
    # in concurrency order 1 -> 4 -> 16, not in throughput order (C16 < C4 on throughput)
    assert list(line.get_xdata()) == pytest.approx([tput[1], tput[4], tput[16]])
    assert list(line.get_ydata()) == pytest.approx([lat[1], lat[4], lat[16]])
    assert tput[16] < tput[4]
    arrows = [a for a in ax.texts if getattr(a, "arrow_patch", None) is not None]
    assert [(a.xyann, a.xy) for a in arrows] == [((tput[1], lat[1]), (tput[4], lat[4])),
                                                 ((tput[4], lat[4]), (tput[16], lat[16]))]
    shuffled = dict(res, points=list(reversed(res["points"])))
    assert [q[0] for q in concurrency_path(shuffled, "ttft")] == [1, 4, 16]


def test_ecdf_log_ticks_are_plain_numbers_with_units(knee_run: tuple) -> None:
    data, res = knee_run
    fig = build_figure("latency_ecdf", data, res)
    ax = fig.axes[0]  # TTFT: 10 ms to 500 ms
    assert ax.get_xscale() == "log"
    FigureCanvasAgg(fig).draw()
    lo, hi = ax.get_xlim()
    ticks = [t for t in ax.xaxis.get_majorticklocs() if lo <= t <= hi]
    labels = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
    assert {round(t / 10 ** math.floor(math.log10(t) + 1e-9)) for t in ticks} <= {1, 2, 5} and len(ticks) >= 4
    assert labels and all(re.fullmatch(r"\d+ (µs|ms|s)", s) for s in labels), labels
    assert "10 ms" in labels and "100 ms" in labels and "200 ms" in labels
    assert ax.get_xlabel() == "TTFT (log scale)"


def test_new_figure_bytes_deterministic_in_process(knee_run: tuple) -> None:
    data, res = knee_run
    a, b = figure_bytes(data, res), figure_bytes(data, res)
    assert a["latency_vs_concurrency.png"] == b["latency_vs_concurrency.png"]
    assert a["latency_vs_concurrency.svg"] == b["latency_vs_concurrency.svg"]
    assert list(a) == [f"{n}.{e}" for n in FIGURE_NAMES for e in ("png", "svg")]


def test_new_figure_bytes_identical_across_processes_and_hash_seeds(knee_run: tuple, knee_dir: Path,
                                                                     tmp_path: Path) -> None:
    # The knee run draws what the in-process test above cannot vouch for across processes: interval bars,
    # hollow markers, the concurrency path's arrows, log ticks. Two fresh interpreters, hash seeds 0 and
    # 4242, and this process (its own seed) must give the same bytes for every figure.
    out0, out1 = tmp_path / "seed0", tmp_path / "seed4242"
    _render_in_subprocesses(knee_dir, [(out0, "0"), (out1, "4242")])
    a, b = read_text_tree(out0), read_text_tree(out1)
    here = figure_bytes(*knee_run)
    assert sorted(k for k in a if k != "render.json") == sorted(here)
    for name in here:
        assert a[name] == b[name], f"{name} differs between PYTHONHASHSEED=0 and 4242"
        assert a[name] == here[name], f"{name} differs between a fresh process and this one"
