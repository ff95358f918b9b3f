"""The deterministic release tar: writing it, hashing it without writing, and extracting one safely:
every member's name, type and size is checked against the archive and against what the release inside
declares (manifests, release.json, Payload-Oxum) before a byte is written."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import shutil
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from evidence.release.files import hash_file, inventory
from evidence.release.layout import (BAG_INFO, CHUNK, MANIFEST, PAYLOAD_DIR, RELEASE_JSON, REQUIRED_FILES, TAG_READ_LIMIT,
                                     TAGMANIFEST, Finding, ReleaseError, path_key, printable)
from evidence.release.manifest import parse_manifest


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


_MEMBER_TYPES = (tarfile.REGTYPE, tarfile.AREGTYPE, tarfile.DIRTYPE)


def tar_member_problems(members: list[tarfile.TarInfo], archive_size: int | None = None) -> list[Finding]:
    """Everything unsafe about an archive's members (names, types, sizes), found before anything is extracted."""
    out: list[Finding] = []
    seen: dict[str, int] = {}
    tops = set()
    total = 0
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
        elif m.sparse is not None or m.type == tarfile.GNUTYPE_SPARSE or any(k.startswith("GNU.sparse.") for k in m.pax_headers):
            out.append(Finding(name, "a regular file stored whole", f"a sparse file claiming {m.size} bytes",
                               "sparse member: its holes would be written out in full"))
        elif m.type not in _MEMBER_TYPES:
            out.append(Finding(name, "a regular file or folder", f"type {m.type!r}", "unsupported member type"))
        elif archive_size is not None and m.isfile():
            total += m.size
            if m.offset_data + m.size > archive_size:
                out.append(Finding(name, f"at most the {archive_size - m.offset_data} bytes the archive holds after its header",
                                   m.size, "the member claims more data than the archive holds"))
        key = name.rstrip("/")
        if key in seen:
            out.append(Finding(name, "each member once", "listed twice", "a later member would overwrite an earlier one"))
        seen[key] = 1
        tops.add(parts[0])
    if len(tops) > 1:
        out.append(Finding("/", "one top-level folder (the release)", sorted(tops), "several top-level entries"))
    if archive_size is not None and total > archive_size:
        out.append(Finding("/", f"at most {archive_size} bytes in all (the archive's size)", total, "members claim more data than the archive holds"))
    return out


def _read_small(tf: tarfile.TarFile, m: tarfile.TarInfo | None) -> bytes | None:
    if m is None or not m.isfile() or m.size > TAG_READ_LIMIT:
        return None
    f = tf.extractfile(m)
    return f.read(m.size) if f is not None else None


