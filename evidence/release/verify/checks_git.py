"""Checks against the git repository: the release's names agree, the tag exists, is annotated, peels where it
says, carries the manifest digests, and its tree holds these files; without the tag, the files HEAD commits
at the release's path are these files."""

from __future__ import annotations

import contextlib
import re
from pathlib import Path
from typing import Any

from evidence.release.files import FileDigest
from evidence.release.layout import MANIFEST, RELEASE_JSON, TAG_NAME, TAGMANIFEST, Finding, dig, path_key
from evidence.release.verify.context import SKIP_NO_META, VerifyContext, check, result


NOT_HERE = "tag binding not checked: tag not present here; git fetch --tags"
NO_REPO = "tag binding not checked: not in a git repository (pass --repo to check against one)"
ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz")


def _names(c: VerifyContext) -> list[tuple[str, str]]:
    """(where, the release's name there): the folder, the archive file, release.json. The folder's name comes
    first: it is what the genuine tag is called, so an edited release.json cannot turn the tag checks off."""
    out = []
    if c.root is not None:
        out.append(("the release folder's name", c.root.name))
    if c.is_archive:
        n = c.source.name
        stem = next((n[: -len(s)] for s in ARCHIVE_SUFFIXES if n.endswith(s)), n)
        out.append((f"the archive's name ({n})", stem))
    tag = dig(c.meta, "tag") if isinstance(c.meta, dict) else None
    if isinstance(tag, str):
        out.append((f"{RELEASE_JSON} tag", tag))
    return out


def _tag_name(c: VerifyContext) -> str | None:
    """The tag the git checks look at: the first of the release's names that is a tag here (else the first)."""
    cached = getattr(c, "_git_tag_name", False)
    if cached is not False:
        return cached if isinstance(cached, str) else None
    names = list(dict.fromkeys(n for _, n in _names(c)))
    name = names[0] if names else c.tag
    if c.repo is not None:  # only a name freeze could have tagged is looked up (a hostile one never reaches git)
        name = next((n for n in names if TAG_NAME.match(n) and _ref(c, f"refs/tags/{n}") is not None), name)
    c._git_tag_name = name  # type: ignore[attr-defined]
    return name


def _ref(c: VerifyContext, rev: str) -> Any:
    import git

    try:
        return c.repo.rev_parse(rev)
    except (git.BadName, ValueError, git.GitCommandError):
        return None


@check("git.name", "release.json's tag is the release folder's name and the archive's name")
def git_name(c: VerifyContext):
    names = _names(c)
    if not any(w.startswith(RELEASE_JSON) for w, _ in names):
        return SKIP_NO_META
    tag = names[-1][1]
    f = [Finding(where, f"{tag} ({RELEASE_JSON} tag)", n, f"{where} differs from the tag {RELEASE_JSON} names")
         for where, n in names[:-1] if n != tag]
    if f:
        return "fail", f"the release's names disagree: {RELEASE_JSON} says {tag!r}, " + "; ".join(f"{x.path} is {x.found!r}" for x in f), f
    return "pass", f"{tag}: {', '.join(w for w, _ in names)} agree", []


def _git_skip(c: VerifyContext) -> tuple[str, str, list[Finding]] | None:
    if c.repo_error:
        return "fail", c.repo_error, [Finding(str(c.source), "a git repository", c.repo_error)]
    if c.repo is None:
        if c.require_tag:
            return "fail", f"--require-tag: {NO_REPO}", [Finding(str(c.source), "a git repository holding the tag", "none")]
        return "skip", NO_REPO, []
    if not _tag_name(c):
        return SKIP_NO_META
    return None


def _tag_obj(c: VerifyContext) -> Any:
    return _ref(c, f"refs/tags/{_tag_name(c)}")


def _tag_message(c: VerifyContext) -> str | None:
    o = _tag_obj(c)
    return o.message if o is not None and o.type == "tag" else None


def _peeled(c: VerifyContext) -> Any:
    return _ref(c, f"refs/tags/{_tag_name(c)}^{{commit}}")


