"""The load generator against the stand-in server: timing, SSE framing, faults, scheduling.

The stand-in (evidence/standin.py) is NOT an engine; it gives exact chunk timing
and faults on demand. It runs in a thread of this process, so timing tolerances
allow for the GIL and the event-loop timer granularity (~1 ms).
"""

from __future__ import annotations

import asyncio
import socket
import time

import pytest

from evidence.loadgen import arrival_schedule, run_trial, run_trial_async
from evidence.metrics import trial_metrics
from evidence.prompts import make_token_prompts
from evidence.standin import StandinServer


@pytest.fixture(scope="module")
def server():
    with StandinServer(bos=False) as url:
        yield url


def prompts(n, out=8, inp=16):
    return make_token_prompts(n, inp, out, seed=7, vocab_size=32000)


def trial(url, n=4, out=8, header=None, **kw):
    extra = {}
    kw.setdefault("max_concurrency", 4)
    kw.setdefault("timeout_s", 5.0)
    kw.setdefault("telemetry", False)
    if header is not None:
        extra["x-standin"] = header
    return run_trial(url, "standin", prompts(n, out), extra_headers=extra, **kw)


# ------------------------------------------------------------------ timing ----


def test_exact_timing_invariants(server):
    ttft, itl, n_tok = 0.05, 0.01, 8
    r = trial(server, n=4, out=n_tok, header=f"ttft={ttft},itl={itl}")
    for x in r.records:
        assert x.ok, x.error
        assert x.status == 200
        assert x.chunk_count == n_tok == x.completion_tokens == len(x.chunk_s)
        assert x.first_chunk_s == x.chunk_s[0]
        assert x.finish_reason == "length"
        assert x.prompt_tokens == x.prompt_len == 16
        ttft_meas = x.first_chunk_s - x.send_s
        e2e = x.chunk_s[-1] - x.send_s
        gaps = [b - a for a, b in zip(x.chunk_s, x.chunk_s[1:])]
        # E2E - TTFT is exactly the sum of the later gaps
        assert e2e - ttft_meas == pytest.approx(sum(gaps), abs=1e-9)
        # TTFT close to the configured one (server schedule + loopback + GIL)
        assert ttft - 0.002 <= ttft_meas <= ttft + 0.03
        # the stand-in schedules chunks absolutely: the last one is due at ttft + 7*itl
        assert e2e == pytest.approx(ttft + (n_tok - 1) * itl, abs=0.03)
        assert all(g > 0 for g in gaps)
    m = trial_metrics(r.records)
    assert m["tpot_ms"]["mean"] == pytest.approx(itl * 1000, abs=4)
    assert m["itl_ms"]["n"] == 4 * (n_tok - 1)
    assert m["chunk_usage_mismatches"] == 0 and m["output_len_mismatches"] == 0


def test_usage_chunk_does_not_extend_e2e(server):
    r = trial(server, n=2, out=4, header="ttft=0.01,itl=0.01,usage_delay=0.15")
    for x in r.records:
        assert x.ok, x.error
        assert x.end_s - x.chunk_s[-1] >= 0.14  # [DONE] came ~0.15 s after the last token
        assert x.chunk_s[-1] - x.send_s < 0.1  # E2E is ttft + 3*itl, not + usage delay
        assert x.completion_tokens == 4


def test_multi_token_chunks_counted_once(server):
    r = trial(server, n=3, out=8, header="tpc=3")
    for x in r.records:
        assert x.ok, x.error
        assert x.chunk_count == 3  # 3 + 3 + 2 tokens
        assert x.completion_tokens == 8
    m = trial_metrics(r.records)
    assert m["chunk_usage_mismatches"] == 3
    assert m["total_output_tokens"] == 24  # usage, not chunks


# ------------------------------------------------------------- SSE framing ----


@pytest.mark.parametrize("fault", ["split", "crlf", "comment"])
def test_framing_variants_parse_exactly(server, fault):
    r = trial(server, n=3, out=12, header=f"fault={fault}")
    for x in r.records:
        assert x.ok, x.error
        assert x.chunk_count == 12 == x.completion_tokens
        assert x.prompt_tokens == 16
        assert x.finish_reason == "length"


def test_split_reads_time_each_chunk_at_arrival(server):
    # "split" writes the stream in irregular pieces 0.5 ms apart: several chunks share
    # a read, some chunks straddle two reads; times must be non-decreasing.
    r = trial(server, n=1, out=20, header="fault=split")
    x = r.records[0]
    assert x.ok and x.chunk_count == 20
    assert all(b >= a for a, b in zip(x.chunk_s, x.chunk_s[1:]))
    assert x.chunk_s[-1] > x.chunk_s[0]


def test_malformed_sse_is_a_failure(server):
    r = trial(server, n=2, out=6, header="fault=malformed,after=2")
    for x in r.records:
        assert not x.ok
        assert x.error.startswith("malformed SSE data")
        assert x.status == 200
        assert x.chunk_count == 6  # the rest of the stream was still read
    m = trial_metrics(r.records)
    assert m["failed"] == 2 and m["completed"] == 0


