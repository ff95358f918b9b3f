"""A release carries its regenerator, so that it verifies with the code that froze it.

At freeze: regenerator/<wheel> (the exact `evidence` that froze it: a wheel built from the running
code's source files) and regenerator/lock.json (the wheel's name and sha256, the git commit of that
code when its checkout was clean, the entry point verify calls, and the render stack: the
interpreter, FreeType and the installed version of everything the wheel requires, transitively) go
into the release's tag area and its tag manifest.

At verify, the regenerating environment is, in this order:
  - the release's wheel, when it is bound to this repository (its files equal evidence/ at its
    code commit): unpacked into a cache and run on this interpreter when this interpreter's render
    stack equals the lock, otherwise in an isolated venv built from the lock (cached per lock).
    An unbound wheel is code the release's author chose (it could reproduce forged derived files):
    it runs only with `--regen-env wheel`;
  - for a release frozen before releases carried their regenerator: the tree of the commit that
    froze it (release.json freeze.code_commit), taken with `git archive` from the repository into a
    per-user cache, on this interpreter (that commit is in the history of every clone; its tag may not be);
  - with `--regen-env current`: this code.
When none can be had, the environment says exactly what could not be done, and the regen.* checks
fail with that reason.
"""

from __future__ import annotations

import base64
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
ENV_MODES = ("auto", "current", "wheel")


@dataclass(frozen=True)
class RegenEnv:
    kind: str  # wheel | venv | commit | current | unavailable
    describe: str  # said to the user: which code and interpreter regenerate
    python: str = sys.executable
    pythonpath: str | None = None
    driver: str = "entry"  # entry (a regenerate(raw, work, sde=, step=) function) | legacy (the flat package of old)
    entry: str = ENTRY
    error: str | None = None  # kind "unavailable": what could not be done

    def as_dict(self) -> dict:
        return {"kind": self.kind, "describe": self.describe, "python": self.python, "error": self.error}


def cache_root() -> Path:
    """Per user, never a shared temporary folder: code found here is run as trusted, so no other user may
    plant it ($EVIDENCE_REGEN_CACHE, else $XDG_CACHE_HOME/evidence/regen, else ~/.cache/evidence/regen)."""
    if os.environ.get("EVIDENCE_REGEN_CACHE"):
        return Path(os.environ["EVIDENCE_REGEN_CACHE"])
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "evidence" / "regen"


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

def resolve(mode: str, root: Path | None, meta: Any, repos: list[Any]) -> RegenEnv:
    """The environment that regenerates this release (see the module docstring)."""
    if mode not in ENV_MODES:
        raise ReleaseError(f"unknown --regen-env {mode!r}; known: {', '.join(ENV_MODES)}.")
    if mode == "current":
        return current_env()
    lock_path = root / LOCK if root is not None else None
    if lock_path is not None and lock_path.is_file():
        return _wheel_env(root, lock_path, repos, trust=mode == "wheel")
    if mode == "wheel":
        return _unavailable(f"--regen-env wheel: the release carries no regenerator ({LOCK})")
    commit = ((meta or {}).get("freeze") or {}).get("code_commit") if isinstance(meta, dict) else None
    if isinstance(commit, str) and commit:
        return _commit_env(commit, repos)
    return RegenEnv("unavailable", "none", error="the release carries no regenerator (regenerator/lock.json) and names "
                    "no commit that froze it (release.json freeze.code_commit); use --regen-env current to regenerate with "
                    "this code (bytes may differ if the code changed)")


def current_env() -> RegenEnv:
    import evidence

    from evidence import __version__

    pkg_parent = str(Path(evidence.__file__).resolve().parent.parent)
    return RegenEnv("current", f"this code (evidence {__version__} at {pkg_parent}), on {sys.executable} "
                    f"(--regen-env current)", pythonpath=pkg_parent)


def _unavailable(what: str) -> RegenEnv:
    return RegenEnv("unavailable", "none", error=what + "; use --regen-env current to regenerate with this code "
                    "(bytes may differ if the code changed), or --no-regen to skip regeneration")


