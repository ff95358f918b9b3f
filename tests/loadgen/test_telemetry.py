"""The Prometheus text parser and the /metrics sampler."""

from __future__ import annotations

import asyncio
import math
import time

import pytest

from evidence.engines.vllm.metrics import TELEMETRY_SERIES as SERIES
from evidence.tools.standin import StandinServer
from evidence.loadgen.telemetry import (
    PromParseError,
    TelemetrySampler,
    parse_prometheus,
    sample_from_body,
    summarize,
)

PAGE = r'''# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_running{engine="1",model_name="m"} 4.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 7
vllm:num_requests_waiting{engine="1",model_name="m"} 0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.5
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.25
# TYPE vllm:generation_tokens counter
vllm:generation_tokens_total{engine="0",model_name="m"} 1.5e3 1700000000000
vllm:generation_tokens_total{engine="1",model_name="m"} 500
vllm:generation_tokens_created{engine="0",model_name="m"} 1.7e9
# TYPE vllm:num_preemptions counter
vllm:num_preemptions{engine="0",model_name="m"} 2
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="m"} 5.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 9.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 1.25
vllm:cache_config_info{block_size="16",note="a \"quoted\", {braced} value\\n"} 1.0
process_open_fds 33
weird_nan{a="x"} NaN
weird_inf +Inf
'''


def test_parse_labels_values_and_comments():
    s = parse_prometheus(PAGE)
    by = {(x.name, tuple(sorted(x.labels.items()))): x.value for x in s}
    assert by[("vllm:num_requests_running", (("engine", "0"), ("model_name", "m")))] == 3.0
    # a timestamp after the value is ignored; exponent notation parses
    assert by[("vllm:generation_tokens_total", (("engine", "0"), ("model_name", "m")))] == 1500.0
    info = [x for x in s if x.name == "vllm:cache_config_info"][0]
    assert info.labels == {"block_size": "16", "note": 'a "quoted", {braced} value\\n'}
    assert [x.value for x in s if x.name == "process_open_fds"] == [33.0]
    assert math.isnan([x.value for x in s if x.name == "weird_nan"][0])
    assert [x.value for x in s if x.name == "weird_inf"] == [math.inf]
    assert not any(x.name.startswith("#") for x in s)


def test_summarize_sums_label_sets_and_averages_the_fraction():
    d = summarize(parse_prometheus(PAGE), SERIES)
    assert d == {
        "num_requests_running": 7.0,  # 3 + 4
        "num_requests_waiting": 7.0,  # 7 + 0
        "kv_cache_usage_perc": 0.375,  # mean of 0.5 and 0.25 (a fraction per engine)
        "generation_tokens_total": 2000.0,  # 1500 + 500; the _created series is not counted
        "num_preemptions_total": 2.0,  # counter exposed without its _total suffix
    }
    assert "prompt_tokens_total" not in d  # absent series: absent key


def test_older_gpu_cache_name_counts_as_kv_cache():
    d = summarize(parse_prometheus('vllm:gpu_cache_usage_perc{model_name="m"} 0.125\n'), SERIES)
    assert d == {"kv_cache_usage_perc": 0.125}


def test_filtered_body_gives_the_same_answer():
    assert sample_from_body(PAGE.encode(), SERIES) == summarize(parse_prometheus(PAGE), SERIES)


@pytest.mark.parametrize("bad", ['x{a="1" 3', 'x{a=1} 3', "x{a=\"1\"}", 'x abc'])
def test_malformed_lines_raise(bad):
    with pytest.raises(PromParseError):
        parse_prometheus(bad)


def test_empty_label_set_and_unlabelled():
    s = parse_prometheus("a{} 1\nb 2\n\n")
    assert [(x.name, x.labels, x.value) for x in s] == [("a", {}, 1.0), ("b", {}, 2.0)]


def test_sampler_against_standin():
    async def main(url):
        t = TelemetrySampler(url, interval_s=0.02, wanted=SERIES)
        assert await t.probe() is None
        t0 = time.perf_counter()
        t.start(t0)
        await asyncio.sleep(0.15)
        await t.stop()
        return t

    with StandinServer() as url:
        t = asyncio.run(main(url))
    assert len(t.samples) >= 5
    assert t.meta()["enabled"] and t.meta()["failures"] == 0
    assert set(t.meta()["series"]) >= {"num_requests_running", "generation_tokens_total"}
    ts = [s["t_s"] for s in t.samples]
    assert ts == sorted(ts) and ts[0] >= 0 and ts[-1] < 1.0
    assert all(s["scrape_s"] > 0 for s in t.samples)


def test_sampler_reports_why_unavailable():
    async def main(url):
        t = TelemetrySampler(url, wanted=SERIES)
        reason = await t.probe()
        await t.close()
        return reason

    with StandinServer(metrics=False) as url:
        assert "HTTP 404" in asyncio.run(main(url))
    assert "failed" in asyncio.run(main("http://127.0.0.1:9"))
