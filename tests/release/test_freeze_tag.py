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


# --------------------------------------------------------------------------- --tag without a run

def _other_spec_run(root: Path, run_id: str) -> Path:
    return build_run(root, run_id=run_id, spec=demo_spec(name="other-spec"))


def test_tag_alone_freezes_the_one_complete_run_of_its_spec(repo):
    runs = repo / "runs"
    build_run(runs, run_id="good")
    build_run(runs, run_id="half", missing=("r1-c4",))  # same spec, not complete: a candidate, not chosen
    _other_spec_run(runs, "elsewhere")
    p = _cli(repo, "freeze", "--tag", "demo-cpu-v1.0")
    assert p.returncode == 0, p.stderr
    rel = repo / "releases" / "demo-cpu-v1.0"
    meta = json.loads((rel / layout.RELEASE_JSON).read_text())
    assert [r["id"] for r in meta["runs"]] == ["good"]
    assert p.stdout.strip().splitlines()[-1] == "publish it with: git push origin main demo-cpu-v1.0"
    assert _git(repo, "tag", "-l") == "demo-cpu-v1.0\n"
    assert bagit.Bag(str(rel)).validate() is True  # the independent oracle accepts what freeze wrote


def test_tag_alone_with_several_complete_runs_lists_them_and_refuses(repo):
    runs = repo / "runs"
    build_run(runs, run_id="first")
    build_run(runs, run_id="second")
    build_run(runs, run_id="half", missing=("r1-c4",))
    p = _cli(repo, "freeze", "--tag", "demo-cpu-v1.0")
    assert p.returncode == 2 and "Traceback" not in p.stderr
    msg = " ".join(p.stderr.split())
    assert "2 complete runs" in msg and "first (spec demo-cpu, status complete" in msg and "second (" in msg
    assert "half" not in msg  # not complete: not a candidate among the complete ones
    assert "evidence freeze --tag demo-cpu-v1.0 " in msg
    _nothing_left(repo, "demo-cpu-v1.0")


def test_tag_alone_with_no_complete_run_lists_the_candidates_and_refuses(repo):
    runs = repo / "runs"
    build_run(runs, run_id="half", missing=("r1-c4",))
    _other_spec_run(runs, "elsewhere")
    p = _cli(repo, "freeze", "--tag", "demo-cpu-v1.0")
    msg = " ".join(p.stderr.split())
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert "no complete run" in msg and "half (spec demo-cpu, status incomplete" in msg and "not complete" in msg
    _nothing_left(repo, "demo-cpu-v1.0")
    # a tag naming a spec that has no run at all: the specs that do have runs are named
    with pytest.raises(layout.ReleaseError, match="no run in .* is of that spec; the runs there are of: demo-cpu, other-spec"):
        freeze.freeze("article9-v1", None, repo)
    _nothing_left(repo, "article9-v1")


# --------------------------------------------------------------------------- interruption

def _start_and_wait_for_staging(repo: Path, tag: str) -> subprocess.Popen:
    env = {**os.environ, "SOURCE_DATE_EPOCH": SDE}
    proc = subprocess.Popen(CLI + ["freeze", "--tag", tag, "runs/one"], cwd=repo, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        rel = repo / "releases"
        if rel.is_dir() and any(p.name.startswith(".tmp-") for p in rel.iterdir()):
            time.sleep(0.3)  # inside the freeze proper: copying, scanning or regenerating
            return proc
        if proc.poll() is not None:
            pytest.fail(f"freeze ended before it staged anything: {proc.communicate()}")
        time.sleep(0.05)
    proc.kill()
    pytest.fail("freeze never created its staging folder")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_interrupted_freeze_leaves_nothing_behind(repo, sig):
    build_run(repo / "runs", run_id="one")
    proc = _start_and_wait_for_staging(repo, "demo-cpu-v1")
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + sig, (proc.returncode, err)
    assert "Traceback" not in err and f"interrupted by {sig.name}" in err and "nothing was released" in err
    _nothing_left(repo, "demo-cpu-v1")
    # and the next freeze runs as if nothing had happened
    res = freeze.freeze("demo-cpu-v1", None, repo)
    assert res.runs == ["one"] and res.publish == "git push origin main demo-cpu-v1"


def test_a_killed_freeze_is_recognised_and_named(repo):
    build_run(repo / "runs", run_id="one")
    proc = _start_and_wait_for_staging(repo, "demo-cpu-v1")
    proc.kill()  # SIGKILL: nothing can clean up
    proc.communicate(timeout=60)
    left = [p for p in (repo / "releases").iterdir() if p.name.startswith(".tmp-")]
    assert len(left) == 1
    with pytest.raises(layout.ReleaseError) as e:
        freeze.freeze("demo-cpu-v2", None, repo)
    msg = str(e.value)
    assert e.value.code == 2 and str(left[0]) in msg and "killed" in msg
    assert f"freeze of tag 'demo-cpu-v1' by pid {proc.pid}" in msg and "rm -rf" in msg


def test_a_freeze_killed_after_placing_the_release_names_what_it_left(repo):
    """Killed between moving the release into place and committing it: the next freeze names the folder."""
    build_run(repo / "runs", run_id="one")
    code = ("import os, signal, sys; from pathlib import Path; import evidence.release.freeze as F; "
            "F.build_tar = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL); "
            "F.freeze('demo-cpu-v1', None, Path(sys.argv[1]))")
    p = subprocess.run([sys.executable, "-c", code, str(repo)], env={**os.environ, "SOURCE_DATE_EPOCH": SDE},
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == -signal.SIGKILL, p.stderr
    assert (repo / "releases" / "demo-cpu-v1").is_dir()
    with pytest.raises(layout.ReleaseError) as e:
        freeze.freeze("demo-cpu-v2", None, repo)
    msg = str(e.value)
    assert "put in place" in msg and "never committed" in msg and str(repo / "releases" / "demo-cpu-v1") in msg
    for path in msg.split("rm -rf ")[1].split(")")[0].split():
        subprocess.run(["rm", "-rf", path], check=True)
    _nothing_left(repo, "demo-cpu-v1")
