"""A release carries its regenerator, so that it verifies with the code that froze it.

At freeze: regenerator/<wheel> (the exact `evidence` that froze it: a wheel built from the running
code's source files) and regenerator/lock.json (the wheel's name and sha256, the git commit of that
code when its checkout was clean, the entry point verify calls, and the render stack: the
interpreter, FreeType and the installed version of everything the wheel requires, transitively) go
into the release's tag area and its tag manifest.

At verify, code from a release runs only when it is exactly the code of a commit that a branch, a tag
or HEAD of the auditor's clone reaches (a commit object that is merely present, fetched from a fork
say, does not count), or exactly the code the auditor is running. The regenerating environment is:
  - the release's wheel, when so bound: every entry is the package's own (evidence/ and its one
    dist-info, no .pth, no other top-level name, no path leaving the install), every evidence/ file
    equals that commit's blob, RECORD agrees, and the lock's commit is the one release.json names.
    It is unpacked into the verify's temporary folder (no cache) and run on this interpreter when its
    render stack equals the lock; otherwise in a venv built there from the lock's pins, installed
    with `pip --require-hashes --no-deps --only-binary :all:` (a lock without hashes is not installed);
  - for a release frozen before releases carried their regenerator: the tree of the commit that
    froze it (release.json freeze.code_commit), under the same reachability rule;
  - with `--regen-env current`: this code.
A wheel or lock that breaks a rule a genuine freeze never breaks is refused (kind "refused": the
regen.code check fails). Code that is merely not bound here is not run (kind "unavailable": the
regen.* checks say "regeneration not checked" and why, and the command that would check it), unless
the auditor passes --run-unverified-code (mode "unverified"), which runs it with a warning and never
yields VALID.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import importlib.metadata as md
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evidence.canon import dumps, write_atomic
from evidence.release.layout import ReleaseError, sha256_bytes
from evidence.release.regen import ENTRY

REGEN_DIR = "regenerator"
LOCK = f"{REGEN_DIR}/lock.json"
LOCK_FORMAT = "evidence-regenerator/1"
ENV_MODES = ("auto", "current", "unverified")
UNVERIFIED_FLAG = "--run-unverified-code"
_COMMIT = re.compile(r"[0-9a-f]{40}")


@dataclass(frozen=True)
class RegenEnv:
    kind: str  # wheel | venv | commit | current | unavailable (not bound here: not run) | refused (hostile: not run)
    describe: str  # said to the user: which code and interpreter regenerate
    python: str = sys.executable
    pythonpath: str | None = None
    driver: str = "entry"  # entry (a regenerate(raw, work, sde=, step=) function) | legacy (the flat package of old)
    entry: str = ENTRY
    error: str | None = None  # kinds unavailable and refused: what could not be done, or what was refused
    how: str | None = None  # kind unavailable: the one command that would make regeneration possible
    unverified: bool = False  # the release's own code, not bound to this repository, run by --run-unverified-code

    def as_dict(self) -> dict:
        return {"kind": self.kind, "describe": self.describe, "python": self.python, "error": self.error,
                "how": self.how, "unverified": self.unverified}


# --------------------------------------------------------------------------- the render stack

def _dependency_closure(requires: list[str]) -> dict[str, str]:
    """name -> installed version of every distribution these requirements name, transitively (extras
    not followed; a requirement not installed here is left out: it cannot be locked)."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    seen: dict[str, str] = {}
    todo = list(requires)
    while todo:
        req = Requirement(todo.pop())
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        key = canonicalize_name(req.name)
        if key in seen:
            continue
        try:
            dist = md.distribution(req.name)
        except md.PackageNotFoundError:
            continue
        seen[key] = dist.version
        todo += dist.requires or []
    return dict(sorted(seen.items()))


def wheel_requires(wheel: Path) -> list[str]:
    """The Requires-Dist lines of a wheel's METADATA (what that code declares it needs)."""
    from email.parser import Parser

    with zipfile.ZipFile(wheel) as z:
        name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA") and n.count("/") == 1)
        meta = Parser().parsestr(z.read(name).decode("utf-8"))
    return meta.get_all("Requires-Dist") or []


