"""One secret scanner, used by provenance redaction and by freeze.

`find_secrets(data, path)` reports every token-, key- or password-looking value in a text;
`redact(obj)` replaces exactly those (and values under secret-named keys) with '<redacted>', so
`find_secrets(redact(x))` finds nothing. The rules are the union of the two scanners the package
had (release: secret-named variables, AWS secret keys; provenance: URL credentials, token prefixes,
query tokens, key=value heuristics) plus private-key blocks of every kind (PEM, OpenSSH, PGP) and
the common token prefixes (ghp_, github_pat_, glpat-, xoxb-, AIza, AKIA, hf_, sk-).

detect-secrets was considered: its plugins are entropy-based and line-oriented, report neither
the spans needed for redaction nor the names we redact by (HF_TOKEN=...), and would add a
dependency for less than these rules do.
"""

from __future__ import annotations

import os
import re
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

REDACTED = "<redacted>"
CHUNK = 1 << 20

# ----------------------------------------------------------------- names --

_SECRET_NAME_PARTS = ("TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL")
#: the last word of a structured key that makes its value a secret (api_key, hf_token, db_password ...)
_SECRET_LAST_WORDS = {"token", "key", "secret", "password", "passwd", "credential", "credentials", "apikey",
                      "authtoken", "accesstoken", "refreshtoken", "secretkey", "privatekey", "pwd", "authorization",
                      "cookie"}
#: words before "token"/"key" that make it a harmless name (eos_token, sort_key ...)
_NOT_SECRET_PREV = {"eos", "bos", "pad", "unk", "sep", "cls", "mask", "start", "end", "special", "sort", "primary",
                    "partition", "cache", "dict", "group", "hash", "foreign", "max", "num", "first", "last", "next"}
#: bare names that say little on their own: a value under them must look like a credential
_WEAK_BARE = {"token", "key"}
#: cheap prefilter for names worth calling secret_key_name on
_SECRETISH = re.compile(r"(?i)token|key|secret|passw|credential|pwd|authorization|cookie")


def secret_env_name(name: str) -> bool:
    """An environment variable whose value is never recorded (conservative: substring match)."""
    up = name.upper()
    return any(p in up for p in _SECRET_NAME_PARTS)


