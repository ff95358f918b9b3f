"""The raw record of one request, as the load generator writes it.

All times are seconds on the client's monotonic clock (`time.perf_counter`),
relative to the trial's `t0` (recorded in the trial's meta with the matching
wall-clock and monotonic-ns readings, which is the clock bridge to traces).
Timestamps are taken when bytes arrive, before any JSON parsing.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Iterable, Literal

Phase = Literal["measure", "warmup", "profile"]


@dataclass
class RequestRecord:
    i: int  # index of the request within its trial (prompt index)
    phase: Phase
    prompt_len: int  # tokens we sent (nominal)
    max_tokens: int
    intended_s: float  # when the schedule said the request was due
    slot_wait_s: float  # time spent waiting for a concurrency slot
    send_s: float  # when the HTTP request was actually issued
    first_chunk_s: float | None = None  # first SSE message carrying a choice
    chunk_s: list[float] = field(default_factory=list)  # arrival of each token-bearing chunk
    end_s: float | None = None  # end of stream ([DONE] or close)
    prompt_tokens: int | None = None  # usage.prompt_tokens (what the server saw)
    completion_tokens: int | None = None  # usage.completion_tokens
    chunk_count: int = 0  # token-bearing chunks
    finish_reason: str | None = None
    status: int | None = None  # HTTP status
    error: str | None = None  # error text; None when the request succeeded
    ok: bool = False
    # attempts before the one recorded above, each {"send_s", "error"}: only a connect failure on a
    # new connection (nothing could have reached the server) is tried again; None: one attempt
    attempts: list[dict[str, Any]] | None = None

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if d["attempts"] is None:
            del d["attempts"]  # a request tried once is written as before (same bytes)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "RequestRecord":
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


def dumps_line(obj: Any) -> str:
    """One JSONL line: sorted keys, compact, repr-exact floats."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False) + "\n"


def write_records(path: Path, records: Iterable[RequestRecord]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for r in records:
            f.write(dumps_line(r.as_dict()))


GZ = ".gz"  # a release stores large raw files gzipped (evidence.release.compress): requests.jsonl -> requests.jsonl.gz


def stored(path: Path) -> Path | None:
    """The file as recorded: `path` itself, else `path`.gz as a release stores it; None when neither is a file."""
    path = Path(path)
    if path.is_file():
        return path
    gz = path.with_name(path.name + GZ)
    return gz if gz.is_file() else None


def read_text(path: Path) -> str:
    """A recorded text file's UTF-8 text, read through gzip when it is stored compressed (see `stored`)."""
    p = stored(path) or Path(path)  # neither: open the name asked for, so the error names it
    if p.name.endswith(GZ) and not Path(path).name.endswith(GZ):
        import gzip

        with gzip.open(p, "rb") as f:
            return f.read().decode("utf-8")
    return p.read_text(encoding="utf-8")


def read_records(path: Path) -> list[RequestRecord]:
    return [RequestRecord.from_dict(json.loads(line)) for line in read_text(path).splitlines() if line.strip()]
