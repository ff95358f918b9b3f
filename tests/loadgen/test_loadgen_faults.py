"""The load generator under faults (issue 23): impossible usage counts, one huge SSE line, and
retries recorded as data (a request the server saw and dropped is a failure, never retried)."""

from __future__ import annotations

import json

import pytest

from evidence.loadgen.sse import SSEStream
from evidence.metrics import trial_metrics
from evidence.records import RequestRecord


def _stream(usage: dict, tokens: int = 3) -> RequestRecord:
    rec = RequestRecord(
        i=0, phase="measure", prompt_len=4, max_tokens=tokens, intended_s=0.0, slot_wait_s=0.0, send_s=0.0, status=200
    )
    sse = SSEStream(rec)
    t = 0.0
    for k in range(tokens):
        t += 0.01
        fin = "null" if k < tokens - 1 else '"length"'
        sse.feed(f'data: {{"choices":[{{"index":0,"text":" w{k}","finish_reason":{fin}}}]}}\n\n'.encode(), t)
    sse.feed(b'data: {"choices":[],"usage":' + json.dumps(usage).encode() + b"}\n\ndata: [DONE]\n\n", t + 0.01)
    rec.end_s = sse.end(t + 0.01)
    sse.finish_record(failed=False)
    return rec


@pytest.mark.parametrize("bad", [-295, True, False, 3.0, "3", [3]])
def test_an_impossible_usage_count_fails_the_request_with_the_reason_and_is_never_averaged(bad):
    good = _stream({"prompt_tokens": 4, "completion_tokens": 3})
    assert good.ok and good.completion_tokens == 3
    for key in ("completion_tokens", "prompt_tokens"):
        usage = {"prompt_tokens": 4, "completion_tokens": 3, key: bad}
        rec = _stream(usage)
        assert not rec.ok, (key, bad)
        assert rec.error.startswith(f"invalid usage count: {key} = {json.dumps(bad)}"), rec.error
        assert getattr(rec, key) is None  # no number is kept for it
        s = trial_metrics([good, rec], (50, 99))
        assert s["failed"] == 1 and s["completed"] == 1
        assert s["total_output_tokens"] == 3 and s["output_throughput"] > 0  # only the good request's tokens


def test_a_missing_usage_count_is_still_not_a_failure():
    rec = _stream({"prompt_tokens": 4})
    assert rec.ok and rec.completion_tokens is None and rec.prompt_tokens == 4


def _one_long_line_cpu(n: int, read: int = 4096) -> float:
    """CPU seconds to take one SSE message of about n bytes, arriving in `read`-byte network reads."""
    import time

    rec = RequestRecord(
        i=0, phase="measure", prompt_len=4, max_tokens=2, intended_s=0.0, slot_wait_s=0.0, send_s=0.0, status=200
    )
    first = b'data: {"choices":[{"index":0,"text":" a","finish_reason":null}]}\n\n'
    long = b'data: {"choices":[{"index":0,"text":"' + b"x" * n + b'","finish_reason":"length"}]}\n\n'
    tail = b'data: {"choices":[],"usage":{"prompt_tokens":4,"completion_tokens":2}}\n\ndata: [DONE]\n\n'
    sse = SSEStream(rec)
    t0 = time.process_time()
    sse.feed(first, 0.0)
    for k in range(0, len(long), read):
        sse.feed(long[k : k + read], 1.0)
    sse.feed(tail, 2.0)
    rec.end_s = sse.end(2.0)
    sse.finish_record(failed=False)
    spent = time.process_time() - t0
    assert rec.ok and rec.chunk_count == 2 and rec.completion_tokens == 2, rec
    return spent


def test_one_long_sse_line_is_parsed_in_time_linear_in_its_bytes():
    """Scaling, not a time limit: 4x the bytes must cost about 4x the CPU (quadratic would be 16x).
    The best of three runs of each size keeps a busy machine's noise out of the ratio."""
    small = min(_one_long_line_cpu(2 << 20) for _ in range(3))
    big = min(_one_long_line_cpu(8 << 20) for _ in range(3))
    assert big < 9 * max(small, 1e-3), (small, big)


