"""The release's secret scanner (freeze refuses a payload holding a secret).

Kept apart from other logic so it can be replaced by the shared evidence/secrets.py scanner."""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from evidence.release.files import default_workers
from evidence.release.layout import CHUNK


_REDACTED = re.compile(rb"(?i)redacted|^\*+$|^x{4,}$|^<[^>]*>$|^\$\{?[A-Za-z_]+\}?$|^\*{3}")
_SECRET_PATTERNS: list[tuple[str, re.Pattern[bytes], int]] = [
    ("Hugging Face token", re.compile(rb"\bhf_[A-Za-z0-9]{30,}"), 0),
    ("API key (sk-...)", re.compile(rb"\bsk-(?:proj-|ant-)?[A-Za-z0-9_-]{20,}"), 0),
    ("bearer token", re.compile(rb"(?i)\bbearer\s+([A-Za-z0-9._~+/=-]{16,})"), 1),
    ("password in a URL", re.compile(rb"[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@\"']+:([^/\s@\"']+)@"), 1),
    ("AWS access key id", re.compile(rb"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"), 0),
    ("AWS secret access key", re.compile(rb"(?i)aws_secret_access_key[\"']?\s*[=:]\s*[\"']?([A-Za-z0-9/+=]{40})"), 1),
    ("private key", re.compile(rb"-----BEGIN (?:[A-Z]+ )?PRIVATE KEY-----"), 0),
    # NAME=value / "NAME": "value" where NAME looks like an environment variable naming a secret
    ("secret-named variable", re.compile(
        rb"\b([A-Z][A-Z0-9_]*(?:TOKEN(?!S|IZER)|SECRET|PASSWORD|PASSWD|API_?KEY|_KEY|KEY_|CREDENTIAL)[A-Z0-9_]*)"
        rb"[\"']?\s*(?:=|:\s)\s*[\"']?([^\s\"',}]+)"), 2),
]


@dataclass(frozen=True)
class SecretFinding:
    path: str
    line: int
    kind: str
    preview: str  # masked: never the value itself

    def __str__(self) -> str:
        return f"{self.path}:{self.line} {self.kind} ({self.preview})"


def _mask(value: bytes) -> str:
    v = value.decode("utf-8", "replace")
    return f"{v[:4]}... ({len(v)} characters)" if len(v) > 4 else "(short value)"


def find_secrets(data: bytes | str, path: str = "") -> list[SecretFinding]:
    """Token-, key- and password-looking values in text: hf_..., sk-..., Bearer ..., user:pass@ in URLs,
    AWS keys, private keys, and NAME=value where NAME says TOKEN/SECRET/PASSWORD/KEY. Values that are
    already redacted ('***', '<redacted>', 'REDACTED'), empty, numbers or booleans are not reported.
    (Release-local scanner; a shared `evidence.provenance.find_secrets` may replace it.)"""
    if isinstance(data, str):
        data = data.encode("utf-8")
    out = []
    for kind, rx, group in _SECRET_PATTERNS:
        for m in rx.finditer(data):
            value = m.group(group)
            if group and (_REDACTED.search(value) or re.fullmatch(rb"[0-9.]+|true|false|none|null|True|False|None", value)):
                continue
            if kind == "password in a URL" and value in (b"", b"x-oauth-basic"):
                continue
            out.append(SecretFinding(path, data.count(b"\n", 0, m.start()) + 1, kind, _mask(value)))
    return sorted(set(out), key=lambda s: (s.path, s.line, s.kind))


def scan_secrets(root: Path, rels: Iterable[str], workers: int | None = None) -> list[SecretFinding]:
    def one(rel: str) -> list[SecretFinding]:
        found: list[SecretFinding] = []
        with open(Path(root) / rel, "rb") as f:
            tail, base_line = b"", 0
            while True:
                chunk = f.read(CHUNK)
                if not chunk:
                    break
                buf = tail + chunk
                cut = buf.rfind(b"\n") + 1 if len(chunk) == CHUNK else len(buf)
                cut = cut or len(buf)
                for s in find_secrets(buf[:cut], rel):
                    found.append(SecretFinding(rel, s.line + base_line, s.kind, s.preview))
                base_line += buf.count(b"\n", 0, cut)
                tail = buf[cut:]
            if tail:
                found += [SecretFinding(rel, s.line + base_line, s.kind, s.preview) for s in find_secrets(tail, rel)]
        return found

    with ThreadPoolExecutor(max_workers=workers or default_workers()) as pool:
        return sorted({s for r in pool.map(one, list(rels)) for s in r}, key=lambda s: (s.path, s.line, s.kind))
