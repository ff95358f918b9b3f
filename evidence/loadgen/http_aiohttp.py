"""HTTP stack `aiohttp`: one ClientSession per trial (connector limit >= max
concurrency, 16 MiB read buffer, no total timeout: the per-request timeout is
ours). The timestamp is read when `readany()` hands over the bytes."""

from __future__ import annotations

import asyncio
import time

import aiohttp

from evidence.loadgen.sse import HEADERS, SSEStream, classify_exc, http_error
from evidence.records import RequestRecord

READ_BUFSIZE = 16 * 1024 * 1024


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
        self.headers = {**HEADERS, **(headers or {})}

    async def request(self, rec: RequestRecord, body: bytes) -> RequestRecord:
        pc = time.perf_counter
        t0 = self.t0
        rec.send_s = pc() - t0
        sse = SSEStream(rec)
        try:
            async with asyncio.timeout(self.timeout_s):
                async with await self._post(rec, body) as resp:
                    rec.status = resp.status
                    if resp.status != 200:
                        text = await resp.content.read(4096)
                        rec.end_s = pc() - t0
                        http_error(rec, resp.status, resp.reason or "", text)
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
            rec.error = classify_exc(exc, self.timeout_s)
            sse.finish_record(failed=True)
            return rec
        sse.finish_record(failed=False)
        return rec

    async def _post(self, rec: RequestRecord, body: bytes) -> aiohttp.ClientResponse:
        """The POST; tried once more only when the connection could not be made (nothing was sent).
        aiohttp itself never retries a POST; a request the server saw and dropped is a failure."""
        try:
            return await self.session.post(self.url, data=body, headers=self.headers)
        except aiohttp.ClientConnectorError as exc:
            rec.attempts = [{"send_s": rec.send_s, "error": classify_exc(exc, self.timeout_s)}]
            rec.send_s = time.perf_counter() - self.t0
            return await self.session.post(self.url, data=body, headers=self.headers)

    async def close(self) -> None:
        pass

