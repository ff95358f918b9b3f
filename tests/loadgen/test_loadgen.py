"""The load generator against the stand-in server: timing, SSE framing, faults, scheduling.

The stand-in (evidence/tools/standin/) is NOT an engine; it gives exact chunk timing
and faults on demand. It runs in a thread of this process, so timing tolerances
allow for the GIL and the event-loop timer granularity (~1 ms).
"""

from __future__ import annotations

import asyncio
import socket
import time

import pytest

from evidence.engines.vllm.metrics import TELEMETRY_SERIES
from evidence.loadgen.trial import TrialConfig, arrival_schedule, run_trial, run_trial_async
from evidence.metrics import trial_metrics
from evidence.loadgen.prompts import make_token_prompts
from evidence.tools.standin import StandinServer


@pytest.fixture(scope="module")
def server():
    with StandinServer(bos=False) as url:
        yield url


@pytest.fixture(params=["h1", "aiohttp"])
def stack(request):
    """Both HTTP stacks must give the same records (they share the SSE parser)."""
    return request.param


# Upper bounds on timings allow for a loaded machine (CI, other work): a late
# wake-up can add tens of ms to one request. Lower bounds are strict (nothing is
# ever measured earlier than the stand-in's schedule), and medians are held tight.
SLACK = 0.25


def prompts(n, out=8, inp=16):
    return make_token_prompts(n, inp, out, seed=7, vocab_size=32000)


def config(url, model, ps, *, http="auto", timeout_s=600.0, **kw):
    """A TrialConfig from the names these tests use (http -> http_stack, timeout_s -> request_timeout_s)."""
    kw.setdefault("telemetry_series", TELEMETRY_SERIES)  # the stand-in serves vLLM's /metrics names
    return TrialConfig(base_url=url, model=model, prompts=ps, http_stack=http, request_timeout_s=timeout_s, **kw)


def go(url, model, ps, *, on_request_done=None, **kw):
    return run_trial(config(url, model, ps, **kw), on_request_done=on_request_done)


def trial(url, n=4, out=8, header=None, stack="h1", **kw):
    extra = {}
    kw["http"] = stack
    kw.setdefault("max_concurrency", 4)
    kw.setdefault("timeout_s", 5.0)
    kw.setdefault("telemetry", False)
    if header is not None:
        extra["x-standin"] = header
    return go(url, "standin", prompts(n, out), extra_headers=extra, **kw)


# ------------------------------------------------------------------ timing ----


def test_exact_timing_invariants(server, stack):
    ttft, itl, n_tok = 0.05, 0.01, 8
    r = trial(server, stack=stack, n=4, out=n_tok, header=f"ttft={ttft},itl={itl}")
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
        assert ttft - 0.002 <= ttft_meas <= ttft + SLACK
        # the stand-in schedules chunks absolutely: the last one is due at ttft + 7*itl
        assert ttft + (n_tok - 1) * itl - 0.002 <= e2e <= ttft + (n_tok - 1) * itl + SLACK
        assert all(g > 0 for g in gaps)
    m = trial_metrics(r.records)
    assert m["ttft_ms"]["median"] == pytest.approx(ttft * 1000, abs=30)
    assert m["tpot_ms"]["median"] == pytest.approx(itl * 1000, abs=5)
    assert m["itl_ms"]["n"] == 4 * (n_tok - 1)
    assert m["chunk_usage_mismatches"] == 0 and m["output_len_mismatches"] == 0


def test_usage_chunk_does_not_extend_e2e(server, stack):
    r = trial(server, stack=stack, n=2, out=4, header="ttft=0.01,itl=0.01,usage_delay=0.15")
    for x in r.records:
        assert x.ok, x.error
        assert x.end_s - x.chunk_s[-1] >= 0.14  # [DONE] came ~0.15 s after the last token
        assert x.chunk_s[-1] - x.send_s < 0.04 + SLACK  # E2E is ttft + 3*itl, not + usage delay
        assert x.completion_tokens == 4


