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
from evidence.analysis.latency import absent_short, interval  # noqa: E402
from evidence.analysis.load import load_run  # noqa: E402


def _log_t(values: list[float], level: float = 0.95) -> tuple[float, float]:
    """The expected interval, worked out here: scipy's t interval of the mean of ln(values), back-transformed."""
    logs = [math.log(v) for v in values]
    n = len(logs)
    lo, hi = sps.t.interval(level, n - 1, loc=sum(logs) / n, scale=sps.tstd(logs) / math.sqrt(n))
    return math.exp(lo), math.exp(hi)


def test_known_interval_over_repeats() -> None:
    iv = interval([10.0, 12.0, 14.0], what="TTFT p99")
    # ln: 2.302585, 2.484907, 2.639057; mean 2.475516, sd 0.168433, n 3; t(0.975, 2) = 4.302653
    # -> exp(2.475516 -+ 4.302653 * 0.168433 / sqrt(3)) = 7.8233 .. 18.0641, around the geometric mean 11.8878
    assert iv["value"] == pytest.approx(12.0)  # the arithmetic mean, the tables' number
    assert iv["geometric_mean"] == pytest.approx((10 * 12 * 14) ** (1 / 3), rel=1e-12)
    assert (iv["ci_low"], iv["ci_high"]) == pytest.approx((7.823302, 18.064090), rel=1e-6)
    assert (iv["ci_low"], iv["ci_high"]) == pytest.approx(_log_t([10.0, 12.0, 14.0]), rel=1e-12)
    # asymmetric: longer above the geometric mean than below, as a positive, skewed quantity is
    assert iv["ci_high"] - iv["geometric_mean"] > iv["geometric_mean"] - iv["ci_low"] > 0
    # not the linear t interval (12 -+ 4.97): that one is symmetric about the mean
    lin = sps.t.interval(0.95, 2, loc=12.0, scale=2 / math.sqrt(3))
    assert abs(iv["ci_low"] - lin[0]) > 0.1 and abs(iv["ci_high"] - lin[1]) > 0.1
    assert (iv["n"], iv["unit"], iv["level"]) == (3, "repeat", 0.95) and "absent" not in iv
    assert "95% t interval" in iv["procedure"] and "ln(per-trial TTFT p99) over 3 repeats" in iv["procedure"]
    assert "back-transformed by exp" in iv["procedure"] and "geometric mean" in iv["procedure"]


def test_wide_spread_stays_positive() -> None:
    # the C256 TTFT p50 case of runs/h200-a100sched-s2 in kind: two units far apart. A linear t interval of
    # [300, 1235] is 767.5 -+ 12.706 * 467.5 = -5172 .. 6708; on logs it stays above 0.
    iv = interval([300.0, 1235.0], what="TTFT p50")
    assert iv["value"] == pytest.approx(767.5)
    assert (iv["ci_low"], iv["ci_high"]) == pytest.approx(_log_t([300.0, 1235.0]), rel=1e-12)
    assert 0 < iv["ci_low"] < 300.0 and iv["ci_high"] > 1235.0
    assert iv["ci_low"] * iv["ci_high"] == pytest.approx(iv["geometric_mean"] ** 2, rel=1e-12)


def test_non_positive_value_has_no_interval() -> None:
    iv = interval([10.0, 0.0, 12.0], what="ITL p50")
    assert iv["ci_low"] is None and iv["ci_high"] is None and iv["geometric_mean"] is None
    assert "ITL p50 of 0 (<= 0) has no logarithm" in iv["absent"]
    assert iv["value"] == pytest.approx(22.0 / 3) and iv["n"] == 3


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_value_has_no_interval_and_no_value(bad: float) -> None:
    # a NaN passed the "<= 0" check (NaN <= 0 is False) and then crashed with an IndexError
    iv = interval([10.0, bad, 12.0], [1, 1, 2], what="ITL p50")
    assert iv["value"] is None and iv["geometric_mean"] is None
    assert iv["ci_low"] is None and iv["ci_high"] is None and (iv["unit"], iv["n"]) == ("session", 2)
    assert iv["absent"].startswith(f"a per-trial ITL p50 is not finite ({bad:g})") and "value is null" in iv["absent"]
    assert iv["absent_short"] == "a trial's value is not finite" == absent_short(iv)
    # a non-finite value is named even where a value <= 0 comes first
    assert interval([0.0, bad])["absent_short"] == "a trial's value is not finite"


def test_short_reasons() -> None:
    assert absent_short(interval([10.0, 0.0, 12.0])) == "a trial's value is 0"
    assert absent_short(interval([7.5])) == "n = 1" and absent_short(interval([])) == "n = 0"
    assert absent_short(interval([10.0, 12.0])) is None and "absent_short" not in interval([10.0, 12.0])
    # an analysis.json from before absent_short: the reason follows from n
    old = {"value": 5.0, "ci_low": None, "ci_high": None, "n": 3, "absent": "a per-trial ITL p50 of 0 (<= 0) ..."}
    assert absent_short(old) == "a trial's value is <= 0"
    assert absent_short(dict(old, n=1, absent="one measured repeat: ...")) == "n = 1"