def test_error_event_in_stream(server):
    r = trial(server, n=1, out=6, header="fault=error_event,after=2")
    x = r.records[0]
    assert not x.ok and x.error.startswith("error event in stream: stand-in error event")
    assert x.chunk_count == 2


# ------------------------------------------------------------------ faults ----


def test_http_500_recorded_not_dropped(server):
    r = trial(server, n=3, out=4, header="fault=http500")
    assert len(r.records) == 3
    for x in r.records:
        assert not x.ok and x.status == 500
        assert x.error.startswith("HTTP 500 Internal Server Error")
        assert "stand-in fault" in x.error
        assert x.end_s is not None and x.end_s >= x.send_s
    m = trial_metrics(r.records)
    assert m["requests"] == 3 and m["failed"] == 3
    assert m["errors"] == {"HTTP 500 Internal Server Error": 3}
    assert r.meta["counts"] == {"requests": 3, "ok": 0, "failed": 3}


def test_hang_hits_per_request_timeout(server):
    t = time.perf_counter()
    r = trial(server, n=2, out=4, header="fault=hang,after=0", timeout_s=0.3)
    assert time.perf_counter() - t < 3.0
    for x in r.records:
        assert not x.ok
        assert x.error == "timeout: no complete response within 0.3 s"
        assert x.end_s - x.send_s == pytest.approx(0.3, abs=0.1)
        assert x.chunk_count == 0 and x.first_chunk_s is None


def test_hang_mid_stream_keeps_partial_record(server):
    r = trial(server, n=1, out=6, header="fault=hang,after=2", timeout_s=0.3)
    x = r.records[0]
    assert not x.ok and x.error.startswith("timeout")
    assert x.chunk_count == 2 and x.first_chunk_s is not None


def test_dropped_connection(server):
    r = trial(server, n=2, out=6, header="fault=drop,after=3")
    for x in r.records:
        assert not x.ok
        assert x.error.startswith("connection dropped"), x.error
        assert x.chunk_count == 3


def test_stream_cut_short(server):
    r = trial(server, n=1, out=6, header="fault=truncate,after=3")
    x = r.records[0]
    assert not x.ok and x.error == "stream ended without usage or [DONE] (cut short)"
    assert x.chunk_count == 3


def test_no_usage_is_ok_but_throughput_absent(server):
    r = trial(server, n=2, out=4, header="fault=no_usage")
    for x in r.records:
        assert x.ok and x.completion_tokens is None and x.chunk_count == 4
    m = trial_metrics(r.records)
    assert m["output_throughput"] is None and "usage" in m["absent"]["output_throughput"]


def test_no_done_with_usage_is_ok(server):
    r = trial(server, n=2, out=4, header="fault=no_done")
    for x in r.records:
        assert x.ok and x.completion_tokens == 4


def test_connection_refused():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    r = trial(f"http://127.0.0.1:{port}", n=2, out=4)
    for x in r.records:
        assert not x.ok and x.error.startswith("connect failed"), x.error
        assert x.status is None


def test_fewer_tokens_than_asked_is_a_mismatch(server):
    r = trial(server, n=2, out=8, header="tokens=5")
    for x in r.records:
        assert x.ok and x.completion_tokens == 5 and x.finish_reason == "stop"
    assert trial_metrics(r.records)["output_len_mismatches"] == 2


# -------------------------------------------------------------- scheduling ----


def test_closed_loop_concurrency_cap_and_slot_wait(server):
    # 6 requests of ~0.1 s, 2 at a time: waves start at ~0, ~0.1, ~0.2 s
    r = trial(server, n=6, out=2, header="ttft=0.09,itl=0.01", max_concurrency=2)
    assert all(x.ok for x in r.records)
    assert all(x.intended_s == 0.0 for x in r.records)
    waits = sorted(x.slot_wait_s for x in r.records)
    assert waits[0] < 0.01 and waits[1] < 0.01
    assert 0.08 <= waits[2] <= 0.2 and 0.08 <= waits[3] <= 0.2
    assert 0.18 <= waits[4] <= 0.35 and 0.18 <= waits[5] <= 0.35
    # never more than 2 in flight: count overlaps at each send
    for x in r.records:
        inflight = sum(1 for y in r.records if y.send_s <= x.send_s < y.end_s)
        assert inflight <= 2
    for x in r.records:  # send follows the slot at once
        assert x.send_s - x.intended_s - x.slot_wait_s < 0.02


def test_open_loop_schedule_is_followed(server):
    n, rate = 20, 100.0
    r = trial(server, n=n, out=2, max_concurrency=None, request_rate=rate, seed=3)
    sched = arrival_schedule(n, rate, 1.0, 3)
    assert [x.intended_s for x in r.records] == sched
    for x in r.records:
        assert x.ok
        assert x.slot_wait_s == 0.0
        assert -1e-6 <= x.send_s - x.intended_s < 0.03  # dispatch lag, visible per request
    assert "Poisson" in r.meta["schedule"]