class _DropServer:
    """A fault server (not an engine; the stand-in cannot do this): streaming completions over
    keep-alive HTTP/1.1, except that the requests whose arrival number is in `drop` are read in full
    and then the connection is closed without a byte of answer (the server saw them and dropped them)."""

    def __init__(self, drop: set[int]):
        import asyncio
        import threading

        self.drop, self.seen = drop, 0
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()

        async def start():
            self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
            self.url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"
            ready.set()

        threading.Thread(
            target=lambda: (self.loop.run_until_complete(start()), self.loop.run_forever()), daemon=True
        ).start()
        ready.wait(10)

    async def _handle(self, reader, writer):
        import asyncio
        import re

        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
                await reader.readexactly(int(re.search(rb"(?i)content-length: *(\d+)", head).group(1)))
            except (asyncio.IncompleteReadError, ConnectionError, AttributeError):
                break
            self.seen += 1
            if self.seen in self.drop:
                break
            msgs = [
                b'data: {"choices":[{"index":0,"text":" a","finish_reason":null}]}\n\n',
                b'data: {"choices":[{"index":0,"text":" b","finish_reason":"length"}]}\n\n',
                b'data: {"choices":[],"usage":{"prompt_tokens":16,"completion_tokens":2}}\n\n',
                b"data: [DONE]\n\n",
            ]
            body = b"".join(b"%x\r\n%s\r\n" % (len(m), m) for m in msgs) + b"0\r\n\r\n"
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n" + body
            )
            await writer.drain()
        writer.close()

    def close(self):
        self.loop.call_soon_threadsafe(self.loop.stop)


@pytest.mark.parametrize("stack", ["h1", "aiohttp"])
def test_a_request_the_server_saw_and_dropped_is_a_failure_never_a_silent_retry(stack):
    from evidence.loadgen.prompts import make_token_prompts
    from evidence.loadgen.trial import TrialConfig, run_trial

    srv = _DropServer(drop={2, 4})
    try:
        res = run_trial(
            TrialConfig(
                base_url=srv.url,
                model="m",
                prompts=make_token_prompts(6, 16, 2, seed=7, vocab_size=32000),
                http_stack=stack,
                request_timeout_s=10.0,
                max_concurrency=1,
                telemetry=False,
            )
        )
    finally:
        srv.close()
    assert srv.seen == 6  # one request per prompt reached the server: none sent twice
    failed = [r for r in res.records if not r.ok]
    assert [r.i for r in failed] == [1, 3]
    assert all(r.error.startswith("connection dropped") or "closed" in r.error for r in failed), failed
    assert all(r.attempts is None for r in res.records)
    assert trial_metrics(res.records, (50,))["failed"] == 2


@pytest.mark.parametrize("stack", ["h1", "aiohttp"])
def test_a_connect_failure_is_tried_once_more_and_kept_as_an_attempt(stack):
    import socket

    from evidence.loadgen.prompts import make_token_prompts
    from evidence.loadgen.trial import TrialConfig, run_trial
    from evidence.records import RequestRecord as R

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    res = run_trial(
        TrialConfig(
            base_url=f"http://127.0.0.1:{port}",
            model="m",
            prompts=make_token_prompts(2, 16, 2, seed=7, vocab_size=32000),
            http_stack=stack,
            request_timeout_s=5.0,
            max_concurrency=1,
            telemetry=False,
        )
    )
    for r in res.records:
        assert not r.ok and r.error.startswith("connect failed")
        (a,) = r.attempts
        assert a["error"].startswith("connect failed") and a["send_s"] <= r.send_s
        assert R.from_dict(r.as_dict()).attempts == r.attempts  # kept in the written record
    plain = R(i=0, phase="measure", prompt_len=1, max_tokens=1, intended_s=0, slot_wait_s=0, send_s=0)
    assert "attempts" not in plain.as_dict()  # one attempt: the record's bytes are as before
