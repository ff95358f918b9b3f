"""BagIt checks: the declaration, manifest format, Payload-Oxum, bag-info; completeness both ways;
payload and tag fixity."""

from __future__ import annotations

import re

from evidence.release.files import FileDigest
from evidence.release.layout import (BAG_INFO, BAGIT_DECLARATION, BAGIT_TXT, MANIFEST, PAYLOAD_DIR, RELEASE_JSON,
                                     REQUIRED_FILES, TAG_FILES, TAGMANIFEST, Finding, path_key)
from evidence.release.manifest import ManifestEntry
from evidence.release.metadata import render_bag_info
from evidence.release.verify.context import SKIP_NO_META, VerifyContext, check, result


@check("bagit.declaration", "bagit.txt declares BagIt 1.0, UTF-8")
def declaration(c: VerifyContext):
    if BAGIT_TXT not in c.inv.files:
        return "fail", "bagit.txt is missing", [Finding(BAGIT_TXT, BAGIT_DECLARATION.decode(), None, "missing")]
    b = c.read_small(BAGIT_TXT)
    if b is None:
        return "fail", "bagit.txt is too large to be the declaration (not read)", [Finding(BAGIT_TXT, BAGIT_DECLARATION.decode(), f"{c.inv.files[BAGIT_TXT].st_size} bytes")]
    return result([] if b == BAGIT_DECLARATION else [Finding(BAGIT_TXT, BAGIT_DECLARATION.decode(), b.decode("utf-8", "replace"))],
                  "BagIt-Version 1.0, UTF-8", "bagit.txt is not the declaration freeze writes")


@check("bagit.manifests", "manifests have the exact format: sorted, one entry per file, in the right manifest")
def manifests(c: VerifyContext):
    f = list(c.manifest_problems) + list(c.tagmanifest_problems)
    for e in c.manifest.values():
        if not e.path.startswith(PAYLOAD_DIR + "/"):
            f.append(Finding(e.path, "a payload path under data/", e.path, f"{MANIFEST} line {e.line} lists a file outside the payload"))
    for e in c.tagmanifest.values():
        if e.path.startswith(PAYLOAD_DIR + "/") or e.path == TAGMANIFEST:
            f.append(Finding(e.path, "a tag file (not data/..., not the tag manifest itself)", e.path, f"{TAGMANIFEST} line {e.line}"))
    for name, state in ((MANIFEST, c.manifest_state), (TAGMANIFEST, c.tagmanifest_state)):
        if state != "ok":
            f.append(Finding(name, "present", state, "required manifest"))
    others = [p for p in c.inv.files if "/" not in p and re.fullmatch(r"(tag)?manifest-\w+\.txt", p) and p not in (MANIFEST, TAGMANIFEST)]
    f += [Finding(p, "sha256 manifests only", p, "another manifest algorithm") for p in others]
    return result(f, "both manifests are well-formed", "{n} manifest format problem(s)")


@check("bagit.oxum", "Payload-Oxum (bytes.files) matches the payload on disk")
def oxum(c: VerifyContext):
    if BAG_INFO not in c.inv.files:
        return "fail", "bag-info.txt is missing", [Finding(BAG_INFO, "present", None)]
    b = c.read_small(BAG_INFO)
    if b is None:
        return "fail", "bag-info.txt is too large (not read)", [Finding(BAG_INFO, "a few lines", f"{c.inv.files[BAG_INFO].st_size} bytes")]
    text = b.decode("utf-8", "replace")
    vals = re.findall(r"(?m)^Payload-Oxum:\s*(\S+)\s*$", text)
    files = c.payload_files()
    found = f"{sum(c.inv.files[p].st_size for p in files)}.{len(files)}"
    if len(vals) != 1:
        return "fail", "bag-info.txt must hold exactly one Payload-Oxum", [Finding(BAG_INFO, found, vals or None)]
    return result([] if vals[0] == found else [Finding(BAG_INFO, vals[0], found, "Payload-Oxum (bytes.files) in bag-info.txt vs the payload")],
                  f"{found} (bytes.files)", "Payload-Oxum does not match the payload")