def render_lock(requires: list[str] | None = None) -> dict:
    """What fixes the bytes of regenerated files, beyond the code: the interpreter, FreeType, and the
    installed versions of everything the code requires (default: the installed evidence's requirements)."""
    if requires is None:
        try:
            requires = md.distribution("evidence").requires or []
        except md.PackageNotFoundError:
            requires = []
    try:
        from matplotlib import ft2font

        freetype = str(ft2font.__freetype_version__)
    except ImportError:
        freetype = None
    return {"python": ".".join(map(str, sys.version_info[:3])), "implementation": sys.implementation.name,
            "freetype": freetype, "packages": _dependency_closure(requires)}


def lock_differences(lock: dict) -> list[str]:
    """How this interpreter differs from a lock, in words; [] when it matches."""
    here = render_lock([f"{n}" for n in lock.get("packages") or {}])
    out = []
    if str(lock.get("python", "")).split(".")[:2] != here["python"].split(".")[:2]:
        out.append(f"python {lock.get('python')} (lock) vs {here['python']} (here)")
    if lock.get("freetype") != here["freetype"]:
        out.append(f"FreeType {lock.get('freetype')} (lock) vs {here['freetype']} (here)")
    for name, v in sorted((lock.get("packages") or {}).items()):
        if here["packages"].get(name) != v:
            out.append(f"{name} {v} (lock) vs {here['packages'].get(name, 'absent')} (here)")
    return out


# --------------------------------------------------------------------------- at freeze

def code_source() -> tuple[Path | None, str | None]:
    """The project folder of the running `evidence` (pyproject.toml beside the package) and its git commit
    when that folder is a clean checkout; (None, None) when the running code is an installed wheel."""
    import evidence

    root = Path(evidence.__file__).resolve().parent.parent
    if not (root / "pyproject.toml").is_file():
        return None, None  # an installed evidence (pip install evidence): its distribution is repacked instead
    commit = None
    try:
        import git

        repo = git.Repo(root)
        if not repo.is_dirty(untracked_files=True, path="evidence") and not repo.is_dirty(path="pyproject.toml"):
            commit = repo.head.commit.hexsha
    except Exception:  # not a git checkout: the wheel is still this exact code
        commit = None
    return root, commit


def build_regenerator(release_dir: Path, *, sde: int) -> list[str]:
    """Build a wheel of the running code and write regenerator/<wheel> and regenerator/lock.json into
    release_dir; returns their paths relative to release_dir (tag files: the tag manifest covers them).
    The wheel is built from a copy of the package's source files (no caches), with SOURCE_DATE_EPOCH set
    so its bytes do not depend on when it was built."""
    root, commit = code_source()
    out_dir = Path(release_dir) / REGEN_DIR
    out_dir.mkdir(parents=True, exist_ok=True)
    if root is None:
        wheel = repack_installed(out_dir, sde=sde)
    else:
        wheel = _build_from_source(root, out_dir, sde=sde)
    lock = {"format": LOCK_FORMAT, "wheel": wheel.name, "wheel_sha256": sha256_bytes(wheel.read_bytes()),
            "code_commit": commit, "entry": ENTRY, "render": render_lock(wheel_requires(wheel))}
    write_atomic(Path(release_dir) / LOCK, dumps(lock))
    return [f"{REGEN_DIR}/{wheel.name}", LOCK]


def repack_installed(out_dir: Path, *, sde: int) -> Path:
    """The installed `evidence` distribution as a wheel again: its files as installed (RECORD lists them),
    no caches, in sorted order with one fixed timestamp, so the same install gives the same bytes."""
    dist = md.distribution("evidence")
    files = sorted({str(f) for f in (dist.files or []) if "__pycache__" not in str(f) and not str(f).endswith(".pyc")
                    and not str(f).startswith("..") and (str(f).startswith("evidence/") or ".dist-info/" in str(f))
                    and not str(f).endswith(("/INSTALLER", "/REQUESTED", "/direct_url.json"))})
    if not any(f.startswith("evidence/") for f in files):
        raise ReleaseError("the installed evidence lists none of its files (no RECORD), so the release's regenerator "
                           "cannot be made; reinstall it with pip, or freeze from a checkout (pip install -e .).")
    name = f"evidence-{dist.version}-py3-none-any.whl"
    stamp = time.gmtime(max(int(sde), 315532800))[:6]  # zip dates start in 1980
    record_name = next(f for f in files if f.endswith(".dist-info/RECORD"))
    rows = []
    out = out_dir / name
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for f in files:
            if f == record_name:
                continue
            body = Path(str(dist.locate_file(f))).read_bytes()
            info = zipfile.ZipInfo(f, date_time=stamp)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            z.writestr(info, body)
            digest = base64.urlsafe_b64encode(hashlib.sha256(body).digest()).rstrip(b"=").decode()
            rows.append(f"{f},sha256={digest},{len(body)}")
        rows.append(f"{record_name},,")
        info = zipfile.ZipInfo(record_name, date_time=stamp)
        info.external_attr = 0o644 << 16
        z.writestr(info, "\n".join(rows) + "\n")
    return out


