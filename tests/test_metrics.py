"""Known answers for evidence.metrics, computed by hand from tiny hand-made records.

Every expected number below is worked out in the comments from the records'
times; nothing here calls the code under test to get an expected value.
Every metric of the registry has its known-answer test (`known_answer`), enforced below.
"""

from __future__ import annotations

from typing import Callable, get_args

import pytest

from evidence.metrics import METRICS, REPORTED_METRICS, trial_metrics
from evidence.records import RequestRecord

#: metric name -> the test that checks its value against one worked out by hand
KNOWN_ANSWERS: dict[str, str] = {}


def known_answer(*names: str) -> Callable[[Callable], Callable]:
    def deco(fn: Callable) -> Callable:
        for n in names:
            KNOWN_ANSWERS[n] = fn.__name__
        return fn
    return deco


def rec(i, send, chunks, end, tokens, max_tokens=None, ok=True, phase="measure", chunk_count=None,
        error=None, status=200, slot_wait=0.0, prompt_tokens=10):
    return RequestRecord(
        i=i, phase=phase, prompt_len=10, max_tokens=max_tokens if max_tokens is not None else (tokens or 0),
        intended_s=0.0, slot_wait_s=slot_wait, send_s=send,
        first_chunk_s=chunks[0] if chunks else None, chunk_s=list(chunks), end_s=end,
        prompt_tokens=prompt_tokens if ok else None, completion_tokens=tokens,
        chunk_count=len(chunks) if chunk_count is None else chunk_count,
        finish_reason="length" if ok else None, status=status, error=error, ok=ok)


def records():
    return [
        # r0: TTFT 0.100; E2E = last token chunk 0.300 - 0 = 0.300 (the usage/[DONE] at 0.320 do not count);
        #     TPOT = (0.300 - 0.100) / (4 - 1) = 0.0666..; ITL gaps 0.050, 0.100, 0.050
        rec(0, 0.000, [0.100, 0.150, 0.250, 0.300], 0.320, 4, slot_wait=0.0),
        # r1: TTFT 0.250-0.050 = 0.200; E2E 0.450-0.050 = 0.400; TPOT (0.400-0.200)/1 = 0.200; ITL 0.200
        #     asked for 3 tokens, got 2: one output-length mismatch
        rec(1, 0.050, [0.250, 0.450], 0.500, 2, max_tokens=3, slot_wait=0.010),
        # r2: HTTP 500: counted as failed, never dropped
        rec(2, 0.100, [], 0.110, None, max_tokens=4, ok=False, status=500,
            error="HTTP 500 Internal Server Error\n{\"error\": ...}"),
        # r3: one token: TTFT 0.100, E2E 0.100, no TPOT, no ITL
        rec(3, 0.200, [0.300], 0.350, 1, slot_wait=0.030),
        # r4: warm-up, sent first and finishing last: must not count anywhere
        rec(4, -1.000, [-0.5, 0.9], 2.000, 2, phase="warmup"),
        # r5: two multi-token chunks carrying 4 tokens: TTFT 0.100, E2E 0.300, TPOT (0.300-0.100)/3,
        #     ITL 0.200; chunk_count 2 != usage 4: one chunk/usage mismatch
        rec(5, 0.300, [0.400, 0.600], 0.650, 4, slot_wait=0.050),
    ]


def test_counts_and_failures():
    m = trial_metrics(records())
    assert m["requests"] == 5  # measured only (warm-up excluded)
    assert m["completed"] == 4
    assert m["failed"] == 1
    assert m["errors"] == {"HTTP 500 Internal Server Error": 1}


@known_answer("ttft")
def test_ttft_by_hand():
    m = trial_metrics(records(), percentiles=(50, 99))
    d = m["ttft_ms"]
    # samples (ms): 100, 200, 100, 100 -> mean 125, median 100
    assert d["n"] == 4
    assert d["mean"] == pytest.approx(125.0)
    assert d["median"] == pytest.approx(100.0)
    # linear percentile over sorted [100, 100, 100, 200]: rank 0.99*3 = 2.97 -> 100 + 0.97*100
    assert d["p99"] == pytest.approx(197.0)
    assert d["min"] == pytest.approx(100.0) and d["max"] == pytest.approx(200.0)


@known_answer("tpot")
def test_tpot_formula_by_hand():
    d = trial_metrics(records())["tpot_ms"]
    # r0: 200/3, r1: 200/1, r5: 200/3 (r3 has one token: excluded)
    assert d["n"] == 3
    assert d["mean"] == pytest.approx((200 / 3 + 200 + 200 / 3) / 3)


@known_answer("itl")
def test_itl_is_pooled_over_requests():
    d = trial_metrics(records(), percentiles=(50,))["itl_ms"]
    # gaps: r0 50,100,50; r1 200; r5 200 -> pooled mean 600/5 = 120
    # (a mean of per-request means would be (66.67+200+200)/3 = 155.6)
    assert d["n"] == 5
    assert d["mean"] == pytest.approx(120.0)
    assert d["p50"] == pytest.approx(100.0)  # sorted 50,50,100,200,200