def declared_problems(tf: tarfile.TarFile, members: list[tarfile.TarInfo]) -> list[Finding]:
    """Members against what the release inside the archive declares, read before any byte is written:
    every payload file is listed in manifest-sha256.txt with the size release.json gives it, the payload
    adds up to bag-info.txt's Payload-Oxum, every other file is a tag file the tag manifest lists.
    What cannot be read here (a missing manifest) is left to the checks, which report it."""
    top = members[0].name.split("/")[0]
    by_rel = {m.name[len(top) + 1:]: m for m in members if m.isfile() and m.name.startswith(top + "/")}
    out: list[Finding] = []
    manifest = tagmanifest = None
    if (b := _read_small(tf, by_rel.get(MANIFEST))) is not None:
        manifest = {e.path for e in parse_manifest(b, MANIFEST)[0]}
    if (b := _read_small(tf, by_rel.get(TAGMANIFEST))) is not None:
        tagmanifest = {e.path for e in parse_manifest(b, TAGMANIFEST)[0]}
    sizes: dict[str, int] = {}
    b = _read_small(tf, by_rel.get(RELEASE_JSON))
    with contextlib.suppress(ValueError, UnicodeDecodeError, AttributeError, TypeError, KeyError, RecursionError):
        sizes = {f["path"]: f["bytes"] for f in json.loads(b)["files"]
                 if isinstance(f, dict) and isinstance(f.get("path"), str) and isinstance(f.get("bytes"), int)}
    oxum = None
    if (b := _read_small(tf, by_rel.get(BAG_INFO))) is not None:
        m = re.search(rb"(?m)^Payload-Oxum:[ \t]*(\d+)\.(\d+)[ \t]*\r?$", b)
        oxum = (int(m.group(1)), int(m.group(2))) if m else None
    payload = {r: m for r, m in by_rel.items() if r.startswith(PAYLOAD_DIR + "/")}
    for rel, m in sorted(by_rel.items(), key=lambda kv: path_key(kv[0])):
        if rel in payload:
            if manifest is not None and rel not in manifest:
                out.append(Finding(m.name, f"listed in {MANIFEST}", "not listed", "an undeclared payload file"))
            elif rel in sizes and sizes[rel] != m.size:
                out.append(Finding(m.name, sizes[rel], m.size, "size differs from release.json"))
        elif rel != TAGMANIFEST and rel not in REQUIRED_FILES and tagmanifest is not None and rel not in tagmanifest:
            out.append(Finding(m.name, f"listed in {TAGMANIFEST}", "not listed", "an undeclared tag file"))
    if oxum is not None:
        octets, count = sum(m.size for m in payload.values()), len(payload)
        if (octets, count) != oxum:
            out.append(Finding(f"{top}/{BAG_INFO}", f"Payload-Oxum {oxum[0]}.{oxum[1]}", f"{octets}.{count}",
                               "the payload members do not add up to Payload-Oxum"))
    return out


def _fsize_limit() -> int | None:
    try:
        import resource
    except ImportError:  # not POSIX
        return None
    soft = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    return None if soft == resource.RLIM_INFINITY else soft


def safe_extract(tar_path: Path, dest: Path) -> tuple[Path | None, list[Finding]]:
    """Check every member first (names, types, sizes against the archive, the manifests, release.json
    and Payload-Oxum); extract only when all are safe, never outside dest, never a link, never more
    bytes than the release declares. Returns (the release folder, problems). Raises ReleaseError when
    the file is not a readable plain tar, or when the extraction would not fit (disk, ulimit -f)."""
    tar_path = Path(tar_path)
    try:
        size = tar_path.stat().st_size
        with open(tar_path, "rb") as f:
            magic = f.read(6)
        # plain tar only: a compressed stream has no sizes to check before it is inflated
        tf = tarfile.open(tar_path, "r:")
    except (tarfile.TarError, OSError) as e:
        hint = " It is compressed: freeze writes a plain .tar; decompress it first." if magic[:2] == b"\x1f\x8b" or magic[:3] in (b"BZh", b"\xfd7z") else ""
        raise ReleaseError(f"{tar_path} is not a readable tar archive ({e}); give a release folder or the .tar that freeze wrote.{hint}")
    with tf:
        try:
            members = tf.getmembers()
        except (tarfile.TarError, OSError, EOFError) as e:
            raise ReleaseError(f"{tar_path} is a damaged tar archive ({e}); nothing was extracted.")
        if not members:
            raise ReleaseError(f"{tar_path} is an empty archive: not a release.")
        problems = tar_member_problems(members, size)
        if problems:
            return None, problems
        problems = declared_problems(tf, members)
        if problems:
            return None, problems
        dest = Path(dest).resolve()
        total = sum(m.size for m in members if m.isfile())
        biggest = max((m for m in members if m.isfile()), key=lambda m: m.size, default=None)
        limit = _fsize_limit()
        if biggest is not None and limit is not None and biggest.size > limit:
            raise ReleaseError(f"{printable(biggest.name)} in {tar_path} is {biggest.size} bytes, over this shell's file-size limit "
                               f"(ulimit -f: {limit} bytes); nothing was extracted. Raise the limit, or verify the release folder.")
        free = shutil.disk_usage(dest).free
        if total > free:
            raise ReleaseError(f"extracting {tar_path} needs {total} bytes and {dest} has {free} free; nothing was extracted. "
                               "Point TMPDIR at a bigger disk, or verify the release folder.")
        try:
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
                    left = m.size  # never more than the member declared (and the checks above allowed)
                    while left > 0 and (chunk := src.read(min(CHUNK, left))):
                        f.write(chunk)
                        left -= len(chunk)
        except (OSError, tarfile.TarError) as e:
            raise ReleaseError(f"could not extract {tar_path} into {dest} ({printable(str(e))}); the temporary folder is removed. "
                               "Check the free space and the file-size limit (ulimit -f), or verify the release folder.")
        top = members[0].name.split("/")[0]
    return dest / top, []


