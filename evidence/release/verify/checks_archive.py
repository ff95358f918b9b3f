"""Checks on the archive: safe members, and the sha256 published beside it."""

from __future__ import annotations

from evidence.release.archive import tar_sha256_of_folder
from evidence.release.files import hash_file
from evidence.release.layout import Finding, ReleaseError, dig
from evidence.release.verify.context import SKIP_NO_META, VerifyContext, check, result


@check("archive.members", "archive members are plain files and folders inside one release folder")
def archive_members(c: VerifyContext):
    if not c.is_archive:
        return "skip", "not an archive (a folder was given)", []
    return result(c.archive_problems or [], "every member is a regular file or folder with a safe name",
                  "{n} unsafe member(s): nothing was extracted")


@check("archive.sha256", "the archive hashes to the sha256 published beside it")
def archive_sha(c: VerifyContext):
    if c.is_archive:
        side = c.source.with_name(c.source.name + ".sha256")
        if not side.is_file():
            return "skip", f"no {side.name} beside the archive", []
        expected = side.read_text(encoding="utf-8", errors="replace").split()[:1]
        found = hash_file(c.source).sha256
        return result([] if expected == [found] else [Finding(c.source.name, expected[0] if expected else None, found, f"differs from {side.name}")],
                      f"matches {side.name}", "the archive does not match its published sha256")
    if c.root is None:
        return "skip", "no release folder", []
    side = c.root.with_name(c.root.name + ".tar.sha256")
    if not side.is_file():
        return "skip", f"no {side.name} beside the folder", []
    sde = dig(c.meta, "freeze", "source_date_epoch")
    if not isinstance(sde, int):
        return SKIP_NO_META
    if c.unhashed:  # rebuilding the archive would read them (an unlisted sparse file of 1 TiB, say)
        return "skip", (f"not rebuilt: {len(c.unhashed)} file(s) are unlisted or not of their declared size and are not "
                        "read (see complete.unexpected, fixity.payload)"), []
    expected = side.read_text(encoding="utf-8", errors="replace").split()[:1]
    c.phases.start("archive", "rebuilding the archive stream")
    try:
        found = tar_sha256_of_folder(c.root, mtime=sde)
    except ReleaseError as e:
        c.phases.finish("archive")
        return "fail", str(e), [Finding(c.root.name, expected[0] if expected else None, None, "cannot be archived")]
    c.phases.finish("archive", "archive stream rebuilt")
    return result([] if expected == [found] else [Finding(side.name, expected[0] if expected else None, found,
                                                           "the deterministic tar of this folder has another sha256")],
                  f"the deterministic tar of this folder matches {side.name}", "this folder does not rebuild the published archive")