def _bind_wheel(data: bytes, lock: dict, repos: list[Any]) -> tuple[bool, str]:
    """Is the wheel the code of a commit in this repository? Its files under evidence/ must equal that
    commit's blobs, and every .py file of the commit's evidence/ must be in it. Unbound, a wheel is code
    the release's author chose: it could reproduce forged derived files, so it is not run by default."""
    commit = lock.get("code_commit")
    if not isinstance(commit, str) or not commit:
        return False, "it was built from a checkout with uncommitted changes (lock.json code_commit is null)"
    repo = _repo_with(commit, repos)
    if repo is None:
        return False, f"its code commit {commit[:12]} is not in this repository (`git fetch origin {commit}` brings it)"
    blobs = {}
    for line in repo.git.ls_tree("-r", "-z", commit, "--", "evidence").split("\0"):
        if line:
            info, path = line.split("\t", 1)
            mode, kind, sha = info.split()
            if kind == "blob":
                blobs[path] = sha
    if "evidence/__init__.py" not in blobs:
        return False, f"commit {commit[:12]} holds no evidence package"
    seen = set()
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        for name in z.namelist():
            if name.endswith("/") or name.split("/")[0].endswith(".dist-info"):
                continue
            body = z.read(name)
            if blobs.get(name) != hashlib.sha1(b"blob %d\0" % len(body) + body).hexdigest():
                return False, f"its file {name} is not the file of commit {commit[:12]}"
            seen.add(name)
    missing = sorted(p for p in blobs if p.endswith(".py") and p not in seen)
    if missing:
        return False, f"it lacks {', '.join(missing[:3])} of commit {commit[:12]}"
    return True, f"its files equal evidence/ at commit {commit[:12]} of this repository"


def _equals_running(data: bytes) -> tuple[bool, str]:
    """Is the wheel the code the auditor is running (e.g. both pip-installed evidence of one version)?
    Then running it runs nothing the auditor has not already chosen to run."""
    import evidence

    pkg = Path(evidence.__file__).resolve().parent
    with zipfile.ZipFile(io.BytesIO(data)) as z:
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


def _repo_with(commit: str, repos: list[Any]) -> Any:
    import git

    for repo in repos:
        if repo is None:
            continue
        try:
            repo.git.cat_file("-e", f"{commit}^{{commit}}")  # the object itself, not a lazy reference to it
            return repo
        except (ValueError, git.BadName, git.GitCommandError):
            continue
    return None


def _wheel_env(root: Path, lock_path: Path, repos: list[Any], *, trust: bool) -> RegenEnv:
    try:
        lock = json.loads(lock_path.read_text(encoding="utf-8"))
        wheel = root / REGEN_DIR / lock["wheel"]
        want = lock["wheel_sha256"]
        entry = lock.get("entry") or ENTRY
        render = lock.get("render") or {}
    except (OSError, ValueError, KeyError, TypeError) as e:
        return _unavailable(f"{LOCK} is unreadable ({type(e).__name__}: {e})")
    if "/" in lock["wheel"] or not wheel.is_file():
        return _unavailable(f"the wheel {lock['wheel']!r} named by {LOCK} is not in {REGEN_DIR}/")
    data = wheel.read_bytes()
    if sha256_bytes(data) != want:
        return _unavailable(f"{REGEN_DIR}/{lock['wheel']} does not hash to the sha256 {LOCK} gives")
    if not re.fullmatch(r"evidence(\.\w+)+:\w+", str(entry)):
        return _unavailable(f"{LOCK} names the entry point {entry!r}, not a function of the evidence package")
    bound, why = _bind_wheel(data, lock, repos)
    if not bound:
        same, why_same = _equals_running(data)
        if same:
            bound, why = True, why_same
        else:
            why = f"{why}; {why_same}"
    if not bound and not trust:
        return _unavailable(f"the release's regenerator ({lock['wheel']}) cannot be bound to code in this repository: {why}. "
                            "`--regen-env wheel` runs it anyway (the release's own code, unverified: it could reproduce "
                            "forged derived files)")
    bound_by = why if bound else f"not bound to this repository ({why}), run by request (--regen-env wheel)"
    site = cache_root() / f"wheel-{want[:24]}"
    if not (site / ".complete").is_file():
        tmp = Path(tempfile.mkdtemp(prefix=".wheel-", dir=_mkcache()))
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            z.extractall(tmp)  # zipfile refuses names outside tmp
        (tmp / ".complete").write_text("ok\n")
        _install_dir(tmp, site)
    diffs = lock_differences(render)
    if not diffs:
        return RegenEnv("wheel", f"the release's own regenerator ({lock['wheel']}: {bound_by}) on {sys.executable}, "
                        "whose render stack equals the release's lock", pythonpath=str(site), entry=entry)
    return _venv_env(lock, render, wheel, entry, diffs, bound_by)