def _build_from_source(root: Path, out_dir: Path, *, sde: int) -> Path:
    with tempfile.TemporaryDirectory(prefix="evidence-wheel-") as td:
        src = Path(td) / "src"
        src.mkdir()
        for name in ("pyproject.toml", "README.md", "LICENSE"):
            if (root / name).is_file():
                shutil.copyfile(root / name, src / name)
        shutil.copytree(root / "evidence", src / "evidence", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        env = {**os.environ, "SOURCE_DATE_EPOCH": str(int(sde))}
        r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(Path(td) / "dist"), str(src)],
                           capture_output=True, text=True, env=env)
        wheels = sorted((Path(td) / "dist").glob("evidence-*.whl")) if r.returncode == 0 else []
        if len(wheels) != 1:
            raise ReleaseError(f"could not build the wheel of the running evidence ({root}) for the release's regenerator "
                               f"(pip wheel exited {r.returncode}: {(r.stderr or r.stdout).strip()[-400:]}); nothing was released.")
        wheel = out_dir / wheels[0].name
        shutil.copyfile(wheels[0], wheel)
    return wheel


def tag_area_files(release_dir: Path) -> list[str]:
    """The regenerator's files present in release_dir (for the tag manifest), sorted."""
    d = Path(release_dir) / REGEN_DIR
    if not d.is_dir():
        return []
    return sorted(f"{REGEN_DIR}/{p.relative_to(d).as_posix()}" for p in d.rglob("*") if p.is_file())


# --------------------------------------------------------------------------- at verify

class Refused(Exception):
    """The release's regenerator breaks a rule a genuine freeze never breaks (never run, the check fails)."""


def resolve(mode: str, root: Path | None, meta: Any, repos: list[Any], work: Path) -> RegenEnv:
    """The environment that regenerates this release (see the module docstring). Nothing from the release
    runs here; whatever is unpacked or built goes under `work` (the verify's own temporary folder)."""
    if mode not in ENV_MODES:
        raise ReleaseError(f"unknown regeneration mode {mode!r}; known: {', '.join(ENV_MODES)}.")
    if mode == "current":
        return current_env()
    lock_path = root / LOCK if root is not None else None
    try:
        if lock_path is not None and lock_path.is_file():
            return _wheel_env(root, lock_path, meta, repos, work, unverified=mode == "unverified")
        commit = ((meta or {}).get("freeze") or {}).get("code_commit") if isinstance(meta, dict) else None
        if isinstance(commit, str) and commit:
            return _commit_env(commit, repos, work)
    except Refused as e:
        return RegenEnv("refused", "none", error=str(e))
    return _unavailable("the release carries no regenerator (regenerator/lock.json) and names no commit that froze it "
                        "(release.json freeze.code_commit)", "--regen-env current (this code: bytes may differ if the "
                        "code changed since the freeze)")


def current_env() -> RegenEnv:
    import evidence

    from evidence import __version__

    pkg_parent = str(Path(evidence.__file__).resolve().parent.parent)
    return RegenEnv("current", f"this code (evidence {__version__} at {pkg_parent}), on {sys.executable} "
                    f"(--regen-env current)", pythonpath=pkg_parent)


def _unavailable(what: str, how: str | None) -> RegenEnv:
    return RegenEnv("unavailable", "none", error=what, how=how)


def _how_for(commit: str) -> str:
    # never `git fetch origin <sha>`: on hosts that share objects across forks it brings a fork's commit,
    # which is exactly the code that must not be trusted
    return (f"evidence verify --repo CLONE PATH, where CLONE is a clone of the project's repository in which a branch "
            f"or tag holds commit {commit[:12]}")


