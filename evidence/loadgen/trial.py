"""The load generator: streaming `/v1/completions` requests on a schedule.

It knows HTTP and time, nothing about analysis: each request becomes one
`RequestRecord` (see records.py) and `evidence.metrics` computes everything else.
A trial is described by one `TrialConfig` and returns a `TrialResult` whose
`meta` (a `TrialMeta`) is what meta.json records.

- `sse.py`: framing and timing of the event stream (one clock, read when bytes arrive).
- `http_aiohttp.py`, `http_h1.py`: two HTTP stacks that share the SSE parser and
  pass the same tests. `aiohttp` is the default (`http_stack="auto"` or
  "aiohttp"): the well-kept library users know, with https, and on the H200 the
  client needed 8-14% of a core, far from any limit. `h1`, our keep-alive
  HTTP/1.1 client (http:// only), is the opt-in for client-bound sweeps: about
  1.2-1.6x less client CPU per token again (bench/RESULTS-client.md).
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
from evidence.loadgen.stop import StopFlag
from evidence.loadgen.telemetry import TelemetrySampler
from evidence.records import Phase, RequestRecord
from evidence.spec.model import Spec

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
    extra_body: Mapping[str, Any] = field(default_factory=dict)  # merged into every request body
    extra_headers: Mapping[str, str] = field(default_factory=dict)
    # Sent as `Authorization: Bearer <key>` on every request (completions, /metrics);
    # never written anywhere: not in repr, not in TrialMeta.
    api_key: str | None = field(default=None, repr=False)
    http_stack: str = "auto"  # auto = aiohttp; "h1" opts in to our HTTP/1.1 stack
    endpoint: str = "/v1/completions"
    telemetry: bool = True
    telemetry_interval_s: float = 0.25
    # /metrics series -> telemetry column, as the engine adapter names them (Engine.telemetry_series)
    telemetry_series: Mapping[str, str] = field(default_factory=dict)
    # The engine's local processes (evidence.engines.base.ProcessRoles), or why there are none; with telemetry
    # on, host telemetry (evidence.loadgen.host) rides on each sample and the speed probe runs around the trial.
    processes: Any = field(default=None, repr=False, compare=False)
    host_telemetry: bool = True
    read_bufsize: int = READ_BUFSIZE
    freeze_gc: bool = True
    normalize_schedule: bool = True
    preconnect: bool = True
    # Checked between requests: once set, nothing more is sent, requests in flight get
    # `stop_grace_s` to finish, the rest are cancelled; completed records are returned.
    stop: StopFlag | None = field(default=None, repr=False, compare=False)
    stop_grace_s: float = 5.0

    def headers(self) -> dict[str, str]:
        """The request headers besides the stack's own (the API key included: never log these)."""
        h = dict(self.extra_headers)
        if self.api_key:
            h["Authorization"] = f"Bearer {self.api_key}"
        return h

    def __post_init__(self) -> None:
        if self.max_concurrency is not None and self.max_concurrency < 1:
            raise ValueError("max_concurrency must be >= 1 (or None for no cap)")
        if self.http_stack not in HTTP_STACKS:
            raise ValueError("http_stack must be 'auto', 'h1' or 'aiohttp'")

    def replace(self, **changes: Any) -> "TrialConfig":
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_spec(cls, spec: Spec, *, base_url: str, model: str, prompts: Sequence[Prompt],
                  max_concurrency: int | None, seed: int, phase: Phase = "measure", **overrides: Any) -> "TrialConfig":
        """A trial of the spec's workload (rate, burstiness, ignore_eos, temperature, extra_body,
        request_timeout_s, endpoint), with the API key read now from the variable the spec names."""
        w = spec.workload
        fields: dict[str, Any] = dict(
            base_url=base_url, model=model, prompts=prompts, max_concurrency=max_concurrency, seed=seed, phase=phase,
            request_rate=w.request_rate, burstiness=w.burstiness, ignore_eos=w.ignore_eos,
            temperature=w.temperature, extra_body=dict(w.extra_body), request_timeout_s=w.request_timeout_s,
            endpoint=w.endpoint, api_key=os.environ.get(spec.engine.api_key_env_name()) or None)
        fields.update(overrides)
        return cls(**fields)


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
    # Only when a stop flag cut the trial short (absent otherwise, so meta.json is unchanged):
    # reason, planned, completed, not_sent, cancelled, grace_s.
    interrupted: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        if d["interrupted"] is None:
            del d["interrupted"]
        return d


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
    CPU server was 15-18% faster per step than sampling (bench/RESULTS-client.md).

    `extra_body` (spec `workload.extra_body`) is merged last, as given. What
    `vllm bench serve` (0.26 and 0.32, backend openai; read in vLLM's
    benchmarks/lib/endpoint_request_func.py, `async_request_openai_completions`)
    puts in every request body: `model`, `prompt`, `"repetition_penalty": 1.0`,
    `max_tokens`, `"logprobs": null`, `"stream": true`,
    `"stream_options": {"include_usage": true}`, `"ignore_eos": true` only with
    --ignore-eos, then its sampling options (--temperature, --top-p, ...) and
    --extra-body; header `Authorization: Bearer $OPENAI_API_KEY` when that is set.
    So to send what it sends: `temperature: null` and
    `extra_body: {repetition_penalty: 1.0}` (without it the server applies the
    model's generation_config value, e.g. 1.05 for Qwen2.5-3B-Instruct); `logprobs:
    null` is the server's default anyway."""
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
        http = "aiohttp"
    if http == "h1" and (session is not None or not url.startswith("http://")):
        raise ValueError("the h1 stack speaks plain http:// only and has no aiohttp session; use http_stack='aiohttp'")
    headers = c.headers()
    stop = c.stop
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
        host = None
        if c.host_telemetry:
            from evidence.loadgen.host import HostReader

            host = HostReader(c.processes)
        sampler = TelemetrySampler(base, c.telemetry_interval_s, wanted=dict(c.telemetry_series), headers=headers,
                                   host=host)
        tele_reason = await sampler.probe()
        if tele_reason is None and host is not None:
            host.run_probe("before")  # before t0: never inside the measured window
    callback_errors: list[str] = []
    sem = asyncio.Semaphore(max_concurrency) if max_concurrency else None
    frozen = False
    client: AiohttpClient | H1Client | None = None
    if c.freeze_gc:
        gc.collect()
        gc.freeze()
        frozen = True
    preconnected = 0
    # 0: not sent, 1: in flight, 2: complete (only 2 is returned when a stop cut the trial)
    state = [0] * n
    interrupted: dict[str, Any] | None = None
    stop_task: asyncio.Task | None = None
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

        async def one(k: int, rec: RequestRecord, body: bytes) -> None:
            if sem is not None:
                tw = time.perf_counter()
                async with sem:
                    rec.slot_wait_s = time.perf_counter() - tw
                    if stop is not None and stop.is_set():
                        return  # between requests: stop sending
                    state[k] = 1
                    await client.request(rec, body)
            else:
                if stop is not None and stop.is_set():
                    return
                state[k] = 1
                await client.request(rec, body)
            state[k] = 2
            if on_request_done is not None:
                try:
                    on_request_done(rec)
                except Exception as exc:  # a progress bar must not break a trial
                    callback_errors.append(f"{type(exc).__name__}: {exc}")

        tasks = []
        create = loop.create_task
        if stop is not None:
            stop_task = create(_wait_for(stop))
        if all(s == 0.0 for s in schedule):
            if stop is None or not stop.is_set():
                for k, (rec, body) in enumerate(zip(records, bodies)):
                    tasks.append(create(one(k, rec, body)))
        else:
            pc = time.perf_counter
            # with a stop flag, sleep in short steps so a stop is seen between sends
            step = math.inf if stop is None else _STOP_POLL_S
            for k, (rec, body) in enumerate(zip(records, bodies)):
                due = t0 + rec.intended_s
                # Loop timers can fire up to a millisecond early: never send before due.
                while (delay := due - pc()) > 0 and not (stop is not None and stop.is_set()):
                    await asyncio.sleep(min(delay, step))
                if stop is not None and stop.is_set():
                    break
                tasks.append(create(one(k, rec, body)))
        if stop is None:
            await asyncio.gather(*tasks)
        else:
            interrupted = await _finish_or_stop(tasks, stop, stop_task, c.stop_grace_s, state)
        t_end = time.perf_counter()
        cpu1 = time.process_time()
        ended_unix = time.time()
    finally:
        if stop_task is not None:
            stop_task.cancel()
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
    if sampler is not None and tele_reason is None and sampler.host is not None:
        sampler.host.run_probe("after")  # once the last sample is taken: its CPU is in no interval
    if interrupted is not None:
        records = [r for k, r in enumerate(records) if state[k] == 2]
        n = len(records)
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
        interrupted=interrupted,
    )
    return TrialResult(records=records, telemetry=list(sampler.samples) if sampler is not None else [], meta=meta)


_STOP_POLL_S = 0.05


async def _wait_for(stop: StopFlag) -> None:
    """Return once the flag is set (a signal handler cannot wake the loop, so poll)."""
    while not stop.is_set():
        await asyncio.sleep(_STOP_POLL_S)


async def _finish_or_stop(tasks: list[asyncio.Task], stop: StopFlag, stop_task: asyncio.Task | None,
                          grace_s: float, state: list[int]) -> dict[str, Any] | None:
    """Wait for every request, or, once `stop` is set, give those in flight `grace_s`
    and cancel the rest. Returns what the stop did (None when it did not happen)."""
    all_done = asyncio.gather(*tasks, return_exceptions=True)
    cancelled = 0
    if not stop.is_set() and stop_task is not None:
        await asyncio.wait({all_done, stop_task}, return_when=asyncio.FIRST_COMPLETED)
    if not stop.is_set():
        results = await all_done
    else:
        if tasks:
            await asyncio.wait(tasks, timeout=max(0.0, grace_s))
        # tasks[k] is request k (both schedules create them in order); not-sent ones just stop waiting
        cancelled = sum(1 for k, t in enumerate(tasks) if not t.done() and state[k] == 1)
        for t in tasks:
            if not t.done():
                t.cancel()
        results = await all_done
    bugs = [r for r in results if isinstance(r, Exception)]
    if bugs:
        raise bugs[0]  # `one` records every request failure; anything else is a bug
    done = state.count(2)
    if not stop.is_set() or done == len(state):
        return None
    return {"reason": stop.reason, "planned": len(state), "completed": done,
            "not_sent": state.count(0), "cancelled": cancelled, "grace_s": grace_s}


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


__all__ = ["StopFlag", "TrialConfig", "TrialMeta", "TrialResult", "SSEStream", "AiohttpClient", "H1Client", "arrival_schedule",
           "make_session", "request_body", "run_trial", "run_trial_async", "run_sync", "new_event_loop",
           "READ_BUFSIZE"]

if sys.version_info < (3, 11):  # pragma: no cover
    raise ImportError("evidence.loadgen needs Python 3.11+ (asyncio.timeout, asyncio.Runner)")