@check("bagit.info", "bag-info.txt is what release.json implies (Bagging-Date, identifier, Oxum)")
def info(c: VerifyContext):
    if c.meta is None:
        return SKIP_NO_META
    if BAG_INFO not in c.inv.files:
        return "fail", "bag-info.txt is missing", [Finding(BAG_INFO, "present", None)]
    try:
        want = render_bag_info(c.meta).decode()
    except (KeyError, TypeError, ValueError) as e:
        return "fail", f"release.json lacks what bag-info.txt is built from ({e})", [Finding(RELEASE_JSON, "tag, tool, freeze, files", None)]
    have = (c.read_small(BAG_INFO) or b"").decode("utf-8", "replace")
    diff = sorted(set(want.splitlines()) ^ set(have.splitlines()))
    return result([] if want == have else [Finding(BAG_INFO, [l for l in diff if l in want.splitlines()],
                                                    [l for l in diff if l in have.splitlines()], "lines that differ")],
                  "bag-info.txt agrees with release.json", "bag-info.txt disagrees with release.json")


# --- completeness and fixity ----------------------------------------------------------------------

@check("complete.missing", "nothing listed is missing (payload and tag files)")
def missing(c: VerifyContext):
    f = [Finding(n, "present", "missing", "required tag file") for n in REQUIRED_FILES if n not in c.inv.files]
    if PAYLOAD_DIR not in c.inv.dirs:
        f.append(Finding(PAYLOAD_DIR + "/", "the payload folder", "missing"))
    for mname, entries in ((MANIFEST, c.manifest), (TAGMANIFEST, c.tagmanifest)):
        for e in entries.values():
            if e.path not in c.inv.files:
                kind = "a symlink" if e.path in c.inv.symlinks else "a special file" if e.path in c.inv.special else "missing"
                f.append(Finding(e.path, f"a regular file ({mname} line {e.line})", kind))
    # a required file missing is reported once
    seen, uniq = set(), []
    for x in f:
        if x.path not in seen:
            seen.add(x.path)
            uniq.append(x)
    return result(uniq, "every listed file is present", "{n} file(s) missing")


@check("complete.unexpected", "nothing is present that is not listed (payload and tag files)")
def unexpected(c: VerifyContext):
    f = []
    for p in [*c.inv.files, *c.inv.symlinks, *c.inv.special]:
        if p.startswith(PAYLOAD_DIR + "/"):
            if p not in c.manifest:
                f.append(Finding(p, f"listed in {MANIFEST}", "not listed"))
        elif p != TAGMANIFEST and p not in c.tagmanifest:
            f.append(Finding(p, f"listed in {TAGMANIFEST}", "not listed"))
    f += [Finding(d + "/", "no empty folders", "an empty folder") for d in c.inv.empty_dirs]
    return result(sorted(f, key=lambda x: path_key(x.path)), "no unlisted files", "{n} unlisted file(s) or folder(s)")


def _fixity(c: VerifyContext, entries: dict[str, ManifestEntry], name: str) -> list[Finding]:
    out = []
    for e in entries.values():
        d = c.digests.get(e.path)
        if e.path in c.unhashed:  # its size already says it cannot match: not read (see VerifyContext._refused)
            out.append(Finding(e.path, e.digest, "not hashed", f"{name} line {e.line}: {c.unhashed[e.path]}"))
        elif isinstance(d, OSError):
            out.append(Finding(e.path, e.digest, f"unreadable ({d})", f"{name} line {e.line}"))
        elif isinstance(d, FileDigest) and d.sha256 != e.digest:
            out.append(Finding(e.path, e.digest, d.sha256, f"{name} line {e.line}: checksum differs"))
    return out


@check("fixity.payload", "every payload file matches its sha256 in manifest-sha256.txt")
def fixity_payload(c: VerifyContext):
    if c.manifest_state != "ok":
        return "fail", f"{MANIFEST} is {c.manifest_state}", [Finding(MANIFEST, "present", c.manifest_state)]
    f = _fixity(c, c.manifest, MANIFEST)
    n = sum(1 for e in c.manifest.values() if isinstance(c.digests.get(e.path), FileDigest))
    return result(f, f"{n} file(s) match", "{n} file(s) do not match their checksum")


@check("fixity.tag", "the tag manifest exists, covers bagit.txt, bag-info.txt, the manifest and release.json, and matches")
def fixity_tag(c: VerifyContext):
    if c.tagmanifest_state != "ok":
        return "fail", f"{TAGMANIFEST} is required and is {c.tagmanifest_state}", [Finding(TAGMANIFEST, "present", c.tagmanifest_state)]
    f = [Finding(n, f"covered by {TAGMANIFEST}", "not listed") for n in TAG_FILES if n not in c.tagmanifest]
    f += _fixity(c, c.tagmanifest, TAGMANIFEST)
    return result(f, f"{len(c.tagmanifest)} tag file(s) covered and matching", "{n} tag file problem(s)")