def secret_key_name(name: str) -> bool:
    """A structured key (api_key, hf_token, DB_PASSWORD, Authorization...) whose value is a secret.

    Decided on the key's last word so that `max_num_batched_tokens`, `tokenizer`,
    `eos_token_id` or `MEAN_KEYS` are kept. (The environment allow-list uses the
    stricter substring rule, `secret_env_name`.)
    """
    if not name:
        return False
    words = [w.lower() for part in re.split(r"[^A-Za-z0-9]+", name)
             for w in re.findall(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z0-9]+|[A-Z0-9]+", part)]
    if not words:
        return False
    last = words[-1]
    if last not in _SECRET_LAST_WORDS:
        return False
    if last in ("token", "key") and len(words) > 1 and words[-2] in _NOT_SECRET_PREV:
        return False
    return True


# ---------------------------------------------------------------- values --

_CODE_WORDS = {"none", "null", "true", "false", "lambda", "self", "cls", "str", "int", "float", "dict", "list",
               "required", "optional", "redacted", "field", "default", "unknown", "missing"}
#: a value that is already a placeholder: '***', '<redacted>', 'REDACTED', 'xxxx', '${HF_TOKEN}'
_PLACEHOLDER = re.compile(r"(?i)redacted|^\*+$|^x{4,}$|^<[^>]*>$|^\$\{?[A-Za-z_]+\}?$|^\*{3}")
_SCALAR = re.compile(r"[0-9.]+|true|false|none|null|True|False|None")


def _credential_like(value: str, name: str) -> bool:
    """Whether a value under a secret-sounding name looks like a real credential (not code or a placeholder)."""
    v = value.strip()
    if not v or REDACTED in v or v.startswith("<") or v.startswith("$") or v.startswith("{"):
        return False
    if re.fullmatch(r"[\d.eE+-]+", v) or v.lower() in _CODE_WORDS or set(v) <= {"*", "x", "X", "."}:
        return False
    if re.fullmatch(r"[A-Z][A-Z0-9_]*", v):  # a constant's name
        return False
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+", v):  # attribute access
        return False
    if name.lower().strip("_-") in _WEAK_BARE:
        return len(v) >= 16 and bool(re.search(r"[A-Za-z]", v)) and bool(re.search(r"\d", v))
    # a plain word ("nothing", "required") is prose or code; a credential has a digit or a symbol, or is long
    return len(v) >= 6 and (bool(re.search(r"[\d\W_]", v)) or len(v) >= 12)


_PEM = r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----"
#: (kind, literals of which one must be in the text (lower-cased where the rule ignores case), pattern);
#: the secret is the named group "s" where there is one, else the whole match. The literals only
#: spare a regex pass over texts that cannot match (a 70 MB payload is scanned at every freeze).
_VALUE_PATTERNS: tuple[tuple[str, tuple[str, ...], re.Pattern[str]], ...] = (
    # the whole block when its END is there, else to the end of the text (a truncated key is still a key)
    ("private key", ("-----BEGIN",),
     re.compile(_PEM + r"(?:[\s\S]*?-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|[\s\S]*)")),
    ("credentials in URL", ("://",), re.compile(r"://(?P<s>[^/\s:@'\"<>]+:[^/\s@'\"<>]+)@")),
    ("token in URL", ("://",), re.compile(
        r"://(?P<s>(?:ghp_|gho_|ghs_|github_pat_|glpat-|hf_|oauth2:|x-access-token:)[^/\s@'\"<>]+)@")),
    ("Hugging Face token", ("hf_",), re.compile(r"\bhf_[A-Za-z0-9]{20,}")),
    ("GitHub token", ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
     re.compile(r"\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{16,}|\bgithub_pat_[A-Za-z0-9_]{20,}")),
    ("GitLab token", ("glpat-",), re.compile(r"\bglpat-[A-Za-z0-9_-]{16,}")),
    ("OpenAI/Anthropic key", ("sk-",), re.compile(r"\bsk-(?:ant-|proj-)?[A-Za-z0-9_-]{20,}")),
    ("AWS access key id", ("AKIA", "ASIA"), re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b")),
    ("AWS secret access key", ("aws_secret_access_key",), re.compile(
        r"(?i)aws_secret_access_key[\"']?[ \t]*[=:][ \t]*[\"']?(?P<s>[A-Za-z0-9/+=]{40})")),
    ("Slack token", ("xox",), re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}")),
    ("Google API key", ("AIza",), re.compile(r"\bAIza[0-9A-Za-z_-]{35}")),
    ("bearer token", ("bearer",), re.compile(r"(?i)\bbearer\s+(?P<s>[A-Za-z0-9._~+/=-]{8,})")),
    ("token in query", ("=",), re.compile(
        r"(?i)[?&](?:access_token|token|api_key|apikey|key|sig|signature|password)=(?P<s>[^&\s'\"<>]+)")),
    # NAME=value / "NAME": "value" where NAME looks like an environment variable naming a secret
    ("secret-named variable", ("TOKEN", "SECRET", "PASSW", "KEY", "CREDENTIAL"), re.compile(
        r"\b[A-Z][A-Z0-9_]*(?:TOKEN(?!S|IZER)|SECRET|PASSWORD|PASSWD|API_?KEY|_KEY|KEY_|CREDENTIAL)[A-Z0-9_]*"
        r"[\"']?[ \t]*(?:=|:[ \t])[ \t]*[\"']?(?P<s>[^\s\"',}]+)")),
)
_IGNORE_CASE = {"AWS secret access key", "bearer token", "token in query"}
#: name = value / "name": "value" in any case; kept when secret_key_name(name) and the value looks like one
_ASSIGN = re.compile(r"""(?P<name>[A-Za-z_][A-Za-z0-9_.-]*)["']?[ \t]*[:=][ \t]*["']?(?P<s>[^\s"',;}{\]\[()]{6,})""")
_SPECIAL_TOKEN_VALUE = re.compile(r"^<\|?[\w.-]*\|?>$")


def _skip(kind: str, value: str) -> bool:
    """Values a rule matched that are not secrets: placeholders, scalars, prose."""
    if REDACTED in value or _PLACEHOLDER.search(value):
        return True
    if kind in ("secret-named variable", "token in query", "credentials in URL"):
        return bool(_SCALAR.fullmatch(value)) or value.endswith(":x-oauth-basic")
    if kind == "bearer token":
        return bool(re.fullmatch(r"[a-z]{1,19}", value))  # "bearer authentication": a word, not a token
    return False


def _spans(text: str) -> list[tuple[int, int, str]]:
    """(start, end, kind) of each secret-looking part of text, merged where they overlap, in order."""
    spans: list[tuple[int, int, str]] = []
    lower = text.lower()
    for kind, literals, pat in _VALUE_PATTERNS:
        hay = lower if kind in _IGNORE_CASE else text
        if not any(lit in hay for lit in literals):
            continue
        for m in pat.finditer(text):
            a, b = m.span("s") if "s" in pat.groupindex else m.span()
            if not _skip(kind, text[a:b]):
                spans.append((a, b, kind))
    for m in _ASSIGN.finditer(text):
        name, value = m.group("name").split(".")[-1], m.group("s")
        if not _SECRETISH.search(name) or _SPECIAL_TOKEN_VALUE.match(value) or not secret_key_name(name):
            continue
        if _credential_like(value, name) and not _PLACEHOLDER.search(value):
            spans.append((*m.span("s"), f"value of {m.group('name')}"))
    spans.sort()
    out: list[tuple[int, int, str]] = []
    for a, b, k in spans:
        if out and a < out[-1][1]:
            if b > out[-1][1]:
                out[-1] = (out[-1][0], b, out[-1][2])
            continue
        out.append((a, b, k))
    return out


def _mask(value: str) -> str:
    v = value.strip()
    return f"{v[:4]}... ({len(v)} characters)" if len(v) > 4 else "(short value)"


# -------------------------------------------------------------- findings --

@dataclass(frozen=True)
class SecretFinding:
    path: str
    line: int
    kind: str
    preview: str  # masked: never the value itself

    def __str__(self) -> str:
        return f"{self.path}:{self.line} {self.kind} ({self.preview})"


def find_secrets(data: bytes | str, path: str = "") -> list[SecretFinding]:
    """Every secret-looking value in a text, as (path, line, kind, masked preview), sorted.

    Values that are already redacted ('***', '<redacted>', 'REDACTED', '${VAR}'), empty, numbers or
    booleans are not reported; neither are names like max_tokens, tokenizer or eos_token.
    """
    text = data.decode("utf-8", "replace") if isinstance(data, (bytes, bytearray)) else data
    out = {SecretFinding(path, text.count("\n", 0, a) + 1, kind, _mask(text[a:b])) for a, b, kind in _spans(text)}
    return sorted(out, key=lambda s: (s.path, s.line, s.kind))


def scan_files(root: Path, rels: Iterable[str], workers: int | None = None) -> list[SecretFinding]:
    """find_secrets over files under root, read in line-aligned chunks (any size, bounded memory)."""
    def one(rel: str) -> list[SecretFinding]:
        found: list[SecretFinding] = []
        with open(Path(root) / rel, "rb") as f:
            tail, base_line = b"", 0
            while True:
                chunk = f.read(CHUNK)
                if not chunk:
                    break
                buf = tail + chunk
                cut = (buf.rfind(b"\n") + 1) or len(buf)
                found += [SecretFinding(rel, s.line + base_line, s.kind, s.preview) for s in find_secrets(buf[:cut])]
                base_line += buf.count(b"\n", 0, cut)
                tail = buf[cut:]
            if tail:
                found += [SecretFinding(rel, s.line + base_line, s.kind, s.preview) for s in find_secrets(tail)]
        return found

    with ThreadPoolExecutor(max_workers=workers or min(8, os.cpu_count() or 1)) as pool:
        return sorted({s for r in pool.map(one, list(rels)) for s in r}, key=lambda s: (s.path, s.line, s.kind))


def find_secrets_in(path_or_tree: Any, *, max_bytes: int = 64 * 1024 * 1024) -> list[dict[str, Any]]:
    """What looks like a secret: [{"path", "line", "kind", "excerpt"}], excerpts masked.

    Takes a file, a folder (every regular file under it, text files only, links not
    followed), or a JSON-able structure (paths are then dotted keys).
    """
    found: list[dict[str, Any]] = []
    if isinstance(path_or_tree, (str, os.PathLike)) and Path(path_or_tree).exists():
        root = Path(path_or_tree)
        files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink())
        for f in files:
            try:
                if f.stat().st_size > max_bytes:
                    continue
                data = f.read_bytes()
            except OSError:
                continue
            if b"\x00" in data[:8192]:
                continue  # binary
            rel = str(f.relative_to(root)) if root.is_dir() else str(f)
            found += [{"path": rel, "line": s.line, "kind": s.kind, "excerpt": s.preview} for s in find_secrets(data)]
        return found

    def walk(node: Any, where: str) -> None:
        if isinstance(node, Mapping):
            for k, v in node.items():
                path = f"{where}.{k}" if where else str(k)
                if isinstance(k, str) and secret_key_name(k) and isinstance(v, str) and _credential_like(v, k):
                    found.append({"path": path, "line": None, "kind": f"value of {k}", "excerpt": _mask(v)})
                else:
                    walk(v, path)
        elif isinstance(node, (list, tuple)):
            for i, v in enumerate(node):
                walk(v, f"{where}[{i}]")
        elif isinstance(node, str):
            for a, b, kind in _spans(node):
                found.append({"path": where, "line": None, "kind": kind, "excerpt": _mask(node[a:b])})

    walk(path_or_tree, "")
    return found


# ------------------------------------------------------------- redaction --

def scrub_text(text: str) -> str:
    """Replace credential-looking substrings of a string with '<redacted>'."""
    spans = _spans(text)
    if not spans:
        return text
    parts, last = [], 0
    for a, b, _ in spans:
        parts.append(text[last:a])
        parts.append(REDACTED)
        last = b
    parts.append(text[last:])
    return "".join(parts)


def strip_url_credentials(url: str) -> str:
    """A remote URL without user info, tokens or query string (scp-like git URLs kept)."""
    if "://" not in url:
        return scrub_text(url)
    try:
        u = urllib.parse.urlsplit(url)
        host = u.hostname or ""
        if u.port:
            host += f":{u.port}"
    except ValueError:
        return scrub_text(url)
    return urllib.parse.urlunsplit((u.scheme, host, u.path, "", ""))


def redact(obj: Any, _key: str | None = None) -> Any:
    """A copy of a string or JSON-able structure with secrets replaced by '<redacted>'.

    A string is scrubbed of credential-looking values; in a mapping, values under secret-named
    keys are replaced whole; in argv-like lists the value after a secret-named flag
    (`--api-key X`, `--hf-token=X`) is replaced.
    """
    if isinstance(obj, Mapping):
        return {k: (REDACTED if (isinstance(k, str) and secret_key_name(k) and v not in (None, "", REDACTED)
                                 and not isinstance(v, (bool, int, float)))
                    else redact(v, k)) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        out = []
        hide_next = False
        for item in obj:
            if hide_next and isinstance(item, str):
                out.append(REDACTED)
                hide_next = False
                continue
            hide_next = False
            if isinstance(item, str) and item.startswith("-"):
                flag, eq, _ = item.lstrip("-").partition("=")
                if secret_key_name(flag.replace("-", "_")):
                    if eq:
                        out.append(item.split("=", 1)[0] + "=" + REDACTED)
                        continue
                    hide_next = True
            out.append(redact(item))
        return out
    if isinstance(obj, str):
        return scrub_text(obj)
    return obj
