"""The load generator: streaming `/v1/completions` requests on a schedule.

It knows HTTP and time, nothing about analysis: each request becomes one
`RequestRecord` (see records.py) and `evidence.metrics` computes everything else.

Timing (notes/metrics.md):
- One clock, `time.perf_counter()`, read once per network read *when the bytes
  arrive*, before any parsing; every SSE message in that read gets that time.
- The stream is buffered and split on blank lines (`\\n\\n`; `\\r\\n` framing is
  normalized), so one read may hold several messages or half of one.
- First-chunk time: the first message carrying a choice (even with empty text).
  Every message carrying a choice is a token-bearing chunk (`chunk_s`), counted
  once in `chunk_count` however many tokens it holds; output tokens come from the
  final usage chunk (`usage.completion_tokens`). The usage chunk and `[DONE]`
  are not chunks; `end_s` is when `[DONE]` arrived (or the stream closed).
- Parsing is light: a message that is framed as one `data: {...}` line and
  carries `"finish_reason":null` (unescaped, which JSON string content cannot
  contain) is a mid-stream choice chunk and is only counted and timed. Every
  other message (the first choice chunk of each request, the one with a finish
  reason, usage, [DONE], errors, comments, anything unusual) is parsed in full.
- `ok` only when status is 200, the stream carried at least one choice chunk,
  finished with usage or [DONE], and nothing went wrong (no error event, no
  malformed message, no dropped connection, no timeout). Failures keep their
  status and error text (first line: a stable kind, for counting).

Scheduling:
- `request_rate="inf"`: every request is due at t0 (`intended_s = 0`), capped by
  `max_concurrency` (closed loop; the seed article's saturation mode).
- finite rate: an open-loop schedule precomputed from the seed (exponential gaps
  for burstiness 1, gamma with shape=burstiness otherwise; like vLLM's benchmark,
  rescaled so the last request is due at n/rate), still capped by
  `max_concurrency` when given.
- `slot_wait_s` is the time spent waiting on the concurrency semaphore;
  `send_s` is taken after acquiring it, just before the request is written.
  `send_s - intended_s - slot_wait_s` is the client's own dispatch lag, so
  coordinated omission is visible per request.
"""

from __future__ import annotations

import asyncio
import gc
import json
import math
import os
import platform
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Sequence

import aiohttp
import numpy as np

from .prompts import Prompt
from .records import Phase, RequestRecord
from .telemetry import TelemetrySampler

READ_BUFSIZE = 16 * 1024 * 1024
_HEADERS = {"Content-Type": "application/json", "Accept": "text/event-stream"}
_NULL_FINISH = b'"finish_reason":null'

try:  # pragma: no cover - depends on the environment
    import uvloop as _uvloop
except ImportError:  # pragma: no cover
    _uvloop = None


@dataclass
class TrialResult:
    records: list[RequestRecord]
    telemetry: list[dict]
    meta: dict[str, Any] = field(default_factory=dict)


# --------------------------------------------------------------- schedule ----


def arrival_schedule(n: int, request_rate: float | str, burstiness: float = 1.0, seed: int = 0,
                     normalize: bool = True) -> list[float]:
    """Intended send times (seconds after t0) for n requests.

    inf: all at 0. Otherwise gaps ~ Gamma(shape=burstiness, scale=1/(rate*burstiness))
    (exponential for burstiness 1: a Poisson process) from numpy's PCG64 seeded
    with `seed`, accumulated; with `normalize` (vLLM's benchmark does this) the
    times are rescaled so the last is exactly n/rate.
    """
    if n <= 0:
        return []
    rate = math.inf if request_rate == "inf" else float(request_rate)
    if math.isinf(rate):
        return [0.0] * n
    if rate <= 0 or burstiness <= 0:
        raise ValueError("request_rate and burstiness must be > 0")
    rng = np.random.Generator(np.random.PCG64(seed))
    gaps = rng.gamma(shape=burstiness, scale=1.0 / (rate * burstiness), size=n)
    t = np.cumsum(gaps)
    if normalize and t[-1] > 0:
        t = t * ((n / rate) / t[-1])
    return [float(x) for x in t]


# ---------------------------------------------------------------- session ----


