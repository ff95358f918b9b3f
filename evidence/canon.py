"""Canonical bytes and atomic writes, shared by every stage that writes files.

Canonical JSON: sorted keys, UTF-8 (no ASCII escaping), fixed separators, a
trailing newline. Floats use Python's shortest round-trip repr, which is stable
across processes and platforms. Built twice from the same data, the same bytes.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any


def _clean(obj: Any) -> Any:
    # NaN/inf are not JSON; a value that could not be measured is None instead.
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return obj


def dumps(obj: Any, indent: int | None = 2) -> str:
    seps = (",", ": ") if indent else (",", ":")
    return json.dumps(_clean(obj), sort_keys=True, ensure_ascii=False, indent=indent, separators=seps, allow_nan=False) + "\n"


def sha256_file(path: Path) -> str:
    """sha256 of a file, read in 1 MiB blocks (traces and records can be large)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def write_atomic(path: Path, data: bytes | str) -> None:
    """Write to a temporary name in the same folder, fsync, then rename over."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        data = data.encode("utf-8")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        # mkstemp creates 0600; give the file the mode a plain open() would (0666 less the umask)
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def write_json(path: Path, obj: Any, indent: int | None = 2) -> None:
    write_atomic(path, dumps(obj, indent=indent))


def read_json(path: Path) -> Any:
    return json.loads(Path(path).read_text(encoding="utf-8"))
