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
