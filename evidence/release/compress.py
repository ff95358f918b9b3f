"""Raw records stored compressed in a release: the large text files of a run (request records, telemetry,
server logs) become NAME.gz, written deterministically (gzip level 9, mtime 0, no file name: the same
bytes give the same .gz with the same zlib), read back transparently (evidence.records.read_text/stored).
The manifests hash the compressed bytes; release.json keeps each original's size and sha256, so the bytes
as recorded are still named and checkable (gunzip -c FILE | sha256sum)."""

from __future__ import annotations

import fnmatch
import gzip
import hashlib
import io
import os
from pathlib import Path

from evidence.canon import write_atomic
from evidence.records import GZ
from evidence.release.layout import ReleaseError, path_key

# by file name, anywhere under data/raw/<run>/: the files that make a run large, each read only through
# evidence.records (trials' and profiles' requests.jsonl, telemetry.jsonl) or by no derivation (warm-up, logs)
NAMES = ("requests*.jsonl", "telemetry*.jsonl", "server*.log")
LEVEL = 9
METHOD = f"gzip (RFC 1952), level {LEVEL}, mtime 0, no file name"


def gzip_bytes(data: bytes) -> bytes:
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", compresslevel=LEVEL, fileobj=buf, mtime=0) as f:
        f.write(data)
    return buf.getvalue()


def compress_raw(raw: Path, prefix: str) -> list[dict]:
    """Replace every file under `raw` whose name matches NAMES by NAME.gz. Returns the originals
    [{"path": <prefix>/<rel>.gz, "bytes", "sha256"}] (of the bytes as recorded), sorted by path."""
    raw = Path(raw)
    todo = sorted(
        (
            p
            for p in raw.rglob("*")
            if p.is_file() and not p.is_symlink() and any(fnmatch.fnmatchcase(p.name, n) for n in NAMES)
        ),
        key=lambda p: path_key(p.as_posix()),
    )
    out = []
    for p in todo:
        gz = p.with_name(p.name + GZ)
        if gz.exists():
            raise ReleaseError(
                f"{p.relative_to(raw)} and {gz.relative_to(raw)} are both in the run; the release stores "
                f"the first compressed as the second, so one would hide the other. Keep one."
            )
        data = p.read_bytes()
        write_atomic(gz, gzip_bytes(data))
        os.unlink(p)
        out.append(
            {
                "path": f"{prefix}/{gz.relative_to(raw).as_posix()}",
                "bytes": len(data),
                "sha256": hashlib.sha256(data).hexdigest(),
            }
        )
    return out