def published_sha256(release_dir: Path) -> str | None:
    """The sha256 committed beside the folder (releases/NAME.tar.sha256), or None when there is none."""
    side = Path(release_dir).with_name(Path(release_dir).name + ".tar.sha256")
    if not side.is_file():
        return None
    with open(side, "rb") as f:  # "<sha256>  NAME.tar\n": the first 4 KiB hold it (never a whole hostile file)
        first = f.read(4096).decode("utf-8", "replace").split()[:1]
    return first[0] if first else ""


def archive_release(release_dir: Path, out: Path | None = None) -> dict:
    """Rebuild releases/NAME.tar from the folder, byte for byte as freeze made it (mtime = release.json's
    freeze.source_date_epoch). The stream is hashed first and compared with NAME.tar.sha256 beside the folder:
    a folder that does not rebuild the published archive writes nothing (ReleaseError, exit 1). Never overwrites:
    an existing file at `out` is kept, and said to be identical or refused."""
    rel = Path(release_dir)
    if not rel.is_dir() or not (rel / RELEASE_JSON).is_file():
        raise ReleaseError(f"{rel} is not a release folder (no {RELEASE_JSON}); give releases/<tag>.")
    try:
        sde = json.loads((rel / RELEASE_JSON).read_bytes())["freeze"]["source_date_epoch"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ReleaseError(f"{rel / RELEASE_JSON} does not give freeze.source_date_epoch ({type(e).__name__}: {e}); "
                           "the archive's dates come from it, so it cannot be rebuilt.") from None
    if type(sde) is not int:
        raise ReleaseError(f"{rel / RELEASE_JSON}: freeze.source_date_epoch is {sde!r}, not whole seconds; cannot rebuild the archive.")
    out = Path(out) if out is not None else rel.with_name(rel.name + ".tar")
    published = published_sha256(rel)
    sha = tar_sha256_of_folder(rel, mtime=sde)
    res = {"release": str(rel), "archive": str(out), "sha256": sha, "published_sha256": published,
           "matches_published": None if published is None else published == sha, "written": False, "existed": False}
    if published is not None and published != sha:
        raise ReleaseError(f"{rel} does not rebuild its published archive: the deterministic tar of the folder hashes to "
                           f"{sha}, {rel.name}.tar.sha256 says {published}. The folder changed since it was frozen "
                           f"(run `evidence verify {rel}`); nothing was written.", 1)
    if out.exists() or out.is_symlink():
        found = hash_file(out).sha256 if out.is_file() and not out.is_symlink() else None
        if found != sha:
            raise ReleaseError(f"{out} already exists and is not this folder's archive (sha256 {found}, the folder "
                               f"rebuilds {sha}); it is never overwritten. Move it away, or pass --out.")
        res["existed"] = True
        return res
    if build_tar(rel, out, mtime=sde) != sha:  # the folder changed while it was read
        out.unlink()
        raise ReleaseError(f"{rel} changed while its archive was written; nothing was kept. Try again.")
    res["written"] = True
    return res
