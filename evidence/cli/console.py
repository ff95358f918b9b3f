"""The CLI's consoles, and what `--json` promises: stdout holds exactly one JSON document, errors included.

Tables never cut a number: off a terminal (a pipe, a file, a CI log) there is no width to fit, so the
console is as wide as its content (COLUMNS still wins when set); on a terminal every column keeps room
for its longest number, and text columns wrap instead.
"""

from __future__ import annotations

import io
import os
import re
import sys
from typing import Any

from rich.console import Console, ConsoleDimensions
from rich.table import Table

WIDE = 1000  # off a terminal: wide enough that no table of ours wraps or cuts
_NUMBER = re.compile(r"\d")


def keep_numbers(table: Table) -> Table:
    """Give each column at least the width of its longest whitespace-free piece that holds a digit
    (`3,417.23`, `+12162.7%`), so shrinking the table to fit wraps words, never numbers."""
    for col in table.columns:
        longest = 0
        for cell in getattr(col, "_cells", []):
            for word in str(cell).split():
                if _NUMBER.search(word):
                    longest = max(longest, len(word))
        if longest and (col.min_width or 0) < min(longest, 40):
            col.min_width = min(longest, 40)
    return table


class CliConsole(Console):
    @property  # type: ignore[override]
    def size(self) -> ConsoleDimensions:
        dims = super().size
        if self._width is None and not self.is_terminal and "COLUMNS" not in os.environ:
            return ConsoleDimensions(WIDE, dims.height)
        return dims

    @size.setter
    def size(self, new_size: tuple[int, int]) -> None:
        Console.size.fset(self, new_size)  # type: ignore[attr-defined]

    def print(self, *objects: Any, **kwargs: Any) -> None:  # type: ignore[override]
        for o in objects:
            if isinstance(o, Table):
                keep_numbers(o)
        super().print(*objects, **kwargs)


def make_console(stderr: bool = False) -> CliConsole:
    return CliConsole(stderr=stderr, highlight=False, soft_wrap=True)


class _Counting(io.TextIOBase):
    """A text stream that passes writes on and remembers them (stdout: whether anything was written;
    stderr: the text, to put an error into the JSON document)."""

    def __init__(self, inner: Any, keep: bool):
        self.inner, self.keep, self.written, self.text = inner, keep, 0, []

    def write(self, s: str) -> int:  # type: ignore[override]
        if isinstance(s, str) and s:
            self.written += len(s)
            if self.keep:
                self.text.append(s)
        return self.inner.write(s)

    def flush(self) -> None:
        self.inner.flush()

    def isatty(self) -> bool:
        return self.inner.isatty()

    def fileno(self) -> int:
        return self.inner.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self.inner, "encoding", "utf-8")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def wants_json(argv: list[str]) -> bool:
    """Whether this command line asked for --json (as an option, not after `--`)."""
    for a in argv:
        if a == "--":
            return False
        if a == "--json":
            return True
    return False


class JsonGuard:
    """Under --json: when the command ends in error without having written its document, write one
    {"ok": false, "exit_code": N, "error": "..."} to stdout (the error text is what went to stderr)."""

    def __init__(self) -> None:
        self.out = _Counting(sys.stdout, keep=False)
        self.err = _Counting(sys.stderr, keep=True)
        self._saved = (sys.stdout, sys.stderr)
        sys.stdout, sys.stderr = self.out, self.err  # type: ignore[assignment]

    def finish(self, code: int | None, message: str | None = None) -> None:
        sys.stdout, sys.stderr = self._saved
        if code in (0, None) or self.out.written:
            return
        from evidence.canon import dumps

        text = message if message is not None else "".join(self.err.text)
        # plain text: no "evidence: error:" prefix, no box drawing around click's usage errors
        lines = [ln.strip().strip("│╭╮╰╯─").strip() for ln in text.splitlines()]
        text = "\n".join(ln for ln in lines if ln and ln != "Error")
        text = re.sub(r"^evidence: error: ", "", text)
        sys.stdout.write(dumps({"ok": False, "exit_code": code, "error": text or f"exit code {code}"}))
        sys.stdout.flush()
