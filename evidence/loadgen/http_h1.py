"""HTTP stack `h1`: a small keep-alive HTTP/1.1 client of our own on asyncio's Protocol API.

The timestamp is read on entry to `data_received`, the first moment the bytes
exist in this process, and no coroutine is woken per read, so a token costs
about 3x less client CPU than in `vllm bench serve`'s client
(bench/RESULTS-client.md). Connections for the first wave are opened before t0,
so TCP handshakes stay out of TTFT. Plain http:// only.
"""

from __future__ import annotations

import asyncio
import socket
import time
from urllib.parse import urlsplit

from evidence.loadgen.sse import HEADERS, NULL_FINISH, SSEStream, classify_exc, http_error
from evidence.records import RequestRecord

_HEAD, _CHUNKED, _LENGTH, _UNTIL_CLOSE, _DONE = range(5)
_perf_counter = time.perf_counter


#: An idle connection older than this is not reused: servers close idle keep-alive connections
#: (uvicorn, vLLM's server, after 5 s), and a request written as that happens cannot be retried.
IDLE_REUSE_S = 2.0


class H1Error(Exception):
    pass


class H1Conn(asyncio.Protocol):
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
        self.idle_since = time.monotonic()

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
            self.fut.set_exception(H1Error(f"{kind}: {why}{detail}"))

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
                            # ...holding one mid-stream choice chunk: _deliver's test, copied
                            # rather than called because a method call per token is a few % of
                            # the client's CPU per token (bench/RESULTS-client.md); keep in step.
                            if (sse.chunks and not sse.buf and not sse.crlf  # type: ignore[union-attr]
                                    and data.startswith(b"data: {", a) and data.endswith(b"}\n\n", a, end)
                                    and data.find(b"\n", a, end) == end - 2 and data.find(b"\r", a, end) < 0
                                    and data.find(NULL_FINISH, a, end) >= 0):
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
        except H1Error as exc:
            self._fail(exc)
        except ValueError as exc:
            self._fail(H1Error(f"bad HTTP response framing: {exc}"))

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
                raise H1Error("bad HTTP response: header block over 64 KiB")
            self.buf = buf
            return
        head = buf[:e].decode("latin-1")
        rest = buf[e + 4:]
        self.buf = b""
        lines = head.split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/"):
            raise H1Error(f"bad HTTP status line: {lines[0][:100]!r}")
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
                and buf.find(NULL_FINISH, a, b) >= 0):
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
                    raise H1Error("bad chunked encoding: no CRLF after chunk data")
                pos += 2
                need = 0
                continue
            e = buf.find(b"\r\n", pos)  # a chunk-size line
            if e < 0:
                if n - pos > 1024:
                    raise H1Error("bad chunked encoding: chunk-size line too long")
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
    keeps them alive. A request is tried again only when a new connection could not
    be opened (nothing was sent); once its bytes were written the server may have seen
    it, so a connection closed before any response byte is that request's failure,
    never a silent retry (a benchmark that hides a server's failures overstates it).
    Earlier attempts are kept in the record (`attempts`).
    """

    name = "h1"

    def __init__(self, url: str, t0: float, timeout_s: float | None, headers: dict[str, str] | None = None):
        u = urlsplit(url)
        if u.scheme != "http":
            raise ValueError("H1Client supports http:// only")
        self.host = u.hostname or "127.0.0.1"
        self.port = u.port or 80
        path = (u.path or "/") + (f"?{u.query}" if u.query else "")
        hdrs = {"Host": f"{self.host}:{self.port}", **HEADERS, **(headers or {})}
        self.head = (f"POST {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in hdrs.items())).encode("latin-1")
        self.t0 = t0
        self.timeout_s = timeout_s
        self.idle: list[H1Conn] = []
        self.opened = 0
        self.retries = 0

    async def _open(self) -> H1Conn:
        loop = asyncio.get_running_loop()
        try:
            _, proto = await loop.create_connection(H1Conn, self.host, self.port)
        except OSError as exc:
            raise H1Error(f"connect failed: {type(exc).__name__}: {exc}") from exc
        sock = proto.transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        self.opened += 1
        return proto

    async def _acquire(self) -> H1Conn:
        idle = self.idle
        now = time.monotonic()
        while idle:
            c = idle.pop()
            if not c.closed and now - c.idle_since < IDLE_REUSE_S:
                c.reused = True
                return c
            c.abort()  # idle too long: the server may be closing it as we write (no retry would be honest)
        return await self._open()

    async def preconnect(self, k: int) -> int:
        """Open k connections ahead (before t0), so TCP handshakes stay out of the
        measured window. Returns how many opened; a failure here is not an error
        (the request that needs the connection will report it)."""
        got = await asyncio.gather(*(self._open() for _ in range(max(0, k))), return_exceptions=True)
        conns = [c for c in got if isinstance(c, H1Conn)]
        self.idle.extend(conns)
        return len(conns)

    async def request(self, rec: RequestRecord, body: bytes) -> RequestRecord:
        pc = time.perf_counter
        t0 = self.t0
        rec.send_s = pc() - t0
        req = self.head + b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
        sse = SSEStream(rec)
        conn: H1Conn | None = None
        try:
            async with asyncio.timeout(self.timeout_s):
                try:
                    conn = await self._acquire()
                except H1Error as exc:  # a connect failure: nothing reached the server; once more
                    rec.attempts = [{"send_s": rec.send_s, "error": str(exc)}]
                    self.retries += 1
                    rec.send_s = pc() - t0
                    conn = await self._acquire()
                fut = asyncio.get_running_loop().create_future()
                conn.begin(req, sse, fut, t0)
                t_end = await fut
            if conn.status != 200:
                rec.end_s = t_end
                http_error(rec, conn.status, conn.reason, b"".join(conn.err_body))
            else:
                rec.end_s = sse.end(t_end)
                sse.finish_record(failed=False)
            if conn.keep_alive and not conn.closed:
                conn.fut = conn.sse = None
                conn.idle_since = time.monotonic()
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
            rec.error = str(exc) if isinstance(exc, H1Error) else classify_exc(exc, self.timeout_s)
            sse.finish_record(failed=True)
        return rec

    async def close(self) -> None:
        for c in self.idle:
            c.abort()
        self.idle.clear()
