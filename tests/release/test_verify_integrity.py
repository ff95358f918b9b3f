"""Issue 22, as an attacker who can edit a release folder but not the repository's history: the release's
names bind it to its tag (git.name), an absent tag is never a pass, a release edited in place and resealed
is caught in a tag-less clone by comparing it with what HEAD commits (git.head), manifest paths are
percent-decoded strictly (RFC 8493), and files the manifest does not list are refused before they are read.

Every case runs the CLI on its own copy, with TMPDIR inside the case's folder, and must exit non-zero
naming the check, print no traceback, and leave the case's folder as it was (TMPDIR empty afterwards).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from evidence.release import archive, layout, manifest, metadata
from evidence.release.regenerator import tag_area_files
from regen_fixtures import freeze_in_new_repo

SDE = 1780000000
TAG = "v1"
RUN_ID = "fixture-run"
RAW_REQ = f"data/raw/{RUN_ID}/trials/r1-c4/requests.jsonl"
EVIDENCE = [
    sys.executable,
    "-c",
    "import sys; from evidence.cli import main; sys.argv[0] = 'evidence'; sys.exit(main())",
]


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout


@pytest.fixture(scope="module")
def frozen(tmp_path_factory):
    return freeze_in_new_repo(tmp_path_factory.mktemp("integrity") / "repo", TAG, SDE)


@pytest.fixture
def case(frozen, tmp_path):
    """The case's folder: a copy of the repository (release, tar, .git) and an empty TMPDIR."""
    shutil.copytree(frozen, tmp_path / "repo", symlinks=True)
    (tmp_path / "tmp").mkdir()
    return tmp_path


def _snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    return {
        p.relative_to(folder).as_posix(): (p.lstat().st_size, p.lstat().st_mtime_ns)
        for p in folder.rglob("*")
        if "tmp" != p.relative_to(folder).parts[0]
    }


def _verify(case: Path, target: Path, *extra: str) -> dict:
    """`evidence verify --json --no-regen` on target; checks the rules every hostile case shares."""
    before = _snapshot(case)
    env = {**os.environ, "TMPDIR": str(case / "tmp"), "PYTHONIOENCODING": "utf-8"}
    p = subprocess.run(
        EVIDENCE + ["verify", "--json", "--no-regen", *extra, str(target)],
        capture_output=True,
        env=env,
        cwd=case,
        timeout=600,
    )
    assert b"Traceback" not in p.stderr, p.stderr.decode(errors="replace")[-2000:]
    rep = json.loads(p.stdout.decode("utf-8"))
    rep["returncode"] = p.returncode
    rep["by_id"] = {c["id"]: c for c in rep.get("checks", [])}
    assert _snapshot(case) == before, "verify wrote inside the case's folder"
    assert list((case / "tmp").iterdir()) == [], "verify left files in TMPDIR"
    return rep


def _failed(rep: dict) -> set[str]:
    return {c["id"] for c in rep["checks"] if c["status"] == "fail"}


def _reseal(rel: Path, change=None) -> None:
    """What a careful forger does with the tool's own code: manifests, release.json, bag-info, tar and its sha256."""
    meta = json.loads((rel / layout.RELEASE_JSON).read_text())
    if change:
        change(meta)
    metadata.seal(rel, meta)
    tar = rel.with_name(rel.name + ".tar")
    if tar.exists():
        sha = archive.build_tar(rel, tar, mtime=meta["freeze"]["source_date_epoch"])
        tar.with_name(tar.name + ".sha256").write_text(f"{sha}  {tar.name}\n")


def _retag(rel: Path) -> None:
    """Rewrite only the tag manifest (after a hand edit of the payload manifest)."""
    names = [*layout.TAG_FILES, *tag_area_files(rel)]
    (rel / layout.TAGMANIFEST).write_bytes(
        manifest.render_manifest({n: layout.sha256_bytes((rel / n).read_bytes()) for n in names})
    )


# --------------------------------------------------------------------------- tag binding (item 3)


def test_untouched_release_passes_the_name_and_tag_checks(case):
    rep = _verify(case, case / "repo" / "releases" / TAG)
    assert rep["returncode"] == 0, _failed(rep)
    assert rep["by_id"]["git.name"]["status"] == rep["by_id"]["git.tag"]["status"] == "pass"
    assert rep["by_id"]["git.head"]["status"] == "skip"  # the tag is here: git.files compares with it


def test_renamed_tag_in_release_json_fails_and_keeps_the_tag_checks_on(case):
    rel = case / "repo" / "releases" / TAG
    _reseal(rel, lambda m: m.update(tag="v2"))
    rep = _verify(case, rel)
    assert rep["returncode"] == 1 and "git.name" in _failed(rep)
    name = rep["by_id"]["git.name"]
    assert "'v2'" in name["message"] and "'v1'" in name["message"], name  # names both
    # the genuine tag, named by the folder, is still checked: it exists and its digests do not match
    assert rep["by_id"]["git.tag"]["status"] == "pass" and "tag v1 exists" in rep["by_id"]["git.tag"]["message"]
    assert "git.message" in _failed(rep)


