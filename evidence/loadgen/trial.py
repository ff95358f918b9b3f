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

HTTP: two stacks share the SSE parser above and pass the same tests.
- `h1` (the default for http:// URLs): a small keep-alive HTTP/1.1 client of our
  own on asyncio's Protocol API. The timestamp is read on entry to
  `data_received`, the first moment the bytes exist in this process, and no
  coroutine is woken per read, so a token costs about 3x less client CPU than
  in `vllm bench serve`'s client (bench/RESULTS-client.md). Connections for the
  first wave are opened before t0, so TCP handshakes stay out of TTFT.
- `aiohttp` (https://, a caller's session, or `http="aiohttp"`): one
  ClientSession, connector limit >= max concurrency, 16 MiB read buffer, no
  total timeout. The timestamp is read when `readany()` hands over the bytes.
Both have the per-request timeout (`timeout_s`, None for none). One choice per
request (n=1) is assumed.

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
import socket
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Sequence
from urllib.parse import urlsplit

import aiohttp
import numpy as np

from evidence.loadgen.prompts import Prompt
from evidence.records import Phase, RequestRecord
from evidence.loadgen.telemetry import TelemetrySampler

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


# --------------------------------------------------------- one request ----


def _classify_exc(exc: BaseException, timeout_s: float | None) -> str:
    name = type(exc).__name__
    if isinstance(exc, (TimeoutError, asyncio.TimeoutError)):
        if timeout_s is None:
            return f"timeout: {name}: {exc}"
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


class SSEStream:
    """The SSE side of one request: frames messages and fills its RequestRecord.

    `feed(data, t)` takes the bytes of one network read and the time they
    arrived; `end(t)` is called at the end of the HTTP body. Shared by both HTTP
    stacks, so the SSE semantics cannot differ between them.
    """

    __slots__ = ("rec", "chunks", "buf", "crlf", "usage", "done_t", "error", "finish")

    def __init__(self, rec: RequestRecord) -> None:
        self.rec = rec
        self.chunks = rec.chunk_s
        self.buf = b""
        self.crlf = False
        self.usage: dict | None = None
        self.done_t: float | None = None
        self.error: str | None = None
        self.finish: str | None = None

    def feed(self, data: bytes, t: float) -> None:
        if self.buf:
            data = self.buf + data
        if not self.crlf and b"\r" in data:
            self.crlf = True
        if self.crlf:
            data = data.replace(b"\r\n", b"\n")
        chunks = self.chunks
        # The common case: the read is exactly one mid-stream choice chunk.
        if (chunks and data[-2:] == b"\n\n" and data[:7] == b"data: {" and data[-3:-2] == b"}"
                and data.find(b"\n") == len(data) - 2 and _NULL_FINISH in data):
            chunks.append(t)
            self.buf = b""
            return
        parts = data.split(b"\n\n")
        self.buf = parts.pop()
        for msg in parts:
            if (chunks and _NULL_FINISH in msg and msg[:7] == b"data: {" and msg[-1:] == b"}"
                    and b"\n" not in msg):
                chunks.append(t)  # mid-stream choice chunk: count and time only
            elif msg:
                self._slow(msg, t)

    def end(self, t: float) -> float:
        """End of body at time t; returns end_s ([DONE]'s arrival, else t)."""
        if self.buf.strip():
            # A last message without its blank line: take it if it parses.
            self._slow(self.buf.rstrip(b"\n"), t)
            self.buf = b""
        return self.done_t if self.done_t is not None else t

    def _slow(self, msg: bytes, t: float) -> None:
        """Full parse of one SSE message (everything but mid-stream choice chunks)."""
        data = _sse_data(msg)
        if data is None:
            return
        if data.strip() == b"[DONE]":
            if self.done_t is None:
                self.done_t = t
            return
        try:
            obj = json.loads(data)
        except (ValueError, UnicodeDecodeError):
            if self.error is None:  # first line: the kind (for counting); then a sample
                self.error = "malformed SSE data: not JSON\n" + data[:200].decode("utf-8", "replace")
            return
        if not isinstance(obj, dict):
            if self.error is None:
                self.error = "malformed SSE data: not a JSON object\n" + data[:200].decode("utf-8", "replace")
            return
        if "error" in obj or obj.get("object") == "error":
            e = obj.get("error", obj)
            msg_txt = e.get("message") if isinstance(e, dict) else str(e)
            if self.error is None:
                self.error = f"error event in stream: {msg_txt}"
            return
        choices = obj.get("choices")
        if choices:
            self.chunks.append(t)
            c0 = choices[0] if isinstance(choices, list) else None
            if isinstance(c0, dict) and c0.get("finish_reason") is not None:
                self.finish = c0["finish_reason"]
        usage = obj.get("usage")
        if isinstance(usage, dict):
            self.usage = usage

    def finish_record(self, failed: bool) -> None:
        rec = self.rec
        rec.chunk_count = len(rec.chunk_s)
        if rec.chunk_s:
            rec.first_chunk_s = rec.chunk_s[0]
        u = self.usage
        if u is not None:
            pt, ct = u.get("prompt_tokens"), u.get("completion_tokens")
            rec.prompt_tokens = pt if isinstance(pt, int) else None
            rec.completion_tokens = ct if isinstance(ct, int) else None
        rec.finish_reason = self.finish
        if failed:
            rec.ok = False
            return
        if self.error is not None:
            rec.error = self.error
        elif not rec.chunk_s:
            rec.error = "no choice chunk in the stream"
        elif self.usage is None and self.done_t is None:
            rec.error = "stream ended without usage or [DONE] (cut short)"
        rec.ok = rec.error is None


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


def _http_error(rec: RequestRecord, status: int, reason: str, body: bytes) -> None:
    rec.status = status
    rec.error = f"HTTP {status} {reason}".rstrip() + "\n" + body[:4096].decode("utf-8", "replace")
    rec.ok = False


# ------------------------------------------------------ HTTP stack: aiohttp ----


class AiohttpClient:
    """Streaming requests through one aiohttp session (connector limit >= concurrency,
    16 MiB read buffer). Timestamps are taken when `readany` hands over bytes."""

    name = "aiohttp"

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
        sse = SSEStream(rec)
        try:
            async with asyncio.timeout(self.timeout_s):
                async with self.session.post(self.url, data=body, headers=self.headers) as resp:
                    rec.status = resp.status
                    if resp.status != 200:
                        text = await resp.content.read(4096)
                        rec.end_s = pc() - t0
                        _http_error(rec, resp.status, resp.reason or "", text)
                        return rec
                    content = resp.content
                    feed = sse.feed
                    while True:
                        data = await content.readany()
                        t = pc() - t0  # bytes arrived: timestamp before any parsing
                        if not data:
                            break
                        feed(data, t)
                    rec.end_s = sse.end(t)
        except asyncio.CancelledError:
            raise  # the caller cancelled (asyncio.timeout's own expiry arrives as TimeoutError)
        except Exception as exc:  # every failure is recorded
            rec.end_s = pc() - t0
            rec.error = _classify_exc(exc, self.timeout_s)
            sse.finish_record(failed=True)
            return rec
        sse.finish_record(failed=False)
        return rec

    async def close(self) -> None:
        pass


# ----------------------------------------------- HTTP stack: minimal HTTP/1.1 ----

_HEAD, _CHUNKED, _LENGTH, _UNTIL_CLOSE, _DONE = range(5)
_perf_counter = time.perf_counter


class _H1Error(Exception):
    pass


class _H1Conn(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection; one request at a time (no pipelining).

    Parses the status line, headers and a chunked / Content-Length / until-close
    body itself, and hands each read's body bytes to the request's SSEStream with
    the time `data_received` was entered (the bytes' arrival in this process).
    """

    def __init__(self, t0: float = 0.0) -> None:
        self.t0 = t0
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.reused = False
        self.fut: asyncio.Future | None = None
        self.sse: SSEStream | None = None
        self.state = _DONE
        self.buf = b""
        self.need = 0  # _CHUNKED: bytes left in this chunk (-1: expecting the CRLF after it); _LENGTH: bytes left
        self.status = 0
        self.reason = ""
        self.keep_alive = True
        self.err_body: list[bytes] = []
        self.got_bytes = False

    # -- asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.fut is not None and not self.fut.done():
            t = time.perf_counter() - self.t0
            if self.state == _UNTIL_CLOSE:
                self._complete(t)
                return
            if not self.got_bytes:
                why = "server closed the connection before responding"
            else:
                why = "connection closed before the response was complete"
            detail = f" ({type(exc).__name__}: {exc})" if exc else ""
            kind = "connection dropped" if not self.got_bytes else "connection dropped mid-stream"
            self.fut.set_exception(_H1Error(f"{kind}: {why}{detail}"))

    def eof_received(self) -> bool:
        return False  # close; connection_lost follows

    # -- requests
    def begin(self, request: bytes, sse: SSEStream, fut: asyncio.Future, t0: float) -> None:
        self.t0 = t0
        self.fut = fut
        self.sse = sse
        self.state = _HEAD
        self.buf = b""
        self.need = 0
        self.status = 0
        self.keep_alive = True
        self.err_body = []
        self.got_bytes = False
        self.transport.write(request)  # type: ignore[union-attr]

    def data_received(self, data: bytes) -> None:
        t = _perf_counter() - self.t0  # bytes arrived: timestamp before any parsing
        self.got_bytes = True
        try:
            st = self.state
            if st == _CHUNKED:
                if self.need == 0 and not self.buf and self.status == 200:
                    # The common case: the read is exactly one whole HTTP chunk...
                    e = data.find(b"\r\n", 0, 10)
                    if e > 0:
                        try:
                            size = int(data[:e], 16)
                        except ValueError:
                            size = 0
                        a = e + 2
                        end = a + size
                        if size and end + 2 == len(data) and data.endswith(b"\r\n"):
                            sse = self.sse
                            # ...holding one mid-stream choice chunk (as in _deliver)
                            if (sse.chunks and not sse.buf and not sse.crlf  # type: ignore[union-attr]
                                    and data.startswith(b"data: {", a) and data.endswith(b"}\n\n", a, end)
                                    and data.find(b"\n", a, end) == end - 2 and data.find(b"\r", a, end) < 0
                                    and data.find(_NULL_FINISH, a, end) >= 0):
                                sse.chunks.append(t)  # type: ignore[union-attr]
                            else:
                                sse.feed(data[a:end], t)  # type: ignore[union-attr]
                            return
                self._chunked(data, t)
            elif st == _HEAD:
                self._head(data, t)
            elif st == _LENGTH:
                self._length(data, t)
            elif st == _UNTIL_CLOSE:
                self._body(data, t)
            # _DONE: bytes after a complete response (none expected): ignored
        except _H1Error as exc:
            self._fail(exc)
        except ValueError as exc:
            self._fail(_H1Error(f"bad HTTP response framing: {exc}"))

    def _fail(self, exc: Exception) -> None:
        self.state = _DONE
        self.keep_alive = False
        if self.fut is not None and not self.fut.done():
            self.fut.set_exception(exc)
        self.abort()

    def abort(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    def _head(self, data: bytes, t: float) -> None:
        buf = self.buf + data if self.buf else data
        e = buf.find(b"\r\n\r\n")
        if e < 0:
            if len(buf) > 65536:
                raise _H1Error("bad HTTP response: header block over 64 KiB")
            self.buf = buf
            return
        head = buf[:e].decode("latin-1")
        rest = buf[e + 4:]
        self.buf = b""
        lines = head.split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/"):
            raise _H1Error(f"bad HTTP status line: {lines[0][:100]!r}")
        status = int(parts[1])
        if 100 <= status < 200:  # interim response: wait for the real one
            if rest:
                self._head(rest, t)
            return
        self.status = status
        self.reason = parts[2] if len(parts) > 2 else ""
        te = cl = conn = None
        for line in lines[1:]:
            k, _, v = line.partition(":")
            k = k.strip().lower()
            if k == "transfer-encoding":
                te = v.strip().lower()
            elif k == "content-length":
                cl = v.strip()
            elif k == "connection":
                conn = v.strip().lower()
        self.keep_alive = parts[0] != "HTTP/1.0" and conn != "close"
        self.sse.rec.status = status  # type: ignore[union-attr]
        if te is not None and "chunked" in te:
            self.state = _CHUNKED
            self.need = 0
            if rest:
                self._chunked(rest, t)
        elif cl is not None:
            self.state = _LENGTH
            self.need = int(cl)
            if self.need == 0:
                self._complete(t)
            elif rest:
                self._length(rest, t)
        else:
            self.state = _UNTIL_CLOSE
            self.keep_alive = False
            if rest:
                self._body(rest, t)

    def _body(self, data: bytes, t: float) -> None:
        self._deliver(data, 0, len(data), t)

    def _length(self, data: bytes, t: float) -> None:
        if len(data) >= self.need:
            data = data[: self.need]
            self.need = 0
            self._body(data, t)
            self._complete(t)
        else:
            self.need -= len(data)
            self._body(data, t)

    def _deliver(self, buf: bytes, a: int, b: int, t: float) -> None:
        """Body bytes buf[a:b] that arrived at t."""
        if self.status != 200:
            if sum(map(len, self.err_body)) < 4096:
                self.err_body.append(buf[a:b])
            return
        sse = self.sse
        # The common case, decided without copying: this piece is exactly one
        # mid-stream choice chunk (SSEStream.feed's fast path, inlined).
        if (sse.chunks and not sse.buf and not sse.crlf  # type: ignore[union-attr]
                and buf.startswith(b"data: {", a) and buf.endswith(b"}\n\n", a, b)
                and buf.find(b"\n", a, b) == b - 2 and buf.find(b"\r", a, b) < 0
                and buf.find(_NULL_FINISH, a, b) >= 0):
            sse.chunks.append(t)  # type: ignore[union-attr]
            return
        sse.feed(buf[a:b] if (a or b != len(buf)) else buf, t)  # type: ignore[union-attr]

    def _chunked(self, data: bytes, t: float) -> None:
        buf = self.buf + data if self.buf else data
        n = len(buf)
        pos = 0
        need = self.need
        while pos < n:
            if need > 0:  # inside a chunk's data
                end = pos + need
                if end > n:
                    self._deliver(buf, pos, n, t)
                    need = end - n
                    pos = n
                    break
                self._deliver(buf, pos, end, t)
                pos = end
                need = -1
            if need == -1:  # the CRLF after a chunk's data
                if n - pos < 2:
                    break
                if buf[pos] != 13 or buf[pos + 1] != 10:
                    raise _H1Error("bad chunked encoding: no CRLF after chunk data")
                pos += 2
                need = 0
                continue
            e = buf.find(b"\r\n", pos)  # a chunk-size line
            if e < 0:
                if n - pos > 1024:
                    raise _H1Error("bad chunked encoding: chunk-size line too long")
                break
            line = buf[pos:e]
            size = int(line.split(b";", 1)[0] if b";" in line else line, 16)
            pos = e + 2
            if size == 0:  # last chunk; then optional trailers and a blank line
                tail = buf[pos:]
                if tail[:2] == b"\r\n" or b"\r\n\r\n" in tail:
                    self.need = 0
                    self.buf = b""
                    self._complete(t)
                    return
                self.buf = b"0\r\n" + tail  # wait for the rest of the trailers
                self.need = 0
                return
            need = size
        self.need = need
        self.buf = buf[pos:] if pos < n else b""

    def _complete(self, t: float) -> None:
        self.state = _DONE
        fut = self.fut
        if fut is not None and not fut.done():
            fut.set_result(t)


class H1Client:
    """Streaming requests over a small keep-alive HTTP/1.1 connection pool of our own.

    Why: aiohttp spends several Python calls per HTTP chunk (one SSE message per
    chunk from vLLM) before our code sees the bytes; at high token rates that,
    not the server, becomes the ceiling. This stack parses the response in the
    protocol's `data_received` and stamps each read on arrival. Plain http://
    only (an https URL uses the aiohttp stack). Connections: at most one per
    request in flight (so at most max_concurrency), reused while the server
    keeps them alive; a request whose reused connection was closed by the server
    before any response byte is retried once on a new connection (as browsers do).
    """

    name = "h1"

    def __init__(self, url: str, t0: float, timeout_s: float | None, headers: dict[str, str] | None = None):
        u = urlsplit(url)
        if u.scheme != "http":
            raise ValueError("H1Client supports http:// only")
        self.host = u.hostname or "127.0.0.1"
        self.port = u.port or 80
        path = (u.path or "/") + (f"?{u.query}" if u.query else "")
        hdrs = {"Host": f"{self.host}:{self.port}", **_HEADERS, **(headers or {})}
        self.head = (f"POST {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in hdrs.items())).encode("latin-1")
        self.t0 = t0
        self.timeout_s = timeout_s
        self.idle: list[_H1Conn] = []
        self.opened = 0
        self.retries = 0

    async def _open(self) -> _H1Conn:
        loop = asyncio.get_running_loop()
        try:
            _, proto = await loop.create_connection(_H1Conn, self.host, self.port)
        except OSError as exc:
            raise _H1Error(f"connect failed: {type(exc).__name__}: {exc}") from exc
        sock = proto.transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        self.opened += 1
        return proto

    async def _acquire(self) -> _H1Conn:
        idle = self.idle
        while idle:
            c = idle.pop()
            if not c.closed:
                c.reused = True
                return c
        return await self._open()

    async def preconnect(self, k: int) -> int:
        """Open k connections ahead (before t0), so TCP handshakes stay out of the
        measured window. Returns how many opened; a failure here is not an error
        (the request that needs the connection will report it)."""
        got = await asyncio.gather(*(self._open() for _ in range(max(0, k))), return_exceptions=True)
        conns = [c for c in got if isinstance(c, _H1Conn)]
        self.idle.extend(conns)
        return len(conns)

    async def request(self, rec: RequestRecord, body: bytes) -> RequestRecord:
        pc = time.perf_counter
        t0 = self.t0
        rec.send_s = pc() - t0
        req = self.head + b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
        sse = SSEStream(rec)
        conn: _H1Conn | None = None
        try:
            async with asyncio.timeout(self.timeout_s):
                for attempt in (0, 1):
                    conn = await self._acquire()
                    fut = asyncio.get_running_loop().create_future()
                    conn.begin(req, sse, fut, t0)
                    try:
                        t_end = await fut
                        break
                    except _H1Error:
                        if attempt == 0 and conn.reused and not conn.got_bytes:
                            self.retries += 1
                            continue
                        raise
            if conn.status != 200:
                rec.end_s = t_end
                _http_error(rec, conn.status, conn.reason, b"".join(conn.err_body))
            else:
                rec.end_s = sse.end(t_end)
                sse.finish_record(failed=False)
            if conn.keep_alive and not conn.closed:
                conn.fut = conn.sse = None
                self.idle.append(conn)
            else:
                conn.abort()
        except asyncio.CancelledError:
            if conn is not None:
                conn.abort()
            raise
        except Exception as exc:  # every failure is recorded
            if conn is not None:
                conn.abort()
            rec.end_s = pc() - t0
            rec.error = str(exc) if isinstance(exc, _H1Error) else _classify_exc(exc, self.timeout_s)
            sse.finish_record(failed=True)
        return rec

    async def close(self) -> None:
        for c in self.idle:
            c.abort()
        self.idle.clear()


# ------------------------------------------------------------------ trial ----


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


async def run_trial_async(base_url: str, model: str, prompts: Sequence[Prompt], *,
                          max_concurrency: int | None, request_rate: float | str = "inf",
                          burstiness: float = 1.0, seed: int = 0, ignore_eos: bool = True,
                          temperature: float | None = 0.0, phase: Phase = "measure",
                          timeout_s: float | None = 600.0, telemetry: bool = True,
                          telemetry_interval_s: float = 0.25,
                          on_request_done: Callable[[RequestRecord], Any] | None = None,
                          session: aiohttp.ClientSession | None = None,
                          extra_body: dict | None = None, extra_headers: dict[str, str] | None = None,
                          endpoint: str = "/v1/completions",
                          read_bufsize: int = READ_BUFSIZE, freeze_gc: bool = True,
                          normalize_schedule: bool = True, http: str = "auto",
                          preconnect: bool = True) -> TrialResult:
    """Run one trial on the running event loop; see `run_trial`."""
    if max_concurrency is not None and max_concurrency < 1:
        raise ValueError("max_concurrency must be >= 1 (or None for no cap)")
    if http not in ("auto", "h1", "aiohttp"):
        raise ValueError("http must be 'auto', 'h1' or 'aiohttp'")
    base = base_url.rstrip("/")
    url = base + endpoint
    if http == "auto":
        http = "aiohttp" if (session is not None or not url.startswith("http://")) else "h1"
    loop = asyncio.get_running_loop()
    n = len(prompts)
    schedule = arrival_schedule(n, request_rate, burstiness, seed, normalize_schedule)
    # Everything that costs CPU is done before t0: bodies, records.
    bodies = [request_body(model, p, ignore_eos=ignore_eos, temperature=temperature, extra_body=extra_body)
              for p in prompts]
    records = [RequestRecord(i=p.i, phase=phase, prompt_len=p.prompt_len, max_tokens=p.max_tokens,
                             intended_s=schedule[k], slot_wait_s=0.0, send_s=0.0)
               for k, p in enumerate(prompts)]
    own_session = session is None and http == "aiohttp"
    sess = make_session(max_concurrency, read_bufsize) if own_session else session
    sampler: TelemetrySampler | None = None
    tele_reason: str | None = "telemetry disabled by the caller"
    if telemetry:
        sampler = TelemetrySampler(base, telemetry_interval_s)
        tele_reason = await sampler.probe()
    callback_errors: list[str] = []
    sem = asyncio.Semaphore(max_concurrency) if max_concurrency else None
    frozen = False
    client: AiohttpClient | H1Client | None = None
    if freeze_gc:
        gc.collect()
        gc.freeze()
        frozen = True
    preconnected = 0
    try:
        if http == "h1":
            client = H1Client(url, 0.0, timeout_s, extra_headers)
            if preconnect:
                k = min(n, max_concurrency) if max_concurrency else min(n, 64)
                preconnected = await client.preconnect(k)
        else:
            client = AiohttpClient(sess, url, 0.0, timeout_s, extra_headers)
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
    meta: dict[str, Any] = {
        "t0_perf": t0,
        "t0_unix": t0_unix,
        "t0_monotonic_ns": t0_mono,
        "clock_bridge_uncertainty_s": bridge_s,
        "ended_perf": t_end,
        "ended_unix": ended_unix,
        "wall_s": wall,
        "client": {**client_info(max_concurrency, read_bufsize, loop, http),
                   **({"connections_opened": client.opened, "connection_retries": client.retries,
                       "preconnected": preconnected}
                      if isinstance(client, H1Client) else {})},
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
    box: list[Any] = []

    async def main() -> None:
        # The result is handed back through `box`, not as the main task's result:
        # on Python 3.11 asyncio.Runner's SIGINT bookkeeping formats the main task's
        # repr, result included, which for a big trial took seconds.
        box.append(await coro)

    with asyncio.Runner(loop_factory=new_event_loop) as r:
        r.run(main())
    return box[0]


def run_trial(base_url: str, model: str, prompts: Sequence[Prompt], *, max_concurrency: int | None,
              request_rate: float | str = "inf", burstiness: float = 1.0, seed: int = 0,
              ignore_eos: bool = True, temperature: float | None = 0.0, phase: Phase = "measure",
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


__all__ = ["TrialResult", "SSEStream", "AiohttpClient", "H1Client", "arrival_schedule", "make_session", "request_body", "run_trial",
           "run_trial_async", "run_sync", "new_event_loop", "READ_BUFSIZE"]

if sys.version_info < (3, 11):  # pragma: no cover
    raise ImportError("evidence.loadgen needs Python 3.11+ (asyncio.timeout, asyncio.Runner)")