def test_multi_token_chunks_counted_once(server, stack):
    r = trial(server, stack=stack, n=3, out=8, header="tpc=3")
    for x in r.records:
        assert x.ok, x.error
        assert x.chunk_count == 3  # 3 + 3 + 2 tokens
        assert x.completion_tokens == 8
    m = trial_metrics(r.records)
    assert m["chunk_usage_mismatches"] == 3
    assert m["total_output_tokens"] == 24  # usage, not chunks


# ------------------------------------------------------------- SSE framing ----


@pytest.mark.parametrize("fault", ["split", "crlf", "comment"])
def test_framing_variants_parse_exactly(server, fault, stack):
    r = trial(server, stack=stack, n=3, out=12, header=f"fault={fault}")
    for x in r.records:
        assert x.ok, x.error
        assert x.chunk_count == 12 == x.completion_tokens
        assert x.prompt_tokens == 16
        assert x.finish_reason == "length"


def test_split_reads_time_each_chunk_at_arrival(server, stack):
    # "split" writes the stream in irregular pieces 0.5 ms apart: several chunks share
    # a read, some chunks straddle two reads; times must be non-decreasing.
    r = trial(server, stack=stack, n=1, out=20, header="fault=split")
    x = r.records[0]
    assert x.ok and x.chunk_count == 20
    assert all(b >= a for a, b in zip(x.chunk_s, x.chunk_s[1:]))
    assert x.chunk_s[-1] > x.chunk_s[0]


def test_malformed_sse_is_a_failure(server, stack):
    r = trial(server, stack=stack, n=2, out=6, header="fault=malformed,after=2")
    for x in r.records:
        assert not x.ok
        assert x.error.startswith("malformed SSE data")
        assert x.status == 200
        assert x.chunk_count == 6  # the rest of the stream was still read
    m = trial_metrics(r.records)
    assert m["failed"] == 2 and m["completed"] == 0


def test_error_event_in_stream(server, stack):
    r = trial(server, stack=stack, n=1, out=6, header="fault=error_event,after=2")
    x = r.records[0]
    assert not x.ok and x.error.startswith("error event in stream: stand-in error event")
    assert x.chunk_count == 2


# ------------------------------------------------------------------ faults ----


def test_http_500_recorded_not_dropped(server, stack):
    r = trial(server, stack=stack, n=3, out=4, header="fault=http500")
    assert len(r.records) == 3
    for x in r.records:
        assert not x.ok and x.status == 500
        assert x.error.startswith("HTTP 500 Internal Server Error")
        assert "stand-in fault" in x.error
        assert x.end_s is not None and x.end_s >= x.send_s
    m = trial_metrics(r.records)
    assert m["requests"] == 3 and m["failed"] == 3
    assert m["errors"] == {"HTTP 500 Internal Server Error": 3}
    assert r.meta.as_dict()["counts"] == {"requests": 3, "ok": 0, "failed": 3}


def test_hang_hits_per_request_timeout(server, stack):
    t = time.perf_counter()
    r = trial(server, stack=stack, n=2, out=4, header="fault=hang,after=0", timeout_s=0.3)
    assert time.perf_counter() - t < 3.0
    for x in r.records:
        assert not x.ok
        assert x.error == "timeout: no complete response within 0.3 s"
        assert x.end_s - x.send_s == pytest.approx(0.3, abs=0.1)
        assert x.chunk_count == 0 and x.first_chunk_s is None


def test_hang_mid_stream_keeps_partial_record(server, stack):
    r = trial(server, stack=stack, n=1, out=6, header="fault=hang,after=2", timeout_s=0.3)
    x = r.records[0]
    assert not x.ok and x.error.startswith("timeout")
    assert x.chunk_count == 2 and x.first_chunk_s is not None