def test_renamed_archive_fails_naming_both(case):
    rel = case / "repo" / "releases" / TAG
    other = case / "repo" / "releases" / "v9.tar"
    shutil.copy2(rel.with_name(f"{TAG}.tar"), other)
    rep = _verify(case, other)
    assert rep["returncode"] == 1 and "git.name" in _failed(rep)
    f = rep["by_id"]["git.name"]["findings"]
    assert any(x["found"] == "v9" and "archive" in x["path"] and TAG in x["expected"] for x in f), f


def test_absent_tag_is_skip_not_pass_and_require_tag_fails(case):
    repo = case / "repo"
    _git(repo, "tag", "-d", TAG)
    rep = _verify(case, repo / "releases" / TAG)
    assert rep["returncode"] == 0 and rep["by_id"]["git.tag"]["status"] == "skip"
    assert rep["by_id"]["git.head"]["status"] == "pass"
    strict = _verify(case, repo / "releases" / TAG, "--require-tag")
    assert strict["returncode"] == 1 and _failed(strict) == {"git.tag"}


def test_edited_in_place_and_resealed_is_caught_without_the_tag(case):
    repo = case / "repo"
    _git(repo, "tag", "-d", TAG)
    rel = repo / "releases" / TAG
    (rel / RAW_REQ).write_bytes((rel / RAW_REQ).read_bytes() + b"\n")  # changed content and size
    _reseal(rel)
    rep = _verify(case, rel)
    assert rep["returncode"] == 1 and "git.head" in _failed(rep)
    paths = {f["path"] for f in rep["by_id"]["git.head"]["findings"]}
    assert {RAW_REQ, layout.MANIFEST, layout.RELEASE_JSON} <= paths, paths
    # every fixity, metadata and name check passes: only the comparison with HEAD catches it
    assert _failed(rep) == {"git.head"}


def test_edited_in_place_same_size_is_caught_by_blob_hash(case):
    repo = case / "repo"
    _git(repo, "tag", "-d", TAG)
    rel = repo / "releases" / TAG
    b = bytearray((rel / RAW_REQ).read_bytes())
    i = b.index(b"1")
    b[i : i + 1] = b"2"
    (rel / RAW_REQ).write_bytes(bytes(b))
    _reseal(rel)
    rep = _verify(case, rel)
    f = [x for x in rep["by_id"]["git.head"]["findings"] if x["path"] == RAW_REQ]
    assert rep["returncode"] == 1 and f and f[0]["found"].startswith("blob "), rep["by_id"]["git.head"]


def test_uncommitted_copy_in_the_work_tree_fails(case):
    repo = case / "repo"
    _git(repo, "tag", "-d", TAG)
    copy = repo / "releases" / "v2"
    shutil.copytree(repo / "releases" / TAG, copy)

    def as_v2(m: dict) -> None:  # a careful copy: every name in release.json says v2 (so metadata.steps passes)
        m.update(tag="v2", repo_path="releases/v2")
        m["regenerate"]["steps"] = ["git checkout v2", "python -m pip install -e .", "evidence verify releases/v2"]

    _reseal(copy, as_v2)
    rep = _verify(case, copy)
    assert rep["returncode"] == 1 and _failed(rep) == {"git.head"}
    assert "does not hold releases/v2" in rep["by_id"]["git.head"]["message"]


def test_outside_a_repository_git_head_is_not_checked(case):
    alone = case / "alone" / TAG
    shutil.copytree(case / "repo" / "releases" / TAG, alone)
    rep = _verify(case, alone)
    head = rep["by_id"]["git.head"]
    assert head["status"] == "skip" and "not inside a git repository" in head["message"]


# --------------------------------------------------------------------------- manifest paths (item 6)


@pytest.mark.parametrize(
    "written, decoded",
    [
        ("data/a%25b", "data/a%b"),
        ("data/a%0Ab", "data/a\nb"),
        ("data/a%0d%0ab", "data/a\r\nb"),
        ("data/plain", "data/plain"),
    ],
)
def test_manifest_paths_are_percent_decoded(written, decoded):
    assert manifest.decode_manifest_path(written) == (decoded, None)
    assert manifest.decode_manifest_path(manifest.encode_manifest_path(decoded)) == (decoded, None)


@pytest.mark.parametrize("written", ["data/100%", "data/a%zzb", "data/a%2", "data/a%41", "data/%%25"])
def test_bare_percent_is_an_error(written):
    path, why = manifest.decode_manifest_path(written)
    assert path == written and why and "%25" in why
    _, problems = manifest.parse_manifest(f"{'0' * 64}  {written}\n".encode(), "m")
    assert any("RFC 8493" in p.message for p in problems), problems


