"""Per-trial series, steady state, waves and regimes on synthetic trials with known answers."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from evidence.analysis.timeseries import Series, regimes, steady_state, trial_series, waves
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