@check("git.tag", "the release tag exists in the repository")
def git_tag(c: VerifyContext):
    if (s := _git_skip(c)):
        if c.repo is None and not c.repo_error and not c.require_tag:
            c.notes.append(NO_REPO)
        return s
    tag = _tag_name(c)
    if _tag_obj(c) is not None:
        return "pass", f"tag {tag} exists", []
    # tags do not travel with every clone or submission: an absent tag is not tampering, unless required; but
    # nothing was checked, so it is a skip (git.head compares the files with HEAD instead), never a pass
    if c.require_tag:
        return "fail", f"tag {tag} is missing (--require-tag)", [Finding(f"refs/tags/{tag}", "a tag", "missing")]
    c.notes.append(f"{NOT_HERE} (tag {tag})")
    return "skip", f"{NOT_HERE} (tag {tag}; --require-tag makes this a failure)", []


@check("git.annotated", "the tag is annotated (a tag object), not lightweight")
def git_annotated(c: VerifyContext):
    if (s := _git_skip(c)):
        return s
    o = _tag_obj(c)
    if o is None:
        return "skip", "no tag (see git.tag)", []
    if o.type != "tag":
        return "fail", "lightweight tag", [Finding(f"refs/tags/{_tag_name(c)}", "an annotated tag object", f"a lightweight tag to {o.type} {o.hexsha[:12]}")]
    if o.tag != _tag_name(c):
        return "fail", "the tag object names another tag", [Finding(f"refs/tags/{_tag_name(c)}", _tag_name(c), o.tag, "tag object name")]
    return "pass", f"annotated tag object {o.hexsha[:12]}", []


@check("git.peel", "the tag peels to the commit its message names, made on top of release.json's code commit")
def git_peel(c: VerifyContext):
    if (s := _git_skip(c)):
        return s
    commit = _peeled(c)
    if commit is None:
        return "skip", "no tag (see git.tag)", []
    f = []
    msg = _tag_message(c)
    if msg is not None:
        named = re.findall(r"(?m)^commit ([0-9a-f]{40,64})$", msg)
        if named != [commit.hexsha]:
            f.append(Finding(f"{_tag_name(c)}^{{commit}}", named[0] if named else "a 'commit <sha>' line in the tag message", commit.hexsha,
                             "the tag points elsewhere than the commit it names (moved tag?)"))
    base = dig(c.meta, "freeze", "code_commit") if isinstance(c.meta, dict) else None
    parents = [p.hexsha for p in commit.parents]
    if base and parents[:1] != [base]:
        f.append(Finding(f"{_tag_name(c)}^{{commit}}^", base, parents[:1] or None, "the release commit's parent vs release.json freeze.code_commit"))
    return result(f, f"{_tag_name(c)} -> {commit.hexsha[:12]}, parent {str(base)[:12]}", "the tag does not point where the release says")


def _message_digests(msg: str) -> dict[str, str]:
    return dict(re.findall(r"(?m)^(\S+) sha256:([0-9a-f]{64})$", msg))


@check("git.message", "the tag message carries the sha256 of manifest-sha256.txt and tagmanifest-sha256.txt")
def git_message(c: VerifyContext):
    if (s := _git_skip(c)):
        return s
    o = _tag_obj(c)
    if o is None:
        return "skip", "no tag (see git.tag)", []
    msg = _tag_message(c)
    if msg is None:
        return "fail", "a lightweight tag has no message", [Finding(f"refs/tags/{_tag_name(c)}", "a message with the manifest digests", None)]
    got = _message_digests(msg)
    f = [Finding(n, got.get(n), c.sha(n), "digest in the tag message vs the file") for n in (MANIFEST, TAGMANIFEST) if got.get(n) != c.sha(n)]
    return result(f, "both manifest digests match the tag message", "{n} digest(s) differ from the tag message")


@check("git.files", "the files at the tagged commit are these files (git blobs, both ways)")
def git_files(c: VerifyContext):
    if (s := _git_skip(c)):
        return s
    commit = _peeled(c)
    if commit is None:
        return "skip", "no tag (see git.tag)", []
    where = dig(c.meta, "repo_path") if isinstance(c.meta, dict) else None
    if not isinstance(where, str) and c.repo.working_tree_dir and not c.is_archive:
        with contextlib.suppress(ValueError):
            where = c.root.resolve().relative_to(Path(c.repo.working_tree_dir).resolve()).as_posix()
    if not isinstance(where, str):
        return "fail", "cannot tell where the release sits in the repository", [Finding(RELEASE_JSON, "repo_path", None)]
    try:
        tree = commit.tree / where
    except KeyError:
        return "fail", f"{where} is not in commit {commit.hexsha[:12]}", [Finding(where, f"a folder in {commit.hexsha[:12]}", "absent")]
    f, n = _tree_differences(c, tree, where, "the tagged commit")
    return result(f, f"{n} file(s) equal {where} at {commit.hexsha[:12]}", "{n} difference(s) from the tagged commit")


