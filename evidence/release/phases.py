"""Progress of a release operation, by phase: one bar per phase (checksums, archive, each run's
regeneration). The release code reports; the CLI draws (or nothing does)."""

from __future__ import annotations

from typing import Protocol


class Phases(Protocol):
    def start(self, key: str, title: str, total: float | None = None) -> None:
        """A phase begins; total None when its size is unknown (a spinner, not a bar)."""

    def advance(self, key: str, n: float = 1, title: str | None = None) -> None:
        """Work done in a phase; title, when given, says what it is doing now."""

    def finish(self, key: str, title: str | None = None) -> None:
        """The phase is over (its bar shows complete)."""


class NoPhases:
    def start(self, key: str, title: str, total: float | None = None) -> None:
        pass

    def advance(self, key: str, n: float = 1, title: str | None = None) -> None:
        pass

    def finish(self, key: str, title: str | None = None) -> None:
        pass