def test_dropped_connection(server, stack):
    r = trial(server, stack=stack, n=2, out=6, header="fault=drop,after=3")
    for x in r.records:
        assert not x.ok
        assert x.error.startswith("connection dropped"), x.error
        assert x.chunk_count == 3


def test_stream_cut_short(server, stack):
    r = trial(server, stack=stack, n=1, out=6, header="fault=truncate,after=3")
    x = r.records[0]
    assert not x.ok and x.error == "stream ended without usage or [DONE] (cut short)"
    assert x.chunk_count == 3


def test_no_usage_is_ok_but_throughput_absent(server, stack):
    r = trial(server, stack=stack, n=2, out=4, header="fault=no_usage")
    for x in r.records:
        assert x.ok and x.completion_tokens is None and x.chunk_count == 4
    m = trial_metrics(r.records)
    assert m["output_throughput"] is None and "usage" in m["absent"]["output_throughput"]


def test_no_done_with_usage_is_ok(server, stack):
    r = trial(server, stack=stack, n=2, out=4, header="fault=no_done")
    for x in r.records:
        assert x.ok and x.completion_tokens == 4


def test_connection_refused(stack):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    r = trial(f"http://127.0.0.1:{port}", stack=stack, n=2, out=4)
    for x in r.records:
        assert not x.ok and x.error.startswith("connect failed"), x.error
        assert x.status is None


def test_fewer_tokens_than_asked_is_a_mismatch(server, stack):
    r = trial(server, stack=stack, n=2, out=8, header="tokens=5")
    for x in r.records:
        assert x.ok and x.completion_tokens == 5 and x.finish_reason == "stop"
    assert trial_metrics(r.records)["output_len_mismatches"] == 2


# -------------------------------------------------------------- scheduling ----


