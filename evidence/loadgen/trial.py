"""The load generator: streaming `/v1/completions` requests on a schedule.

It knows HTTP and time, nothing about analysis: each request becomes one
`RequestRecord` (see records.py) and `evidence.metrics` computes everything else.
A trial is described by one `TrialConfig` and returns a `TrialResult` whose
`meta` (a `TrialMeta`) is what meta.json records.

- `sse.py`: framing and timing of the event stream (one clock, read when bytes arrive).
- `http_h1.py`, `http_aiohttp.py`: two HTTP stacks that share the SSE parser and
  pass the same tests. `h1` is used for http:// URLs unless asked otherwise;
  `aiohttp` for https://, for a caller's session, or with `http_stack="aiohttp"`.
  Both have the per-request timeout (`request_timeout_s`, None for none). One
  choice per request (n=1) is assumed.
- `schedule.py`: when each request is due.

`slot_wait_s` is the time spent waiting on the concurrency semaphore; `send_s`
is taken after acquiring it, just before the request is written.
`send_s - intended_s - slot_wait_s` is the client's own dispatch lag, so
coordinated omission is visible per request.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import json
import math
import os
import platform
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Mapping, Sequence

import aiohttp
import numpy as np

from evidence.loadgen.http_aiohttp import READ_BUFSIZE, AiohttpClient, make_session
from evidence.loadgen.http_h1 import H1Client
from evidence.loadgen.prompts import Prompt
from evidence.loadgen.schedule import arrival_schedule, describe_schedule
from evidence.loadgen.sse import SSEStream
from evidence.loadgen.telemetry import TelemetrySampler
from evidence.records import Phase, RequestRecord

try:  # pragma: no cover - depends on the environment
    import uvloop as _uvloop
except ImportError:  # pragma: no cover
    _uvloop = None

HTTP_STACKS = ("auto", "h1", "aiohttp")


@dataclass(frozen=True)
class TrialConfig:
    """Everything one trial needs; the load generator reads nothing else."""

    base_url: str
    model: str  # the name requests carry
    prompts: Sequence[Prompt] = field(repr=False)
    max_concurrency: int | None
    request_rate: float | str = "inf"
    burstiness: float = 1.0
    seed: int = 0  # the arrival schedule's seed
    ignore_eos: bool = True
    temperature: float | None = 0.0
    phase: Phase = "measure"
    request_timeout_s: float | None = 600.0
    extra_body: Mapping[str, Any] = field(default_factory=dict)
    extra_headers: Mapping[str, str] = field(default_factory=dict)
    http_stack: str = "auto"
    endpoint: str = "/v1/completions"
    telemetry: bool = True
    telemetry_interval_s: float = 0.25
    read_bufsize: int = READ_BUFSIZE
    freeze_gc: bool = True
    normalize_schedule: bool = True
    preconnect: bool = True

    def __post_init__(self) -> None:
        if self.max_concurrency is not None and self.max_concurrency < 1:
            raise ValueError("max_concurrency must be >= 1 (or None for no cap)")
        if self.http_stack not in HTTP_STACKS:
            raise ValueError("http_stack must be 'auto', 'h1' or 'aiohttp'")

    def replace(self, **changes: Any) -> "TrialConfig":
        return dataclasses.replace(self, **changes)


@dataclass
class TrialMeta:
    """What meta.json records about one trial (`as_dict()`: exactly these keys)."""

    t0_perf: float
    t0_unix: float
    t0_monotonic_ns: int
    clock_bridge_uncertainty_s: float
    ended_perf: float
    ended_unix: float
    wall_s: float
    client: dict[str, Any]
    client_cpu_s: float
    client_cpu_util: float | None
    dispatch_lag_s: dict[str, float | None]
    base_url: str
    endpoint: str
    model: str
    phase: str
    max_concurrency: int | None
    request_rate: float | str
    burstiness: float
    schedule_seed: int
    schedule: str
    ignore_eos: bool
    temperature: float | None
    timeout_s: float | None
    gc_frozen: bool
    counts: dict[str, int]
    telemetry: dict[str, Any]
    callback_errors: list[str]
    callback_error_count: int

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


@dataclass
class TrialResult:
    records: list[RequestRecord]
    telemetry: list[dict]
    meta: TrialMeta


def request_body(model: str, prompt: Prompt, *, ignore_eos: bool, temperature: float | None,
                 extra_body: dict | None = None) -> bytes:
    """The JSON body of one streaming completion. `temperature=None` leaves it out, so
    the server's default applies (vLLM: the model's generation_config, else 1.0),
    which is what `vllm bench serve` does; 0.0 asks for greedy decoding, which on a
    CPU server was 15-18% faster per step than sampling (bench/RESULTS-client.md)."""
    payload: dict[str, Any] = {
        "model": model,
        "prompt": prompt.payload_prompt,
        "max_tokens": prompt.max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": ignore_eos,
    }
    if temperature is not None:
        payload["temperature"] = temperature
    if extra_body:
        payload.update(extra_body)
    return json.dumps(payload, separators=(",", ":")).encode()



def client_info(max_concurrency: int | None, read_bufsize: int, loop: asyncio.AbstractEventLoop,
                http: str = "h1") -> dict[str, Any]:
    loop_mod = type(loop).__module__
    return {
        "client": "evidence.loadgen",
        "http_stack": http,
        "python": platform.python_version(),
        "aiohttp": aiohttp.__version__,
        "numpy": np.__version__,
        "event_loop": f"{loop_mod}.{type(loop).__name__}",
        "uvloop": loop_mod.startswith("uvloop"),
        "uvloop_version": getattr(_uvloop, "__version__", None) if loop_mod.startswith("uvloop") else None,
        **({"connector_limit": 0 if not max_concurrency else int(max_concurrency) + 4,
            "read_bufsize": read_bufsize} if http == "aiohttp" else
           {"max_connections": max_concurrency,  # one per request in flight; None: unbounded
            "read_buffer": "whatever each socket read returns; no client-side size limit"}),
        "clock": "time.perf_counter",
        "pid": os.getpid(),
        "cpu_count": os.cpu_count(),
    }



async def run_trial_async(config: TrialConfig, *,
                          on_request_done: Callable[[RequestRecord], Any] | None = None,
                          session: aiohttp.ClientSession | None = None) -> TrialResult:
    """Run one trial on the running event loop; see `run_trial`."""
    c = config
    max_concurrency, timeout_s, read_bufsize = c.max_concurrency, c.request_timeout_s, c.read_bufsize
    base = c.base_url.rstrip("/")
    url = base + c.endpoint
    http = c.http_stack
    if http == "auto":
        http = "aiohttp" if (session is not None or not url.startswith("http://")) else "h1"
    headers = dict(c.extra_headers)
    loop = asyncio.get_running_loop()
    prompts = c.prompts
    n = len(prompts)
    schedule = arrival_schedule(n, c.request_rate, c.burstiness, c.seed, c.normalize_schedule)
    # Everything that costs CPU is done before t0: bodies, records.
    extra_body = dict(c.extra_body) or None
    bodies = [request_body(c.model, p, ignore_eos=c.ignore_eos, temperature=c.temperature, extra_body=extra_body)
              for p in prompts]
    records = [RequestRecord(i=p.i, phase=c.phase, prompt_len=p.prompt_len, max_tokens=p.max_tokens,
                             intended_s=schedule[k], slot_wait_s=0.0, send_s=0.0)
               for k, p in enumerate(prompts)]
    own_session = session is None and http == "aiohttp"
    sess = make_session(max_concurrency, read_bufsize) if own_session else session
    sampler: TelemetrySampler | None = None
    tele_reason: str | None = "telemetry disabled by the caller"
    if c.telemetry:
        sampler = TelemetrySampler(base, c.telemetry_interval_s)
        tele_reason = await sampler.probe()
    callback_errors: list[str] = []
    sem = asyncio.Semaphore(max_concurrency) if max_concurrency else None
    frozen = False
    client: AiohttpClient | H1Client | None = None
    if c.freeze_gc:
        gc.collect()
        gc.freeze()
        frozen = True
    preconnected = 0
    try:
        if http == "h1":
            client = H1Client(url, 0.0, timeout_s, headers)
            if c.preconnect:
                k = min(n, max_concurrency) if max_concurrency else min(n, 64)
                preconnected = await client.preconnect(k)
        else:
            client = AiohttpClient(sess, url, 0.0, timeout_s, headers)
        # The clock bridge: perf_counter, wall clock and monotonic_ns read together.
        p_a = time.perf_counter()
        t0_unix = time.time()
        t0_mono = time.monotonic_ns()
        t0 = time.perf_counter()
        bridge_s = t0 - p_a
        cpu0 = time.process_time()
        client.t0 = t0
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
        if client is not None:
            await client.close()
        if sampler is not None and tele_reason is None:
            await sampler.stop()
        elif sampler is not None:
            await sampler.close()
        if own_session:
            await sess.close()
    ok = sum(1 for r in records if r.ok)
    lags = [r.send_s - r.intended_s - r.slot_wait_s for r in records]
    wall = t_end - t0
    meta = TrialMeta(
        t0_perf=t0,
        t0_unix=t0_unix,
        t0_monotonic_ns=t0_mono,
        clock_bridge_uncertainty_s=bridge_s,
        ended_perf=t_end,
        ended_unix=ended_unix,
        wall_s=wall,
        client={**client_info(max_concurrency, read_bufsize, loop, http),
                **({"connections_opened": client.opened, "connection_retries": client.retries,
                    "preconnected": preconnected}
                   if isinstance(client, H1Client) else {})},
        client_cpu_s=cpu1 - cpu0,
        client_cpu_util=(cpu1 - cpu0) / wall if wall > 0 else None,
        dispatch_lag_s={"max": max(lags) if lags else None,
                        "mean": (sum(lags) / len(lags)) if lags else None},
        base_url=base,
        endpoint=c.endpoint,
        model=c.model,
        phase=c.phase,
        max_concurrency=max_concurrency,
        request_rate="inf" if c.request_rate == "inf" or math.isinf(float(c.request_rate)) else float(c.request_rate),
        burstiness=c.burstiness,
        schedule_seed=c.seed,
        schedule=describe_schedule(schedule, c.burstiness, c.seed, c.normalize_schedule),
        ignore_eos=c.ignore_eos,
        temperature=c.temperature,
        timeout_s=timeout_s,
        gc_frozen=frozen,
        counts={"requests": n, "ok": ok, "failed": n - ok},
        telemetry=sampler.meta() if sampler is not None else {"enabled": False, "reason": tele_reason},
        callback_errors=callback_errors[:10],
        callback_error_count=len(callback_errors),
    )
    return TrialResult(records=records, telemetry=list(sampler.samples) if sampler is not None else [], meta=meta)


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop's loop when importable, else asyncio's."""
    if _uvloop is not None:
        return _uvloop.new_event_loop()
    return asyncio.new_event_loop()


