"""`freeze` as an author meets it: the one scanner refuses every secret kind, `--tag` alone picks the
complete run of the spec the tag names (or lists the candidates and refuses), the publish command
is printed, and an interrupted freeze leaves nothing behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import bagit
import pytest

from evidence.release import freeze, layout
from rundir_fixtures import build_run, demo_spec

SDE = "1780000000"
CLI = [sys.executable, "-c", "import sys; from evidence.cli import main; sys.argv[0] = 'evidence'; sys.exit(main())"]


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def repo(tmp_path):
    r = tmp_path / "repo"
    r.mkdir()
    _git(r, "init", "-q", "-b", "main")
    for k, v in (("user.email", "a@example.org"), ("user.name", "A"), ("commit.gpgsign", "false"), ("tag.gpgsign", "false")):
        _git(r, "config", k, v)
    (r / ".gitignore").write_text("runs/\n")
    _git(r, "add", ".gitignore")
    _git(r, "commit", "-q", "-m", "init")
    return r


def _cli(repo: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "SOURCE_DATE_EPOCH": SDE, "COLUMNS": "250"}
    return subprocess.run(CLI + list(args), cwd=repo, capture_output=True, text=True, env=env, timeout=timeout)


def _nothing_left(repo: Path, tag: str) -> None:
    rel = repo / "releases"
    assert not rel.exists() or sorted(p.name for p in rel.iterdir()) == [], sorted(rel.iterdir())
    assert _git(repo, "tag", "-l") == ""
    assert _git(repo, "status", "--porcelain") == ""
    assert _git(repo, "rev-list", "--count", "HEAD").strip() == "1"


# --------------------------------------------------------------------------- secrets

GHP = "ghp_" + "Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0FeDcBa98"
PGP = ("-----BEGIN PGP PRIVATE KEY BLOCK-----\n\nlQOYBGN" + "a1B2c3D4" * 8 + "\n=Ab12\n"
       "-----END PGP PRIVATE KEY BLOCK-----\n")


@pytest.mark.parametrize("planted, where", [
    (f"INFO cloning with {GHP}\n", "engine/server.log:1"),
    ("startup\n" + PGP, "engine/server.log:2"),
    ('{"note": "' + "AIza" + "SyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q" + '"}\n', "engine/server.log:1"),
    ("x\ny\nslack xoxb-" + "123456789012-abcdefABCDEF\n", "engine/server.log:3"),
], ids=["ghp", "pgp-block", "google", "slack"])
def test_freeze_refuses_what_the_old_release_scanner_missed(repo, planted, where):
    run = build_run(repo / "runs", run_id="leaky")
    (run / "engine" / "server.log").write_text(planted)
    with pytest.raises(layout.ReleaseError, match="secret") as e:
        freeze.freeze("leak-v1", [run], repo)
    assert where in str(e.value) and GHP not in str(e.value) and "a1B2c3D4a1B2" not in str(e.value)
    _nothing_left(repo, "leak-v1")