def test_closed_loop_concurrency_cap_and_slot_wait(server, stack):
    # 6 requests of ~0.1 s, 2 at a time: waves start at ~0, ~0.1, ~0.2 s
    r = trial(server, stack=stack, n=6, out=2, header="ttft=0.09,itl=0.01", max_concurrency=2)
    assert all(x.ok for x in r.records)
    assert all(x.intended_s == 0.0 for x in r.records)
    waits = sorted(x.slot_wait_s for x in r.records)
    assert waits[0] < 0.01 and waits[1] < 0.01
    assert 0.08 <= waits[2] <= 0.2 + SLACK and 0.08 <= waits[3] <= 0.2 + SLACK
    assert 0.18 <= waits[4] <= 0.35 + SLACK and 0.18 <= waits[5] <= 0.35 + SLACK
    # never more than 2 in flight: count overlaps at each send
    for x in r.records:
        inflight = sum(1 for y in r.records if y.send_s <= x.send_s < y.end_s)
        assert inflight <= 2
    lags = sorted(x.send_s - x.intended_s - x.slot_wait_s for x in r.records)
    assert lags[len(lags) // 2] < 0.01 and lags[-1] < SLACK  # send follows the slot at once


def test_open_loop_schedule_is_followed(server):
    n, rate = 20, 100.0
    r = trial(server, n=n, out=2, max_concurrency=None, request_rate=rate, seed=3)
    sched = arrival_schedule(n, rate, 1.0, 3)
    assert [x.intended_s for x in r.records] == sched
    for x in r.records:
        assert x.ok
        assert x.slot_wait_s == 0.0
        assert -1e-6 <= x.send_s - x.intended_s < SLACK  # never early; the lag is visible per request
    lags = sorted(x.send_s - x.intended_s for x in r.records)
    assert lags[len(lags) // 2] < 0.01
    assert "Poisson" in r.meta.as_dict()["schedule"]


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
    m = r.meta.as_dict()
    for k in ("t0_perf", "t0_unix", "t0_monotonic_ns", "ended_unix", "client_cpu_s", "wall_s"):
        assert k in m
    assert m["client"]["http_stack"] == "h1" and m["client"]["max_connections"] == 4
    assert m["client"]["preconnected"] == 4 and m["client"]["connections_opened"] == 4
    ra = trial(server, n=2, out=2, stack="aiohttp")
    assert ra.meta.client["read_bufsize"] >= 16 * 1024 * 1024
    assert ra.meta.client["connector_limit"] >= 4
    assert m["counts"]["ok"] == 5
    assert m["clock_bridge_uncertainty_s"] < 0.01
    assert abs(m["t0_unix"] - time.time()) < 60
    # meta.json's keys, exactly: TrialMeta.as_dict() must not add or drop any (published bytes)
    assert sorted(m) == sorted([
        "t0_perf", "t0_unix", "t0_monotonic_ns", "clock_bridge_uncertainty_s", "ended_perf", "ended_unix", "wall_s",
        "client", "client_cpu_s", "client_cpu_util", "dispatch_lag_s", "base_url", "endpoint", "model", "phase",
        "max_concurrency", "request_rate", "burstiness", "schedule_seed", "schedule", "ignore_eos", "temperature",
        "timeout_s", "gc_frozen", "counts", "telemetry", "callback_errors", "callback_error_count"])


def test_callback_exception_does_not_break_trial(server):
    def bad(rec):
        raise RuntimeError("boom")
    r = trial(server, n=3, out=2, on_request_done=bad)
    assert all(x.ok for x in r.records)
    assert r.meta.as_dict()["callback_error_count"] == 3


def test_async_variant_in_running_loop(server):
    async def main():
        return await run_trial_async(config(server, "standin", prompts(3, 4), max_concurrency=2, telemetry=False))
    r = asyncio.run(main())
    assert [x.i for x in r.records] == [0, 1, 2] and all(x.ok for x in r.records)


def test_text_prompt_is_sent_as_text(server):
    from evidence.loadgen.prompts import Prompt
    ps = [Prompt(i=0, token_ids=None, text=" w5 w6 w7", prompt_len=3, max_tokens=2)]
    r = go(server, "standin", ps, max_concurrency=1, telemetry=False)
    x = r.records[0]
    assert x.ok and x.prompt_tokens == 3


def test_telemetry_sampled_during_trial():
    with StandinServer(ttft_s=0.05, itl_s=0.01, max_running=2) as url:
        r = go(url, "standin", prompts(8, 10), max_concurrency=8, telemetry=True,
                      telemetry_interval_s=0.05, timeout_s=5)
    assert r.meta.as_dict()["telemetry"]["enabled"] is True
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
        r = go(url, "standin", prompts(2, 2), max_concurrency=2, telemetry=True)
    assert r.telemetry == []
    assert r.meta.as_dict()["telemetry"]["enabled"] is False
    assert "404" in r.meta.as_dict()["telemetry"]["reason"]
    assert all(x.ok for x in r.records)


# ------------------------------------------------------- the HTTP/1.1 stack ----

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from evidence.loadgen.http_h1 import H1Conn as _H1Conn  # noqa: E402
from evidence.loadgen.sse import SSEStream  # noqa: E402
from evidence.records import RequestRecord  # noqa: E402

_TOK = (b'data: {"id":"c","object":"text_completion","created":1,"model":"m","choices":[{"index":0,'
        b'"text":" a","logprobs":null,"finish_reason":null,"stop_reason":null}]}\n\n')
_LAST = _TOK.replace(b'"finish_reason":null', b'"finish_reason":"length"')
_USAGE = (b'data: {"id":"c","object":"text_completion","created":1,"model":"m","choices":[],'
          b'"usage":{"prompt_tokens":7,"total_tokens":12,"completion_tokens":5}}\n\n')
_SSE = [_TOK, _TOK, b": ping\n\n", _TOK, _TOK, _LAST, _USAGE, b"data: [DONE]\n\n"]


def _chunked(msgs, ext=False, trailers=False):
    out = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    for m in msgs:
        out += (b"%x;x=1\r\n" if ext else b"%x\r\n") % len(m) + m + b"\r\n"
    return out + (b"0\r\nX-Trailer: 1\r\n\r\n" if trailers else b"0\r\n\r\n")


class _FakeTransport:
    def __init__(self):
        self.written = b""
        self.aborted = False

    def write(self, d):
        self.written += d

    def abort(self):
        self.aborted = True

    def get_extra_info(self, k):
        return None


def _drive(pieces):
    loop = asyncio.new_event_loop()
    try:
        rec = RequestRecord(0, "measure", 7, 5, 0.0, 0.0, 0.0)
        conn = _H1Conn(0.0)
        conn.connection_made(_FakeTransport())
        fut = loop.create_future()
        sse = SSEStream(rec)
        conn.begin(b"POST / HTTP/1.1\r\n\r\n", sse, fut, 0.0)
        for p in pieces:
            conn.data_received(p)
        if fut.done() and fut.exception() is None:
            rec.end_s = sse.end(fut.result())
            sse.finish_record(failed=False)
        return rec, conn, fut
    finally:
        loop.close()


def _split(raw, cuts):
    cuts = sorted(set(c for c in cuts if 0 < c < len(raw)))
    return [raw[a:b] for a, b in zip([0] + cuts, cuts + [len(raw)])]


@settings(max_examples=150, deadline=None)
@given(cuts=st.lists(st.integers(min_value=1, max_value=2000), max_size=40), ext=st.booleans(),
       trailers=st.booleans(), crlf=st.booleans())
def test_h1_any_split_of_the_bytes_gives_the_same_record(cuts, ext, trailers, crlf):
    msgs = [m.replace(b"\n", b"\r\n") for m in _SSE] if crlf else _SSE
    raw = _chunked(msgs, ext, trailers)
    rec, conn, fut = _drive(_split(raw, cuts))
    assert fut.done() and fut.exception() is None
    assert rec.ok, rec.error
    assert rec.status == 200
    assert rec.chunk_count == 5 and rec.completion_tokens == 5 and rec.prompt_tokens == 7
    assert rec.finish_reason == "length"
    assert conn.keep_alive


def test_h1_byte_by_byte():
    raw = _chunked(_SSE, ext=True, trailers=True)
    rec, _, fut = _drive([raw[i:i + 1] for i in range(len(raw))])
    assert rec.ok and rec.chunk_count == 5 and rec.completion_tokens == 5


def test_h1_error_body_with_content_length_and_interim_100():
    body = b'{"error":{"message":"bad","code":400}}'
    raw = (b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 400 Bad Request\r\nContent-Length: %d\r\n\r\n" % len(body)) + body
    rec, conn, fut = _drive([raw[:30], raw[30:]])
    assert fut.done() and conn.status == 400 and conn.reason == "Bad Request"
    assert b"".join(conn.err_body) == body


def test_h1_close_delimited_body():
    raw = b"HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n" + b"".join(_SSE)
    rec, conn, fut = _drive([raw])
    assert not fut.done()  # the body ends when the server closes
    conn.connection_lost(None)
    assert fut.done() and fut.exception() is None and not conn.keep_alive


def test_h1_bad_framing_is_an_error():
    rec, conn, fut = _drive([b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n"])
    assert fut.done() and "bad HTTP response framing" in str(fut.exception())
    rec, conn, fut = _drive([b"SMTP nonsense\r\n\r\n"])
    assert "bad HTTP status line" in str(fut.exception())


def test_h1_reuses_connections(server):
    r = trial(server, n=12, out=3, max_concurrency=3)
    assert all(x.ok for x in r.records)
    assert r.meta.as_dict()["client"]["http_stack"] == "h1"
    assert r.meta.as_dict()["client"]["connections_opened"] <= 3


def test_h1_never_retries_a_request_a_reused_connection_dropped():
    # A raw server that answers the first request on each connection and closes the
    # connection, without a word, on the second: it read that request, so it is a failure
    # (issue 23: a silent retry hid the server's failures), and the next request opens anew.
    resp = _chunked([_TOK, _LAST, _USAGE, b"data: [DONE]\n\n"])

    async def handle(reader, writer):
        served = 0
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                n = int([ln.split(b":")[1] for ln in head.split(b"\r\n") if ln.lower().startswith(b"content-length")][0])
                await reader.readexactly(n)
                if served:
                    break
                writer.write(resp)
                await writer.drain()
                served += 1
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    async def main():
        srv = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = srv.sockets[0].getsockname()[1]
        async with srv:
            return await run_trial_async(config(f"http://127.0.0.1:{port}", "m", prompts(3, 2), max_concurrency=1,
                                                telemetry=False, http="h1", timeout_s=5))

    r = asyncio.run(main())
    assert [x.ok for x in r.records] == [True, False, True], [x.error for x in r.records]
    assert r.records[1].error.startswith("connection dropped") and r.records[1].attempts is None
    assert r.meta.as_dict()["client"]["connection_retries"] == 0


def test_chunk_times_match_when_the_standin_wrote_them(stack):
    """Known answer from the other side: the in-process stand-in logs perf_counter()
    just before writing each chunk (same clock as the client). Every chunk must be
    stamped after its write, and soon after it (arrival, not after parsing)."""
    from evidence.tools.standin import prompt_key
    srv = StandinServer(record_writes=True, ttft_s=0.02, itl_s=0.004)
    with srv as url:
        ps = prompts(6, 12)
        r = go(url, "standin", ps, max_concurrency=3, telemetry=False, http=stack, timeout_s=5)
        writes = srv.standin.writes
    t0 = r.meta.as_dict()["t0_perf"]
    delays = []
    for p, x in zip(ps, r.records):
        w = writes[prompt_key(p.token_ids)]
        assert x.ok and len(w) == len(x.chunk_s) == 12
        for tw, tc in zip(w, x.chunk_s):
            assert t0 + tc >= tw  # never stamped before the server wrote it
            delays.append(t0 + tc - tw)
    delays.sort()
    assert delays[len(delays) // 2] < 0.003  # median write-to-stamp delay: loopback + one loop turn
    assert delays[-1] < SLACK


def test_standin_steps_of_several_chunks(stack):
    with StandinServer(step_chunks=4) as url:
        r = go(url, "standin", prompts(4, 10), max_concurrency=4, telemetry=False, http=stack)
    for x in r.records:
        assert x.ok and x.chunk_count == 10 == x.completion_tokens


def test_request_body_temperature_and_extras():
    import json as _json

    from evidence.loadgen.trial import request_body
    p = prompts(1, 4)[0]
    d = _json.loads(request_body("m", p, ignore_eos=True, temperature=None, extra_body={"repetition_penalty": 1.0}))
    assert "temperature" not in d  # the server's default applies, as with vllm bench serve
    assert d["repetition_penalty"] == 1.0 and d["ignore_eos"] is True and d["max_tokens"] == 4
    assert d["stream"] is True and d["stream_options"] == {"include_usage": True}
    assert d["prompt"] == p.token_ids
    assert _json.loads(request_body("m", p, ignore_eos=False, temperature=0.0))["temperature"] == 0.0


def test_aiohttp_is_the_default_stack_and_h1_is_opt_in(server):
    r = go(server, "standin", prompts(2, 2), max_concurrency=2, telemetry=False)
    assert r.meta.client["http_stack"] == "aiohttp" and all(x.ok for x in r.records)
    r = go(server, "standin", prompts(2, 2), max_concurrency=2, telemetry=False, http="h1")
    assert r.meta.client["http_stack"] == "h1" and all(x.ok for x in r.records)
    with pytest.raises(ValueError, match="plain http:// only"):
        go("https://127.0.0.1:1", "standin", prompts(1, 2), max_concurrency=1, telemetry=False, http="h1")
