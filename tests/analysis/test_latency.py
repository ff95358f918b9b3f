"""Latency intervals across repeats (evidence.analysis.latency): known answers, the unit rule, absence."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
from scipy import stats as sps

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rundir_fixtures import build_run, demo_spec  # noqa: E402

from evidence.analysis.analyze import compute_analysis  # noqa: E402
from evidence.analysis.latency import interval  # noqa: E402
from evidence.analysis.load import load_run  # noqa: E402


def test_known_interval_over_repeats() -> None:
    iv = interval([10.0, 12.0, 14.0], what="TTFT p99")
    # mean 12, sd 2, n 3: 12 -+ t(0.975, 2) * 2 / sqrt(3) = 12 -+ 4.303 * 1.1547
    assert iv["value"] == pytest.approx(12.0)
    assert iv["ci_low"] == pytest.approx(12.0 - 4.302652729911275 * 2 / math.sqrt(3), abs=1e-9)
    assert (iv["ci_low"], iv["ci_high"]) == pytest.approx(sps.t.interval(0.95, 2, loc=12.0, scale=2 / math.sqrt(3)))
    assert (iv["n"], iv["unit"]) == (3, "repeat") and "absent" not in iv
    assert "95% t interval" in iv["procedure"] and "TTFT p99 over 3 repeats" in iv["procedure"]


@pytest.mark.parametrize("values", [[], [7.5]])
def test_fewer_than_two_repeats_no_interval(values: list[float]) -> None:
    iv = interval(values)
    assert iv["ci_low"] is None and iv["ci_high"] is None
    assert iv["n"] == len(values) and "needs at least 2" in iv["absent"]
    assert iv["value"] == (values[0] if values else None)


def test_zero_spread_is_a_point_and_says_so() -> None:
    iv = interval([5.0, 5.0, 5.0])
    assert iv["ci_low"] == iv["ci_high"] == 5.0 and "zero spread" in iv["note"]


def test_sessions_that_differ_are_the_unit() -> None:
    # two sessions of two repeats: 10, 11 | 20, 21. The sessions differ far beyond their repeats.
    iv = interval([10.0, 11.0, 20.0, 21.0], [1, 1, 2, 2])
    assert (iv["unit"], iv["n"]) == ("session", 2)
    means = [10.5, 20.5]
    sd = sps.tstd(means)
    assert (iv["ci_low"], iv["ci_high"]) == pytest.approx(sps.t.interval(0.95, 1, loc=15.5, scale=sd / math.sqrt(2)))
    assert iv["components"]["sd_between"] > iv["components"]["sd_within"]
    # sessions whose means do not differ: the repeat stays the unit
    same = interval([10.0, 12.0, 10.0, 12.0], [1, 1, 2, 2])
    assert (same["unit"], same["n"]) == ("repeat", 4) and same["components"]["sd_between"] == 0
    # one repeat per session: the repeats are the sessions
    one = interval([10.0, 12.0], [1, 2])
    assert (one["unit"], one["n"]) == ("session", 2)


def test_mismatched_sessions_rejected() -> None:
    with pytest.raises(ValueError, match="2 session labels for 3 values"):
        interval([1.0, 2.0, 3.0], [1, 2])


def test_attached_to_analysis(tmp_path: Path) -> None:
    run = build_run(tmp_path, spec=demo_spec(comparisons=[(4, 16)]), missing=("r2-c16", "r3-c16"))
    res = compute_analysis(load_run(run))
    assert "latency_intervals" in res["methods"]
    by = {p["point"]: p for p in res["points"]}
    for m in ("ttft", "tpot", "itl", "e2el"):
        lat = by[4]["latency"][m]
        for st in ("mean", "p50", "p99"):
            iv = lat["intervals"][st]
            vals = [t["latency"][m][st] for t in res["trials"] if t["point"] == 4]
            assert iv["value"] == pytest.approx(lat["mean_over_repeats"][st], abs=1e-8)
            assert (iv["ci_low"], iv["ci_high"]) == pytest.approx(
                sps.t.interval(0.95, 2, loc=sum(vals) / 3, scale=sps.tstd(vals) / math.sqrt(3)), abs=1e-8)
            assert iv["ci_low"] < iv["value"] < iv["ci_high"]
        # C16 kept one repeat: absent with the reason, never a zero-width interval
        one = by[16]["latency"][m]["intervals"]["p99"]
        assert one["n"] == 1 and one["ci_low"] is None and "one measured repeat" in one["absent"]


def test_session_unit_in_a_run(tmp_path: Path) -> None:
    spec = demo_spec(repeats=6)
    spec = spec.model_copy(update={"sweep": spec.sweep.model_copy(update={"sessions": 3})})
    factor = [1.10, 1.11, 1.20, 1.21, 1.02, 1.03]  # latency follows throughput in the fixture
    run = build_run(tmp_path, spec=spec, throughput=lambda r, p: {1: 50.0, 4: 100.0 * factor[r - 1], 16: 100.0}[p])
    res = compute_analysis(load_run(run))
    iv = next(p for p in res["points"] if p["point"] == 4)["latency"]["ttft"]["intervals"]["p50"]
    assert (iv["unit"], iv["n"]) == ("session", 3) and "engine sessions" in iv["procedure"]
