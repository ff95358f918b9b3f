"""Releases say what superseded them: `freeze --supersedes OLD [--erratum FILE]` records the relation in the
new release (release.json, bag-info, its notes); `verify` of the old release says so first without changing
its verdict; releases/README.md lists every release with its reading and status, from the folders alone.
Chains: v3 supersedes v2, which corrects v1."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from evidence.release import catalog, freeze, verify
from regen_fixtures import freeze_in_new_repo, git
from rundir_fixtures import build_run

ROOT = Path(__file__).resolve().parents[2]
SDE = 1780000000
CLI = "import sys; from evidence.cli import main; sys.argv[0] = 'evidence'; main()"


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", CLI, *args], cwd=cwd, capture_output=True, text=True)


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    """v1 (no relation), v2 supersedes v1 with an erratum, v3 supersedes v2: one repository."""
    base = tmp_path_factory.mktemp("chain")
    repo = freeze_in_new_repo(base / "repo", "v1", SDE)
    erratum = base / "erratum.md"
    erratum.write_text("v1 called C4 > C8 a finding; its interval includes zero.\n")
    notes = base / "notes.md"
    notes.write_text("# v2: the corrected reading\n\nNothing is decided.\n")
    freeze.freeze(
        "v2", [build_run(repo / "runs", run_id="run-two")], repo, supersedes=["v1"], erratum=erratum, notes=notes
    )
    # v3 through the command line, as a user freezes: --supersedes, and the raw records gzipped (the CLI's default)
    build_run(repo / "runs", run_id="run-three")
    p = subprocess.run(
        [sys.executable, "-c", CLI, "freeze", "--tag", "v3", "--supersedes", "v2", "runs/run-three"],
        cwd=repo,
        capture_output=True,
        text=True,
        env={**os.environ, "SOURCE_DATE_EPOCH": str(SDE)},
    )
    assert p.returncode == 0, p.stdout + p.stderr
    return repo


def test_the_new_release_records_what_it_supersedes(chain):
    rel = chain / "releases"
    meta = json.loads((rel / "v2" / "release.json").read_text())
    old = (rel / "v1" / "release.json").read_bytes()
    assert meta["supersedes"] == [
        {
            "tag": "v1",
            "release_json_sha256": hashlib.sha256(old).hexdigest(),
            "frozen": json.loads(old)["freeze"]["date"],
            "erratum": "data/release/notes.md",
        }
    ]
    notes = (rel / "v2" / "data/release/notes.md").read_text()
    assert (
        notes.startswith("# v2: the corrected reading") and "## Erratum to v1\n\nv1 called C4 > C8 a finding" in notes
    )
    assert "Supersedes: v1\n" in (rel / "v2" / "bag-info.txt").read_text()
    assert "supersedes" not in json.loads((rel / "v1" / "release.json").read_text())  # the old one is untouched
    v3 = json.loads((rel / "v3" / "release.json").read_text())
    assert v3["supersedes"][0]["erratum"] is None and v3["raw_compressed"]["originals"]
    for t in ("v1", "v2", "v3"):  # the new fields pass every check (schema, canonical, bag-info rebuilt)
        rep = verify.verify(rel / t, regen=False)
        assert rep.ok, {c.id: c.message for c in rep.failed}
    assert rep.by_id()["metadata.originals"].status == "pass"


def test_verify_of_the_old_release_says_so_first_and_keeps_its_verdict(chain, tmp_path):
    p = _cli("verify", "--no-regen", "releases/v1", cwd=chain)
    assert p.returncode == 0, p.stdout
    first = p.stdout.splitlines()[0]
    assert first.startswith("SUPERSEDED: v1 is superseded by v2") and "releases/v2/data/release/notes.md" in p.stdout
    assert "current release of this chain: v3" in " ".join(p.stdout.split())
    j = json.loads(_cli("verify", "--no-regen", "--json", "releases/v1", cwd=chain).stdout)
    assert [n["tag"] for n in j["superseded"]["superseded_by"]] == ["v2"] and j["superseded"]["current"] == ["v3"]
    assert j["ok"] is True and j["exit_code"] == 0
    j3 = json.loads(_cli("verify", "--no-regen", "--json", "releases/v3", cwd=chain).stdout)
    assert j3["superseded"] is None
    # a broken old release still fails as before: the note never changes a verdict
    work = tmp_path / "repo"
    shutil.copytree(chain, work, symlinks=True)
    (work / "releases/v1/bag-info.txt").write_text("edited\n")
    p = _cli("verify", "--no-regen", "releases/v1", cwd=work)
    assert p.returncode == 1 and p.stdout.startswith("SUPERSEDED: v1")


def test_freeze_refuses_what_is_not_a_committed_release(chain, tmp_path):
    work = tmp_path / "repo"
    shutil.copytree(chain, work, symlinks=True)
    run = build_run(work / "runs", run_id="run-four")
    for args, words in (
        (["--supersedes", "v0"], "is not a committed release folder here"),
        (["--supersedes", "v4"], "not the new tag itself"),
        (["--erratum", "nowhere.md"], "exactly one --supersedes"),
    ):
        p = _cli("freeze", "--tag", "v4", *args, str(run), cwd=work)
        assert p.returncode == 2 and words in " ".join(p.stderr.split()) and "Traceback" not in p.stderr, p.stderr
    # a folder that is there but not committed is not a release of this repository
    shutil.copytree(work / "releases/v1", work / "releases/v9")
    (work / ".git/info/exclude").write_text("releases/v9/\n")  # so the tree is clean and the refusal is about v9
    p = _cli("freeze", "--tag", "v4", "--supersedes", "v9", str(run), cwd=work)
    assert p.returncode == 2 and "releases/v9/release.json is not committed" in " ".join(p.stderr.split())
    assert git(work, "tag", "-l", "v4") == ""


def test_the_releases_index_lists_every_release_with_its_status(chain, tmp_path):
    rel = chain / "releases"
    text = catalog.render_catalog(rel)
    assert text == catalog.render_catalog(rel)
    rows = {ln.split(" | ")[0]: ln for ln in text.splitlines() if ln.startswith("| [v")}
    assert rows["| [v3](v3/data/release/index.md)"].endswith("| current |")
    assert "superseded by v3 (release.json supersedes) |" in rows["| [v2](v2/data/release/index.md)"]
    assert "superseded by v2 (release.json supersedes); current: v3 |" in rows["| [v1](v1/data/release/index.md)"]
    assert "- Reading: The corrected reading. run-two: C" in text  # notes' title, then the run's own verdicts
    assert "`evidence verify releases/v2`" in text
    # each freeze committed the index with its release: the last one lists all three
    assert (rel / "README.md").read_text() == text
    assert git(chain, "show", "--name-only", "--format=", "v3").splitlines().count("releases/README.md") == 1
    work = tmp_path / "repo"
    shutil.copytree(chain, work, symlinks=True)
    assert _cli("releases", "index", "--check", cwd=work).returncode == 0
    (work / "releases/README.md").write_text("stale\n")
    assert _cli("releases", "index", "--check", cwd=work).returncode == 1
    assert _cli("releases", "index", cwd=work).returncode == 0
    assert (work / "releases/README.md").read_text() == text
    assert _cli("releases", "index", "--check", cwd=work).returncode == 0
    p = _cli("releases", "index", "--releases-dir", "nowhere", cwd=work)
    assert p.returncode == 2 and "no release folder" in p.stderr


def test_the_committed_releases_index_is_what_the_committed_folders_give():
    # v1.1's notes carry "## Erratum to article1-h200-v1.0": the chain of releases frozen before release.json had it
    assert (ROOT / "releases/README.md").read_text(encoding="utf-8") == catalog.render_catalog(ROOT / "releases")
    rep = verify.verify(ROOT / "releases/article1-h200-v1.0", regen=False)
    assert rep.superseded["superseded_by"][0]["tag"] == "article1-h200-v1.1" and not rep.failed


def test_hostile_folders_beside_the_release_are_never_read_whole_nor_a_traceback(chain, tmp_path):
    work = tmp_path / "repo"
    shutil.copytree(chain, work, symlinks=True)
    deep, big = work / "releases/deep", work / "releases/big"
    deep.mkdir()
    (deep / "release.json").write_text("[" * 100000)
    big.mkdir()
    with open(big / "release.json", "wb") as f:
        f.truncate(1 << 40)  # sparse: reading it would take hours
    rep = verify.verify(work / "releases/v1", regen=False)
    assert rep.ok and [n["tag"] for n in rep.superseded["superseded_by"]] == ["v2"]
    assert "| [deep](deep/) | ? | current |" in catalog.render_catalog(work / "releases")
