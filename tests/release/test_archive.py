"""`evidence archive`: the release tar rebuilt from its folder byte for byte, so a freeze commits only the
folder and NAME.tar.sha256. The committed releases rebuild their committed sha256; a fresh freeze commits no
tar, verifies without it, rebuilds it, verifies the rebuilt tar, and names the check when the sha256 lies."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from evidence.release import verify
from regen_fixtures import freeze_in_new_repo, git

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = sorted(p for p in (ROOT / "releases").glob("*.tar.sha256") if p.with_suffix("").with_suffix("").is_dir())
SDE = 1780000000
TAG = "v1"
CLI = "import sys; from evidence.cli import main; sys.argv[0] = 'evidence'; main()"


def _cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", CLI, *args], cwd=cwd, capture_output=True, text=True)


@pytest.mark.parametrize("sha", COMMITTED, ids=[p.name for p in COMMITTED])
def test_committed_release_folder_rebuilds_its_committed_sha256(sha, tmp_path):
    folder = sha.parent / sha.name.removesuffix(".tar.sha256")
    p = _cli("archive", str(folder), "--out", str(tmp_path / "x.tar"), "--json")
    assert p.returncode == 0, p.stdout + p.stderr
    res = json.loads(p.stdout)
    published = sha.read_text().split()[0]
    assert res["sha256"] == published and res["matches_published"] is True and res["written"] is True
    import hashlib

    assert hashlib.sha256((tmp_path / "x.tar").read_bytes()).hexdigest() == published


@pytest.fixture(scope="module")
def frozen(tmp_path_factory):
    return freeze_in_new_repo(tmp_path_factory.mktemp("archive") / "repo", TAG, SDE)


@pytest.fixture
def repo(frozen, tmp_path):
    r = tmp_path / "repo"
    shutil.copytree(frozen, r, symlinks=True)
    return r


def test_freeze_commits_the_sha256_not_the_tar(repo):
    committed = git(repo, "show", "--name-only", "--format=", "HEAD").splitlines()
    assert f"releases/{TAG}.tar.sha256" in committed and f"releases/{TAG}.tar" not in committed
    assert "releases/.gitignore" in committed  # the rule that keeps the rebuilt tar out of the next freeze's way
    assert (repo / "releases" / f"{TAG}.tar").is_file()  # left beside the folder to publish, ignored by git
    assert git(repo, "status", "--porcelain", "--untracked-files=all") == ""


def test_folder_verifies_without_the_tar_and_the_rebuilt_tar_verifies(repo):
    rel, tar = repo / "releases" / TAG, repo / "releases" / f"{TAG}.tar"
    old = tar.read_bytes()
    tar.unlink()
    rep = verify.verify(rel, regen=False)
    assert rep.ok, {c.id: c.message for c in rep.failed}
    assert rep.by_id()["archive.sha256"].status == "pass"
    p = _cli("archive", f"releases/{TAG}", cwd=repo)
    assert p.returncode == 0, p.stderr
    assert tar.read_bytes() == old  # byte for byte what freeze wrote
    p = _cli("verify", "--no-regen", "--json", f"releases/{TAG}.tar", cwd=repo)
    assert p.returncode == 0, p.stdout
    checks = {c["id"]: c["status"] for c in json.loads(p.stdout)["checks"]}
    assert checks["archive.sha256"] == "pass" and checks["archive.members"] == "pass"
    # a second archive finds it identical and leaves it as it is
    p = _cli("archive", f"releases/{TAG}", cwd=repo)
    assert p.returncode == 0 and "already there, identical" in p.stdout


def test_a_sha256_the_folder_does_not_rebuild_fails_a_named_check(repo):
    rel, tar = repo / "releases" / TAG, repo / "releases" / f"{TAG}.tar"
    tar.unlink()
    side = repo / "releases" / f"{TAG}.tar.sha256"
    side.write_text("0" * 64 + f"  {TAG}.tar\n")
    rep = verify.verify(rel, regen=False)
    assert {c.id for c in rep.failed} == {"archive.sha256"}
    assert rep.by_id()["archive.sha256"].findings[0].expected == "0" * 64
    p = _cli("archive", f"releases/{TAG}", cwd=repo)
    assert p.returncode == 1 and "does not rebuild its published archive" in p.stderr and "Traceback" not in p.stderr
    assert not tar.exists()  # nothing written


def test_archive_never_overwrites_another_file(repo):
    tar = repo / "releases" / f"{TAG}.tar"
    tar.write_bytes(b"not the archive")
    p = _cli("archive", f"releases/{TAG}", cwd=repo)
    assert p.returncode == 2 and "never overwritten" in p.stderr and "Traceback" not in p.stderr
    assert tar.read_bytes() == b"not the archive"
    p = _cli("archive", "README-absent", cwd=repo)
    assert p.returncode == 2 and "not a release folder" in p.stderr


def test_a_second_freeze_in_the_same_repository_is_not_blocked_by_the_tar(repo):
    from evidence.release import freeze

    from rundir_fixtures import build_run

    run = build_run(repo / "runs", run_id="second-run")
    res = freeze.freeze("v2", [run], repo)
    committed = git(repo, "show", "--name-only", "--format=", "HEAD").splitlines()
    assert "releases/v2.tar" not in committed and "releases/.gitignore" not in committed  # the rule is there already
    assert res.tar_path.is_file() and git(repo, "status", "--porcelain", "--untracked-files=all") == ""
