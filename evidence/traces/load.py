"""Which reader a trace file needs (from its first bytes, not its name), and `load_trace`."""

from __future__ import annotations

import gzip
from pathlib import Path

from evidence.traces.kineto import load_kineto_json
from evidence.traces.model import Trace, TraceError
from evidence.traces.nsys import load_nsys_sqlite

__all__ = ["detect_format", "load_trace"]

_SQLITE_MAGIC = b"SQLite format 3\x00"


def detect_format(path: Path) -> str:
    """'nsys-sqlite' or 'kineto-json', from the file's first bytes (not its name)."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)
    except OSError as e:
        raise TraceError(f"Cannot read trace file {path}: {e.strerror or e}.") from None
    if head.startswith(_SQLITE_MAGIC):
        return "nsys-sqlite"
    if head[:2] == b"\x1f\x8b":
        try:
            with gzip.open(path, "rb") as f:
                head = f.read(64)
        except (OSError, EOFError) as e:
            raise TraceError(f"{path} starts like a gzip file but cannot be decompressed ({e}); is it truncated?") from None
    if head.lstrip()[:1] in (b"{", b"["):
        return "kineto-json"
    raise TraceError(
        f"{path} is neither an Nsight Systems SQLite export nor a PyTorch profiler (Kineto) "
        "Chrome-trace JSON (.json or .json.gz): its first bytes match neither. For nsys, export "
        "the report with `nsys export --type sqlite`; for the PyTorch profiler, pass the "
        "`*.pt.trace.json[.gz]` file it wrote."
    )


def load_trace(path: str | Path) -> Trace:
    """Load a trace, detecting its format by content. Raises TraceError on bad input."""
    p = Path(path)
    if not p.exists():
        raise TraceError(f"Trace file {p} does not exist.")
    if p.is_dir():
        raise TraceError(f"{p} is a folder; pass one trace file (an nsys .sqlite export or a Kineto .json/.json.gz).")
    fmt = detect_format(p)
    return load_nsys_sqlite(p) if fmt == "nsys-sqlite" else load_kineto_json(p)