def make_session(max_concurrency: int | None, read_bufsize: int = READ_BUFSIZE) -> aiohttp.ClientSession:
    """The one HTTP session of a trial: connector limit >= concurrency, big read
    buffer, no total timeout (the per-request timeout is ours)."""
    limit = 0 if not max_concurrency else int(max_concurrency) + 4
    conn = aiohttp.TCPConnector(limit=limit, limit_per_host=limit, ttl_dns_cache=300,
                                keepalive_timeout=60, force_close=False)
    return aiohttp.ClientSession(
        connector=conn, read_bufsize=read_bufsize,
        timeout=aiohttp.ClientTimeout(total=None, connect=None, sock_connect=None, sock_read=None),
        auto_decompress=False)


def request_body(model: str, prompt: Prompt, *, ignore_eos: bool, temperature: float,
                 extra_body: dict | None = None) -> bytes:
    payload: dict[str, Any] = {
        "model": model,
        "prompt": prompt.payload_prompt,
        "max_tokens": prompt.max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": ignore_eos,
        "temperature": temperature,
    }
    if extra_body:
        payload.update(extra_body)
    return json.dumps(payload, separators=(",", ":")).encode()


# --------------------------------------------------------- one request ----


def _classify_exc(exc: BaseException, timeout_s: float | None) -> str:
    name = type(exc).__name__
    if isinstance(exc, (TimeoutError, asyncio.TimeoutError)):
        return f"timeout: no complete response within {timeout_s:g} s"
    if isinstance(exc, aiohttp.ClientPayloadError):
        return f"connection dropped mid-stream: {name}: {exc}"
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return f"connection dropped: {name}: {exc}"
    if isinstance(exc, aiohttp.ClientConnectorError):
        return f"connect failed: {name}: {exc}"
    if isinstance(exc, (aiohttp.ClientOSError, ConnectionError)):
        return f"connection dropped: {name}: {exc}"
    return f"client error: {name}: {exc}"


class _StreamState:
    __slots__ = ("usage", "done_t", "error", "finish")

    def __init__(self) -> None:
        self.usage: dict | None = None
        self.done_t: float | None = None
        self.error: str | None = None
        self.finish: str | None = None


def _sse_data(msg: bytes) -> bytes | None:
    """The data of one SSE event (lines joined by '\\n'), or None for an event without data."""
    data: list[bytes] = []
    for line in msg.split(b"\n"):
        if not line or line[:1] == b":":
            continue  # comment (pings)
        name, sep, value = line.partition(b":")
        if not sep:
            name, value = line, b""
        elif value[:1] == b" ":
            value = value[1:]
        if name == b"data":
            data.append(value)
        # event:, id:, retry: carry nothing we use
    return b"\n".join(data) if data else None


def _slow_message(msg: bytes, t: float, rec: RequestRecord, st: _StreamState) -> None:
    """Full parse of one SSE message (everything but mid-stream choice chunks)."""
    data = _sse_data(msg)
    if data is None:
        return
    if data.strip() == b"[DONE]":
        if st.done_t is None:
            st.done_t = t
        return
    try:
        obj = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        if st.error is None:
            st.error = "malformed SSE data: " + data[:200].decode("utf-8", "replace")
        return
    if not isinstance(obj, dict):
        if st.error is None:
            st.error = "malformed SSE data: not a JSON object: " + data[:200].decode("utf-8", "replace")
        return
    if "error" in obj or obj.get("object") == "error":
        e = obj.get("error", obj)
        msg_txt = e.get("message") if isinstance(e, dict) else str(e)
        if st.error is None:
            st.error = f"error event in stream: {msg_txt}"
        return
    choices = obj.get("choices")
    if choices:
        rec.chunk_s.append(t)
        rec.chunk_count += 1
        c0 = choices[0] if isinstance(choices, list) else None
        if isinstance(c0, dict) and c0.get("finish_reason") is not None:
            st.finish = c0["finish_reason"]
    usage = obj.get("usage")
    if isinstance(usage, dict):
        st.usage = usage