def reachable(repo: Any, commit: str) -> bool | None:
    """True when a branch, remote branch, tag or HEAD of repo reaches commit; False when the object is there
    but nothing reaches it (a dangling object, or one fetched by its id); None when repo lacks it."""
    import git

    if not _COMMIT.fullmatch(commit):  # never an option or a revision expression on git's command line
        return None
    try:
        repo.git.cat_file("-e", f"{commit}^{{commit}}")
    except (ValueError, git.GitCommandError):
        return None
    try:
        if repo.git.for_each_ref("--contains", commit, "--format=%(refname)", "refs/heads", "refs/remotes", "refs/tags").strip():
            return True
    except git.GitCommandError:
        pass
    try:
        repo.git.merge_base("--is-ancestor", commit, "HEAD")
        return True
    except (ValueError, git.GitCommandError):
        return False


def _find(commit: str, repos: list[Any]) -> tuple[Any, str | None]:
    """(the first repository where a ref reaches commit, None) or (None, why not)."""
    dangling = False
    for repo in repos:
        if repo is None:
            continue
        r = reachable(repo, commit)
        if r:
            return repo, None
        dangling = dangling or r is False
    if dangling:
        return None, (f"commit {commit[:12]} is in this repository but no branch or tag reaches it (a commit on no branch, "
                      "fetched by its id or from a fork, is not this project's code)")
    return None, f"commit {commit[:12]} is not in this repository"


def _tree_blobs(repo: Any, commit: str, path: str) -> dict[str, str]:
    blobs = {}
    for line in repo.git.ls_tree("-r", "-z", commit, "--", path).split("\0"):
        if line:
            info, name = line.split("\t", 1)
            _mode, kind, sha = info.split()
            if kind == "blob":
                blobs[name] = sha
    return blobs


_DIST_INFO_FILES = {"METADATA", "WHEEL", "RECORD", "entry_points.txt", "top_level.txt"}


def _dist_info_file(parts: list[str]) -> bool:
    """A file a dist-info folder carries: the metadata files, or a licence text (at its top or, PEP 639,
    in licenses/); nothing a loader or the interpreter runs (.pth is refused separately)."""
    licence = re.compile(r"(LICEN[CS]E|COPYING|NOTICE|AUTHORS)[A-Za-z0-9._-]*")
    if len(parts) == 1:
        return parts[0] in _DIST_INFO_FILES or bool(licence.fullmatch(parts[0]))
    return parts[0] == "licenses" and all(re.fullmatch(r"[A-Za-z0-9._-]+", p) for p in parts[1:])


def wheel_entries(z: zipfile.ZipFile) -> str:
    """Check that every entry of the wheel is the package's own file; returns its dist-info folder name.
    Raises Refused: a name that normalises outside the install or outside evidence/ and its one
    dist-info (`evidence-1.dist-info/../x.pth`, a top-level sitecustomize.py), a .pth anywhere, a
    dist-info file a wheel does not carry, or a RECORD that does not list exactly the entries."""
    names = z.namelist()
    dist = sorted({n.split("/")[0] for n in names if n.split("/")[0].endswith(".dist-info")})
    if len(dist) != 1 or not re.fullmatch(r"evidence-[A-Za-z0-9_.+!]+\.dist-info", dist[0]):
        raise Refused(f"the wheel holds the dist-info folder(s) {dist}, not exactly one evidence-<version>.dist-info")
    di = dist[0]
    files = []
    for n in names:
        parts = n.rstrip("/").split("/")
        if (n.startswith("/") or "\\" in n or ":" in n or any(p in ("", ".", "..") for p in parts)
                or any(ord(ch) < 32 for ch in n)):
            raise Refused(f"the wheel's entry {n!r} is not a plain path inside the package (it could land outside the install)")
        if parts[0] not in ("evidence", di):
            raise Refused(f"the wheel's entry {n!r} is not the package's own file (only evidence/ and {di}/ are)")
        if n.endswith(".pth") or parts[-1].split(".")[0] in ("sitecustomize", "usercustomize"):
            raise Refused(f"the wheel's entry {n!r} is code the interpreter runs at start-up")
        if parts[0] == di and not n.endswith("/") and not _dist_info_file(parts[1:]):
            raise Refused(f"the wheel's entry {n!r} is not a file a dist-info folder carries ({', '.join(sorted(_DIST_INFO_FILES))}, "
                          "licence texts)")
        if not n.endswith("/"):
            files.append(n)
    if len(set(files)) != len(files):
        raise Refused("the wheel names one file twice")
    record = f"{di}/RECORD"
    if record not in files:
        raise Refused(f"the wheel has no {record}")
    rows = {}
    for row in csv.reader(io.StringIO(z.read(record).decode("utf-8"))):
        if row:
            if len(row) != 3 or row[0] in rows:
                raise Refused(f"{record} has a malformed or repeated row {row!r}")
            rows[row[0]] = row[1]
    if set(rows) != set(files):
        odd = sorted(set(rows) ^ set(files))
        raise Refused(f"{record} does not list exactly the wheel's files (differs at {', '.join(map(repr, odd[:3]))})")
    for n in files:
        if n == record:
            continue
        digest = base64.urlsafe_b64encode(hashlib.sha256(z.read(n)).digest()).rstrip(b"=").decode()
        if rows[n] != f"sha256={digest}":
            raise Refused(f"{record} gives another hash for {n}")
    from email.parser import Parser

    meta = Parser().parsestr(z.read(f"{di}/METADATA").decode("utf-8")) if f"{di}/METADATA" in files else None
    if meta is None or meta.get("Name", "").lower() != "evidence":
        raise Refused(f"{di}/METADATA does not name the distribution evidence")
    return di