def run_sync(coro: Awaitable[Any]) -> Any:
    """Run a coroutine to completion on a fresh (uvloop when available) event loop."""
    box: list[Any] = []

    async def main() -> None:
        # The result is handed back through `box`, not as the main task's result:
        # on Python 3.11 asyncio.Runner's SIGINT bookkeeping formats the main task's
        # repr, result included, which for a big trial took seconds.
        box.append(await coro)

    with asyncio.Runner(loop_factory=new_event_loop) as r:
        r.run(main())
    return box[0]


def run_trial(config: TrialConfig, *, on_request_done: Callable[[RequestRecord], Any] | None = None,
              session: aiohttp.ClientSession | None = None) -> TrialResult:
    """Run one trial: send every prompt as a streaming completion and record it.

    Sync wrapper around `run_trial_async` on a fresh event loop (uvloop when
    importable). Records are in prompt order; times are seconds since t0 on
    `time.perf_counter`; `meta` holds the clock bridge (t0_perf, t0_unix,
    t0_monotonic_ns read together), the client's configuration and its own CPU
    use, counts, and why telemetry is missing if it is. `on_request_done` is
    called with each finished record (its exceptions are counted, never raised);
    `session`: an aiohttp session to send through (implies the aiohttp stack).
    """
    return run_sync(run_trial_async(config, on_request_done=on_request_done, session=session))


__all__ = ["TrialConfig", "TrialMeta", "TrialResult", "SSEStream", "AiohttpClient", "H1Client", "arrival_schedule",
           "make_session", "request_body", "run_trial", "run_trial_async", "run_sync", "new_event_loop",
           "READ_BUFSIZE"]

if sys.version_info < (3, 11):  # pragma: no cover
    raise ImportError("evidence.loadgen needs Python 3.11+ (asyncio.timeout, asyncio.Runner)")
