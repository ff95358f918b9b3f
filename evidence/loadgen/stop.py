"""A stop request that a signal handler can raise safely.

The runner's SIGTERM/SIGINT handler calls `flag.set(...)` and returns; nothing is
raised inside an I/O callback. The load generator reads `is_set()` between
requests: it stops sending, lets the requests in flight finish within a short
grace period, cancels the rest, and returns the records of every request that
completed. Setting is a plain attribute write (no lock), so it cannot deadlock
when the handler interrupts code that holds a lock, as `threading.Event.set` can.
"""

from __future__ import annotations


class StopFlag:
    """Set once (by a signal handler or a test); read between requests."""

    __slots__ = ("_set", "reason")

    def __init__(self) -> None:
        self._set = False
        self.reason: str | None = None

    def set(self, reason: str = "stop requested") -> None:
        if not self._set:
            self.reason = reason
        self._set = True

    def is_set(self) -> bool:
        return self._set

    def __bool__(self) -> bool:
        return self._set

    def __repr__(self) -> str:
        return f"StopFlag({'set: ' + str(self.reason) if self._set else 'clear'})"