class Client:
    """Issues requests on one session; fills RequestRecords. Times relative to t0."""

    def __init__(self, session: aiohttp.ClientSession, url: str, t0: float, timeout_s: float | None,
                 headers: dict[str, str] | None = None):
        self.session = session
        self.url = url
        self.t0 = t0
        self.timeout_s = timeout_s
        self.headers = {**_HEADERS, **(headers or {})}

    async def request(self, rec: RequestRecord, body: bytes) -> RequestRecord:
        pc = time.perf_counter
        t0 = self.t0
        rec.send_s = pc() - t0
        st = _StreamState()
        try:
            async with asyncio.timeout(self.timeout_s):
                async with self.session.post(self.url, data=body, headers=self.headers) as resp:
                    rec.status = resp.status
                    if resp.status != 200:
                        text = await resp.content.read(4096)
                        rec.end_s = pc() - t0
                        reason = resp.reason or ""
                        rec.error = (f"HTTP {resp.status} {reason}".rstrip() + "\n"
                                     + text.decode("utf-8", "replace"))
                        return rec
                    await self._read(resp, rec, st)
        except asyncio.CancelledError:
            raise  # the caller cancelled (asyncio.timeout's own expiry arrives as TimeoutError)
        except Exception as exc:  # every failure is recorded
            rec.end_s = pc() - t0
            rec.error = _classify_exc(exc, self.timeout_s)
            self._finish(rec, st, failed=True)
            return rec
        self._finish(rec, st, failed=False)
        return rec

    async def _read(self, resp: aiohttp.ClientResponse, rec: RequestRecord, st: _StreamState) -> None:
        pc = time.perf_counter
        t0 = self.t0
        chunks = rec.chunk_s
        append = chunks.append
        null_finish = _NULL_FINISH
        buf = b""
        crlf = False
        t = 0.0
        async for data in resp.content.iter_any():
            t = pc() - t0  # bytes arrived: timestamp before any parsing
            if buf:
                data = buf + data
            if b"\r" in data:
                crlf = True
            if crlf:
                data = data.replace(b"\r\n", b"\n")
            parts = data.split(b"\n\n")
            buf = parts.pop()
            for msg in parts:
                if (chunks and null_finish in msg and msg[:7] == b"data: {" and msg[-1:] == b"}"
                        and b"\n" not in msg):
                    append(t)  # mid-stream choice chunk: count and time only
                    continue
                if msg:
                    _slow_message(msg, t, rec, st)
        rec.end_s = (st.done_t if st.done_t is not None else pc() - t0)
        if buf.strip():
            # A last message without its blank line at EOF: take it if it parses.
            _slow_message(buf.rstrip(b"\n"), rec.end_s, rec, st)
            if st.done_t is not None:
                rec.end_s = st.done_t
        rec.chunk_count = len(chunks)

    @staticmethod
    def _finish(rec: RequestRecord, st: _StreamState, failed: bool) -> None:
        rec.chunk_count = len(rec.chunk_s)
        if rec.chunk_s:
            rec.first_chunk_s = rec.chunk_s[0]
        u = st.usage
        if u is not None:
            pt, ct = u.get("prompt_tokens"), u.get("completion_tokens")
            rec.prompt_tokens = pt if isinstance(pt, int) else None
            rec.completion_tokens = ct if isinstance(ct, int) else None
        rec.finish_reason = st.finish
        if failed:
            rec.ok = False
            return
        if st.error is not None:
            rec.error = st.error
        elif not rec.chunk_s:
            rec.error = "no choice chunk in the stream"
        elif st.usage is None and st.done_t is None:
            rec.error = "stream ended without usage or [DONE] (cut short)"
        rec.ok = rec.error is None


# ------------------------------------------------------------------ trial ----


def client_info(max_concurrency: int | None, read_bufsize: int, loop: asyncio.AbstractEventLoop) -> dict[str, Any]:
    loop_mod = type(loop).__module__
    return {
        "client": "evidence.loadgen",
        "python": platform.python_version(),
        "aiohttp": aiohttp.__version__,
        "numpy": np.__version__,
        "event_loop": f"{loop_mod}.{type(loop).__name__}",
        "uvloop": loop_mod.startswith("uvloop"),
        "uvloop_version": getattr(_uvloop, "__version__", None) if loop_mod.startswith("uvloop") else None,
        "connector_limit": 0 if not max_concurrency else int(max_concurrency) + 4,
        "read_bufsize": read_bufsize,
        "clock": "time.perf_counter",
        "pid": os.getpid(),
        "cpu_count": os.cpu_count(),
    }


