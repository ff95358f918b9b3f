"""The SSE side of one streaming completion, shared by both HTTP stacks.

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
  finished with usage or [DONE], its usage counts (when given) are non-negative
  integers (a bool, a float or a negative count fails the request), and nothing went wrong (no error event, no
  malformed message, no dropped connection, no timeout). Failures keep their
  status and error text (first line: a stable kind, for counting).

"""

from __future__ import annotations

import asyncio
import json

import aiohttp

from evidence.records import RequestRecord

HEADERS = {"Content-Type": "application/json", "Accept": "text/event-stream"}
NULL_FINISH = b'"finish_reason":null'


def classify_exc(exc: BaseException, timeout_s: float | None) -> str:
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

    __slots__ = ("rec", "chunks", "buf", "crlf", "cr", "usage", "done_t", "error", "finish")

    def __init__(self, rec: RequestRecord) -> None:
        self.rec = rec
        self.chunks = rec.chunk_s
        self.buf = bytearray()  # an unfinished message; grown in place, so one long line costs linear time
        self.crlf = False
        self.cr = False  # with CRLF framing: a "\r" that ended the last read (its "\n" may come next)
        self.usage: dict | None = None
        self.done_t: float | None = None
        self.error: str | None = None
        self.finish: str | None = None

    def feed(self, data: bytes, t: float) -> None:
        if not self.crlf and b"\r" in data:
            self.crlf = True
        if self.crlf:
            if self.cr:
                data = b"\r" + data
                self.cr = False
            if data[-1:] == b"\r":
                data, self.cr = data[:-1], True
            data = data.replace(b"\r\n", b"\n")
        buf = self.buf
        if buf:
            # Every read is scanned once: while no blank line ends the message it only grows the
            # buffer (never joined and rescanned per read, which made one 40 MB line quadratic).
            if b"\n\n" not in data and not (buf[-1] == 10 and data[:1] == b"\n"):
                buf += data
                return
            data = bytes(buf) + data
            self.buf = bytearray()
        chunks = self.chunks
        # The common case: the read is exactly one mid-stream choice chunk.
        if (chunks and data[-2:] == b"\n\n" and data[:7] == b"data: {" and data[-3:-2] == b"}"
                and data.find(b"\n") == len(data) - 2 and NULL_FINISH in data):
            chunks.append(t)
            return
        parts = data.split(b"\n\n")
        self.buf = bytearray(parts.pop())
        for msg in parts:
            if (chunks and NULL_FINISH in msg and msg[:7] == b"data: {" and msg[-1:] == b"}"
                    and b"\n" not in msg):
                chunks.append(t)  # mid-stream choice chunk: count and time only
            elif msg:
                self._slow(msg, t)

    def end(self, t: float) -> float:
        """End of body at time t; returns end_s ([DONE]'s arrival, else t)."""
        if self.cr:
            self.buf += b"\r"
            self.cr = False
        if self.buf.strip():
            # A last message without its blank line: take it if it parses.
            self._slow(bytes(self.buf).rstrip(b"\n"), t)
            self.buf = bytearray()
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
        bad_usage = None
        if u is not None:
            for key in ("prompt_tokens", "completion_tokens"):
                v = u.get(key)
                if v is None:
                    continue
                # bool is an int in Python; a negative or non-integer count is no count at all
                if type(v) is int and v >= 0:
                    setattr(rec, key, v)
                elif bad_usage is None:
                    bad_usage = (f"invalid usage count: {key} = {json.dumps(v)[:100]} (a count must be a non-negative "
                                 "integer)")
        rec.finish_reason = self.finish
        if failed:
            rec.ok = False
            return
        if self.error is not None:
            rec.error = self.error
        elif bad_usage is not None:
            rec.error = bad_usage  # a failed request with the reason, never averaged
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


def http_error(rec: RequestRecord, status: int, reason: str, body: bytes) -> None:
    rec.status = status
    rec.error = f"HTTP {status} {reason}".rstrip() + "\n" + body[:4096].decode("utf-8", "replace")
    rec.ok = False

