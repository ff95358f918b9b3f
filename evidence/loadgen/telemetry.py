"""Engine telemetry during a trial: the Prometheus `/metrics` page, sampled.

A sampler task scrapes `/metrics` every `interval_s` while a trial runs and keeps
the series the engine adapter names (`wanted`: series -> column; vLLM's are
evidence.engines.vllm.metrics.TELEMETRY_SERIES) per sample:

    {"t_s": ..., "scrape_s": ..., "num_requests_running": ..., "num_requests_waiting": ...,
     "kv_cache_usage_perc": ..., "generation_tokens_total": ..., "prompt_tokens_total": ...,
     "num_preemptions_total": ...}

`t_s` is seconds since the trial's t0 on the same `time.perf_counter` clock as
the request records (the midpoint of the scrape; `scrape_s` is its duration, so
the sample was taken within t_s +/- scrape_s/2). A key is present only when the
server exposes that series. Series with several label sets (one per engine, say)
are summed; `kv_cache_usage_perc`, a fraction per engine, is averaged instead
(a sum of fractions is not a fraction). A counter exposed without its `_total`
suffix counts as the `_total` name.

GPU figures (evidence.loadgen.gpu) and, when the trial passes a HostReader, the engine's processes by role, the
client's CPU and the host's (evidence.loadgen.host) ride on each sample, on the same clock.

The scrape uses its own one-connection HTTP session so that it never waits for
a connection the load generator holds, and only the lines of the wanted series
are parsed, to keep the work on the load generator's event loop small.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass
from typing import Any, Iterable

MEAN_KEYS = frozenset({"kv_cache_usage_perc"})


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


class PromParseError(ValueError):
    pass


_ESC = {"\\": "\\", '"': '"', "n": "\n"}


def _parse_labels(s: str, i: int, line: str) -> tuple[dict[str, str], int]:
    """Parse `{a="x",b="y"}` starting at s[i] == '{'; return (labels, index after '}')."""
    labels: dict[str, str] = {}
    i += 1
    n = len(s)
    while True:
        while i < n and s[i] in " \t":
            i += 1
        if i >= n:
            raise PromParseError(f"unterminated label set: {line!r}")
        if s[i] == "}":
            return labels, i + 1
        j = i
        while j < n and s[j] not in '= \t':
            j += 1
        key = s[i:j]
        while j < n and s[j] in " \t":
            j += 1
        if j >= n or s[j] != "=" or not key:
            raise PromParseError(f"bad label in {line!r}")
        j += 1
        while j < n and s[j] in " \t":
            j += 1
        if j >= n or s[j] != '"':
            raise PromParseError(f"label value must be quoted in {line!r}")
        j += 1
        out = []
        while True:
            if j >= n:
                raise PromParseError(f"unterminated label value in {line!r}")
            c = s[j]
            if c == "\\" and j + 1 < n:
                out.append(_ESC.get(s[j + 1], "\\" + s[j + 1]))
                j += 2
            elif c == '"':
                j += 1
                break
            else:
                out.append(c)
                j += 1
        labels[key] = "".join(out)
        while j < n and s[j] in " \t":
            j += 1
        if j < n and s[j] == ",":
            j += 1
        i = j


def _parse_value(tok: str, line: str) -> float:
    t = tok.strip()
    low = t.lower()
    if low in ("nan",):
        return math.nan
    if low in ("+inf", "inf"):
        return math.inf
    if low == "-inf":
        return -math.inf
    try:
        return float(t)
    except ValueError:
        raise PromParseError(f"bad sample value {tok!r} in {line!r}") from None


def parse_prometheus(text: str) -> list[Sample]:
    """Parse Prometheus text exposition format (0.0.4): comments and blank lines
    are skipped; each sample line is `name[{labels}] value [timestamp]`."""
    out: list[Sample] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        i = 0
        n = len(line)
        while i < n and line[i] not in "{ \t":
            i += 1
        name = line[:i]
        if not name:
            raise PromParseError(f"sample without a name: {raw!r}")
        labels: dict[str, str] = {}
        if i < n and line[i] == "{":
            labels, i = _parse_labels(line, i, raw)
        rest = line[i:].split()
        if not rest:
            raise PromParseError(f"sample without a value: {raw!r}")
        out.append(Sample(name, labels, _parse_value(rest[0], raw)))
    return out


def _key_for(name: str, wanted: dict[str, str]) -> str | None:
    k = wanted.get(name)
    if k is None and not name.endswith("_total"):
        k = wanted.get(name + "_total")
    return k


def summarize(samples: Iterable[Sample], wanted: dict[str, str]) -> dict[str, float]:
    """Wanted series -> one number each: summed over label sets (averaged for MEAN_KEYS)."""
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    for s in samples:
        k = _key_for(s.name, wanted)
        if k is None:
            continue
        sums[k] = sums.get(k, 0.0) + s.value
        counts[k] = counts.get(k, 0) + 1
    return {k: (v / counts[k] if k in MEAN_KEYS else v) for k, v in sums.items()}


def _prefixes(wanted: dict[str, str]) -> tuple[bytes, ...]:
    names = set(wanted)
    names |= {n[: -len("_total")] for n in wanted if n.endswith("_total")}
    return tuple(sorted(n.encode() for n in names))


def filter_lines(body: bytes, prefixes: tuple[bytes, ...]) -> str:
    """Only the lines that start with a wanted series name (cheap byte work)."""
    keep = [ln for ln in body.split(b"\n") if ln.startswith(prefixes)]
    return b"\n".join(keep).decode("utf-8", "replace")


def sample_from_body(body: bytes, wanted: dict[str, str]) -> dict[str, float]:
    return summarize(parse_prometheus(filter_lines(body, _prefixes(wanted))), wanted)


class TelemetrySampler:
    """Scrape `<base_url>/metrics` every `interval_s` until stopped.

    Call `await probe()` first (before t0): it reports why telemetry is
    unavailable, or None. Then `start(t0_perf)` and, after the trial, `await stop()`.
    """

    def __init__(self, base_url: str, interval_s: float = 0.25, timeout_s: float = 5.0, *,
                 wanted: dict[str, str], headers: dict[str, str] | None = None, gpu: bool = True,
                 host: Any = None):
        import aiohttp

        from evidence.loadgen.gpu import GpuReader

        self.url = base_url.rstrip("/") + "/metrics"
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.wanted = wanted
        self._prefixes = _prefixes(wanted)
        self._aiohttp = aiohttp
        self._session: Any = None
        self._headers = dict(headers or {})  # may hold the API key: never recorded
        self.samples: list[dict[str, float]] = []
        self.failures: int = 0
        self.last_error: str | None = None
        self.reason: str | None = None  # why telemetry is unavailable
        self.series: list[str] = []
        self._t0 = 0.0
        self._task: asyncio.Task | None = None
        self._stop = asyncio.Event()
        # GPU utilization, power, SM clock and memory ride on each sample (evidence.loadgen.gpu)
        self.gpu = GpuReader() if gpu else None
        # the engine's processes by role, the client and the host ride on each sample too (evidence.loadgen.host)
        self.host = host

    async def _scrape(self) -> dict[str, float] | None:
        pc = time.perf_counter
        ts = pc()
        try:
            async with self._session.get(self.url) as resp:
                body = await resp.read()
                if resp.status != 200:
                    raise RuntimeError(f"HTTP {resp.status}")
        except Exception as exc:  # any failure: count it, keep sampling
            self.failures += 1
            self.last_error = f"{type(exc).__name__}: {exc}"
            return None
        te = pc()
        try:
            vals = summarize(parse_prometheus(filter_lines(body, self._prefixes)), self.wanted)
        except PromParseError as exc:
            self.failures += 1
            self.last_error = f"parse error: {exc}"
            return None
        d: dict[str, float] = {"t_s": (ts + te) / 2 - self._t0, "scrape_s": te - ts}
        d.update(vals)
        if self.gpu is not None:
            d.update(self.gpu.read())
        if self.host is not None:
            d.update(self.host.read())
        return d

    async def probe(self) -> str | None:
        aiohttp = self._aiohttp
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=1), headers=self._headers,
                timeout=aiohttp.ClientTimeout(total=self.timeout_s))
        try:
            async with self._session.get(self.url) as resp:
                body = await resp.read()
                if resp.status != 200:
                    self.reason = f"GET /metrics answered HTTP {resp.status}"
                    return self.reason
        except Exception as exc:
            self.reason = f"GET /metrics failed: {type(exc).__name__}: {exc}"
            return self.reason
        try:
            vals = summarize(parse_prometheus(filter_lines(body, self._prefixes)), self.wanted)
        except PromParseError as exc:
            self.reason = f"/metrics is not Prometheus text: {exc}"
            return self.reason
        if not vals:
            self.reason = ("/metrics has none of the series sampled (" + ", ".join(sorted(self.wanted)) + ")"
                           if self.wanted else "no /metrics series to sample: the engine adapter names none")
            return self.reason
        self.series = sorted(vals)
        return None

    def start(self, t0_perf: float) -> None:
        self._t0 = t0_perf
        self._stop.clear()
        self._task = asyncio.get_running_loop().create_task(self._loop())

    async def _loop(self) -> None:
        k = 0
        while not self._stop.is_set():
            s = await self._scrape()
            if s is not None:
                self.samples.append(s)
            # Absolute ticks; a slow scrape skips the ticks it overran.
            k += 1
            now = time.perf_counter() - self._t0
            nxt = k * self.interval_s
            if nxt <= now:
                k = int(now / self.interval_s) + 1
                nxt = k * self.interval_s
            try:
                await asyncio.wait_for(self._stop.wait(), nxt - now)
            except asyncio.TimeoutError:
                pass

    async def stop(self, final_sample: bool = True) -> None:
        self._stop.set()
        if self._task is not None:
            await self._task
            self._task = None
        if final_sample and self.reason is None and self._session is not None:
            s = await self._scrape()
            if s is not None:
                self.samples.append(s)
        await self.close()

    async def close(self) -> None:
        if self.gpu is not None:
            self.gpu.close()
        if self._session is not None:
            await self._session.close()
            self._session = None
            await asyncio.sleep(0)  # let the transports finish closing before a caller's loop ends

    def meta(self) -> dict[str, Any]:
        return {
            "enabled": self.reason is None,
            "reason": self.reason,
            "url": self.url,
            "interval_s": self.interval_s,
            "samples": len(self.samples),
            "failures": self.failures,
            "last_error": self.last_error,
            "series": self.series,
            "aggregation": "sum over label sets; mean for " + ", ".join(sorted(MEAN_KEYS)),
            "t_s": "midpoint of the scrape, seconds since t0 (perf_counter)",
            "gpu": self.gpu.meta() if self.gpu is not None else {"enabled": False, "reason": "not asked for"},
            **({"host": self.host.meta()} if self.host is not None else {}),
        }
