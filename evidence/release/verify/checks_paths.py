"""Checks on names: absolute, '..', backslashes, encoding, collisions; links and special files."""

from __future__ import annotations

from evidence.release.layout import MANIFEST, TAGMANIFEST, Finding, path_problems
from evidence.release.verify.context import CheckFn, VerifyContext, check, result


def _all_path_names(c: VerifyContext) -> list[tuple[str, str]]:
    names = [(p, "on disk") for p in c.inv.all_names()]
    for mname, entries in ((MANIFEST, c.manifest), (TAGMANIFEST, c.tagmanifest)):
        names += [(e.path, f"{mname} line {e.line}") for e in entries.values()]
    return names


def _paths_rule(rule: str, ok: str, fail: str) -> CheckFn:
    def fn(c: VerifyContext):
        if c.path_problems_cache is None:  # one pass over all names serves the five rules
            c.path_problems_cache = path_problems(_all_path_names(c))
        return result(c.path_problems_cache[rule], ok, fail)
    return fn


absolute = check("paths.absolute", "no absolute paths in the manifests")(
    _paths_rule("paths.absolute", "no absolute paths", "{n} absolute path(s)"))
dotdot = check("paths.dotdot", "no '..' (or empty, '.') path components")(
    _paths_rule("paths.dotdot", "no path escapes its folder", "{n} path(s) with '..', '.' or empty components"))
backslash = check("paths.backslash", "no backslashes in names")(
    _paths_rule("paths.backslash", "no backslashes", "{n} name(s) with a backslash"))
encoding = check("paths.encoding", "names are UTF-8 without control characters")(
    _paths_rule("paths.encoding", "every name is clean UTF-8", "{n} name(s) with control characters or non-UTF-8 bytes"))
collision = check("paths.collision", "no names collide after NFC normalization or case folding")(
    _paths_rule("paths.collision", "no colliding names", "{n} group(s) of colliding names"))


@check("paths.symlink", "no symbolic links")
def symlinks(c: VerifyContext):
    return result([Finding(p, "a regular file or folder", f"a symlink to {t!r}") for p, t in c.inv.symlinks.items()],
                  "no symbolic links", "{n} symbolic link(s)")


@check("paths.hardlink", "no hard links (every file has one name)")
def hardlinks(c: VerifyContext):
    return result([Finding(p, "1 link", f"{st.st_nlink} links") for p, st in c.inv.files.items() if st.st_nlink > 1],
                  "no hard links", "{n} file(s) with more than one name")


@check("paths.special", "no devices, fifos or sockets")
def special(c: VerifyContext):
    return result([Finding(p, "a regular file or folder", k) for p, k in c.inv.special.items()],
                  "regular files and folders only", "{n} special file(s)")
