"""The deterministic release tar: writing it, hashing it without writing, and extracting one safely."""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import re
import shutil
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from evidence.release.files import inventory
from evidence.release.layout import CHUNK, Finding, ReleaseError, path_key


def _tar_entries(release_dir: Path) -> list[tuple[str, Path, bool]]:
    inv = inventory(release_dir)
    if inv.symlinks or inv.special:
        raise ReleaseError(f"{release_dir} holds links or special files ({', '.join(sorted({**inv.symlinks, **inv.special})[:5])}); "
                           "a release archive holds regular files and folders only.")
    name = release_dir.name
    entries = [(name, release_dir, True)]
    entries += [(f"{name}/{d}", release_dir / d, True) for d in inv.dirs]
    entries += [(f"{name}/{f}", release_dir / f, False) for f in inv.files]
    return sorted(entries, key=lambda e: path_key(e[0]))


def write_tar(release_dir: Path, fileobj: Any, *, mtime: int) -> None:
    """Sorted entries, PAX format, uid/gid 0, empty uname/gname, mtime fixed, modes 0755/0644,
    regular files and folders only: the same folder gives the same bytes."""
    with tarfile.open(fileobj=fileobj, mode="w", format=tarfile.PAX_FORMAT, encoding="utf-8") as tf:
        for arcname, src, is_dir in _tar_entries(Path(release_dir)):
            ti = tarfile.TarInfo(arcname)
            ti.uid = ti.gid = 0
            ti.uname = ti.gname = ""
            ti.mtime = int(mtime)
            if is_dir:
                ti.type, ti.mode, ti.size = tarfile.DIRTYPE, 0o755, 0
                tf.addfile(ti)
            else:
                ti.type, ti.mode = tarfile.REGTYPE, 0o644
                with open(src, "rb") as f:
                    ti.size = os.fstat(f.fileno()).st_size
                    tf.addfile(ti, f)


class _HashWriter(io.RawIOBase):
    def __init__(self, sink: Any = None):
        self.h, self.sink, self.n = hashlib.sha256(), sink, 0

    def writable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.n

    def write(self, b: Any) -> int:
        self.h.update(b)
        self.n += len(b)
        if self.sink is not None:
            self.sink.write(b)
        return len(b)


def build_tar(release_dir: Path, out: Path, *, mtime: int) -> str:
    """Write the deterministic tar atomically; returns its sha256."""
    out = Path(out)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            hw = _HashWriter(f)
            write_tar(release_dir, hw, mtime=mtime)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, out)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return hw.h.hexdigest()


def tar_sha256_of_folder(release_dir: Path, *, mtime: int) -> str:
    """The sha256 the deterministic tar of this folder has, without writing it."""
    hw = _HashWriter()
    write_tar(release_dir, hw, mtime=mtime)
    return hw.h.hexdigest()


def tar_member_problems(members: list[tarfile.TarInfo]) -> list[Finding]:
    """Everything unsafe about an archive's members, found before anything is extracted."""
    out: list[Finding] = []
    seen: dict[str, int] = {}
    tops = set()
    for m in members:
        name = m.name
        if name.startswith("/") or re.match(r"^[A-Za-z]:", name):
            out.append(Finding(name, "a relative member name", "an absolute path", "absolute member"))
        parts = name.replace("\\", "/").split("/")
        if ".." in parts:
            out.append(Finding(name, "no '..' component", "'..'", "member would be written outside the folder"))
        if "\\" in name:
            out.append(Finding(name, "'/' separators only", "a backslash", "member name with a backslash"))
        if m.issym() or m.islnk():
            out.append(Finding(name, "a regular file or folder", f"a {'symbolic' if m.issym() else 'hard'} link to {m.linkname!r}", "link member"))
        elif m.isdev() or m.isfifo():
            out.append(Finding(name, "a regular file or folder", "a device or fifo", "special member"))
        elif not (m.isfile() or m.isdir()):
            out.append(Finding(name, "a regular file or folder", f"type {m.type!r}", "unsupported member type"))
        key = name.rstrip("/")
        if key in seen:
            out.append(Finding(name, "each member once", "listed twice", "a later member would overwrite an earlier one"))
        seen[key] = 1
        tops.add(parts[0])
    if len(tops) > 1:
        out.append(Finding("/", "one top-level folder (the release)", sorted(tops), "several top-level entries"))
    return out


def safe_extract(tar_path: Path, dest: Path) -> tuple[Path | None, list[Finding]]:
    """Check every member first; extract only when all are safe, never outside dest, never a link.
    Returns (the release folder, problems). Raises ReleaseError when the file is not a readable tar."""
    try:
        tf = tarfile.open(tar_path, "r:*")
    except (tarfile.TarError, OSError) as e:
        raise ReleaseError(f"{tar_path} is not a readable tar archive ({e}); give a release folder or the .tar that freeze wrote.")
    with tf:
        try:
            members = tf.getmembers()
        except (tarfile.TarError, OSError, EOFError) as e:
            raise ReleaseError(f"{tar_path} is a damaged tar archive ({e}); nothing was extracted.")
        if not members:
            raise ReleaseError(f"{tar_path} is an empty archive: not a release.")
        problems = tar_member_problems(members)
        if problems:
            return None, problems
        dest = Path(dest).resolve()
        for m in members:
            target = (dest / m.name).resolve()
            if target != dest and dest not in target.parents:
                return None, [Finding(m.name, f"inside {dest}", str(target), "member resolves outside the folder")]
            if m.isdir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            src = tf.extractfile(m)
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
            with os.fdopen(fd, "wb") as f, src:
                shutil.copyfileobj(src, f, CHUNK)
        top = members[0].name.split("/")[0]
    return dest / top, []