def _venv_env(lock: dict, render: dict, wheel: Path, entry: str, diffs: list[str], bound_by: str) -> RegenEnv:
    here = ".".join(map(str, sys.version_info[:2]))
    if str(render.get("python", "")).split(".")[:2] != here.split("."):
        return _unavailable(f"the release's regenerator needs Python {render.get('python')} (this is {here}); "
                            f"render stack differences: {'; '.join(diffs[:6])}")
    key = sha256_bytes(dumps({"lock": render, "wheel": lock["wheel_sha256"]}).encode())[:24]
    venv = cache_root() / f"venv-{key}"
    py = venv / "bin" / "python"
    if not (venv / ".complete").is_file():
        tmp = Path(tempfile.mkdtemp(prefix=".venv-", dir=_mkcache()))
        pins = [f"{n}=={v}" for n, v in sorted((render.get("packages") or {}).items())]
        steps = [[sys.executable, "-m", "venv", str(tmp)],
                 [str(tmp / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps", str(wheel), *pins]]
        for cmd in steps:
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                shutil.rmtree(tmp, ignore_errors=True)
                return _unavailable(f"could not build an isolated environment from the release's lock (`{' '.join(cmd[:4])} ...` "
                                    f"exited {r.returncode}: {(r.stderr or r.stdout).strip()[-300:]}); this interpreter "
                                    f"differs from the lock: {'; '.join(diffs[:6])}")
        (tmp / ".complete").write_text("ok\n")
        # a venv's scripts name their folder: it is used where it was built, and renamed only as a whole
        try:
            _install_dir(tmp, venv)
        except OSError:
            venv = tmp
        py = venv / "bin" / "python"
    return RegenEnv("venv", f"the release's own regenerator ({lock['wheel']}: {bound_by}) in an isolated environment built from its "
                    f"lock ({venv}), since this interpreter differs: {'; '.join(diffs[:4])}",
                    python=str(py), entry=entry)


def _commit_env(commit: str, repos: list[Any]) -> RegenEnv:
    tree = cache_root() / f"commit-{commit}"
    if not (tree / ".complete").is_file():
        found = _repo_with(commit, repos)
        if found is None:
            return _unavailable(f"the release was frozen at commit {commit[:12]} (release.json freeze.code_commit), before "
                                "releases carried their regenerator, and that commit is not in this repository "
                                f"(`git fetch origin {commit}` brings it)")
        if not _in_tree(found, commit, "evidence/__init__.py"):
            return _unavailable(f"the release names commit {commit[:12]} as the code that froze it, but that commit's tree "
                                "holds no evidence package, and the release carries no regenerator of its own")
        tmp = Path(tempfile.mkdtemp(prefix=".commit-", dir=_mkcache()))
        try:
            buf = io.BytesIO()
            # the code and, where a tree of that time kept them, the report templates beside it
            paths = [p for p in ("evidence", "templates") if _in_tree(found, commit, p)]
            found.archive(buf, treeish=commit, format="tar", path=paths)
            buf.seek(0)
            with tarfile.open(fileobj=buf) as tf:
                tf.extractall(tmp, filter="data")
        except Exception as e:
            shutil.rmtree(tmp, ignore_errors=True)
            return _unavailable(f"could not extract commit {commit[:12]}'s tree ({type(e).__name__}: {e})")
        (tmp / ".complete").write_text("ok\n")
        _install_dir(tmp, tree)
    legacy = not (tree / "evidence" / "derive.py").is_file()
    return RegenEnv("commit", f"the code of commit {commit[:12]} that froze the release (git archive into {tree}), "
                    f"on {sys.executable}", pythonpath=str(tree), driver="legacy" if legacy else "entry")


def _in_tree(repo: Any, commit: str, path: str) -> bool:
    try:
        repo.commit(commit).tree / path
        return True
    except KeyError:
        return False


def _mkcache() -> Path:
    c = cache_root()
    c.mkdir(parents=True, exist_ok=True, mode=0o700)
    return c


def _install_dir(tmp: Path, final: Path) -> None:
    """Move a fully written folder into place; a concurrent verify that got there first wins."""
    try:
        os.replace(tmp, final)
    except OSError:
        if (final / ".complete").is_file():
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            shutil.rmtree(final, ignore_errors=True)
            os.replace(tmp, final)
