"""SIGINT and SIGTERM during a run: a flag while requests are in flight, an exception elsewhere.

While the load generator runs (a trial, the warm-up, prompt checks against the server) a
signal only sets the `StopFlag` it reads between requests: nothing is raised inside its
I/O callbacks, the requests in flight finish or are cut at a short deadline, and the
records of those that completed come back to be kept under aborted/. Outside those
stretches (starting the engine, sleeping between trials) no I/O callback can be hit, so
the signal raises KeyboardInterrupt at once, as Ctrl-C always did; the runner also raises
it itself as soon as a shielded stretch ends with the flag set. Either way the run ends
"interrupted" (exit 130), never "complete".
"""

from __future__ import annotations

import signal
from contextlib import contextmanager
from typing import Iterator

from evidence.loadgen.stop import StopFlag

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupts:
    """Install with `with Interrupts() as intr:`; run load inside `with intr.shielded():`."""

    def __init__(self) -> None:
        self.flag = StopFlag()
        self._shield = 0
        self._closing = False
        self._old: dict[int, object] = {}

    def _handler(self, signum: int, frame: object) -> None:
        self.flag.set(f"{signal.Signals(signum).name} received")
        if self._shield == 0 and not self._closing:
            raise KeyboardInterrupt

    def __enter__(self) -> "Interrupts":
        for s in SIGNALS:
            self._old[s] = signal.signal(s, self._handler)
        return self

    def __exit__(self, *exc: object) -> None:
        for s, h in self._old.items():
            signal.signal(s, h)  # type: ignore[arg-type]

    @contextmanager
    def shielded(self) -> Iterator[StopFlag]:
        """A stretch where a signal only sets the flag (the caller checks `check()` after it)."""
        self._shield += 1
        try:
            yield self.flag
        finally:
            self._shield -= 1

    @contextmanager
    def closing(self) -> Iterator[None]:
        """Cleanup (stopping the engine, writing the status): a second signal must not cut it."""
        self._closing = True
        try:
            yield
        finally:
            self._closing = False

    def check(self) -> None:
        """Raise KeyboardInterrupt when a stop was requested (call between units of work)."""
        if self.flag.is_set():
            raise KeyboardInterrupt
