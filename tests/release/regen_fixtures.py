"""A release frozen the way the real project freezes: by an evidence repository whose package is
committed in it, so its regenerator (wheel and lock) is bound to a commit of that repository.
Frozen once per session (modules that import the fixture share it); tests work on copies."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import evidence
from rundir_fixtures import build_run

SDE = 1780000000
TAG = "v1"
RUN_ID = "fixture-run"
FREEZE = (
    "import os, sys; from pathlib import Path; from evidence.release.freeze import freeze; "
    "freeze('v1', [Path('runs/fixture-run')], Path('.'))"
)


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout


def init_repo(repo: Path) -> None:
    """A new git repository at `repo` (made here) whose commits and tags need no signing key."""
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    for k, v in (
        ("user.email", "a@example.org"),
        ("user.name", "A"),
        ("commit.gpgsign", "false"),
        ("tag.gpgsign", "false"),
    ):
        git(repo, "config", k, v)


def freeze_in_new_repo(repo: Path, tag: str, sde: int, *, compress_raw: bool = False) -> Path:
    """A repository holding one fixture run (ignored) frozen in this process as releases/<tag>, tag made
    (compress_raw: the raw records stored gzipped, as `evidence freeze` does by default)."""
    from evidence.release import freeze

    init_repo(repo)
    (repo / ".gitignore").write_text("runs/\n")
    git(repo, "add", ".gitignore")
    git(repo, "commit", "-q", "-m", "init")
    run = build_run(repo / "runs", run_id=RUN_ID)
    old = os.environ.get("SOURCE_DATE_EPOCH")
    os.environ["SOURCE_DATE_EPOCH"] = str(sde)
    try:
        freeze.freeze(tag, [run], repo, compress_raw=compress_raw)
    finally:
        if old is None:
            os.environ.pop("SOURCE_DATE_EPOCH")
        else:
            os.environ["SOURCE_DATE_EPOCH"] = old
    return repo


_BUILT: dict[str, Path] = {}


@pytest.fixture(scope="session")
def code_release(tmp_path_factory) -> Path:
    """The repository (package committed, one run frozen as releases/v1 with tag v1)."""
    if "repo" not in _BUILT:
        _BUILT["repo"] = _freeze(tmp_path_factory)
    return _BUILT["repo"]


def _freeze(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("regen")
    repo = base / "repo"
    init_repo(repo)
    (repo / ".gitignore").write_text("runs/\n__pycache__/\n")
    src = Path(evidence.__file__).resolve().parent
    shutil.copytree(src, repo / "evidence", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copyfile(src.parent / name, repo / name)
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "the code")
    build_run(repo / "runs", run_id=RUN_ID)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(PYTHONPATH=str(repo), SOURCE_DATE_EPOCH=str(SDE), PYTHONDONTWRITEBYTECODE="1")
    r = subprocess.run([sys.executable, "-P", "-c", FREEZE], cwd=repo, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return repo


def reseal(rel: Path, meta: dict | None = None) -> None:
    """What a careful forger does with the tool's own code: rewrite release.json, the manifests, the archive
    beside the folder and its sha256, all consistent with the edited folder."""
    import json

    from evidence.release import archive, layout, metadata

    meta = metadata.seal(rel, meta if meta is not None else json.loads((rel / layout.RELEASE_JSON).read_text()))
    tar = rel.with_name(rel.name + ".tar")
    sha = archive.build_tar(rel, tar, mtime=meta["freeze"]["source_date_epoch"])
    rel.with_name(tar.name + ".sha256").write_text(f"{sha}  {tar.name}\n")
    commit_forgery(rel)


def commit_forgery(rel: Path) -> None:
    """A forgery in a clone without the tag is committed, as a merged change would be: otherwise git.head
    (the folder against what HEAD commits at its path) fails first and the gate keeps regeneration, the
    stage these cases test, from running."""
    repo = rel.parents[1]
    if (repo / ".git").exists() and not git(repo, "tag", "-l", rel.name).strip():
        git(repo, "add", "-A", "--", str(rel.parent.relative_to(repo)))
        git(repo, "commit", "-q", "--allow-empty", "-m", "resealed " + rel.name)


def rewrite_lock(rel: Path, **changes) -> None:
    """Change top-level fields of the release's lock and reseal, as a forger with the tool's code would."""
    import json

    from evidence.release import regenerator

    lock = json.loads((rel / regenerator.LOCK).read_text())
    lock.update(changes)
    (rel / regenerator.LOCK).write_text(json.dumps(lock))
    reseal(rel)


def rewrite_wheel(rel: Path, changes: dict[str, bytes], **lock_changes) -> None:
    """Replace or add files of the release's wheel, rewrite its RECORD to agree (as a careful forger would),
    and reseal the lock's digest and the manifests."""
    import base64
    import hashlib
    import json
    import zipfile

    from evidence.release import regenerator

    lock = json.loads((rel / regenerator.LOCK).read_text())
    wheel = rel / regenerator.REGEN_DIR / lock["wheel"]
    with zipfile.ZipFile(wheel) as z:
        files = {n: z.read(n) for n in z.namelist() if not n.endswith("/")}
    files.update(changes)
    record = next(n for n in files if n.endswith(".dist-info/RECORD"))
    rows = [
        f"{n},sha256={base64.urlsafe_b64encode(hashlib.sha256(b).digest()).rstrip(b'=').decode()},{len(b)}"
        for n, b in files.items()
        if n != record
    ]
    files[record] = ("\n".join(rows + [f"{record},,"]) + "\n").encode()
    with zipfile.ZipFile(wheel, "w") as z:
        for n, b in files.items():
            z.writestr(n, b)
    rewrite_lock(rel, wheel_sha256=hashlib.sha256(wheel.read_bytes()).hexdigest(), **lock_changes)
