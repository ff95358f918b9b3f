"""An absent latency interval names its real reason in the report table and the figure, not always "n".

The case: ITL p50 = 0 in every trial when a response's chunks arrive in one read and share a timestamp; a 0 has no
logarithm, so there is no interval although there are 3 repeats.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rundir_fixtures import build_run, demo_spec  # noqa: E402

from evidence.analysis.analyze import compute_analysis  # noqa: E402
from evidence.analysis.latency import interval  # noqa: E402
from evidence.analysis.load import load_run  # noqa: E402
from evidence.figures import build_figure  # noqa: E402
from evidence.report.layout import latency_concurrency_table  # noqa: E402


def _res(ivs: dict[str, dict]) -> dict:
    return {"spec": {"percentiles": [50.0, 99.0], "latency_metrics": ["itl"]},
            "points": [{"label": "C8", "repeats_measured": 3, "latency": {"itl": {"intervals": ivs}}}]}


def test_table_names_a_zero_value_not_n() -> None:
    t = latency_concurrency_table(_res({"p50": interval([0.0, 0.0, 0.0], what="ITL p50"),
                                        "p99": interval([4.0, 5.0, 6.0], what="ITL p99")}))
    row = t["rows"][0]
    assert row[3] == "0.0 (no interval: a trial's value is 0)", "was '(no interval: n = 3)', which is no reason"
    assert row[4].startswith("5.0 (") and "no interval" not in row[4]
    assert "a trial's value of 0 or less (no logarithm)" in t["note"]


def test_table_names_a_non_finite_value() -> None:
    # no value (a mean over a NaN is none), but the cell still says why rather than a bare n/a
    t = latency_concurrency_table(_res({"p50": interval([1.0, float("nan"), 2.0]), "p99": interval([7.5])}))
    assert t["rows"][0][3:] == ["n/a (no interval: a trial's value is not finite)", "7.5 (no interval: n = 1)"]
    # nothing measured at all: a bare n/a, and no "0 repeats" in the interval-over column
    t = latency_concurrency_table(_res({"p50": interval([]), "p99": interval([4.0, 5.0])}))
    assert t["rows"][0][2:] == ["2 repeats", "n/a", "4.5 (1.1 to 18.5)"]


@pytest.fixture(scope="module")
def zero_itl(tmp_path_factory) -> tuple:
    run = build_run(tmp_path_factory.mktemp("zero-itl"), spec=demo_spec(), missing=("r2-c16", "r3-c16"))
    data = load_run(run)
    res = compute_analysis(data)
    for p in res["points"]:
        if p["point"] == 4:  # C4's ITL p50: three repeats, each 0
            p["latency"]["itl"]["intervals"]["p50"] = interval([0.0, 0.0, 0.0], [1, 1, 1], what="ITL p50")
    return data, res


def _hollow_labels(fig, metric: str) -> dict[str, str]:
    ax = fig.axes[["ttft", "tpot", "itl", "e2el"].index(metric)]
    return {c.get_gid(): c.get_label() for c in ax.collections if (c.get_gid() or "").startswith("no-interval-")}


def test_figure_legend_gives_the_reason(zero_itl: tuple) -> None:
    data, res = zero_itl
    fig = build_figure("latency_vs_concurrency", data, res)
    # TTFT: only C16's single repeat lacks an interval, and says so (it said "fewer than 2 repeats" for every case)
    assert _hollow_labels(fig, "ttft") == {"no-interval-ttft-p50": "p50: no interval (n = 1)",
                                           "no-interval-ttft-p99": "p99: no interval (n = 1)"}
    # ITL p50: C4 (a 0) and C16 (one repeat) lack it for different reasons: the legend sends to the table
    labels = _hollow_labels(fig, "itl")
    assert labels["no-interval-itl-p50"] == "p50: no interval (see table)"
    assert labels["no-interval-itl-p99"] == "p99: no interval (n = 1)"
    # the same figure twice: the same labels (the reasons are sorted, not in set order)
    assert _hollow_labels(build_figure("latency_vs_concurrency", data, res), "itl") == labels


def test_figure_legend_names_a_single_zero_reason(zero_itl: tuple) -> None:
    data, res = zero_itl
    only_c4 = dict(res, points=[p for p in res["points"] if p["point"] != 16])
    labels = _hollow_labels(build_figure("latency_vs_concurrency", data, only_c4), "itl")
    assert labels == {"no-interval-itl-p50": "p50: no interval (a trial's value is 0)"}