def _requires(z: zipfile.ZipFile, di: str) -> list[str]:
    from email.parser import Parser

    return Parser().parsestr(z.read(f"{di}/METADATA").decode("utf-8")).get_all("Requires-Dist") or []


def _check_lock_names(render: dict, requires: list[str]) -> None:
    """Every name the lock pins must be one the frozen distribution declares, directly or through what its
    requirements require (as installed here); an extra name would install whatever the lock's author chose."""
    from packaging.utils import canonicalize_name

    packages = render.get("packages") or {}
    if not isinstance(packages, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in packages.items()):
        raise Refused(f"{LOCK} render.packages is not a table of names and versions")
    declared = set(_dependency_closure(requires))
    extra = sorted(n for n in packages if canonicalize_name(n) not in declared)
    if extra:
        raise Refused(f"{LOCK} pins {', '.join(map(repr, extra[:5]))}, which the frozen distribution does not declare "
                      "(directly or through its requirements)")


def _bind_wheel(z: zipfile.ZipFile, lock: dict, meta: Any, repos: list[Any]) -> tuple[bool, str]:
    """Is the wheel exactly the code of a commit a ref of this repository reaches? (True, how) or (False, why not:
    not bound here). Raises Refused when it claims a commit it is not, or a commit other than the release's."""
    commit = lock.get("code_commit")
    if commit is None:
        return False, "it was built from a checkout with uncommitted changes (lock.json code_commit is null)"
    if not isinstance(commit, str) or not _COMMIT.fullmatch(commit):
        raise Refused(f"{LOCK} code_commit {commit!r} is not a commit id")
    frozen_at = ((meta or {}).get("freeze") or {}).get("code_commit") if isinstance(meta, dict) else None
    if isinstance(frozen_at, str) and frozen_at != commit and _COMMIT.fullmatch(frozen_at):
        # the release was frozen in this project's own repository when the commit that froze it holds the package:
        # then the regenerator must be that commit's code (a later commit's code is not the code that froze it)
        for repo in repos:
            if repo is not None and reachable(repo, frozen_at) is not None and _tree_blobs(repo, frozen_at, "evidence/__init__.py"):
                raise Refused(f"{LOCK} binds the regenerator to commit {commit[:12]}, but release.json says the release "
                              f"was frozen at commit {frozen_at[:12]} of this code")
    repo, why = _find(commit, repos)
    if repo is None:
        return False, why or ""
    blobs = _tree_blobs(repo, commit, "evidence")
    if "evidence/__init__.py" not in blobs:
        raise Refused(f"{LOCK} names commit {commit[:12]}, whose tree holds no evidence package")
    seen = set()
    for name in z.namelist():
        if name.endswith("/") or not name.startswith("evidence/"):
            continue  # wheel_entries has admitted only evidence/ and its dist-info
        body = z.read(name)
        if blobs.get(name) != hashlib.sha1(b"blob %d\0" % len(body) + body).hexdigest():
            raise Refused(f"the wheel's file {name} is not the file of commit {commit[:12]}, which {LOCK} names")
        seen.add(name)
    missing = sorted(p for p in blobs if p.endswith(".py") and p not in seen)
    if missing:
        raise Refused(f"the wheel lacks {', '.join(missing[:3])} of commit {commit[:12]}, which {LOCK} names")
    return True, f"its files equal evidence/ at commit {commit[:12]}, which a branch or tag of this repository reaches"