def _tree_differences(c: VerifyContext, tree: Any, where: str, what: str) -> tuple[list[Finding], int]:
    """Every difference, both ways, between a git tree (the release folder at `where`) and the files here:
    type, size, then blob id. Returns (findings sorted by path, files in the tree)."""
    blobs = {}
    for item in tree.traverse():
        if item.type != "tree":  # blobs, and submodules (flagged below)
            blobs[Path(item.path).relative_to(where).as_posix()] = item
    f = []
    for p, b in blobs.items():
        if b.type != "blob" or b.mode not in (0o100644, 0o100755):
            f.append(Finding(p, f"a regular file in {what}", f"mode {b.mode:o}"))
            continue
        st, d = c.inv.files.get(p), c.digests.get(p)
        if st is None:
            f.append(Finding(p, f"present (blob {b.hexsha[:12]})", "a symlink here" if p in c.inv.symlinks else "absent here"))
        elif st.st_size != b.size:
            f.append(Finding(p, f"{b.size} bytes", f"{st.st_size} bytes", f"differs from {what}"))
        elif not isinstance(d, FileDigest) or d.git_sha1 is None:
            f.append(Finding(p, f"blob {b.hexsha}", "not hashed (unlisted or unreadable)", f"cannot be compared with {what}"))
        elif d.git_sha1 != b.hexsha:
            f.append(Finding(p, f"blob {b.hexsha}", f"blob {d.git_sha1}", f"differs from {what}"))
    for p in [*c.inv.files, *c.inv.symlinks, *c.inv.special]:
        if p not in blobs:
            f.append(Finding(p, f"absent (not in {what})", "present here"))
    return sorted(f, key=lambda x: path_key(x.path)), len(blobs)


def _head_where(c: VerifyContext) -> tuple[str | None, str]:
    """Where the release sits in the work tree (None, and why not, when it cannot be compared with HEAD)."""
    if not c.repo.working_tree_dir:
        return None, "the repository has no work tree"
    top = Path(c.repo.working_tree_dir).resolve()
    # an archive is compared with the folder of its name beside it (releases/NAME.tar -> releases/NAME)
    folder = c.source.parent / c.root.name if c.is_archive else c.root
    try:
        return folder.resolve().relative_to(top).as_posix(), ""
    except ValueError:
        return None, f"{folder} is not inside the repository's work tree ({top})"


@check("git.head", "without the tag: the files HEAD commits at the release's path are these files (sizes, git blobs, both ways)")
def git_head(c: VerifyContext):
    if c.repo_error:
        return "fail", c.repo_error, [Finding(str(c.source), "a git repository", c.repo_error)]
    if c.repo is None:
        return "skip", "not checked: the release is not inside a git repository (pass --repo to check against one)", []
    if c.root is None:
        return "skip", "no release folder", []
    if _tag_obj(c) is not None:
        return "skip", f"the tag {_tag_name(c)} is here: git.files compares the files with the tagged commit", []
    where, why = _head_where(c)
    if where is None:
        return "skip", f"not checked: {why}", []
    try:
        head = c.repo.head.commit
    except Exception as e:  # an empty repository, a detached HEAD on nothing, "dubious ownership"
        return "skip", f"not checked: no HEAD commit to compare with ({type(e).__name__}: {e})", []
    try:
        tree = head.tree / where if where != "." else head.tree
    except KeyError:
        if c.is_archive:  # an archive downloaded anywhere: no committed folder to hold it against
            return "skip", f"not checked: HEAD ({head.hexsha[:12]}) has no folder {where} to compare the archive with", []
        return "fail", f"HEAD ({head.hexsha[:12]}) does not hold {where}: nothing binds these files to this repository's history", \
            [Finding(where, f"a folder committed at HEAD {head.hexsha[:12]}", "absent from HEAD")]
    if tree.type != "tree":
        return "fail", f"{where} is not a folder at HEAD {head.hexsha[:12]}", [Finding(where, "a folder", tree.type)]
    f, n = _tree_differences(c, tree, where, f"HEAD {head.hexsha[:12]}")
    if f:
        return "fail", f"{len(f)} file(s) differ from what HEAD {head.hexsha[:12]} commits at {where}", f
    return "pass", f"{n} file(s) equal {where} at HEAD {head.hexsha[:12]} (sizes and git blobs; no tag here)", []
