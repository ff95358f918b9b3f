"""Per-trial series, steady state, waves and regimes on synthetic trials with known answers."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from scipy import stats

from evidence.analysis.timeseries import (Series, detectable_drift, drift_to_noise_80, regimes, steady_state,
                                        trial_series, waves)
from evidence.records import RequestRecord, read_records

ROOT = Path(__file__).resolve().parents[2]
H200 = ROOT / "releases/article1-h200-v1.0/data/raw/h200-a100sched/trials"


def _rec(i, send, chunks, end, tokens, ok=True, phase="measure"):
    return RequestRecord(i=i, phase=phase, prompt_len=8, max_tokens=8, intended_s=0.0, slot_wait_s=0.0, send_s=send,
                         first_chunk_s=chunks[0] if chunks else None, chunk_s=list(chunks), end_s=end,
                         completion_tokens=tokens, chunk_count=len(chunks), ok=ok)


def test_trial_series_by_hand():
    recs = [_rec(0, 0.0, [0.1, 0.3, 0.6], 0.6, 3),
            _rec(1, 0.2, [0.4], 0.45, 2),  # one chunk carrying two tokens
            _rec(2, 0.0, [0.05], 0.1, 1, phase="warmup")]  # not measured: left out
    rows = [{"t_s": 0.1, "num_requests_running": 2.0, "num_requests_waiting": 1.0},
            {"t_s": 0.2, "num_requests_running": 4.0, "num_requests_waiting": 0.0}]
    s = trial_series(recs, rows)
    assert s.t == (0.0, 0.25, 0.5)
    assert s.output_tps == pytest.approx((4.0, 12.0, 4.0))
    # in flight: bin 0 = (0.25 + 0.05) / 0.25, bin 1 = (0.25 + 0.2) / 0.25, bin 2 = 0.1 / 0.25
    assert s.in_flight == pytest.approx((1.2, 1.8, 0.4))
    assert s.running == (3.0, None, None) and s.waiting == (0.5, None, None)
    assert s.output_tokens == pytest.approx(5.0) and s.n_requests == 2
    json.dumps(s.as_dict())


def test_missing_telemetry_is_absent_with_a_reason():
    recs = [_rec(0, 0.0, [0.1], 0.2, 1)]
    s = trial_series(recs, [])
    assert s.running is None and "no /metrics samples" in s.absent["running"]
    s = trial_series(recs, [{"t_s": 0.1, "num_requests_running": 1.0}])
    assert s.running == (1.0,) and s.waiting is None and "num_requests_waiting" in s.absent["waiting"]
    with pytest.raises(ValueError):
        trial_series([], [])


def _series(tps, conc=64.0, drain_bins=8, bin_s=0.25):
    tps = list(tps) + [float(np.mean(tps)) * (1 - k / drain_bins) for k in range(drain_bins)]
    fl = [conc] * (len(tps) - drain_bins) + [conc * (1 - (k + 1) / (drain_bins + 1)) for k in range(drain_bins)]
    n = len(tps)
    return Series(bin_s=bin_s, t=tuple(i * bin_s for i in range(n)), output_tps=tuple(tps), in_flight=tuple(fl),
                  n_requests=1000, duration_s=n * bin_s, output_tokens=float(np.sum(tps) * bin_s))


def test_a_steady_trial_is_steady_and_has_no_waves():
    rng = np.random.default_rng(0)
    s = _series(10_000 + rng.normal(0, 300, 240))
    st = steady_state(s)
    assert st.steady and st.method == "MSER-5"
    assert st.end_s == pytest.approx(60.0)  # the drain is cut
    assert st.throughput == pytest.approx(10_000, rel=0.01)
    assert waves(s, st) is None


def test_mser_cuts_a_slow_start():
    rng = np.random.default_rng(1)
    tps = np.concatenate([np.linspace(1000, 9000, 16), 10_000 + rng.normal(0, 300, 224)])
    st = steady_state(_series(tps))
    assert st.steady
    assert 3.0 <= st.start_s <= 15.0  # MSER may over-truncate a little within the noise
    assert st.throughput == pytest.approx(10_000, rel=0.01)
    assert st.throughput > st.whole_throughput


def test_a_rising_trial_has_no_steady_state_and_says_how_long_it_would_need():
    rng = np.random.default_rng(2)
    st = steady_state(_series(np.linspace(8_000, 14_000, 100) + rng.normal(0, 400, 100)))
    assert not st.steady and st.trend_rho > 0.65 and st.trend_p < 0.05
    assert "no steady state" in st.note and st.needed_s == pytest.approx(2 * st.end_s)
    assert st.needed_prompts > 1000


def test_no_trend_says_what_drift_it_could_have_seen():
    """A steady trial's note names the drift the trend test finds with 80% power: the batch means' residual sd (here
    300 tok/s per 0.25 s bin, 24 bins a batch mean) times drift_to_noise_80, over the level."""
    expect = drift_to_noise_80() * 300 / np.sqrt(24) / 10_000
    seen = []
    for seed in range(60):
        st = steady_state(_series(10_000 + np.random.default_rng(100 + seed).normal(0, 300, 240)))
        seen.append(st.detectable_drift)
    # each trial's residual sd has 8 df (its mean is c4 = 0.969 of the true sd; its own spread about 25%)
    assert np.mean(seen) == pytest.approx(0.969 * expect, rel=0.1)
    assert st.steady and "no trend detected" in st.note
    assert f"a drift of ±{100 * st.detectable_drift:.1f}% over this window could have been seen" in st.note
    assert st.as_dict()["detectable_drift"] == st.detectable_drift
    assert detectable_drift(np.full(10, 5.0)) == pytest.approx(0.0, abs=1e-12)  # no noise: any drift shows
    assert detectable_drift(np.zeros(10)) is None  # no level to relate it to


def test_the_detectable_drift_is_found_four_times_in_five():
    """At the batch means, a linear drift of the stated size is found in 80% of series by scipy's own spearmanr
    (an independent computation of the rule); a third of it rarely, three times it almost always."""
    k = drift_to_noise_80()
    rng = np.random.default_rng(7)
    x = np.arange(10)

    def rate(size: float, n: int = 1500) -> float:
        found = 0
        for _ in range(n):
            r = stats.spearmanr(x, rng.standard_normal(10) + size * (x - 4.5) / 10)
            found += abs(r.statistic) > 0.65 and r.pvalue < 0.05
        return found / n

    assert rate(k) == pytest.approx(0.80, abs=0.035)  # MC sd about 0.01
    assert rate(k / 3) < 0.25 and rate(3 * k) > 0.99


def test_a_known_drift_in_a_trial_is_found_as_the_note_says():
    """End to end on synthetic trials (0.25 s bins, 300 tok/s noise, 60 s at 10,000 tok/s): with no drift the trend
    test fires in about 5%; with the stated detectable drift over the trial in most (MSER may take the first part
    of a drift from t0 for warm-up, leaving less of it in the window, so a little below 80%); with three times it in
    nearly all."""
    X = drift_to_noise_80() * 300 / np.sqrt(24) / 10_000
    i = np.arange(240)

    def found(size: float, n: int = 80) -> float:
        out = 0
        for seed in range(n):
            y = 10_000 * (1 + size * ((i + 0.5) / 240 - 0.5)) + np.random.default_rng(seed).normal(0, 300, 240)
            out += not steady_state(_series(y)).steady
        return out / n

    assert found(0.0) <= 0.10
    assert 0.55 <= found(X) <= 0.92
    assert found(3 * X) >= 0.85


def test_injected_waves_are_found_with_their_period():
    rng = np.random.default_rng(3)
    t = np.arange(240) * 0.25
    tps = np.where((t % 3.0) < 1.5, 3_000, 20_000) + rng.normal(0, 500, 240)
    w = waves(_series(tps))
    assert w is not None and "periodic" in w["kind"]
    assert w["period_s"] == pytest.approx(3.0, abs=0.25) and w["autocorr"] > 0.5
    assert "waves" in w["note"]


def test_two_regimes_are_found_and_one_is_not():
    r = regimes([9_200, 9_300, 9_150, 12_700, 12_800, 12_600])
    assert r is not None and r["low"]["n"] == 3 and r["high"]["n"] == 3 and r["ashman_d"] > 2
    assert r["gap"] == pytest.approx(12_600 - 9_300)
    rng = np.random.default_rng(4)
    found = sum(regimes(list(10_000 + rng.normal(0, 500, n))) is not None for n in (6, 8, 14) for _ in range(40))
    assert found <= 12  # one population: flagged at most ~5% of the time (+ MC error)
    assert regimes([1.0, 2.0, 3.0]) is None  # too few trials to tell


def test_the_published_h200_trials_show_waves():
    # bench/h200 notes: lockstep waves with a 1.5-4.5 s period at 0.25 s resolution.
    d = H200 / "r1-c256"
    s = trial_series(read_records(d / "requests.jsonl"),
                     [json.loads(x) for x in (d / "telemetry.jsonl").read_text().splitlines() if x.strip()])
    summary = json.loads((d / "summary.json").read_text())
    st = steady_state(s)
    assert st.whole_throughput == pytest.approx(summary["output_throughput"], rel=0.002)
    w = waves(s, st)
    assert w is not None and 1.0 <= w["period_s"] <= 6.0
    assert s.running is not None and max(v for v in s.running if v is not None) > 200
