"""Checks against the git repository: the tag exists, is annotated, peels where it says, carries the
manifest digests, and its tree holds these files."""

from __future__ import annotations

import contextlib
import re
from pathlib import Path
from typing import Any

from evidence.release.files import FileDigest
from evidence.release.layout import MANIFEST, RELEASE_JSON, TAGMANIFEST, Finding, dig, path_key
from evidence.release.verify.context import SKIP_NO_META, VerifyContext, check, result


NOT_HERE = "tag binding not checked: tag not present here; git fetch --tags"
NO_REPO = "tag binding not checked: not in a git repository (pass --repo to check against one)"


def _git_skip(c: VerifyContext) -> tuple[str, str, list[Finding]] | None:
    if c.repo_error:
        return "fail", c.repo_error, [Finding(str(c.source), "a git repository", c.repo_error)]
    if c.repo is None:
        if c.require_tag:
            return "fail", f"--require-tag: {NO_REPO}", [Finding(str(c.source), "a git repository holding the tag", "none")]
        return "skip", NO_REPO, []
    if not c.tag:
        return SKIP_NO_META
    return None


def _tag_obj(c: VerifyContext) -> Any:
    import git

    try:
        return c.repo.rev_parse(f"refs/tags/{c.tag}")
    except (git.BadName, ValueError, git.GitCommandError):
        return None


def _tag_message(c: VerifyContext) -> str | None:
    o = _tag_obj(c)
    return o.message if o is not None and o.type == "tag" else None


def _peeled(c: VerifyContext) -> Any:
    import git

    try:
        return c.repo.rev_parse(f"refs/tags/{c.tag}^{{commit}}")
    except (git.BadName, ValueError, git.GitCommandError):
        return None


@check("git.tag", "the release tag exists in the repository")
def git_tag(c: VerifyContext):
    if (s := _git_skip(c)):
        if c.repo is None and not c.repo_error and not c.require_tag:
            c.notes.append(NO_REPO)
        return s
    if _tag_obj(c) is not None:
        return "pass", f"tag {c.tag} exists", []
    # tags do not travel with every clone or submission: an absent tag is not tampering, unless required
    if c.require_tag:
        return "fail", f"tag {c.tag} is missing (--require-tag)", [Finding(f"refs/tags/{c.tag}", "a tag", "missing")]
    c.notes.append(f"{NOT_HERE} (tag {c.tag})")
    return "pass", f"{NOT_HERE} (tag {c.tag}; --require-tag makes this a failure)", []


@check("git.annotated", "the tag is annotated (a tag object), not lightweight")
def git_annotated(c: VerifyContext):
    if (s := _git_skip(c)):
        return s
    o = _tag_obj(c)
    if o is None:
        return "skip", "no tag (see git.tag)", []
    if o.type != "tag":
        return "fail", "lightweight tag", [Finding(f"refs/tags/{c.tag}", "an annotated tag object", f"a lightweight tag to {o.type} {o.hexsha[:12]}")]
    if o.tag != c.tag:
        return "fail", "the tag object names another tag", [Finding(f"refs/tags/{c.tag}", c.tag, o.tag, "tag object name")]
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
            f.append(Finding(f"{c.tag}^{{commit}}", named[0] if named else "a 'commit <sha>' line in the tag message", commit.hexsha,
                             "the tag points elsewhere than the commit it names (moved tag?)"))
    base = dig(c.meta, "freeze", "code_commit") if isinstance(c.meta, dict) else None
    parents = [p.hexsha for p in commit.parents]
    if base and parents[:1] != [base]:
        f.append(Finding(f"{c.tag}^{{commit}}^", base, parents[:1] or None, "the release commit's parent vs release.json freeze.code_commit"))
    return result(f, f"{c.tag} -> {commit.hexsha[:12]}, parent {str(base)[:12]}", "the tag does not point where the release says")


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
        return "fail", "a lightweight tag has no message", [Finding(f"refs/tags/{c.tag}", "a message with the manifest digests", None)]
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
    blobs = {}
    for item in tree.traverse():
        if item.type != "tree":  # blobs, and submodules (flagged below)
            blobs[Path(item.path).relative_to(where).as_posix()] = item
    f = []
    for p, b in blobs.items():
        if b.type != "blob" or b.mode not in (0o100644, 0o100755):
            f.append(Finding(p, "a regular file in the commit", f"mode {b.mode:o}"))
        d = c.digests.get(p)
        if p not in c.inv.files:
            f.append(Finding(p, f"present (blob {b.hexsha[:12]})", "absent here"))
        elif isinstance(d, FileDigest) and d.git_sha1 != b.hexsha:
            f.append(Finding(p, f"blob {b.hexsha}", f"blob {d.git_sha1}", "differs from the tagged commit"))
    for p in c.inv.files:
        if p not in blobs:
            f.append(Finding(p, "absent (not in the tagged commit)", "present here"))
    for p in c.inv.symlinks:
        if p not in blobs:
            f.append(Finding(p, "absent (not in the tagged commit)", "a symlink here"))
    return result(sorted(f, key=lambda x: path_key(x.path)), f"{len(blobs)} file(s) equal {where} at {commit.hexsha[:12]}",
                  "{n} difference(s) from the tagged commit")