@known_answer("e2el")
def test_e2e_excludes_usage_chunk_and_done():
    d = trial_metrics(records())["e2el_ms"]
    # 300, 400, 100, 300 (not 320/450/150/350 that end_s would give)
    assert d["n"] == 4
    assert d["mean"] == pytest.approx(275.0)
    assert d["max"] == pytest.approx(400.0)


@known_answer("output_throughput", "request_throughput", "duration")
def test_throughput_first_send_to_last_completion():
    m = trial_metrics(records())
    # window: first measured send 0.000 (warm-up's -1.0 excluded) .. last completion 0.650
    assert m["duration_s"] == pytest.approx(0.650)
    # output tokens of completed requests: 4 + 2 + 1 + 4 = 11 (the failed one adds nothing)
    assert m["total_output_tokens"] == 11
    assert m["output_throughput"] == pytest.approx(11 / 0.650)
    assert m["request_throughput"] == pytest.approx(4 / 0.650)


def test_mismatches():
    m = trial_metrics(records())
    assert m["output_len_mismatches"] == 1  # r1: 2 of 3
    assert m["chunk_usage_mismatches"] == 1  # r5: 2 chunks, 4 tokens


@known_answer("slot_wait")
def test_slot_wait():
    d = trial_metrics(records())["slot_wait_ms"]
    # completed: 0, 10, 30, 50 ms -> mean 22.5
    assert d["mean"] == pytest.approx(22.5)


def test_prompt_tokens_server():
    p = trial_metrics(records())["prompt_tokens_server"]
    assert p == {"min": 10, "max": 10, "mean": 10.0, "total": 40}


def test_absent_with_reason_when_all_failed():
    rs = [rec(0, 0.0, [], 0.1, None, max_tokens=4, ok=False, status=500, error="HTTP 500 x"),
          rec(1, 0.0, [], 2.0, None, max_tokens=4, ok=False, status=None, error="timeout: no complete response within 2 s")]
    m = trial_metrics(rs)
    assert m["completed"] == 0 and m["failed"] == 2
    for k in ("output_throughput", "request_throughput", "duration_s"):
        assert m[k] is None
        assert m["absent"][k]
    for k in ("ttft_ms", "tpot_ms", "itl_ms", "e2el_ms"):
        assert m[k] is None and m["absent"][k]
    assert m["errors"] == {"HTTP 500 x": 1, "timeout: no complete response within 2 s": 1}


def test_absent_tpot_itl_for_single_token_outputs():
    rs = [rec(0, 0.0, [0.1], 0.2, 1), rec(1, 0.0, [0.3], 0.4, 1)]
    m = trial_metrics(rs)
    assert m["tpot_ms"] is None and "more than one output token" in m["absent"]["tpot_ms"]
    assert m["itl_ms"] is None and "more than one output token" in m["absent"]["itl_ms"]
    assert m["ttft_ms"]["mean"] == pytest.approx(200.0)  # 100 and 300 ms


def test_throughput_absent_when_usage_missing():
    rs = [rec(0, 0.0, [0.1, 0.2], 0.3, 2), rec(1, 0.0, [0.1, 0.2], 0.3, None, max_tokens=2)]
    m = trial_metrics(rs)
    assert m["output_throughput"] is None
    assert "usage.completion_tokens" in m["absent"]["output_throughput"]
    assert m["request_throughput"] == pytest.approx(2 / 0.3)


def test_window_opens_at_first_send_even_if_that_request_failed():
    rs = [rec(0, 0.0, [], 0.05, None, max_tokens=2, ok=False, status=500, error="HTTP 500 x"),
          rec(1, 0.5, [0.6, 0.7], 1.0, 2)]
    m = trial_metrics(rs)
    # first send 0.0 (the failed one) .. last completion 1.0 -> 2 tokens / 1.0 s
    assert m["duration_s"] == pytest.approx(1.0)
    assert m["output_throughput"] == pytest.approx(2.0)


def test_every_metric_has_a_known_answer_test() -> None:
    missing = [m for m in METRICS if m not in KNOWN_ANSWERS]
    assert not missing, f"metrics without a known-answer test (mark one with @known_answer): {missing}"
    assert set(KNOWN_ANSWERS) <= set(METRICS), sorted(set(KNOWN_ANSWERS) - set(METRICS))


def test_the_spec_accepts_exactly_the_reported_latency_metrics() -> None:
    # the spec stage imports no other stage, so its Literal is a copy; this keeps it the registry's
    from evidence.spec.model import AnalysisSection

    field = AnalysisSection.model_fields["latency_metrics"].annotation
    assert get_args(get_args(field)[0]) == REPORTED_METRICS