def _equals_running(z: zipfile.ZipFile) -> tuple[bool, str]:
    """Is the wheel the code the auditor is running (e.g. both pip-installed evidence of one version)?
    Then running it runs nothing the auditor has not already chosen to run (wheel_entries has admitted
    only evidence/ and its dist-info)."""
    import evidence

    pkg = Path(evidence.__file__).resolve().parent
    names = [n for n in z.namelist() if n.startswith("evidence/") and not n.endswith("/")]
    for n in names:
        here = pkg.parent / n
        if not here.is_file() or here.read_bytes() != z.read(n):
            return False, f"nor is it the running evidence ({n} differs)"
    ours = {p.relative_to(pkg.parent).as_posix() for p in pkg.rglob("*.py") if "__pycache__" not in p.parts}
    missing = sorted(ours - set(names))
    if missing:
        return False, f"nor is it the running evidence (it lacks {missing[0]})"
    return True, f"its files equal the running evidence ({pkg})"


def _wheel_env(root: Path, lock_path: Path, meta: Any, repos: list[Any], work: Path, *, unverified: bool) -> RegenEnv:
    try:
        lock = json.loads(lock_path.read_text(encoding="utf-8"))
        name, want = lock["wheel"], lock["wheel_sha256"]
        entry = lock.get("entry") or ENTRY
        render = lock.get("render") or {}
        if not isinstance(name, str) or not isinstance(render, dict):
            raise TypeError("wheel is not a name or render is not a table")
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise Refused(f"{LOCK} is unreadable ({type(e).__name__}: {e})")
    if "/" in name or "\\" in name or name.startswith(".") or not (root / REGEN_DIR / name).is_file():
        raise Refused(f"the wheel {name!r} named by {LOCK} is not a file in {REGEN_DIR}/")
    data = (root / REGEN_DIR / name).read_bytes()
    if sha256_bytes(data) != want:
        raise Refused(f"{REGEN_DIR}/{name} does not hash to the sha256 {LOCK} gives")
    if not re.fullmatch(r"evidence(\.\w+)+:\w+", str(entry)):
        raise Refused(f"{LOCK} names the entry point {entry!r}, not a function of the evidence package")
    try:
        z = zipfile.ZipFile(io.BytesIO(data))
    except zipfile.BadZipFile as e:
        raise Refused(f"{REGEN_DIR}/{name} is not a wheel ({e})")
    with z:
        di = wheel_entries(z)
        _check_lock_names(render, _requires(z, di))
        bound, why = _bind_wheel(z, lock, meta, repos)
        if not bound:
            same, why_same = _equals_running(z)
            bound, why = (True, why_same) if same else (False, f"{why}; {why_same}")
        if not bound and not unverified:
            commit = lock.get("code_commit")
            return _unavailable(f"the release's own code ({name}) is not bound to this repository: {why}; code from a release "
                                "runs only when it is exactly the code of a commit a branch or tag here reaches",
                                _how_for(commit) if isinstance(commit, str) else None)
        bound_by = why if bound else f"NOT bound to this repository ({why}); run by request ({UNVERIFIED_FLAG})"
        site = work / "wheel"
        site.mkdir(parents=True)
        z.extractall(site)  # every name was checked by wheel_entries
    diffs = lock_differences(render)
    if not diffs:
        return RegenEnv("wheel", f"the release's own regenerator ({name}: {bound_by}) on {sys.executable}, "
                        "whose render stack equals the release's lock", pythonpath=str(site), entry=entry,
                        unverified=not bound)
    here = ".".join(map(str, sys.version_info[:2]))
    if str(render.get("python", "")).split(".")[:2] != here.split("."):
        return _unavailable(f"the release's regenerator needs Python {render.get('python')} (this is {here}); render stack "
                            f"differences: {'; '.join(diffs[:6])}", f"evidence verify PATH, run with Python {render.get('python')}")
    if _hashed(render):
        return _venv_env(lock, render, root / REGEN_DIR / name, entry, diffs, bound_by, work, unverified=not bound)
    # pip without --require-hashes installs whatever an index serves under a name and version, so a lock without
    # hashes is never installed: the bound code runs here, and a byte difference names the stack's differences
    return RegenEnv("wheel", f"the release's own regenerator ({name}: {bound_by}) on {sys.executable}, whose render stack "
                    f"differs from the release's lock ({'; '.join(diffs[:4])}; the lock records no hashes to install its "
                    "pins with)", pythonpath=str(site), entry=entry, unverified=not bound)