def test_uneven_sessions_centre_is_the_sessions_mean_log() -> None:
    # sessions of 1 and 3 repeats that differ: the centre weighs each session alike, not each repeat
    iv = interval([10.0, 20.0, 21.0, 22.0], [1, 2, 2, 2])
    assert (iv["unit"], iv["n"]) == ("session", 2)
    s2 = (math.log(20) + math.log(21) + math.log(22)) / 3
    assert iv["geometric_mean"] == pytest.approx(math.exp((math.log(10) + s2) / 2), rel=1e-12)
    assert iv["geometric_mean"] != pytest.approx((10 * 20 * 21 * 22) ** 0.25, rel=1e-3)
    assert "an interval around exp of the mean of the sessions' mean logs" in iv["procedure"]


@pytest.mark.parametrize("values", [[], [7.5]])
def test_fewer_than_two_repeats_no_interval(values: list[float]) -> None:
    iv = interval(values)
    assert iv["ci_low"] is None and iv["ci_high"] is None
    assert iv["n"] == len(values) and "needs at least 2" in iv["absent"]
    assert iv["value"] == (values[0] if values else None)


def test_zero_spread_is_a_point_and_says_so() -> None:
    iv = interval([5.0, 5.0, 5.0])
    assert iv["ci_low"] == pytest.approx(5.0, rel=1e-15) and iv["ci_high"] == iv["ci_low"]
    assert "zero spread" in iv["note"]


def test_sessions_that_differ_are_the_unit() -> None:
    # two sessions of two repeats: 10, 11 | 20, 21. The sessions differ far beyond their repeats.
    iv = interval([10.0, 11.0, 20.0, 21.0], [1, 1, 2, 2])
    assert (iv["unit"], iv["n"]) == ("session", 2)
    # each session valued by the mean of its logs; the interval over those 2 values
    s1, s2 = (math.log(10) + math.log(11)) / 2, (math.log(20) + math.log(21)) / 2
    lo, hi = sps.t.interval(0.95, 1, loc=(s1 + s2) / 2, scale=sps.tstd([s1, s2]) / math.sqrt(2))
    assert (iv["ci_low"], iv["ci_high"]) == pytest.approx((math.exp(lo), math.exp(hi)), rel=1e-12)
    assert iv["geometric_mean"] == pytest.approx((10 * 11 * 20 * 21) ** 0.25, rel=1e-12)
    assert iv["value"] == pytest.approx(15.5)  # the mean over the 4 repeats
    c = iv["components"]
    assert c["scale"] == "ln" and c["sd_between"] > c["sd_within"]
    assert "engine sessions" in iv["procedure"] and "mean of ln over its repeats" in iv["procedure"]
    # sessions whose mean logs do not differ: still the session is the unit (fixed by the design, no pre-test
    # on the between-session estimate, which would make the unit depend on the data)
    same = interval([10.0, 12.0, 10.0, 12.0], [1, 1, 2, 2])
    assert (same["unit"], same["n"], same["df"]) == ("session", 2, 1) and same["components"]["sd_between"] == 0
    assert same["scope"] == "these 2 server starts"
    m = (math.log(10) + math.log(12)) / 2
    assert (same["ci_low"], same["ci_high"]) == pytest.approx((math.exp(m), math.exp(m)), rel=1e-12)  # zero spread
    # one repeat per session: the repeats are the sessions
    one = interval([10.0, 12.0], [1, 2])
    assert (one["unit"], one["n"]) == ("session", 2)
    assert (one["ci_low"], one["ci_high"]) == pytest.approx(_log_t([10.0, 12.0]), rel=1e-12)


def test_mismatched_sessions_rejected() -> None:
    with pytest.raises(ValueError, match="2 session labels for 3 values"):
        interval([1.0, 2.0, 3.0], [1, 2])


def test_attached_to_analysis(tmp_path: Path) -> None:
    run = build_run(tmp_path, spec=demo_spec(comparisons=[(4, 16)]), missing=("r2-c16", "r3-c16"))
    res = compute_analysis(load_run(run))
    assert "back-transformed by exp" in res["methods"]["latency_intervals"]
    assert "around exp(mean ln over the units)" in res["methods"]["latency_intervals"]
    assert "exp of the mean of the sessions' mean logs" in res["methods"]["latency_intervals"]
    by = {p["point"]: p for p in res["points"]}
    for m in ("ttft", "tpot", "itl", "e2el"):
        lat = by[4]["latency"][m]
        for st in ("mean", "p50", "p99"):
            iv = lat["intervals"][st]
            vals = [t["latency"][m][st] for t in res["trials"] if t["point"] == 4]
            assert iv["value"] == pytest.approx(lat["mean_over_repeats"][st], abs=1e-8)
            assert (iv["ci_low"], iv["ci_high"]) == pytest.approx(_log_t(vals), rel=1e-8)
            assert 0 < iv["ci_low"] < iv["geometric_mean"] <= iv["value"] < iv["ci_high"]
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
