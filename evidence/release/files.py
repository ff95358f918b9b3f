"""Files on disk: streamed hashing (sha256 and git blob ids, a thread pool) and a link-safe inventory."""

from __future__ import annotations

import hashlib
import os
import stat
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

from evidence.release.layout import CHUNK, path_key


@dataclass(frozen=True)
class FileDigest:
    size: int
    sha256: str
    git_sha1: str | None = None  # the git blob id (sha1 of "blob <size>\\0" + content), when asked for


HashProgress = Callable[[int, int], None]  # (bytes just hashed, total bytes)


def hash_file(path: Path, *, git_blob: bool = False, progress: HashProgress | None = None, total: int = 0) -> FileDigest:
    """sha256 (and optionally the git blob id) in one pass of chunked reads; never follows a symlink."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    with os.fdopen(fd, "rb", buffering=0) as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise OSError(f"{path} is not a regular file")
        h = hashlib.sha256()
        g = hashlib.sha1(b"blob %d\0" % st.st_size) if git_blob else None
        buf = bytearray(min(CHUNK, max(st.st_size, 1)))
        mv = memoryview(buf)
        size = 0
        while True:
            n = f.readinto(mv)
            if not n:
                break
            chunk = mv[:n]
            h.update(chunk)
            if g is not None:
                g.update(chunk)
            size += n
            if progress is not None:
                progress(n, total)
    if g is not None and size != st.st_size:  # changed while read: the blob id would be wrong
        g = hashlib.sha1(b"blob %d\0" % size)
        with open(path, "rb") as f2:
            while chunk2 := f2.read(CHUNK):
                g.update(chunk2)
    return FileDigest(size, h.hexdigest(), g.hexdigest() if g is not None else None)


def default_workers() -> int:
    # hashlib releases the GIL on large updates; a few threads per core also overlap I/O waits.
    return max(2, min(32, 2 * (os.cpu_count() or 1)))


def hash_files(root: Path, rels: Iterable[str], *, git_blob: bool = False, workers: int | None = None,
               progress: HashProgress | None = None) -> dict[str, FileDigest | OSError]:
    """Hash many files in parallel (a thread pool; biggest first so one large file does not finish last)."""
    root = Path(root)
    rels = list(rels)
    sizes = {}
    for r in rels:
        try:
            sizes[r] = os.lstat(root / r).st_size
        except OSError:
            sizes[r] = 0
    total = sum(sizes.values())
    order = sorted(rels, key=lambda r: (-sizes[r], path_key(r)))

    def one(rel: str) -> FileDigest | OSError:
        try:
            return hash_file(root / rel, git_blob=git_blob, progress=progress, total=total)
        except OSError as e:
            return e

    with ThreadPoolExecutor(max_workers=workers or default_workers()) as pool:
        results = dict(zip(order, pool.map(one, order)))
    return {r: results[r] for r in sorted(rels, key=path_key)}


@dataclass
class Inventory:
    """Everything under a folder, walked without following links."""

    files: dict[str, os.stat_result] = field(default_factory=dict)  # regular files
    dirs: list[str] = field(default_factory=list)
    empty_dirs: list[str] = field(default_factory=list)
    symlinks: dict[str, str] = field(default_factory=dict)  # path -> target
    special: dict[str, str] = field(default_factory=dict)  # path -> kind (fifo, socket, device)

    def all_names(self) -> list[str]:
        return sorted([*self.files, *self.dirs, *self.symlinks, *self.special], key=path_key)


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "fifo"), (stat.S_ISSOCK, "socket"), (stat.S_ISCHR, "character device"),
                       (stat.S_ISBLK, "block device")):
        if test(mode):
            return name
    return "unknown file type"


def inventory(root: Path) -> Inventory:
    inv = Inventory()
    stack = [("", Path(root))]
    while stack:
        prefix, d = stack.pop()
        n = 0
        with os.scandir(d) as it:
            for entry in it:
                n += 1
                rel = prefix + entry.name
                st = entry.stat(follow_symlinks=False)
                if stat.S_ISLNK(st.st_mode):
                    try:
                        inv.symlinks[rel] = os.readlink(entry.path)
                    except OSError:
                        inv.symlinks[rel] = "?"
                elif stat.S_ISDIR(st.st_mode):
                    inv.dirs.append(rel)
                    stack.append((rel + "/", Path(entry.path)))
                elif stat.S_ISREG(st.st_mode):
                    inv.files[rel] = st
                else:
                    inv.special[rel] = _kind(st.st_mode)
        if n == 0 and prefix:
            inv.empty_dirs.append(prefix[:-1])
    inv.dirs.sort(key=path_key)
    inv.empty_dirs.sort(key=path_key)
    inv.files = {k: inv.files[k] for k in sorted(inv.files, key=path_key)}
    return inv