def _hashed(render: dict) -> bool:
    hashes = render.get("hashes")
    return isinstance(hashes, dict) and bool(render.get("packages")) and all(
        isinstance(hashes.get(n), str) and re.fullmatch(r"sha256:[0-9a-f]{64}", hashes[n]) for n in render["packages"])


def _venv_env(lock: dict, render: dict, wheel: Path, entry: str, diffs: list[str], bound_by: str, work: Path, *,
              unverified: bool) -> RegenEnv:
    """A venv in the verify's temporary folder holding the wheel and the lock's pins, each checked against its
    hash (`pip --require-hashes --no-deps --only-binary :all:`: no resolver, no sdist's build code)."""
    differ = f"this interpreter differs from the lock: {'; '.join(diffs[:6])}"
    hashes = render["hashes"]
    venv = work / "venv"
    req = work / "requirements.txt"
    req.write_text("".join(f"{n}=={v} --hash={hashes[n]}\n" for n, v in sorted(render["packages"].items()))
                   + f"{wheel} --hash=sha256:{lock['wheel_sha256']}\n", encoding="utf-8")
    steps = [[sys.executable, "-m", "venv", str(venv)],
             [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps", "--require-hashes",
              "--only-binary", ":all:", "-r", str(req)]]
    for cmd in steps:
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            return _unavailable(f"could not build an isolated environment from the release's lock (`{' '.join(cmd[:4])} ...` "
                                f"exited {r.returncode}: {(r.stderr or r.stdout).strip()[-300:]}); {differ}", None)
    return RegenEnv("venv", f"the release's own regenerator ({lock['wheel']}: {bound_by}) in an isolated environment built from "
                    f"its lock's hashed pins, since {differ}", python=str(venv / "bin" / "python"), entry=entry,
                    unverified=unverified)


def _commit_env(commit: str, repos: list[Any], work: Path) -> RegenEnv:
    if not _COMMIT.fullmatch(commit):
        raise Refused(f"release.json freeze.code_commit {commit!r} is not a commit id")
    found, why = _find(commit, repos)
    if found is None:
        return _unavailable(f"the release was frozen at commit {commit[:12]} (release.json freeze.code_commit), before "
                            f"releases carried their regenerator, and {why}", _how_for(commit))
    if not _tree_blobs(found, commit, "evidence/__init__.py"):
        return _unavailable(f"the release names commit {commit[:12]} as the code that froze it, but that commit's tree "
                            "holds no evidence package, and the release carries no regenerator of its own",
                            "--regen-env current (this code: bytes may differ if the code changed since the freeze)")
    tree = work / f"commit-{commit[:12]}"
    tree.mkdir(parents=True)
    buf = io.BytesIO()
    # the code and, where a tree of that time kept them, the report templates beside it
    paths = [p for p in ("evidence", "templates") if _tree_blobs(found, commit, p)]
    found.archive(buf, treeish=commit, format="tar", path=paths)
    buf.seek(0)
    with tarfile.open(fileobj=buf) as tf:
        tf.extractall(tree, filter="data")
    legacy = not (tree / "evidence" / "derive.py").is_file()
    return RegenEnv("commit", f"the code of commit {commit[:12]} that froze the release (a branch or tag of this repository "
                    f"reaches it; git archive into the verify's temporary folder), on {sys.executable}",
                    pythonpath=str(tree), driver="legacy" if legacy else "entry")
