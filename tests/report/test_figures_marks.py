"""Issue 21 item 8: the throughput figure marks server starts and arms; the latency figure shows every trial's value
beside the intervals."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rundir_fixtures import build_run, demo_spec  # noqa: E402

from evidence.analysis.analyze import compute_analysis  # noqa: E402
from evidence.analysis.load import load_run  # noqa: E402
from evidence.figures import build_figure  # noqa: E402
from evidence.spec.model import spec_from_json, spec_to_json  # noqa: E402


@pytest.fixture(scope="module")
def arms_run(tmp_path_factory) -> tuple:
    # 4 server starts, one repeat each, arms fast and slow in blocks (the plan's order)
    d = json.loads(spec_to_json(demo_spec(repeats=4)))
    d["sweep"]["sessions"] = 4
    d["arms"] = [{"name": "fast"}, {"name": "slow", "env": {"SLOW": "1"}}]
    run = build_run(
        tmp_path_factory.mktemp("arms"),
        spec=spec_from_json(json.dumps(d)),
        throughput=lambda r, p: {1: 100.0, 4: 300.0, 16: 280.0}[p] * (1 + 0.05 * r),
    )
    data = load_run(run)
    return data, compute_analysis(data)


def _scatter_labels(ax) -> dict[str, list[tuple[float, float]]]:
    return {
        c.get_label(): [tuple(map(float, o)) for o in c.get_offsets()]
        for c in ax.collections
        if not c.get_label().startswith("_")
    }


def test_throughput_marks_each_server_start_and_its_arm(arms_run: tuple) -> None:
    data, res = arms_run
    fig = build_figure("throughput_vs_concurrency", data, res)
    got = _scatter_labels(fig.axes[0])
    want: dict[str, list[float]] = {}
    for t in data.trials:
        want.setdefault(f"server start {t.session}, arm {t.arm}", []).append(
            next(x["output_throughput"] for x in res["trials"] if x["id"] == t.id)
        )
    assert set(got) == set(want) and len(want) == 4
    for name, pts in got.items():
        assert sorted(y for _, y in pts) == pytest.approx(sorted(want[name]))
    markers = {
        c.get_label(): c.get_paths()[0].vertices.tobytes()
        for c in fig.axes[0].collections
        if not c.get_label().startswith("_")
    }
    fast = {markers[n] for n in markers if n.endswith("arm fast")}
    slow = {markers[n] for n in markers if n.endswith("arm slow")}
    assert len(fast) == 1 and len(slow) == 1 and fast != slow, "one marker shape per arm"
    colours = {tuple(c.get_facecolor()[0]) for c in fig.axes[0].collections if not c.get_label().startswith("_")}
    assert len(colours) == 4, "one colour per server start"
    assert "4 server starts" in fig._suptitle.get_text() and "arms fast and slow" in fig._suptitle.get_text()


def test_one_server_start_keeps_one_mark_per_repeat(tmp_path: Path) -> None:
    data = load_run(build_run(tmp_path, spec=demo_spec()))
    fig = build_figure("throughput_vs_concurrency", data, compute_analysis(data))
    assert sorted(_scatter_labels(fig.axes[0])) == ["repeat 1", "repeat 2", "repeat 3"]
    assert "server start" not in fig._suptitle.get_text()


def test_latency_shows_every_trials_value_beside_its_interval(arms_run: tuple) -> None:
    data, res = arms_run
    fig = build_figure("latency_vs_concurrency", data, res)
    for ax, m in zip(fig.axes, res["spec"]["latency_metrics"]):
        bars = [c for c in ax.containers if c.has_yerr]
        bar_x = {float(s[0][0]) for c in bars for s in c.lines[2][0].get_segments()}
        dots = _scatter_labels(ax)
        for key in ("p50", "p99"):
            pts = dots[f"{key}: each trial"]
            want = sorted(t["latency"][m][key] for t in res["trials"] if t["status"] == "present")
            assert sorted(y for _, y in pts) == pytest.approx(want), "every trial, no more"
            assert not {x for x, _ in pts} & bar_x, "beside the bars, not on them"
        # p50's dots left of its bar, p99's right of its bar: neither sits between the pair
        for P in res["spec"]["points"]:
            near = sorted(x for x in bar_x if 0.8 * P < x < 1.25 * P)
            assert all(x < near[0] for x, _ in dots["p50: each trial"] if 0.8 * P < x < 1.25 * P)
            assert all(x > near[-1] for x, _ in dots["p99: each trial"] if 0.8 * P < x < 1.25 * P)


# ---------------------------------------------------------------- per-user against total throughput (issue 25) ----


@pytest.fixture(scope="module")
def knee(tmp_path_factory) -> tuple:
    # known latencies per point: each request's E2EL = ttft + (32 - 1) * tpot (rundir_fixtures' timing model)
    lat = {1: (0.01, 0.005), 4: (0.05, 0.008), 16: (0.5, 0.02)}
    run = build_run(tmp_path_factory.mktemp("knee"), spec=demo_spec(), latency=lat, missing=("r2-c16",))
    data = load_run(run)
    return data, compute_analysis(data), lat


def test_per_user_throughput_from_the_raw_records(knee: tuple) -> None:
    from evidence.analysis.user_throughput import user_vs_total

    data, res, lat = knee
    rows = {r["point"]: r for r in user_vs_total(data)}
    for P, (ttft, tpot) in lat.items():
        assert rows[P]["per_user"] == pytest.approx(32 / (ttft + 31 * tpot), rel=1e-9)
        # the total is the trials' output throughput (one definition), mean over the point's trials
        want = [t["output_throughput"] for t in res["trials"] if t["point"] == P and t["status"] == "present"]
        assert rows[P]["total"] == pytest.approx(sum(want) / len(want), rel=1e-6)
        assert rows[P]["trials"] == len(want) and rows[P]["requests"] == 4 * P * len(want)
    assert rows[16]["trials"] == 2, "the missing trial is left out"


def test_per_user_figure_one_marker_per_point_labelled(knee: tuple) -> None:
    from evidence.analysis.user_throughput import user_vs_total

    data, res, _ = knee
    fig = build_figure("user_vs_total_throughput", data, res)
    ax = fig.axes[0]
    rows = sorted(user_vs_total(data), key=lambda r: r["point"])
    pts = next(c for c in ax.collections if c.get_gid() == "user-vs-total-points").get_offsets()
    assert [float(v) for p in pts for v in p] == pytest.approx([v for r in rows for v in (r["total"], r["per_user"])])
    path = next(ln for ln in ax.get_lines() if ln.get_gid() == "user-vs-total-path")
    assert list(path.get_xdata()) == pytest.approx([r["total"] for r in rows]), "joined in increasing concurrency"
    labels = {t.get_text(): t.xy for t in ax.texts if hasattr(t, "xy")}
    assert set(labels) == {"C1", "C4", "C16"}
    assert labels["C16"] == pytest.approx((rows[2]["total"], rows[2]["per_user"]))
    assert "per user" in ax.get_ylabel() and "total output throughput" in ax.get_xlabel()


def test_per_user_figure_names_a_point_with_nothing_measured(tmp_path: Path) -> None:
    data = load_run(build_run(tmp_path, spec=demo_spec(), missing=("r1-c16", "r2-c16", "r3-c16")))
    fig = build_figure("user_vs_total_throughput", data, compute_analysis(data))
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert "nothing measured at C16" in texts and "C16" not in texts