async def run_trial_async(base_url: str, model: str, prompts: Sequence[Prompt], *,
                          max_concurrency: int | None, request_rate: float | str = "inf",
                          burstiness: float = 1.0, seed: int = 0, ignore_eos: bool = True,
                          temperature: float = 0.0, phase: Phase = "measure",
                          timeout_s: float | None = 600.0, telemetry: bool = True,
                          telemetry_interval_s: float = 0.25,
                          on_request_done: Callable[[RequestRecord], Any] | None = None,
                          session: aiohttp.ClientSession | None = None,
                          extra_body: dict | None = None, extra_headers: dict[str, str] | None = None,
                          endpoint: str = "/v1/completions",
                          read_bufsize: int = READ_BUFSIZE, freeze_gc: bool = True,
                          normalize_schedule: bool = True) -> TrialResult:
    """Run one trial on the running event loop; see `run_trial`."""
    if max_concurrency is not None and max_concurrency < 1:
        raise ValueError("max_concurrency must be >= 1 (or None for no cap)")
    base = base_url.rstrip("/")
    url = base + endpoint
    loop = asyncio.get_running_loop()
    n = len(prompts)
    schedule = arrival_schedule(n, request_rate, burstiness, seed, normalize_schedule)
    # Everything that costs CPU is done before t0: bodies, records.
    bodies = [request_body(model, p, ignore_eos=ignore_eos, temperature=temperature, extra_body=extra_body)
              for p in prompts]
    records = [RequestRecord(i=p.i, phase=phase, prompt_len=p.prompt_len, max_tokens=p.max_tokens,
                             intended_s=schedule[k], slot_wait_s=0.0, send_s=0.0)
               for k, p in enumerate(prompts)]
    own_session = session is None
    sess = make_session(max_concurrency, read_bufsize) if own_session else session
    sampler: TelemetrySampler | None = None
    tele_reason: str | None = "telemetry disabled by the caller"
    if telemetry:
        sampler = TelemetrySampler(base, telemetry_interval_s)
        tele_reason = await sampler.probe()
    callback_errors: list[str] = []
    sem = asyncio.Semaphore(max_concurrency) if max_concurrency else None
    frozen = False
    if freeze_gc:
        gc.collect()
        gc.freeze()
        frozen = True
    try:
        # The clock bridge: perf_counter, wall clock and monotonic_ns read together.
        p_a = time.perf_counter()
        t0_unix = time.time()
        t0_mono = time.monotonic_ns()
        t0 = time.perf_counter()
        bridge_s = t0 - p_a
        cpu0 = time.process_time()
        client = Client(sess, url, t0, timeout_s, extra_headers)
        if sampler is not None and tele_reason is None:
            sampler.start(t0)

        async def one(rec: RequestRecord, body: bytes) -> None:
            if sem is not None:
                tw = time.perf_counter()
                async with sem:
                    rec.slot_wait_s = time.perf_counter() - tw
                    await client.request(rec, body)
            else:
                await client.request(rec, body)
            if on_request_done is not None:
                try:
                    on_request_done(rec)
                except Exception as exc:  # a progress bar must not break a trial
                    callback_errors.append(f"{type(exc).__name__}: {exc}")

        tasks = []
        create = loop.create_task
        if all(s == 0.0 for s in schedule):
            for rec, body in zip(records, bodies):
                tasks.append(create(one(rec, body)))
        else:
            pc = time.perf_counter
            for rec, body in zip(records, bodies):
                due = t0 + rec.intended_s
                # Loop timers can fire up to a millisecond early: never send before due.
                while (delay := due - pc()) > 0:
                    await asyncio.sleep(delay)
                tasks.append(create(one(rec, body)))
        await asyncio.gather(*tasks)
        t_end = time.perf_counter()
        cpu1 = time.process_time()
        ended_unix = time.time()
    finally:
        if frozen:
            gc.unfreeze()
        if sampler is not None and tele_reason is None:
            await sampler.stop()
        elif sampler is not None:
            await sampler.close()
        if own_session:
            await sess.close()
    ok = sum(1 for r in records if r.ok)
    lags = [r.send_s - r.intended_s - r.slot_wait_s for r in records]
    wall = t_end - t0
    meta: dict[str, Any] = {
        "t0_perf": t0,
        "t0_unix": t0_unix,
        "t0_monotonic_ns": t0_mono,
        "clock_bridge_uncertainty_s": bridge_s,
        "ended_perf": t_end,
        "ended_unix": ended_unix,
        "wall_s": wall,
        "client": client_info(max_concurrency, read_bufsize, loop),
        "client_cpu_s": cpu1 - cpu0,
        "client_cpu_util": (cpu1 - cpu0) / wall if wall > 0 else None,
        "dispatch_lag_s": {"max": max(lags) if lags else None,
                           "mean": (sum(lags) / len(lags)) if lags else None},
        "base_url": base,
        "endpoint": endpoint,
        "model": model,
        "phase": phase,
        "max_concurrency": max_concurrency,
        "request_rate": "inf" if request_rate == "inf" or math.isinf(float(request_rate)) else float(request_rate),
        "burstiness": burstiness,
        "schedule_seed": seed,
        "schedule": ("all due at t0 (closed loop)" if all(s == 0.0 for s in schedule) else
                     f"{'Poisson' if burstiness == 1.0 else 'gamma'} arrivals, numpy PCG64 seed {seed}"
                     + (", rescaled so the last is due at n/rate" if normalize_schedule else "")),
        "ignore_eos": ignore_eos,
        "temperature": temperature,
        "timeout_s": timeout_s,
        "gc_frozen": frozen,
        "counts": {"requests": n, "ok": ok, "failed": n - ok},
        "telemetry": sampler.meta() if sampler is not None else {"enabled": False, "reason": tele_reason},
        "callback_errors": callback_errors[:10],
        "callback_error_count": len(callback_errors),
    }
    return TrialResult(records=records, telemetry=list(sampler.samples) if sampler is not None else [], meta=meta)


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop's loop when importable, else asyncio's."""
    if _uvloop is not None:
        return _uvloop.new_event_loop()
    return asyncio.new_event_loop()


def run_sync(coro: Awaitable[Any]) -> Any:
    """Run a coroutine to completion on a fresh (uvloop when available) event loop."""
    with asyncio.Runner(loop_factory=new_event_loop) as r:
        return r.run(coro)  # type: ignore[arg-type]


def run_trial(base_url: str, model: str, prompts: Sequence[Prompt], *, max_concurrency: int | None,
              request_rate: float | str = "inf", burstiness: float = 1.0, seed: int = 0,
              ignore_eos: bool = True, temperature: float = 0.0, phase: Phase = "measure",
              timeout_s: float | None = 600.0, telemetry: bool = True, telemetry_interval_s: float = 0.25,
              on_request_done: Callable[[RequestRecord], Any] | None = None, **kw: Any) -> TrialResult:
    """Run one trial: send every prompt as a streaming completion and record it.

    Sync wrapper around `run_trial_async` on a fresh event loop (uvloop when
    importable). Records are in prompt order; times are seconds since t0 on
    `time.perf_counter`; `meta` holds the clock bridge (t0_perf, t0_unix,
    t0_monotonic_ns read together), the client's configuration and its own CPU
    use, counts, and why telemetry is missing if it is.
    """
    return run_sync(run_trial_async(
        base_url, model, prompts, max_concurrency=max_concurrency, request_rate=request_rate,
        burstiness=burstiness, seed=seed, ignore_eos=ignore_eos, temperature=temperature, phase=phase,
        timeout_s=timeout_s, telemetry=telemetry, telemetry_interval_s=telemetry_interval_s,
        on_request_done=on_request_done, **kw))


__all__ = ["TrialResult", "Client", "arrival_schedule", "make_session", "request_body", "run_trial",
           "run_trial_async", "run_sync", "new_event_loop", "READ_BUFSIZE"]

if sys.version_info < (3, 11):  # pragma: no cover
    raise ImportError("evidence.loadgen needs Python 3.11+ (asyncio.timeout, asyncio.Runner)")
