"""The stand-in's application: per-request behaviour, the toy tokenizer, the routes, the chunk stepper.

NOT an engine; see the package docstring for what it is for.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import time
from dataclasses import dataclass, field, replace
from typing import Any

from aiohttp import web

_WORD = re.compile(r"^w(\d+)$")
FAULTS = ("none", "malformed", "split", "crlf", "comment", "error_event", "truncate", "no_usage",
          "no_done", "hang", "drop")
_SPLIT_SIZES = (5, 17, 1, 150, 3, 400, 64, 2, 900)


@dataclass(frozen=True)
class Behavior:
    ttft_s: float = 0.0
    itl_s: float = 0.0
    tokens: int | None = None
    tokens_per_chunk: int = 1
    fault: str = "none"
    fault_after: int = 2
    usage_delay_s: float = 0.0
    hang_s: float = 3600.0
    burst: bool = False  # with itl 0: the whole stream in one write (else one write per chunk)
    step_chunks: int = 1  # with itl 0 and no burst: chunks each stream gets per step (one write)
    itl_jitter: float = 0.0  # > 0: each request's itl is scaled by exp(N(0, itl_jitter)) (run-to-run noise for tests)

    _KEYS = {"ttft": "ttft_s", "itl": "itl_s", "tokens": "tokens", "tpc": "tokens_per_chunk",
             "fault": "fault", "after": "fault_after", "usage_delay": "usage_delay_s", "hang": "hang_s",
             "burst": "burst", "step": "step_chunks", "jitter": "itl_jitter"}

    def override(self, header: str | None) -> "Behavior":
        if not header:
            return self
        changes: dict[str, Any] = {}
        for part in header.split(","):
            if not part.strip():
                continue
            k, _, v = part.partition("=")
            name = self._KEYS.get(k.strip())
            if name is None:
                raise ValueError(f"unknown x-standin key {k.strip()!r}; known: {', '.join(self._KEYS)}")
            v = v.strip()
            if name == "fault":
                changes[name] = v
            elif name in ("tokens", "tokens_per_chunk", "fault_after", "step_chunks"):
                changes[name] = int(v)
            elif name == "burst":
                changes[name] = v.lower() in ("1", "true", "yes")
            else:
                changes[name] = float(v)
        b = replace(self, **changes)
        b.check()
        return b

    def check(self) -> None:
        if self.fault not in FAULTS and not re.fullmatch(r"http\d{3}", self.fault):
            raise ValueError(f"unknown fault {self.fault!r}; known: {', '.join(FAULTS)}, httpNNN")
        if self.tokens_per_chunk < 1:
            raise ValueError("tpc must be >= 1")
        if self.step_chunks < 1:
            raise ValueError("step must be >= 1")


@dataclass
class Options:
    behavior: Behavior = field(default_factory=Behavior)
    model: str = "standin"
    vocab: int = 32000
    bos: bool = False
    quirk: int = 0
    metrics: bool = True
    max_running: int = 0  # 0: unlimited; otherwise extra requests wait (num_requests_waiting)
    kv_capacity: int = 256  # requests that "fill" the pretend KV cache (for kv_cache_usage_perc)
    record_writes: bool = False  # keep perf_counter() of every token chunk's write, per prompt (tests)


@dataclass
class Counters:
    running: int = 0
    waiting: int = 0
    prompt_tokens: int = 0
    generation_tokens: int = 0
    requests: int = 0
    finished: dict[str, int] = field(default_factory=dict)
    ttft_obs: list[float] = field(default_factory=list)


# ---------------------------------------------------------------- tokenizer ----


_DIGIT0 = 4  # ids 4..13 are the digit pieces "0".."9" (no leading space)


def detokenize(ids: list[int]) -> str:
    out = []
    for k in ids:
        k = int(k)
        if k == 1:
            continue  # the special BOS token is skipped, as decoding with skip_special_tokens does
        out.append(str(k - _DIGIT0) if _DIGIT0 <= k < _DIGIT0 + 10 else f" w{k}")
    return "".join(out)


def _word_ids(k: int, quirk: int) -> list[int]:
    if quirk and k >= 10 and k % quirk == 0:
        return _word_ids(k // 10, quirk) + [_DIGIT0 + k % 10]
    return [k]


def tokenize(text: str, opts: Options, add_special_tokens: bool = True) -> list[int]:
    """Words " w<k>" -> id k; with quirk Q, a k >= 10 that is a multiple of Q splits
    into the word for k//10 and a digit piece (recursively), and a digit piece
    after a word merges back into it. decode(encode(text)) == text, as with
    byte-level BPE, but encode(decode(ids)) can be longer or shorter than ids."""
    out: list[int] = [1] if (opts.bos and add_special_tokens) else []
    for word in text.split():
        m = _WORD.match(word)
        if m:
            out.extend(_word_ids(int(m.group(1)) % opts.vocab, opts.quirk))
        else:
            out.extend(16 + (ord(c) % (opts.vocab - 16)) for c in word)
    return out


# --------------------------------------------------------------------- app ----


def _err(status: int, message: str, typ: str = "BadRequestError") -> web.Response:
    body = {"error": {"message": message, "type": typ, "param": None, "code": status}}
    return web.json_response(body, status=status)


class Standin:
    def __init__(self, opts: Options):
        self.opts = opts
        self.c = Counters()
        self.sem = asyncio.Semaphore(opts.max_running) if opts.max_running > 0 else None
        self._seq = 0
        self._stepper = _Stepper()
        # prompt key -> perf_counter() just before each token chunk was written
        # (with record_writes; in-process tests share the clock with the client)
        self.writes: dict[str, list[float]] = {}

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_get("/health", self.health)
        app.router.add_get("/version", self.version)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/metrics", self.metrics)
        app.router.add_post("/tokenize", self.tokenize)
        app.router.add_post("/detokenize", self.detokenize)
        app.router.add_post("/v1/completions", self.completions)
        return app

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def version(self, request: web.Request) -> web.Response:
        return web.json_response({"version": "standin"})

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [
            {"id": self.opts.model, "object": "model", "created": 0, "owned_by": "standin",
             "root": self.opts.model, "max_model_len": 1 << 20}]})

    async def metrics(self, request: web.Request) -> web.Response:
        if not self.opts.metrics:
            return web.Response(status=404, text="404: Not Found")
        m = self.opts.model
        lab = f'engine="0",model_name="{m}"'
        c = self.c
        kv = min(1.0, c.running / max(1, self.opts.kv_capacity))
        lines = [
            "# HELP vllm:num_requests_running Number of requests in model execution batches.",
            "# TYPE vllm:num_requests_running gauge",
            f"vllm:num_requests_running{{{lab}}} {float(c.running)}",
            "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.",
            "# TYPE vllm:num_requests_waiting gauge",
            f"vllm:num_requests_waiting{{{lab}}} {float(c.waiting)}",
            "# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.",
            "# TYPE vllm:kv_cache_usage_perc gauge",
            f"vllm:kv_cache_usage_perc{{{lab}}} {kv}",
            "# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.",
            "# TYPE vllm:num_preemptions_total counter",
            f"vllm:num_preemptions_total{{{lab}}} 0.0",
            "# HELP vllm:prompt_tokens_total Number of prefill tokens processed.",
            "# TYPE vllm:prompt_tokens_total counter",
            f"vllm:prompt_tokens_total{{{lab}}} {float(c.prompt_tokens)}",
            "# HELP vllm:generation_tokens_total Number of generation tokens processed.",
            "# TYPE vllm:generation_tokens_total counter",
            f"vllm:generation_tokens_total{{{lab}}} {float(c.generation_tokens)}",
            "# HELP vllm:request_success_total Count of successfully processed requests.",
            "# TYPE vllm:request_success_total counter",
        ]
        for reason in ("abort", "length", "stop"):
            lines.append(f'vllm:request_success_total{{{lab},finished_reason="{reason}"}} {float(c.finished.get(reason, 0))}')
        lines += [
            "# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.",
            "# TYPE vllm:time_to_first_token_seconds histogram",
        ]
        obs = c.ttft_obs
        for le in (0.001, 0.01, 0.1, 1.0, 10.0):
            lines.append(f'vllm:time_to_first_token_seconds_bucket{{{lab},le="{le}"}} {float(sum(1 for x in obs if x <= le))}')
        lines.append(f'vllm:time_to_first_token_seconds_bucket{{{lab},le="+Inf"}} {float(len(obs))}')
        lines.append(f"vllm:time_to_first_token_seconds_count{{{lab}}} {float(len(obs))}")
        lines.append(f"vllm:time_to_first_token_seconds_sum{{{lab}}} {float(sum(obs))}")
        lines += [
            "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig",
            "# TYPE vllm:cache_config_info gauge",
            f'vllm:cache_config_info{{block_size="16",cache_dtype="auto",engine="0",num_gpu_blocks="{self.opts.kv_capacity}"}} 1.0',
        ]
        return web.Response(text="\n".join(lines) + "\n", content_type="text/plain", charset="utf-8")

    async def tokenize(self, request: web.Request) -> web.Response:
        body = await request.json()
        toks = tokenize(body.get("prompt", ""), self.opts, bool(body.get("add_special_tokens", True)))
        return web.json_response({"count": len(toks), "max_model_len": 1 << 20, "tokens": toks, "token_strs": None})

    async def detokenize(self, request: web.Request) -> web.Response:
        body = await request.json()
        ids = [int(k) for k in body.get("tokens", [])]
        bad = [k for k in ids if not 0 <= k < self.opts.vocab]
        if bad:
            return _err(400, f"token id {bad[0]} is out of vocabulary")
        return web.json_response({"prompt": detokenize(ids)})

    # -------------------------------------------------------- completions ----

    async def completions(self, request: web.Request) -> web.StreamResponse:
        t_arrive = time.perf_counter()
        try:
            b = self.opts.behavior.override(request.headers.get("x-standin"))
        except ValueError as exc:
            return _err(400, str(exc))
        if b.itl_jitter > 0:
            b = replace(b, itl_s=b.itl_s * random.lognormvariate(0.0, b.itl_jitter))
        body = await request.json()
        prompt = body.get("prompt")
        key = prompt_key(prompt)
        if isinstance(prompt, str):
            n_prompt = len(tokenize(prompt, self.opts, True))
        elif isinstance(prompt, list) and all(isinstance(k, int) for k in prompt):
            bad = [k for k in prompt if not 0 <= k < self.opts.vocab]
            if bad:
                return _err(400, f"Token id {bad[0]} is out of vocabulary")
            n_prompt = len(prompt)
        else:
            return _err(400, "prompt must be a string or a list of token ids")
        if b.fault.startswith("http"):
            code = int(b.fault[4:])
            return _err(code, f"stand-in fault {b.fault}", "InternalServerError" if code >= 500 else "BadRequestError")
        max_tokens = int(body.get("max_tokens") or 16)
        n = b.tokens if b.tokens is not None else max_tokens
        self._seq += 1
        rid = f"cmpl-standin-{self._seq}"
        self.c.requests += 1
        if self.sem is not None:
            self.c.waiting += 1
            try:
                await self.sem.acquire()
            finally:
                self.c.waiting -= 1
        self.c.running += 1
        self.c.prompt_tokens += n_prompt
        try:
            if not body.get("stream"):
                return await self._plain(b, rid, n, n_prompt, max_tokens, t_arrive)
            opts = body.get("stream_options") or {}
            return await self._stream(request, b, rid, n, n_prompt, max_tokens, bool(opts.get("include_usage")),
                                      t_arrive, key)
        finally:
            self.c.running -= 1
            if self.sem is not None:
                self.sem.release()

    async def _plain(self, b: Behavior, rid: str, n: int, n_prompt: int, max_tokens: int,
                     t_arrive: float) -> web.Response:
        await _sleep_until(t_arrive + b.ttft_s + max(0, n - 1) * b.itl_s)
        self.c.generation_tokens += n
        reason = "length" if n >= max_tokens else "stop"
        self.c.finished[reason] = self.c.finished.get(reason, 0) + 1
        return web.json_response({
            "id": rid, "object": "text_completion", "created": int(time.time()), "model": self.opts.model,
            "choices": [{"index": 0, "text": " tok" * n, "logprobs": None, "finish_reason": reason, "stop_reason": None}],
            "usage": {"prompt_tokens": n_prompt, "total_tokens": n_prompt + n, "completion_tokens": n}})

    def _messages(self, b: Behavior, rid: str, n: int, n_prompt: int, max_tokens: int,
                  include_usage: bool) -> list[tuple[str, bytes, int]]:
        """The stream's SSE messages as vLLM frames them (compact JSON, '\\n\\n' ends each),
        as (kind, bytes, tokens) with kind 'tok', 'usage', 'done' or 'other'."""
        created = int(time.time())
        head = (f'data: {{"id":"{rid}","object":"text_completion","created":{created},'
                f'"model":"{self.opts.model}","choices":[{{"index":0,"text":"').encode()
        tail_null = b'","logprobs":null,"finish_reason":null,"stop_reason":null,"prompt_token_ids":null,"token_ids":null}]}\n\n'
        reason = "length" if n >= max_tokens else "stop"
        tail_last = (f'","logprobs":null,"finish_reason":"{reason}","stop_reason":null,'
                     '"prompt_token_ids":null,"token_ids":null}]}\n\n').encode()
        tpc = b.tokens_per_chunk
        sizes = [tpc] * (n // tpc) + ([n % tpc] if n % tpc else [])
        out: list[tuple[str, bytes, int]] = []
        if sizes:
            mid = head + b" tok" * tpc + tail_null
            for j, k in enumerate(sizes):
                last = j == len(sizes) - 1
                out.append(("tok", head + b" tok" * k + tail_last if last else (mid if k == tpc else head + b" tok" * k + tail_null), k))
        if include_usage and b.fault != "no_usage":
            out.append(("usage", (f'data: {{"id":"{rid}","object":"text_completion","created":{created},'
                                  f'"model":"{self.opts.model}","choices":[],"usage":{{"prompt_tokens":{n_prompt},'
                                  f'"total_tokens":{n_prompt + n},"completion_tokens":{n}}}}}\n\n').encode(), 0))
        if b.fault != "no_done":
            out.append(("done", b"data: [DONE]\n\n", 0))
        return out

    async def _stream(self, request: web.Request, b: Behavior, rid: str, n: int, n_prompt: int,
                      max_tokens: int, include_usage: bool, t_arrive: float, key: str = "") -> web.StreamResponse:
        resp = web.StreamResponse(status=200, headers={"Content-Type": "text/event-stream; charset=utf-8",
                                                       "Cache-Control": "no-cache"})
        await resp.prepare(request)
        items = self._messages(b, rid, n, n_prompt, max_tokens, include_usage)
        n_tok = sum(1 for k, _, _ in items if k == "tok")
        fault = b.fault
        after = min(b.fault_after, n_tok)
        if fault == "hang" and after == 0:
            await asyncio.sleep(b.hang_s)
            return resp
        if fault == "crlf":
            items = [(k, m.replace(b"\n", b"\r\n"), t) for k, m, t in items]
        elif fault == "comment":
            items = [("other", b"event: message\nretry: 1000\n\n", 0)] + [
                x for k, m, t in items for x in (("other", b": ping\n\n", 0), (k, m, t))]
        elif fault == "malformed":
            bad = b'data: {"id":"' + rid.encode() + b'","object":"text_completion","choices":[{"index":0,"text":"x"\n\n'
            items.insert(after, ("other", bad, 0))
        elif fault == "error_event":
            err = json.dumps({"error": {"message": "stand-in error event", "type": "InternalServerError",
                                        "param": None, "code": 500}}).encode()
            toks = [x for x in items if x[0] == "tok"][:after]
            items = toks + [("other", b"data: " + err + b"\n\n", 0), ("done", b"data: [DONE]\n\n", 0)]
        t_first = t_arrive + b.ttft_s
        if fault == "split":
            await _sleep_until(t_first)
            data = b"".join(m for _, m, _ in items)
            pos, k = 0, 0
            while pos < len(data):
                size = _SPLIT_SIZES[k % len(_SPLIT_SIZES)]
                await resp.write(data[pos:pos + size])
                pos += size
                k += 1
                await asyncio.sleep(0.0005)
            self.c.generation_tokens += n
            self._done(n, max_tokens, b.ttft_s)
            await resp.write_eof()
            return resp
        # Token chunk j is due at ttft + j*itl after the request arrived (an
        # absolute schedule: no drift). Messages not separated by a wait go out
        # in one write.
        pace = b.itl_s == 0 and not b.burst
        if pace and fault in ("none", "no_usage", "no_done") and b.usage_delay_s == 0:
            return await self._stepped(request, resp, items, n, max_tokens, t_first, t_arrive, b.step_chunks)
        log = self.writes.setdefault(key, []) if self.opts.record_writes else None
        cut = fault in ("hang", "drop", "truncate")
        batch: list[bytes] = []
        batch_toks = 0
        j = 0
        sent_tokens = 0

        async def flush() -> None:
            nonlocal batch, batch_toks
            if batch:
                if log is not None:
                    log.extend([time.perf_counter()] * batch_toks)
                await resp.write(b"".join(batch))
                batch, batch_toks = [], 0

        for kind, m, ntok in items:
            if kind == "tok":
                if cut and j == after:
                    break
                due = t_first + j * b.itl_s
                if due > time.perf_counter():
                    await flush()
                    await _sleep_until(due)
                elif j > 0 and pace:
                    await flush()
                    await asyncio.sleep(0)
                if j == 0:
                    self.c.ttft_obs.append(time.perf_counter() - t_arrive)
                j += 1
                sent_tokens += ntok
                batch_toks += 1
            elif kind == "usage" and b.usage_delay_s > 0:
                await flush()
                await asyncio.sleep(b.usage_delay_s)
            batch.append(m)
        await flush()
        self.c.generation_tokens += sent_tokens
        if cut:
            if fault == "hang":
                await asyncio.sleep(b.hang_s)
                return resp
            if fault == "drop":
                self.c.finished["abort"] = self.c.finished.get("abort", 0) + 1
                if request.transport is not None:
                    request.transport.abort()
                return resp
            await resp.write_eof()  # truncate: the HTTP response ends cleanly, mid-stream
            return resp
        self._done(n, max_tokens, None)
        await resp.write_eof()
        return resp

    async def _stepped(self, request: web.Request, resp: web.StreamResponse, items: list[tuple[str, bytes, int]],
                       n: int, max_tokens: int, t_first: float, t_arrive: float,
                       b_step: int | None = None) -> web.StreamResponse:
        """itl 0, no fault: the first chunk through aiohttp (it sends the headers
        with it), the rest by the shared stepper, one chunk per stream per step
        (the way an engine step hands out tokens), written straight to the
        transport in HTTP chunked framing; the usage chunk and [DONE] ride with
        the last token chunk."""
        await _sleep_until(t_first)
        toks = [m for k, m, _ in items if k == "tok"]
        tail = b"".join(m for k, m, _ in items if k != "tok")
        if not toks:
            await resp.write(tail)
            await resp.write_eof()
            return resp
        self.c.ttft_obs.append(time.perf_counter() - t_arrive)
        await resp.write(toks[0] + (tail if len(toks) == 1 else b""))
        if len(toks) > 1:
            framed = [_frame(m) for m in toks[1:-1]] + [_frame(toks[-1] + tail)]
            k = self.opts.behavior.step_chunks if b_step is None else b_step
            if k > 1:
                framed = [b"".join(framed[i:i + k]) for i in range(0, len(framed), k)]
            ok = await self._stepper.add(request.transport, framed)
            if not ok:
                return resp
        self.c.generation_tokens += n
        self._done(n, max_tokens, None)
        await resp.write_eof()
        return resp

    def _done(self, n: int, max_tokens: int, ttft: float | None) -> None:
        reason = "length" if n >= max_tokens else "stop"
        self.c.finished[reason] = self.c.finished.get(reason, 0) + 1
        if ttft is not None:
            self.c.ttft_obs.append(ttft)


def _frame(m: bytes) -> bytes:
    return b"%x\r\n" % len(m) + m + b"\r\n"


class _Stepper:
    """Writes the next chunk of every registered stream, one round per event-loop turn."""

    def __init__(self) -> None:
        self.active: list[list[Any]] = []
        self.task: asyncio.Task | None = None

    def add(self, tr: asyncio.Transport | None, framed: list[bytes]) -> asyncio.Future:
        fut = asyncio.get_running_loop().create_future()
        if tr is None:
            fut.set_result(False)
            return fut
        self.active.append([tr, framed, 0, fut])
        if self.task is None or self.task.done():
            self.task = asyncio.get_running_loop().create_task(self._run())
        return fut

    async def _run(self) -> None:
        while self.active:
            keep = []
            for s in self.active:
                tr, framed, i, fut = s
                if tr.is_closing():
                    if not fut.done():
                        fut.set_result(False)
                    continue
                tr.write(framed[i])
                i += 1
                if i == len(framed):
                    if not fut.done():
                        fut.set_result(True)
                else:
                    s[2] = i
                    keep.append(s)
            self.active = keep
            await asyncio.sleep(0)


def prompt_key(prompt: Any) -> str:
    """How `Standin.writes` names a request: its prompt's first 8 ids, or first 64 characters."""
    if isinstance(prompt, list):
        return ",".join(str(k) for k in prompt[:8])
    return str(prompt)[:64]


async def _sleep_until(t: float) -> None:
    d = t - time.perf_counter()
    if d > 0:
        await asyncio.sleep(d)


def make_app(opts: Options | None = None, **behavior: Any) -> tuple[web.Application, Standin]:
    o = opts or Options()
    if behavior:
        o = replace(o, behavior=replace(o.behavior, **behavior))
    o.behavior.check()
    s = Standin(o)
    return s.app(), s


