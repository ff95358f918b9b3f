"""The release layout: file names, roles, payload paths, the error type, findings, and the path rules
freeze and verify share."""

from __future__ import annotations

import hashlib
import re
import unicodedata
from dataclasses import dataclass
from typing import Any, Iterable

from evidence.rundir import DERIVED_DIRS


FORMAT = "evidence-release/1"
BAGIT_TXT = "bagit.txt"
BAG_INFO = "bag-info.txt"
MANIFEST = "manifest-sha256.txt"
TAGMANIFEST = "tagmanifest-sha256.txt"
RELEASE_JSON = "release.json"
TAG_FILES = (BAGIT_TXT, BAG_INFO, MANIFEST, RELEASE_JSON)  # what the tag manifest must cover
REQUIRED_FILES = TAG_FILES + (TAGMANIFEST,)
PAYLOAD_DIR = "data"
DERIVED_ROLES = tuple(DERIVED_DIRS)  # analysis, figures, report: regenerated, never copied
ROLES = ("raw",) + DERIVED_ROLES + ("provenance",)
ROLE_DOC = {
    "raw": "the run directory as recorded (everything but analysis/, figures/, report/)",
    "analysis": "tables regenerated from data/raw by evidence.analysis.analyze_run",
    "figures": "figures regenerated from data/raw by evidence.figures.render_figures",
    "report": "report regenerated from data/raw by evidence.report.render_report",
    "provenance": "in-toto Statement (SLSA provenance v1 predicate) per run: raw inputs and regenerated outputs",
}
REGEN_FUNCTIONS = {
    "analysis": "evidence.analysis.analyze_run(run_dir, run_dir / 'analysis')",
    "figures": "evidence.figures.render_figures(run_dir, run_dir / 'figures')",
    "report": "evidence.report.render_report(run_dir, run_dir / 'report')",
}
BAGIT_DECLARATION = b"BagIt-Version: 1.0\nTag-File-Character-Encoding: UTF-8\n"
ALLOW_VALUES = ("incomplete",)
TAG_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
CHUNK = 4 << 20  # 4 MiB reads: large enough that hashlib releases the GIL for nearly all the work


class ReleaseError(Exception):
    """A refusal or a could-not-verify: one paragraph for the user; exit code 2 unless given."""

    def __init__(self, message: str, code: int = 2):
        super().__init__(printable(message, newlines=True))  # it may quote a hostile name
        self.code = code


def payload_path(role: str, run_id: str, rel: str = "") -> str:
    if role == "provenance":
        return f"{PAYLOAD_DIR}/provenance/{run_id}.json"
    return f"{PAYLOAD_DIR}/{role}/{run_id}/{rel}"


def role_of(path: str) -> tuple[str, str] | None:
    """(role, run id) of a payload path, or None when it fits no role of the layout."""
    parts = path.split("/")
    if len(parts) < 3 or parts[0] != PAYLOAD_DIR or parts[1] not in ROLES:
        return None
    if parts[1] == "provenance":
        return ("provenance", parts[2][:-5]) if len(parts) == 3 and parts[2].endswith(".json") and len(parts[2]) > 5 else None
    return (parts[1], parts[2]) if len(parts) >= 4 else None


def path_key(p: str) -> bytes:
    """Sort key: UTF-8 bytes (LC_ALL=C order); undecodable names keep their original bytes."""
    return p.encode("utf-8", "surrogateescape")


def sha256_bytes(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def dig(d: Any, *keys: str) -> Any:
    for k in keys:
        if not isinstance(d, dict) or k not in d:
            return None
        d = d[k]
    return d


def printable(s: str, *, newlines: bool = False) -> str:
    """A string as it can be shown anywhere (a terminal, UTF-8 JSON): bytes that are not UTF-8 (held as
    surrogates) become \\xNN, control and other unprintable characters their escapes (\\x1b, \\u200b);
    with newlines=True, line breaks and tabs are kept."""
    if s.isprintable():
        return s
    out = []
    for ch in s:
        o = ord(ch)
        if ch.isprintable() or (newlines and ch in "\n\t"):
            out.append(ch)
        elif 0xDC80 <= o <= 0xDCFF:  # an undecodable byte (surrogateescape)
            out.append(f"\\x{o - 0xDC00:02x}")
        else:
            out.append(ch.encode("unicode_escape").decode("ascii") if not 0xD800 <= o <= 0xDFFF else f"\\u{o:04x}")
    return "".join(out)


def printable_tree(obj: Any) -> Any:
    """printable() over every string (keys too) of a JSON-able structure."""
    if isinstance(obj, str):
        return printable(obj)
    if isinstance(obj, dict):
        return {printable_tree(k): printable_tree(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [printable_tree(v) for v in obj]
    return obj


@dataclass
class Finding:
    """One problem a check found: where, what was expected, what was found."""

    path: str
    expected: Any = None
    found: Any = None
    message: str = ""

    def as_dict(self) -> dict:
        # names come from the release (hostile input): escaped, so the output is always valid UTF-8
        return printable_tree({"path": self.path, "expected": self.expected, "found": self.found, "message": self.message})


_BAD_CHARS = re.compile("[\x00-\x1f\x7f\udc80-\udcff]")  # control characters; undecodable bytes (surrogateescape)


def _nfc_fold(p: str) -> str:
    return unicodedata.normalize("NFC", unicodedata.normalize("NFC", p).casefold())


def path_problems(names: Iterable[tuple[str, str]]) -> dict[str, list[Finding]]:
    """Rules on path strings, by check id. `names` are (path, where it was seen)."""
    out: dict[str, list[Finding]] = {k: [] for k in ("paths.absolute", "paths.dotdot", "paths.backslash",
                                                     "paths.encoding", "paths.collision")}
    by_where: dict[str, dict[str, set[str]]] = {}
    for p, where in names:
        if p.startswith("/") or re.match(r"^[A-Za-z]:", p):
            out["paths.absolute"].append(Finding(p, "a path relative to the release", "an absolute path", where))
        parts = p.replace("\\", "/").split("/")
        if p.startswith("/"):
            parts = parts[1:]
        if ".." in parts:
            out["paths.dotdot"].append(Finding(p, "no '..' component", "'..'", where + ": points outside its folder"))
        elif any(x in ("", ".") for x in parts):
            out["paths.dotdot"].append(Finding(p, "no empty or '.' component", "an empty or '.' component", where))
        if "\\" in p:
            out["paths.backslash"].append(Finding(p, "'/' separators only", "a backslash", where))
        bad = _BAD_CHARS.findall(p)
        if bad:
            out["paths.encoding"].append(Finding(p, "UTF-8 without control characters", repr("".join(bad)), where))
        groups = by_where.setdefault(where.split(" line ")[0], {})
        groups.setdefault(_nfc_fold(p), set()).add(p)
    for where, groups in by_where.items():
        for key, members in groups.items():
            if len(members) > 1:
                ms = sorted(members, key=path_key)
                out["paths.collision"].append(Finding(ms[0], "one name per file after NFC normalization and case folding",
                                                      ms, f"{where}: these names collide on case-insensitive or normalizing filesystems"))
    return out


def freeze_name_problems(rel: str) -> str | None:
    # Stricter than verify: a name freeze writes must survive every filesystem and stock BagIt tools.
    if "%" in rel:
        return "contains '%' (bagit-python does not decode %25 in manifests)"
    if _BAD_CHARS.search(rel):
        return "contains a control character or bytes that are not UTF-8"
    if "\\" in rel:
        return "contains a backslash"
    return None
