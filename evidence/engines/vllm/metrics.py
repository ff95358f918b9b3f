"""vLLM's `/metrics` names: the series sampled during a trial, and what the text says about the KV cache."""

from __future__ import annotations

import re
from typing import Any

#: The series the load generator samples during a trial -> the engine-neutral column the analysis reads.
#: `vllm:gpu_cache_usage_perc` is vLLM's older name of `kv_cache_usage_perc`.
TELEMETRY_SERIES: dict[str, str] = {
    "vllm:num_requests_running": "num_requests_running",
    "vllm:num_requests_waiting": "num_requests_waiting",
    "vllm:kv_cache_usage_perc": "kv_cache_usage_perc",
    "vllm:gpu_cache_usage_perc": "kv_cache_usage_perc",
    "vllm:generation_tokens_total": "generation_tokens_total",
    "vllm:prompt_tokens_total": "prompt_tokens_total",
    "vllm:num_preemptions_total": "num_preemptions_total",
}


def parse_cache_config_info(metrics_text: str) -> dict[str, str] | None:
    """The labels of `vllm:cache_config_info` in Prometheus text (first engine), or None."""
    for line in metrics_text.splitlines():
        if line.startswith("vllm:cache_config_info{"):
            body = line[len("vllm:cache_config_info{"):line.rindex("}")]
            return dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', body))
    return None


def parse_metrics(metrics_text: str) -> dict[str, dict[str, Any]]:
    """What `/metrics` says about the cache: name -> {"value", "source"}."""
    labels = parse_cache_config_info(metrics_text)
    if not labels:
        return {}
    src = "/metrics cache_config_info"
    out: dict[str, dict[str, Any]] = {}

    def lab(name: str, key: str, conv) -> None:
        v = labels.get(key)
        if v is None or v == "None":
            return
        try:
            out[name] = {"value": conv(v), "source": f"{src} {key}=\"{v}\""}
        except ValueError:
            out[name] = {"value": v, "source": f"{src} {key}=\"{v}\""}

    as_bool = lambda v: {"True": True, "False": False}[v]  # noqa: E731
    lab("block_size", "block_size", int)
    lab("enable_prefix_caching", "enable_prefix_caching", as_bool)
    lab("kv_cache_tokens", "kv_cache_size_tokens", int)
    lab("kv_cache_gib", "kv_cache_memory_bytes", lambda v: round(int(v) / 2**30, 4))
    lab("num_kv_blocks", "num_gpu_blocks", int)
    lab("gpu_memory_utilization", "gpu_memory_utilization", float)
    lab("kv_cache_dtype", "cache_dtype", str)
    lab("kv_cache_max_concurrency", "kv_cache_max_concurrency", float)
    return out