def test_bare_percent_in_a_release_manifest_fails_verify(case):
    rel = case / "repo" / "releases" / TAG
    (rel / "data" / "release" / "100%").write_bytes(b"x")
    lines = (rel / layout.MANIFEST).read_text().splitlines(keepends=True)
    lines.append(f"{layout.sha256_bytes(b'x')}  data/release/100%\n")
    (rel / layout.MANIFEST).write_text("".join(sorted(lines, key=lambda l: l.split("  ", 1)[1].encode())))
    _retag(rel)
    rep = _verify(case, rel)
    assert rep["returncode"] == 1 and "bagit.manifests" in _failed(rep)
    assert any("RFC 8493" in f["message"] for f in rep["by_id"]["bagit.manifests"]["findings"])


# --------------------------------------------------------------------------- refused unread (item 5)

TIB = 1 << 40


def _sparse(path: Path, size: int = TIB) -> Path:
    with open(path, "wb") as f:  # a hole: no block is written
        f.truncate(size)
    return path


@pytest.fixture
def never_opened(monkeypatch):
    """Fail the test if any file (absolute path) in the returned set is opened (os.open, open, io.open) here."""
    import builtins
    import io

    watched: set[str] = set()
    opened: list[str] = []
    real_os_open, real_open = os.open, builtins.open

    def guard(p):
        if isinstance(p, (str, os.PathLike)) and os.path.abspath(os.fspath(p)) in watched:
            opened.append(os.fspath(p))
            raise AssertionError(f"{p} was opened")

    def os_open(p, *a, **k):
        guard(p)
        return real_os_open(p, *a, **k)

    def b_open(p, *a, **k):
        guard(p)
        return real_open(p, *a, **k)

    monkeypatch.setattr(os, "open", os_open)
    monkeypatch.setattr(builtins, "open", b_open)
    monkeypatch.setattr(io, "open", b_open)
    yield watched
    assert opened == [], opened


def _verify_in_process(rel: Path):
    from evidence.release import verify

    return verify.verify(rel, regen=False)


def test_unlisted_sparse_tib_file_is_refused_unread(case, never_opened):
    rel = case / "repo" / "releases" / TAG
    big = _sparse(rel / "data" / "raw" / RUN_ID / "huge.bin")
    never_opened.add(str(big))
    rep = _verify_in_process(rel)
    failed = {c.id for c in rep.failed}
    assert "complete.unexpected" in failed and f"data/raw/{RUN_ID}/huge.bin" in {
        f.path for f in rep.by_id()["complete.unexpected"].findings
    }
    assert "fixity.payload" not in failed  # every listed file was hashed and matches
    assert rep.by_id()["archive.sha256"].status == "skip"  # rebuilding the archive would read it


def test_unlisted_sparse_file_via_the_cli(case):
    rel = case / "repo" / "releases" / TAG
    _sparse(rel / "data" / "raw" / RUN_ID / "huge.bin")
    rep = _verify(case, rel)
    assert rep["returncode"] == 1 and "complete.unexpected" in _failed(rep)


def test_listed_file_of_another_size_is_not_hashed(case, never_opened):
    rel = case / "repo" / "releases" / TAG
    (rel / RAW_REQ).unlink()
    never_opened.add(str(_sparse(rel / RAW_REQ)))
    rep = _verify_in_process(rel)
    fx = rep.by_id()["fixity.payload"]
    assert fx.status == "fail" and any(
        f.path == RAW_REQ and f.found == "not hashed" and "declared" in f.message for f in fx.findings
    ), fx.findings
    assert {"bagit.oxum", "metadata.agrees"} <= {c.id for c in rep.failed}


def test_declared_size_beyond_the_oxum_is_not_hashed(case, never_opened):
    """release.json edited to declare the big size (tag manifest rewritten), the Payload-Oxum left as it was."""
    from evidence import canon

    rel = case / "repo" / "releases" / TAG
    (rel / RAW_REQ).unlink()
    never_opened.add(str(_sparse(rel / RAW_REQ)))
    meta = json.loads((rel / layout.RELEASE_JSON).read_text())
    next(f for f in meta["files"] if f["path"] == RAW_REQ)["bytes"] = TIB
    (rel / layout.RELEASE_JSON).write_text(canon.dumps(meta))
    _retag(rel)
    rep = _verify_in_process(rel)
    fx = rep.by_id()["fixity.payload"]
    assert fx.status == "fail" and any(f.path == RAW_REQ and "Payload-Oxum" in f.message for f in fx.findings)


def test_tib_release_json_is_not_read(case, never_opened):
    rel = case / "repo" / "releases" / TAG
    (rel / layout.RELEASE_JSON).unlink()
    never_opened.add(str(_sparse(rel / layout.RELEASE_JSON)))
    rep = _verify_in_process(rel)
    assert (
        rep.by_id()["metadata.canonical"].status == "fail" and "too large" in rep.by_id()["metadata.canonical"].message
    )
    assert "fixity.tag" in {c.id for c in rep.failed}
