"""Which release supersedes which, read from the release folders alone.

A frozen release never changes, so the relation is declared by the newer one: `freeze --supersedes OLD`
writes release.json "supersedes" (and an "Erratum to OLD" section of its notes). Releases frozen before
that field existed declare it the way article1-h200-v1.1 did, with a notes heading "## Erratum to OLD"
(data/release/notes.md); both are read here. Chains follow: v1.2 supersedes v1.1, which corrects v1.0.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from evidence.release.layout import (
    NOTES,
    PAYLOAD_DIR,
    RELEASE_DIR,
    RELEASE_JSON,
    TAG_NAME,
    TAG_READ_LIMIT,
    ReleaseError,
    dig,
)

ERRATUM_HEADING = re.compile(r"(?m)^#{1,3}[ \t]+Erratum (?:to|of|for)[ \t]+`?([A-Za-z0-9][A-Za-z0-9._-]*?)`?[ \t]*$")
NOTES_PATH = f"{PAYLOAD_DIR}/{RELEASE_DIR}/{NOTES}"


def small_file(p: Path) -> bytes | None:
    """A file of another release, read only when it is a regular file no larger than any tag file freeze writes
    (a folder beside the one verified may be hostile: a sparse 1 TiB release.json is never read)."""
    try:
        if p.is_symlink() or not p.is_file() or p.stat().st_size > TAG_READ_LIMIT:
            return None
        return p.read_bytes()
    except OSError:
        return None


def _meta(folder: Path) -> dict:
    b = small_file(folder / RELEASE_JSON)
    try:
        m = json.loads(b) if b is not None else {}
    except (ValueError, RecursionError):  # RecursionError: hostile nesting
        return {}
    return m if isinstance(m, dict) else {}


def _notes(folder: Path) -> str:
    b = small_file(folder / NOTES_PATH)
    return b.decode("utf-8", "replace") if b is not None else ""


def declared(folder: Path) -> list[dict[str, str]]:
    """The releases this one says it supersedes: [{"tag", "how"}], from release.json or its notes' erratum headings."""
    meta = _meta(folder)
    sup = meta.get("supersedes")
    if isinstance(sup, list):
        return [
            {"tag": s["tag"], "how": f"{RELEASE_JSON} supersedes"}
            for s in sup
            if isinstance(s, dict) and isinstance(s.get("tag"), str)
        ]
    own = meta.get("tag", folder.name)
    return [
        {"tag": t, "how": f"{NOTES_PATH}: 'Erratum to {t}'"}
        for t in dict.fromkeys(ERRATUM_HEADING.findall(_notes(folder)))
        if t != own
    ]


def release_folders(releases: Path) -> dict[str, Path]:
    """tag -> folder: every folder under releases/ that holds a release.json (hidden staging folders excluded)."""
    if not Path(releases).is_dir():
        return {}
    return {
        p.name: p
        for p in sorted(Path(releases).iterdir())
        if p.is_dir() and not p.is_symlink() and not p.name.startswith(".") and (p / RELEASE_JSON).is_file()
    }


def superseded_by(releases: Path, skip: Path | None = None) -> dict[str, list[dict[str, str]]]:
    """old tag -> [{"tag": newer tag, "how"}] over every release folder here (but `skip`: a release never declares
    its own successor, so verify does not read the release it checks through this path)."""
    out: dict[str, list[dict[str, str]]] = {}
    for tag, folder in release_folders(releases).items():
        if skip is not None and folder.resolve() == skip.resolve():
            continue
        for d in declared(folder):
            out.setdefault(d["tag"], []).append({"tag": tag, "how": d["how"]})
    return out


def current_of(tag: str, sup: dict[str, list[dict[str, str]]]) -> list[str]:
    """The releases that end each chain starting at `tag` (those superseded by nothing), in tag order."""
    seen, todo, ends = {tag}, [tag], set()
    while todo:
        t = todo.pop()
        newer = [n["tag"] for n in sup.get(t, []) if n["tag"] not in seen]
        if not sup.get(t) and t != tag:
            ends.add(t)
        seen.update(newer)
        todo.extend(newer)
    return sorted(ends)


def supersession(release_dir: Path, tag: str | None = None) -> dict[str, Any] | None:
    """For verify: whether a release beside this one (in the same releases/ folder) supersedes it, and which
    releases are current at the end of the chain. None when nothing here supersedes it."""
    release_dir = Path(release_dir)
    tag = tag or release_dir.name
    sup = superseded_by(release_dir.parent, skip=release_dir)
    if tag not in sup:
        return None
    by = sorted(sup[tag], key=lambda n: n["tag"])
    folders = release_folders(release_dir.parent)
    return {
        "tag": tag,
        "superseded_by": [
            {
                **n,
                "path": (folders[n["tag"]]).as_posix(),
                "erratum": (folders[n["tag"]] / NOTES_PATH).as_posix()
                if (folders[n["tag"]] / NOTES_PATH).is_file()
                else None,
            }
            for n in by
        ],
        "current": current_of(tag, sup),
    }


def supersession_text(s: dict[str, Any]) -> str:
    by = "; ".join(
        f"{n['tag']} (declared in its {n['how']}" + (f"; erratum: {n['erratum']}" if n["erratum"] else "") + ")"
        for n in s["superseded_by"]
    )
    cur = [c for c in s["current"] if c not in {n["tag"] for n in s["superseded_by"]}]
    return (
        f"SUPERSEDED: {s['tag']} is superseded by {by}."
        + (f" The current release of this chain: {', '.join(cur)}." if cur else "")
        + " Its files are checked below as frozen; read the newer release for what the evidence supports."
    )


def check_supersedes(old: list[str], tag: str, repo: Any, releases: Path, repo_root: Path) -> list[dict[str, Any]]:
    """release.json "supersedes" for `freeze --supersedes`: each OLD must be a release folder committed at HEAD
    in this repository (its release.json tracked), not the new tag itself. Binds the exact bytes superseded."""
    import hashlib

    out = []
    for o in old:
        if not TAG_NAME.fullmatch(o) or o == tag:
            raise ReleaseError(
                f"--supersedes {o!r}: give the tag of an earlier release (a folder under releases/), "
                f"not {'the new tag itself' if o == tag else 'a path or an odd name'}."
            )
        folder = releases / o
        rel = (folder / RELEASE_JSON).relative_to(repo_root).as_posix()
        try:
            blob = repo.head.commit.tree / rel
        except KeyError:
            blob = None
        if blob is None or not folder.is_dir():
            known = ", ".join(release_folders(releases)) or "none"
            raise ReleaseError(
                f"--supersedes {o}: {rel} is not committed in this repository at HEAD, so {o} is not a "
                f"committed release folder here (committed releases: {known}). A release can only "
                "supersede one whose frozen files this repository holds; check the tag's spelling."
            )
        data = blob.data_stream.read()
        meta = json.loads(data.decode("utf-8")) if data else {}
        out.append(
            {
                "tag": o,
                "release_json_sha256": hashlib.sha256(data).hexdigest(),
                "frozen": dig(meta, "freeze", "date") if isinstance(dig(meta, "freeze", "date"), str) else None,
            }
        )
    return out


def erratum_section(old: str, text: str) -> str:
    """The erratum as it goes into the new release's notes: under a heading "## Erratum to OLD" (added when the
    text does not carry one), which is also how releases frozen before release.json "supersedes" declared it."""
    body = text.strip("\n")
    if any(t == old for t in ERRATUM_HEADING.findall(body)):
        return body + "\n"
    return f"## Erratum to {old}\n\n{body}\n"