def test_open_loop_capped_shows_coordinated_omission(server):
    r = trial(server, n=5, out=2, header="ttft=0.05", max_concurrency=1, request_rate=1000.0, seed=1)
    lates = [x.send_s - x.intended_s for x in r.records]
    assert max(lates) > 0.15  # the fifth waited behind four 50 ms requests
    assert max(x.slot_wait_s for x in r.records) > 0.15


def test_arrival_schedule_properties():
    a = arrival_schedule(1000, 10.0, 1.0, seed=5)
    assert a == arrival_schedule(1000, 10.0, 1.0, seed=5)
    assert a != arrival_schedule(1000, 10.0, 1.0, seed=6)
    assert a[-1] == pytest.approx(100.0)  # rescaled: last due at n/rate
    assert all(b >= x for x, b in zip(a, a[1:]))
    gaps = [b - x for x, b in zip([0.0] + a, a)]
    cv_poisson = (sum((g - 0.1) ** 2 for g in gaps) / len(gaps)) ** 0.5 / 0.1
    smooth = arrival_schedule(1000, 10.0, 50.0, seed=5)
    sg = [b - x for x, b in zip([0.0] + smooth, smooth)]
    cv_smooth = (sum((g - 0.1) ** 2 for g in sg) / len(sg)) ** 0.5 / 0.1
    assert 0.85 < cv_poisson < 1.15  # exponential gaps: CV ~ 1
    assert cv_smooth < 0.25  # gamma shape 50: CV ~ 1/sqrt(50)
    assert arrival_schedule(3, "inf") == [0.0, 0.0, 0.0]


# ------------------------------------------------------- callbacks and meta ----


def test_on_request_done_and_meta(server):
    seen = []
    r = trial(server, n=5, out=3, on_request_done=lambda rec: seen.append(rec.i), phase="warmup")
    assert sorted(seen) == [0, 1, 2, 3, 4]
    assert all(x.phase == "warmup" for x in r.records)
    m = r.meta
    for k in ("t0_perf", "t0_unix", "t0_monotonic_ns", "ended_unix", "client_cpu_s", "wall_s"):
        assert k in m
    assert m["client"]["aiohttp"] and m["client"]["read_bufsize"] >= 16 * 1024 * 1024
    assert m["client"]["connector_limit"] >= 4
    assert m["counts"]["ok"] == 5
    assert m["clock_bridge_uncertainty_s"] < 0.01
    assert abs(m["t0_unix"] - time.time()) < 60


def test_callback_exception_does_not_break_trial(server):
    def bad(rec):
        raise RuntimeError("boom")
    r = trial(server, n=3, out=2, on_request_done=bad)
    assert all(x.ok for x in r.records)
    assert r.meta["callback_error_count"] == 3


def test_async_variant_in_running_loop(server):
    async def main():
        return await run_trial_async(server, "standin", prompts(3, 4), max_concurrency=2, telemetry=False)
    r = asyncio.run(main())
    assert [x.i for x in r.records] == [0, 1, 2] and all(x.ok for x in r.records)


def test_text_prompt_is_sent_as_text(server):
    from evidence.prompts import Prompt
    ps = [Prompt(i=0, token_ids=None, text=" w5 w6 w7", prompt_len=3, max_tokens=2)]
    r = run_trial(server, "standin", ps, max_concurrency=1, telemetry=False)
    x = r.records[0]
    assert x.ok and x.prompt_tokens == 3


def test_telemetry_sampled_during_trial():
    with StandinServer(ttft_s=0.05, itl_s=0.01, max_running=2) as url:
        r = run_trial(url, "standin", prompts(8, 10), max_concurrency=8, telemetry=True,
                      telemetry_interval_s=0.05, timeout_s=5)
    assert r.meta["telemetry"]["enabled"] is True
    tel = r.telemetry
    assert len(tel) >= 4
    ts = [s["t_s"] for s in tel]
    assert ts == sorted(ts)
    assert max(s["num_requests_running"] for s in tel) == 2.0
    assert max(s["num_requests_waiting"] for s in tel) >= 1.0  # 8 sent, 2 run at a time
    assert tel[-1]["generation_tokens_total"] == 80.0  # final sample after the last request
    for s in tel:
        assert {"kv_cache_usage_perc", "prompt_tokens_total", "num_preemptions_total"} <= set(s)


def test_telemetry_unavailable_is_explained():
    with StandinServer(metrics=False) as url:
        r = run_trial(url, "standin", prompts(2, 2), max_concurrency=2, telemetry=True)
    assert r.telemetry == []
    assert r.meta["telemetry"]["enabled"] is False
    assert "404" in r.meta["telemetry"]["reason"]
    assert all(x.ok for x in r.records)
