"""Every serving metric, defined once, computed from request records.

Definitions follow vLLM's benchmark (the seed article used them); differences
from other tools are named in `METRIC_DOCS`. Latencies are reported in
milliseconds. Percentiles use numpy's default linear interpolation (vLLM's).

A metric that cannot be measured is absent (None) and `absent[name]` says why;
it is never reported as zero.

Two choices worth stating: a distribution's `std` is the population standard
deviation (numpy's default); a trial's duration runs from its first send,
failed requests included, to the end of its last completed request.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

from evidence.records import RequestRecord

PERCENTILE_METHOD = "linear"  # numpy's default, as vLLM's benchmark uses

@dataclass(frozen=True)
class Metric:
    """One serving metric: what it is, its unit and direction, how a table prints it, why it can be absent."""

    name: str
    unit: str  # as tables and axes name it: "ms", "tok/s", "req/s", "s"
    higher_is_better: bool | None  # None: not a figure of merit (e.g. duration)
    doc: str
    decimals: int  # fixed decimals of its CSV columns
    absent: str  # why a trial can have no value for it
    samples: Callable[[Sequence[RequestRecord]], list[float]] | None = None  # latency: seconds per sample
    per_request: bool = True  # False: samples are pooled gaps (ITL)
    reported: bool = True  # latency: given for every point and trial in the tables, the report and exports
    headline: bool = False  # latency: also in the report's trial table and the ECDF figure

    @property
    def is_latency(self) -> bool:
        return self.samples is not None


def _ttft(rs: Sequence[RequestRecord]) -> list[float]:
    return [r.first_chunk_s - r.send_s for r in rs if r.ok and r.first_chunk_s is not None]


def _e2el(rs: Sequence[RequestRecord]) -> list[float]:
    return [r.chunk_s[-1] - r.send_s for r in rs if r.ok and r.chunk_s]


def _tpot(rs: Sequence[RequestRecord]) -> list[float]:
    out = []
    for r in rs:
        n = r.completion_tokens
        if r.ok and r.first_chunk_s is not None and r.chunk_s and n is not None and n > 1:
            out.append(((r.chunk_s[-1] - r.send_s) - (r.first_chunk_s - r.send_s)) / (n - 1))
    return out


def _itl(rs: Sequence[RequestRecord]) -> list[float]:
    out: list[float] = []
    for r in rs:
        if r.ok and len(r.chunk_s) > 1:
            c = r.chunk_s
            out.extend(c[i + 1] - c[i] for i in range(len(c) - 1))
    return out


def _slot_wait(rs: Sequence[RequestRecord]) -> list[float]:
    return [r.slot_wait_s for r in rs if r.ok]


_NO_COMPLETED = "no completed request"
_ONE_TOKEN = "needs requests with more than one output token"

# The registry, in the order every table lists the metrics.
METRICS: dict[str, Metric] = {
    m.name: m
    for m in (
        Metric("ttft", "ms", False, "time to first token: first SSE message carrying a choice minus the request's send "
               "time (excludes the client-side wait for a concurrency slot, as vLLM does; that wait is recorded as "
               "slot_wait)", 3, _NO_COMPLETED, _ttft, headline=True),
        Metric("tpot", "ms", False, "time per output token after the first: (E2E - TTFT) / (completion_tokens - 1), "
               "only requests with more than one output token (GuideLLM calls this ITL)", 3, _ONE_TOKEN, _tpot,
               headline=True),
        Metric("itl", "ms", False, "inter-token latency: every gap between consecutive token-bearing chunks, pooled "
               "over requests", 3, _ONE_TOKEN, _itl, per_request=False),
        Metric("e2el", "ms", False, "end-to-end latency: last token-bearing chunk minus send time (the usage chunk and "
               "[DONE] do not extend it)", 3, _NO_COMPLETED, _e2el),
        Metric("slot_wait", "ms", False, "time a request waited for a concurrency slot before it was sent (closed loop)",
               3, _NO_COMPLETED, _slot_wait, reported=False),
        Metric("output_throughput", "tok/s", True, "output tokens of completed requests (usage.completion_tokens) / "
               "trial duration", 2, "no completed request in the trial"),
        Metric("request_throughput", "req/s", True, "completed requests / trial duration", 4,
               "no completed request in the trial"),
        Metric("duration", "s", None, "first send to last completion of the trial's measured requests", 3,
               "no completed request in the trial"),
    )
}
METRIC_DOCS = {name: m.doc for name, m in METRICS.items()}
LATENCY_METRICS: dict[str, Metric] = {name: m for name, m in METRICS.items() if m.is_latency}
REPORTED_METRICS = tuple(name for name, m in LATENCY_METRICS.items() if m.reported)
HEADLINE_METRICS = tuple(name for name, m in LATENCY_METRICS.items() if m.headline)
# Kept as a name for readers of the latency part of the registry.
LatencyMetric = Metric


def pct_key(p: float) -> str:
    return f"p{p:g}"


def distribution_ms(samples_s: Iterable[float], percentiles: Sequence[float]) -> dict[str, float] | None:
    import numpy as np  # here, not at the top: the spec imports the registry, and validating needs no numpy

    a = np.asarray(list(samples_s), dtype=np.float64) * 1000.0
    if a.size == 0:
        return None
    out = {
        "n": int(a.size),
        "mean": float(a.mean()),
        "median": float(np.median(a)),
        "std": float(a.std()),
        "min": float(a.min()),
        "max": float(a.max()),
    }
    for p in percentiles:
        out[pct_key(p)] = float(np.percentile(a, p, method=PERCENTILE_METHOD))
    return out


def trial_metrics(records: Sequence[RequestRecord], percentiles: Sequence[float] = (50, 90, 99)) -> dict:
    """Summary of one trial's measured requests. Warm-up records are ignored by phase."""
    import numpy as np

    rs = [r for r in records if r.phase == "measure"]
    ok = [r for r in rs if r.ok]
    failed = [r for r in rs if not r.ok]
    absent: dict[str, str] = {}
    out: dict = {
        "requests": len(rs),
        "completed": len(ok),
        "failed": len(failed),
        "errors": _error_counts(failed),
        "percentile_method": PERCENTILE_METHOD,
    }
    if rs:
        start = min(r.send_s for r in rs)
        ends = [r.end_s for r in ok if r.end_s is not None]
        end = max(ends) if ends else None
    else:
        start = end = None
    duration = (end - start) if (start is not None and end is not None and end > start) else None
    out["duration_s"] = duration
    usage_missing = [r for r in ok if r.completion_tokens is None]
    out_tokens = sum(r.completion_tokens or 0 for r in ok)
    out["total_output_tokens"] = out_tokens if ok and not usage_missing else None
    out["total_input_tokens_nominal"] = sum(r.prompt_len for r in rs)
    pt = [r.prompt_tokens for r in ok if r.prompt_tokens is not None]
    out["prompt_tokens_server"] = (
        {"min": min(pt), "max": max(pt), "mean": float(np.mean(pt)), "total": int(sum(pt))} if pt else None
    )
    if not pt:
        absent["prompt_tokens_server"] = "the server reported no usage.prompt_tokens"
    # Output-length checks: under ignore_eos every request should return exactly max_tokens.
    mism = [r.i for r in ok if r.completion_tokens is not None and r.completion_tokens != r.max_tokens]
    out["output_len_mismatches"] = len(mism)
    out["chunk_usage_mismatches"] = sum(
        1 for r in ok if r.completion_tokens is not None and r.chunk_count != r.completion_tokens
    )
    if duration is None:
        absent["duration_s"] = "no completed request in the trial"
        out["output_throughput"] = None
        out["request_throughput"] = None
        absent["output_throughput"] = absent["request_throughput"] = absent["duration_s"]
    else:
        out["request_throughput"] = len(ok) / duration
        if usage_missing:
            out["output_throughput"] = None
            absent["output_throughput"] = f"{len(usage_missing)} completed request(s) lack usage.completion_tokens"
        else:
            out["output_throughput"] = out_tokens / duration
    for name, m in LATENCY_METRICS.items():
        d = distribution_ms(m.samples(rs), percentiles)
        out[name + "_ms"] = d
        if d is None:
            absent[name + "_ms"] = m.absent
    out["absent"] = absent
    return out


def _error_counts(failed: Sequence[RequestRecord]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for r in failed:
        key = (r.error or "unknown error").split("\n")[0][:120]
        counts[key] = counts.get(key, 0) + 1
    return dict(sorted(counts.items()))
