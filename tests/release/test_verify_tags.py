"""Tag states: present and binding (pass); absent in this clone (skip, said prominently, and the files are
compared with HEAD instead; --require-tag fails it); not in a repository at all (skip with the same note; --require-tag fails); lightweight,
moved, or with edited digests (fail). And `cd releases/X && evidence verify .`."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from evidence.release import verify
from regen_fixtures import freeze_in_new_repo

SDE = 1780000000
TAG = "v1"
CLI = "import sys; from evidence.cli import main; sys.argv[0] = 'evidence'; main()"


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout


@pytest.fixture(scope="module")
def frozen(tmp_path_factory):
    return freeze_in_new_repo(tmp_path_factory.mktemp("tags") / "repo", TAG, SDE)


@pytest.fixture
def repo(frozen, tmp_path):
    r = tmp_path / "repo"
    shutil.copytree(frozen, r, symlinks=True)
    return r


def _git_status(rep: verify.VerifyReport) -> dict[str, str]:
    return {c.id: c.status for c in rep.checks if c.id.startswith("git.")}


def _v(repo: Path, **kw) -> verify.VerifyReport:
    return verify.verify(repo / "releases" / TAG, regen=False, **kw)


def test_present_and_binding(repo):
    rep = _v(repo)
    st = _git_status(rep)
    assert st.pop("git.head") == "skip"  # the tag is here: git.files compares with the tagged commit
    assert set(st.values()) == {"pass"} and rep.ok and not rep.notes


def test_absent_in_this_clone_is_not_a_pass_and_says_so(repo):
    _git(repo, "tag", "-d", TAG)
    rep = _v(repo)
    assert rep.ok
    tag = rep.by_id()["git.tag"]
    assert tag.status == "skip" and "tag binding not checked: tag not present here; git fetch --tags" in tag.message
    assert any("git fetch --tags" in n for n in rep.notes)
    assert {k: v for k, v in _git_status(rep).items() if k not in ("git.tag", "git.name", "git.head")} == dict.fromkeys(
        ("git.annotated", "git.peel", "git.message", "git.files"), "skip")
    assert _git_status(rep)["git.head"] == "pass" and _git_status(rep)["git.name"] == "pass"
    strict = _v(repo, require_tag=True)
    assert not strict.ok and {c.id for c in strict.failed} == {"git.tag"}


def test_absent_cli_prints_the_note_and_require_tag_fails(repo):
    _git(repo, "tag", "-d", TAG)
    rel = repo / "releases" / TAG
    ok = subprocess.run([sys.executable, "-c", CLI, "verify", "--no-regen", str(rel)], capture_output=True, text=True)
    assert ok.returncode == 0 and "NOTE: tag binding not checked: tag not present here; git fetch --tags" in ok.stdout
    strict = subprocess.run([sys.executable, "-c", CLI, "verify", "--no-regen", "--require-tag", str(rel)],
                            capture_output=True, text=True)
    assert strict.returncode == 1 and "git.tag" in strict.stdout


def test_not_in_a_repository(repo, tmp_path):
    alone = tmp_path / "alone" / TAG
    shutil.copytree(repo / "releases" / TAG, alone)
    rep = verify.verify(alone, regen=False)
    st = _git_status(rep)
    assert rep.ok and st.pop("git.name") == "pass" and set(st.values()) == {"skip"}
    assert "not inside a git repository" in rep.by_id()["git.head"].message
    assert any("not in a git repository" in n for n in rep.notes)
    assert "git.tag" in {c.id for c in verify.verify(alone, regen=False, require_tag=True).failed}


def test_lightweight_tag_fails(repo):
    commit = _git(repo, "rev-parse", f"{TAG}^{{commit}}").strip()
    _git(repo, "tag", "-d", TAG)
    _git(repo, "tag", TAG, commit)
    assert _git_status(_v(repo))["git.annotated"] == "fail"


def test_moved_tag_fails(repo):
    msg = _git(repo, "tag", "-l", "--format=%(contents)", TAG)
    (repo / "later.txt").write_text("a later commit\n")
    _git(repo, "add", "later.txt")
    _git(repo, "commit", "-q", "-m", "later")
    _git(repo, "tag", "-f", "-a", TAG, "-m", msg, "HEAD")  # same message, another commit
    st = _git_status(_v(repo))
    assert st["git.peel"] == "fail" and st["git.tag"] == "pass"


def test_edited_digests_fail(repo):
    msg = _git(repo, "tag", "-l", "--format=%(contents)", TAG)
    lines = msg.splitlines()
    i = next(k for k, ln in enumerate(lines) if ln.startswith("manifest-sha256.txt sha256:"))
    lines[i] = "manifest-sha256.txt sha256:" + "0" * 64
    commit = _git(repo, "rev-parse", f"{TAG}^{{commit}}").strip()
    _git(repo, "tag", "-f", "-a", TAG, "-m", "\n".join(lines) + "\n", commit)
    st = _git_status(_v(repo))
    assert st["git.message"] == "fail" and st["git.peel"] == "pass"


def test_verify_dot_from_inside_the_release(repo):
    rel = repo / "releases" / TAG
    r = subprocess.run([sys.executable, "-c", CLI, "verify", "--no-regen", "."], cwd=rel, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "VALID" in r.stdout and "archive.sha256" in r.stdout
    tar = subprocess.run([sys.executable, "-c", CLI, "verify", "--no-regen", f"{TAG}.tar"], cwd=rel.parent,
                         capture_output=True, text=True)
    assert tar.returncode == 0, tar.stdout + tar.stderr
