"""The stop flag (signals become a flag checked between requests), the API key on every request
(both HTTP stacks, /tokenize, /detokenize, /metrics), and the request timeout from the spec."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
import time

import pytest
from aiohttp import web

from evidence.engines.vllm.metrics import TELEMETRY_SERIES
from evidence.loadgen.prompts import make_text_prompts, make_token_prompts
from evidence.loadgen.stop import StopFlag
from evidence.loadgen.trial import TrialConfig, run_trial, run_trial_async
from evidence.tools.standin import StandinServer, make_app

KEY = "sk-test-0123456789abcdef"


def prompts(n, out=8, inp=16):
    return make_token_prompts(n, inp, out, seed=7, vocab_size=32000)


def cfg(url, ps, **kw):
    kw.setdefault("telemetry", False)
    kw.setdefault("request_timeout_s", 10.0)
    kw.setdefault("telemetry_series", TELEMETRY_SERIES)  # the stand-in serves vLLM's /metrics names
    return TrialConfig(base_url=url, model="standin", prompts=ps, **kw)


@pytest.fixture(params=["h1", "aiohttp"])
def stack(request):
    return request.param


# ------------------------------------------------------------------ stop ----


def test_stop_between_requests_returns_completed_records(stack):
    """Closed loop, 2 at a time: after the first completion the flag is set; nothing more is
    sent, the one in flight finishes within the grace period, and every returned record is whole."""
    flag = StopFlag()
    seen = []

    def done(rec):
        seen.append(rec.i)
        flag.set("test")

    with StandinServer(ttft_s=0.05, itl_s=0.01) as url:
        r = run_trial(cfg(url, prompts(10, 6), max_concurrency=2, http_stack=stack, stop=flag, stop_grace_s=5.0),
                      on_request_done=done)
    m = r.meta.as_dict()
    assert m["interrupted"]["reason"] == "test"
    # the first completion sets the flag; at most the other request in flight and one dispatched in the same
    # event-loop turn can still finish
    assert 1 <= len(r.records) <= 3, len(r.records)
    assert len(r.records) == m["interrupted"]["completed"]
    assert m["interrupted"]["not_sent"] == 10 - len(r.records) and m["interrupted"]["cancelled"] == 0
    assert all(x.ok and x.completion_tokens == 6 for x in r.records)
    assert m["counts"] == {"requests": len(r.records), "ok": len(r.records), "failed": 0}


def test_stop_cancels_hung_requests_after_the_grace_period(stack):
    """Requests that never finish are cancelled cleanly at the grace deadline: no failed record,
    no traceback, the trial returns promptly."""
    flag = StopFlag()
    with StandinServer() as url:
        # timed from a running server, with room for a loaded machine to send all 4 before the flag
        threading.Timer(1.0, flag.set, ("SIGTERM",)).start()
        t = time.monotonic()
        r = run_trial(cfg(url, prompts(4, 6), max_concurrency=4, http_stack=stack, stop=flag, stop_grace_s=0.3,
                          extra_headers={"x-standin": "fault=hang,after=2"}))
    assert time.monotonic() - t < 5
    assert r.records == []
    assert r.meta.interrupted == {"reason": "SIGTERM", "planned": 4, "completed": 0, "not_sent": 0,
                                  "cancelled": 4, "grace_s": 0.3}


def test_stop_in_open_loop_stops_dispatch():
    flag = StopFlag()
    at: list[float] = []

    def stop_at_the_fifth(rec) -> None:
        # stopped by the trial's own progress (the 5th completion), not by a clock a loaded machine delays
        if not at and rec.i >= 4:
            at.append(rec.intended_s)
            flag.set()

    with StandinServer(ttft_s=0.01, itl_s=0.001) as url:
        r = run_trial(cfg(url, prompts(40, 2), max_concurrency=None, request_rate=20.0, stop=flag),
                      on_request_done=stop_at_the_fifth)
    it = r.meta.interrupted
    assert at and it is not None and it["not_sent"] >= 20  # 40 due over 2 s, stopped near the 5th
    assert all(x.ok for x in r.records) and len(r.records) == it["completed"]
    # nothing was dispatched long after the stop (one 50 ms slot of slack per request in flight)
    assert max(x.intended_s for x in r.records) < at[0] + 0.5


def test_a_real_signal_sets_the_flag_and_nothing_fails():
    """SIGTERM delivered to this process mid-trial: the handler only sets the flag, so no
    exception is raised inside an I/O callback and no completed request is marked failed."""
    flag = StopFlag()
    old = signal.signal(signal.SIGTERM, lambda s, f: flag.set(signal.Signals(s).name))
    sent: list[int] = []

    def first_done(rec) -> None:
        # the signal comes at the first completion, mid-trial however slow the machine, not on a clock
        if not sent:
            sent.append(rec.i)
            os.kill(os.getpid(), signal.SIGTERM)

    try:
        with StandinServer(ttft_s=0.02, itl_s=0.002) as url:
            r = run_trial(cfg(url, prompts(60, 40), max_concurrency=8, stop=flag, stop_grace_s=5.0),
                          on_request_done=first_done)
    finally:
        signal.signal(signal.SIGTERM, old)
    assert r.meta.interrupted is not None and r.meta.interrupted["reason"] == "SIGTERM"
    assert r.records and all(x.ok for x in r.records)
    assert r.meta.interrupted["not_sent"] > 0  # it did stop the trial part-way


def test_no_stop_means_no_interrupted_key(stack):
    flag = StopFlag()
    with StandinServer() as url:
        r = run_trial(cfg(url, prompts(3, 2), max_concurrency=2, http_stack=stack, stop=flag))
    assert "interrupted" not in r.meta.as_dict() and len(r.records) == 3


# --------------------------------------------------------------- API key ----


class _Auth:
    """The stand-in behind a gate that answers 401 without `Authorization: Bearer KEY` (like vLLM's
    --api-key middleware, but on every path) and remembers each path's Authorization header."""

    def __init__(self, **opts):
        self.app, _ = make_app(**opts)
        self.seen: dict[str, set] = {}

        @web.middleware
        async def gate(request, handler):
            h = request.headers.get("Authorization")
            self.seen.setdefault(request.path, set()).add(h)
            if h != f"Bearer {KEY}":
                return web.json_response({"error": "Unauthorized"}, status=401)
            return await handler(request)

        self.app.middlewares.append(gate)

    async def __aenter__(self):
        self.runner = web.AppRunner(self.app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    async def __aexit__(self, *exc):
        await self.runner.cleanup()


def test_api_key_sent_on_every_request_and_never_recorded(stack):
    gate = _Auth()

    async def main():
        async with gate as url:
            import aiohttp

            async with aiohttp.ClientSession() as s:
                ps = await make_text_prompts(s, url, "standin", 3, 12, 4, 5, 32000,
                                             headers={"Authorization": f"Bearer {KEY}"})
            ok = await run_trial_async(cfg(url, ps, max_concurrency=2, http_stack=stack, api_key=KEY, telemetry=True,
                                           telemetry_interval_s=0.05))
            bad = await run_trial_async(cfg(url, ps, max_concurrency=2, http_stack=stack, api_key=None))
            return ok, bad

    ok, bad = asyncio.run(main())
    assert all(x.ok for x in ok.records)
    assert ok.meta.telemetry["enabled"] is True
    for path in ("/v1/completions", "/tokenize", "/detokenize", "/metrics"):
        assert f"Bearer {KEY}" in gate.seen[path], path
    assert [x.status for x in bad.records] == [401, 401, 401]
    # never recorded: not in meta, records or the config's repr
    blob = json.dumps(ok.meta.as_dict()) + "".join(repr(x) for x in ok.records)
    blob += repr(cfg("http://x", [], max_concurrency=1, api_key=KEY))
    assert KEY not in blob


def test_from_spec_reads_the_key_extra_body_and_timeout(monkeypatch):
    from evidence.spec.model import Spec

    spec = Spec.model_validate({
        "name": "t", "title": "t", "hardware": {"count": 0},
        "engine": {"kind": "endpoint", "base_url": "http://127.0.0.1:1", "api_key_env": "MY_TEST_KEY"},
        "model": {"id": "m"}, "code": {"allow_dirty": True},
        "workload": {"input_len": 8, "output_len": 2, "seed": 1, "extra_body": {"repetition_penalty": 1.0},
                     "request_timeout_s": 7.5, "temperature": None},
        "sweep": {"points": [1], "prompts": {1: 1}},
    })
    monkeypatch.setenv("MY_TEST_KEY", KEY)
    c = TrialConfig.from_spec(spec, base_url="http://h", model="m", prompts=[], max_concurrency=1, seed=3)
    assert c.api_key == KEY and c.headers()["Authorization"] == f"Bearer {KEY}"
    assert c.request_timeout_s == 7.5 and dict(c.extra_body) == {"repetition_penalty": 1.0} and c.temperature is None
    assert KEY not in repr(c)
    monkeypatch.delenv("MY_TEST_KEY")
    assert TrialConfig.from_spec(spec, base_url="http://h", model="m", prompts=[], max_concurrency=1,
                                 seed=3).api_key is None


def test_request_timeout_comes_from_the_config(stack):
    with StandinServer() as url:
        r = run_trial(cfg(url, prompts(1, 4), max_concurrency=1, http_stack=stack, request_timeout_s=0.25,
                          extra_headers={"x-standin": "fault=hang,after=1"}))
    x = r.records[0]
    assert not x.ok and x.error.startswith("timeout: no complete response within 0.25 s")
    assert r.meta.timeout_s == 0.25
