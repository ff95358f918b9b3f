"""The load generator under faults (issue 23): impossible usage counts, one huge SSE line, and
retries recorded as data (a request the server saw and dropped is a failure, never retried)."""

from __future__ import annotations

import json

import pytest

from evidence.loadgen.sse import SSEStream
from evidence.metrics import trial_metrics
from evidence.records import RequestRecord


def _stream(usage: dict, tokens: int = 3) -> RequestRecord:
    rec = RequestRecord(i=0, phase="measure", prompt_len=4, max_tokens=tokens, intended_s=0.0, slot_wait_s=0.0,
                        send_s=0.0, status=200)
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

    rec = RequestRecord(i=0, phase="measure", prompt_len=4, max_tokens=2, intended_s=0.0, slot_wait_s=0.0,
                        send_s=0.0, status=200)
    first = b'data: {"choices":[{"index":0,"text":" a","finish_reason":null}]}\n\n'
    long = b'data: {"choices":[{"index":0,"text":"' + b"x" * n + b'","finish_reason":"length"}]}\n\n'
    tail = b'data: {"choices":[],"usage":{"prompt_tokens":4,"completion_tokens":2}}\n\ndata: [DONE]\n\n'
    sse = SSEStream(rec)
    t0 = time.process_time()
    sse.feed(first, 0.0)
    for k in range(0, len(long), read):
        sse.feed(long[k:k + read], 1.0)
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
