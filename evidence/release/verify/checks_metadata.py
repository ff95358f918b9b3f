"""Checks on release.json: canonical bytes, agreement with the manifests and the disk, provenance."""

from __future__ import annotations

from evidence.canon import dumps
from evidence.release.layout import FORMAT, MANIFEST, PAYLOAD_DIR, RELEASE_JSON, Finding, path_key, payload_path, role_of, sha256_bytes
from evidence.release.metadata import build_provenance
from evidence.release.schema import schema_problems
from evidence.release.verify.context import SKIP_NO_META, VerifyContext, check, result


@check("metadata.canonical", "release.json is canonical JSON (re-serializes to the same bytes)")
def canonical(c: VerifyContext):
    if c.meta is None:
        return "fail", c.meta_error or "unreadable", [Finding(RELEASE_JSON, "canonical JSON", c.meta_error)]
    want = dumps(c.meta).encode("utf-8")
    if want != c.meta_bytes:
        i = next((k for k in range(min(len(want), len(c.meta_bytes))) if want[k] != c.meta_bytes[k]), min(len(want), len(c.meta_bytes)))
        return "fail", "release.json is not in canonical form", [Finding(RELEASE_JSON, want[max(0, i - 30):i + 30].decode("utf-8", "replace"),
                                                                         c.meta_bytes[max(0, i - 30):i + 30].decode("utf-8", "replace"),
                                                                         f"first difference at byte {i}")]
    if c.meta.get("format") != FORMAT:
        return "fail", "unknown release format", [Finding(RELEASE_JSON, FORMAT, c.meta.get("format"), "format")]
    return "pass", "canonical bytes, format " + FORMAT, []


@check("metadata.schema", "release.json has exactly the fields of its schema, each of its type")
def schema(c: VerifyContext):
    if c.meta is None:
        return SKIP_NO_META
    return result(schema_problems(c.meta), "every field present, typed, and nothing else",
                  "{n} field(s) missing, extra or of the wrong type (even a consistently resealed release.json must fit)")


@check("metadata.agrees", "what release.json lists (files, roles, runs, sizes, sha256) matches the manifest and the disk")
def agrees(c: VerifyContext):
    if c.meta is None:
        return SKIP_NO_META
    f: list[Finding] = []
    files = c.meta.get("files")
    if not isinstance(files, list):
        return "fail", "release.json has no file list", [Finding(RELEASE_JSON, "a 'files' list", type(files).__name__)]
    listed: dict[str, dict] = {}
    for x in files:
        if not isinstance(x, dict) or not isinstance(x.get("path"), str):
            f.append(Finding(RELEASE_JSON, "file entries with a path", repr(x)[:80]))
            continue
        listed[x["path"]] = x
    for p in sorted(set(listed) - set(c.manifest), key=path_key):
        f.append(Finding(p, f"in {MANIFEST}", "only in release.json"))
    for p in sorted(set(c.manifest) - set(listed), key=path_key):
        f.append(Finding(p, "in release.json", f"only in {MANIFEST}"))
    for p, x in listed.items():
        e = c.manifest.get(p)
        if e is not None and e.digest != x.get("sha256"):
            f.append(Finding(p, x.get("sha256"), e.digest, f"sha256 in release.json vs {MANIFEST}"))
        st = c.inv.files.get(p)
        if st is not None and st.st_size != x.get("bytes"):
            f.append(Finding(p, x.get("bytes"), st.st_size, "size in release.json vs on disk"))
        r = role_of(p)
        if r is None or (x.get("role"), x.get("run")) != r:
            f.append(Finding(p, f"role/run from the path: {r}", (x.get("role"), x.get("run")), "role and run"))
    runs = [r.get("id") for r in c.meta.get("runs", []) if isinstance(r, dict)]
    in_files = {x.get("run") for x in listed.values() if x.get("run") is not None}
    for rid in sorted(in_files - set(runs), key=str):
        f.append(Finding(f"{PAYLOAD_DIR}/*/{rid}", "a run listed in release.json 'runs'", "files of an unlisted run"))
    for rid in runs:
        roles = {x.get("role") for x in listed.values() if x.get("run") == rid}
        for need in ("raw", "provenance"):
            if need not in roles:
                f.append(Finding(payload_path(need, rid), f"{need} files of run {rid}", "none"))
    return result(f, f"{len(listed)} files and {len(runs)} run(s) agree", "{n} disagreement(s)")


@check("metadata.provenance", "each data/provenance/<run>.json is what release.json implies")
def provenance(c: VerifyContext):
    if c.meta is None:
        return SKIP_NO_META
    f = []
    for r in c.meta.get("runs", []):
        rid = r.get("id") if isinstance(r, dict) else None
        if not isinstance(rid, str):
            continue
        rel = payload_path("provenance", rid)
        try:
            want = dumps(build_provenance(c.meta, rid)).encode("utf-8")
        except (KeyError, TypeError, ValueError) as e:
            f.append(Finding(rel, "buildable from release.json", f"{type(e).__name__}: {e}"))
            continue
        if rel not in c.inv.files:
            f.append(Finding(rel, sha256_bytes(want), "missing"))
        elif c.sha(rel) != sha256_bytes(want):
            f.append(Finding(rel, sha256_bytes(want), c.sha(rel), "differs from the statement rebuilt from release.json"))
    return result(f, "every provenance statement matches", "{n} provenance statement(s) differ")


@check("metadata.originals", "each raw file stored compressed decompresses to the size and sha256 release.json gives its original")
def originals(c: VerifyContext):
    import gzip
    import hashlib
    import zlib

    rc = c.meta.get("raw_compressed") if isinstance(c.meta, dict) else None
    if rc is None:
        return "skip", "the release stores its raw files as recorded (no raw_compressed)", []
    listed = rc.get("originals") if isinstance(rc, dict) else None
    if not isinstance(listed, list):
        return "fail", "raw_compressed has no list of originals (see metadata.schema)", [Finding(f"{RELEASE_JSON}:raw_compressed", "originals", None)]
    f = []
    for o in listed:
        path, want_n, want_sha = (o.get("path"), o.get("bytes"), o.get("sha256")) if isinstance(o, dict) else (None, None, None)
        # only files the inventory holds, listed and of their declared size, are opened (a name from release.json is hostile)
        if not isinstance(path, str) or path not in c.inv.files or path in c.unhashed or type(want_n) is not int:
            f.append(Finding(str(path), "a compressed payload file of the release", "absent, unlisted or not read", "original not checkable"))
            continue
        h, n = hashlib.sha256(), 0
        try:
            with gzip.open(c.root / path, "rb") as z:
                while chunk := z.read(1 << 20):
                    n += len(chunk)
                    if n > want_n:  # never inflate past what release.json declares (a gzip bomb stops here)
                        break
                    h.update(chunk)
        except (OSError, EOFError, zlib.error) as e:
            f.append(Finding(path, "a gzip stream", f"{type(e).__name__}: {e}", "does not decompress"))
            continue
        if n != want_n or h.hexdigest() != want_sha:
            f.append(Finding(path, f"{want_n} bytes, sha256 {want_sha}", f"{'more than ' if n > want_n else ''}{n} bytes"
                             + ("" if n > want_n else f", sha256 {h.hexdigest()}"), "decompressed, differs from the original release.json names"))
    return result(sorted(f, key=lambda x: path_key(x.path)), f"{len(listed)} compressed raw file(s) decompress to their recorded originals",
                  "{n} compressed raw file(s) do not decompress to the original release.json names")
