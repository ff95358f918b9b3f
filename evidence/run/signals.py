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

# SIGUSR2: Slurm's warning before the time limit (submitit asks for it 90 s ahead); its default
# action kills at once, so it is a clean stop like SIGTERM, which a requeued job then resumes.
SIGNALS = (signal.SIGINT, signal.SIGTERM) + ((signal.SIGUSR2,) if hasattr(signal, "SIGUSR2") else ())


def _raise(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"{signal.Signals(signum).name} received")


#: Set by the command line's main(): this process is the command's own, so its signal handlers may be
#: set for its whole life (an in-process caller, e.g. a test's CliRunner, keeps its own handlers).
OWN_PROCESS = False


def install_early() -> None:
    """From the command's first instruction: every stop signal raises KeyboardInterrupt (exit 130,
    nothing half-written: files are renamed into place), never the default action's instant death."""
    if not OWN_PROCESS:
        return
    for s in SIGNALS:
        signal.signal(s, _raise)


#: signals that arrived once the work was done (the outcome stands; they are only noted)
LATE: list[str] = []


def _note(signum: int, frame: object) -> None:
    LATE.append(signal.Signals(signum).name)


def quiet() -> None:
    """After the outcome is recorded: a stop signal is noted and the exit goes on with the outcome's code."""
    for s in SIGNALS:
        signal.signal(s, _note)


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
            # under the command's early handlers (install_early) the work is over now: a signal from
            # here to the exit is only noted (no KeyboardInterrupt, no default-action death)
            signal.signal(s, _note if h is _raise else h)  # type: ignore[arg-type]

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
