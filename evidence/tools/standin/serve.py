"""Running the stand-in: in-process on a free port (`StandinServer`) or from the command line (`main`)."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import threading
from dataclasses import fields
from typing import Any

from aiohttp import web

from evidence.tools.standin.server import Behavior, Options, Standin, make_app

__all__ = ["StandinServer", "main"]

_OPTION_NAMES = {f.name for f in fields(Options)} - {"behavior"}
_BEHAVIOR_NAMES = {f.name for f in fields(Behavior)}


class StandinServer:
    """The stand-in on a free port in a background thread (for tests and benches).

    `StandinServer(itl_s=0.01, ttft_s=0.05, bos=True)`: keyword arguments are
    `Options` fields or `Behavior` fields. Use as a context manager; it yields the
    base URL.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0, **kw: Any):
        unknown = set(kw) - _OPTION_NAMES - _BEHAVIOR_NAMES
        if unknown:
            raise TypeError(f"unknown stand-in option(s): {sorted(unknown)}")
        beh = Behavior(**{k: v for k, v in kw.items() if k in _BEHAVIOR_NAMES})
        beh.check()
        self.opts = Options(behavior=beh, **{k: v for k, v in kw.items() if k in _OPTION_NAMES})
        self.host, self.port = host, port
        self.url = ""
        self.standin: Standin | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None

    def start(self) -> str:
        ready = threading.Event()
        error: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self._start())
            except BaseException as exc:  # pragma: no cover - reported to the caller
                error.append(exc)
                ready.set()
                return
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self._runner.cleanup())
            loop.close()

        self._thread = threading.Thread(target=run, name="standin", daemon=True)
        self._thread.start()
        ready.wait(10)
        if error:
            raise error[0]
        return self.url

    async def _start(self) -> None:
        app, self.standin = make_app(self.opts)
        self._runner = web.AppRunner(app, access_log=None, handler_cancellation=True, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, backlog=4096)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"http://{self.host}:{port}"

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._loop = None

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


# -------------------------------------------------------------------- CLI ----


def vllm_argv(argv: list[str]) -> list[str]:
    """`serve MODEL --served-model-name N --host H --port P ...` (the argv the vllm adapter builds) ->
    the stand-in's own flags, so a spec can name the stand-in as `engine.launch.command` and a machine
    without a GPU (or each node of a test cluster) runs the whole pipeline. vLLM flags the stand-in has
    no use for are dropped; `--standin-X V` in `engine.args.extra` passes `--X V` through."""
    flags = {"--burst", "--bos", "--no-metrics", "--no-uvloop"}  # the stand-in's flags that take no value
    out: list[str] = []
    it = iter(argv[2:])  # past "serve MODEL"
    for tok in it:
        if tok in ("--host", "--port"):
            out += [tok, next(it, "")]
        elif tok == "--served-model-name":
            out += ["--model", next(it, "")]
        elif tok.startswith("--standin-"):
            name = "--" + tok[len("--standin-"):]
            out += [name] if name in flags else [name, next(it, "")]
    return out


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["serve"]:
        argv = vllm_argv(argv)
    p = argparse.ArgumentParser(prog="python -m evidence.tools.standin",
                                description="A fast stand-in streaming server (NOT an engine; see the module docstring).")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8123)
    p.add_argument("--ttft", type=float, default=0.0, help="seconds to the first chunk")
    p.add_argument("--itl", type=float, default=0.0, help="seconds between chunks (0: no delay, one write per chunk)")
    p.add_argument("--burst", action="store_true", help="with --itl 0: the whole stream in one write")
    p.add_argument("--step", type=int, default=1, help="with --itl 0: chunks per stream per step (one write)")
    p.add_argument("--tokens", type=int, default=None, help="completion tokens (default: max_tokens)")
    p.add_argument("--tpc", type=int, default=1, help="tokens per chunk")
    p.add_argument("--fault", default="none")
    p.add_argument("--model", default="standin")
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--bos", action="store_true")
    p.add_argument("--quirk", type=int, default=0)
    p.add_argument("--no-metrics", action="store_true")
    p.add_argument("--max-running", type=int, default=0)
    p.add_argument("--no-uvloop", action="store_true")
    a = p.parse_args(argv)
    beh = Behavior(ttft_s=a.ttft, itl_s=a.itl, tokens=a.tokens, tokens_per_chunk=a.tpc, fault=a.fault,
                   burst=a.burst, step_chunks=a.step)
    beh.check()
    opts = Options(behavior=beh, model=a.model, vocab=a.vocab, bos=a.bos, quirk=a.quirk,
                   metrics=not a.no_metrics, max_running=a.max_running)
    loop_factory = None
    if not a.no_uvloop:
        try:
            import uvloop

            loop_factory = uvloop.new_event_loop
        except ImportError:
            pass

    async def serve() -> None:
        app, _ = make_app(opts)
        runner = web.AppRunner(app, access_log=None, handler_cancellation=True, shutdown_timeout=0.5)
        await runner.setup()
        site = web.TCPSite(runner, a.host, a.port, backlog=4096)
        await site.start()
        port = runner.addresses[0][1]
        print(f"standin listening on http://{a.host}:{port} (NOT an engine)", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        await runner.cleanup()

    with asyncio.Runner(loop_factory=loop_factory) as r:
        r.run(serve())
    sys.exit(0)
