"""BagIt manifests (RFC 8493): rendering and strict parsing."""

from __future__ import annotations

import re
from dataclasses import dataclass

from evidence.release.layout import Finding, path_key


def encode_manifest_path(p: str) -> str:
    # RFC 8493 2.1.3: CR, LF and % are percent-encoded in manifests.
    return p.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


_DECODED = {"25": "%", "0A": "\n", "0D": "\r"}
_PERCENT = re.compile(r"%(.{0,2})", re.S)


def decode_manifest_path(p: str) -> tuple[str, str | None]:
    """(the path, None) per RFC 8493 2.1.3, or (p as written, why it cannot be decoded). Only %25, %0A and %0D
    (either case) are defined: a literal '%' must be written %25, so any other '%' makes the path ambiguous."""
    bad: list[str] = []

    def one(m: re.Match) -> str:
        code = m.group(1).upper()
        if code in _DECODED:
            return _DECODED[code]
        bad.append(m.group(0))
        return m.group(0)

    out = _PERCENT.sub(one, p)
    if bad:
        return p, (f"'%' not followed by 25, 0A or 0D ({', '.join(repr(b) for b in bad)}): RFC 8493 writes a literal "
                   "'%' as %25 and encodes only CR, LF and '%'")
    return out, None


def render_manifest(digests: dict[str, str]) -> bytes:
    """BagIt manifest bytes: "<hex>  <path>\\n", sorted by path in byte order."""
    return "".join(f"{digests[p]}  {encode_manifest_path(p)}\n" for p in sorted(digests, key=path_key)).encode("utf-8", "surrogateescape")


@dataclass(frozen=True)
class ManifestEntry:
    line: int
    digest: str
    path: str


_MANIFEST_LINE = re.compile(r"^(\S+)[ \t]+(.*)$")


def parse_manifest(data: bytes, name: str) -> tuple[list[ManifestEntry], list["Finding"]]:
    """Entries (permissive, as a BagIt reader would take them) and strict-format problems."""
    problems: list[Finding] = []
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        text = data.decode("utf-8", "surrogateescape")
        problems.append(Finding(name, "UTF-8 text", f"undecodable byte at offset {e.start}", "the manifest is not UTF-8"))
    if "\r" in text:
        problems.append(Finding(name, "LF line endings", "CR found", "manifest lines end with LF only"))
    if text and not text.endswith("\n"):
        problems.append(Finding(name, "a final newline", "none", "the last line is not terminated"))
    entries: list[ManifestEntry] = []
    for i, line in enumerate(text.split("\n")[:-1] if text.endswith("\n") else text.split("\n"), start=1):
        line = line.rstrip("\r")
        if not line.strip():
            problems.append(Finding(f"{name}:{i}", "<sha256>  <path>", "an empty line", "blank line in the manifest"))
            continue
        m = _MANIFEST_LINE.match(line)
        if not m:
            problems.append(Finding(f"{name}:{i}", "<sha256>  <path>", line[:120], "not a manifest line"))
            continue
        if not re.fullmatch(r"[0-9a-f]{64}  .+", line):
            problems.append(Finding(f"{name}:{i}", "64 lowercase hex digits, two spaces, the path", line[:120],
                                    "the line does not have the exact format freeze writes"))
        path, why = decode_manifest_path(m.group(2))
        if why:
            problems.append(Finding(f"{name}:{i}", "a path percent-encoded per RFC 8493", m.group(2)[:120], why))
        entries.append(ManifestEntry(i, m.group(1).lower(), path))
    seen: dict[str, int] = {}
    for e in entries:
        if e.path in seen:
            problems.append(Finding(e.path, f"listed once (line {seen[e.path]})", f"listed again at line {e.line}",
                                    f"duplicate entry in {name}"))
        seen.setdefault(e.path, e.line)
    keys = [path_key(e.path) for e in entries]
    if keys != sorted(keys):
        bad = next(i for i in range(1, len(keys)) if keys[i] < keys[i - 1])
        problems.append(Finding(f"{name}:{entries[bad].line}", "lines sorted by path (byte order)",
                                f"{entries[bad].path!r} after {entries[bad - 1].path!r}", "the manifest is not sorted"))
    return entries, problems
