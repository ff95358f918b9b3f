"""Hostile input to `verify`: archives that lie about their members, names that are not UTF-8,
release.json with extra fields or wrong types. Each must fail cleanly (a named check, or one
paragraph and exit 2), never write what the release does not declare, never print a traceback.

One release is frozen per module from a synthetic run; every case works on a copy outside the
git repository (so the git checks skip and only what is under test can fail).
"""

from __future__ import annotations

import io
import json
import os
import resource
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from evidence.release import freeze, layout, metadata, verify
from rundir_fixtures import build_run

SDE = 1780000000
TAG = "h1"
RUN_ID = "fixture-run"
EVIDENCE = [sys.executable, "-c", "import sys; from evidence.cli import main; sys.argv[0] = \"evidence\"; sys.exit(main())"]
RAW_REQ = f"data/raw/{RUN_ID}/trials/r1-c4/requests.jsonl"


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)


@pytest.fixture(scope="module")
def frozen(tmp_path_factory):
    base = tmp_path_factory.mktemp("hostile")
    repo = base / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    for k, v in (("user.email", "a@example.org"), ("user.name", "A"), ("commit.gpgsign", "false"), ("tag.gpgsign", "false")):
        _git(repo, "config", k, v)
    (repo / ".gitignore").write_text("runs/\n")
    _git(repo, "add", ".gitignore")
    _git(repo, "commit", "-q", "-m", "init")
    run = build_run(repo / "runs", run_id=RUN_ID)
    os.environ["SOURCE_DATE_EPOCH"] = str(SDE)
    try:
        freeze.freeze(TAG, [run], repo)
    finally:
        os.environ.pop("SOURCE_DATE_EPOCH")
    return repo / "releases"


@pytest.fixture
def box(frozen, tmp_path):
    """A copy of the release folder and its tar, outside any git repository."""
    out = tmp_path / "box"
    out.mkdir()
    shutil.copytree(frozen / TAG, out / TAG)
    shutil.copy2(frozen / f"{TAG}.tar", out / f"{TAG}.tar")
    return out


def _members(tar: Path) -> list[tuple[tarfile.TarInfo, bytes | None]]:
    with tarfile.open(tar) as tf:
        return [(m, tf.extractfile(m).read() if m.isfile() else None) for m in tf.getmembers()]


def _write(tar: Path, members: list[tuple[tarfile.TarInfo, bytes | None]]) -> None:
    with tarfile.open(tar, "w", format=tarfile.PAX_FORMAT) as tf:
        for m, data in members:
            if data is not None and not m.pax_headers.get("GNU.sparse.map"):
                m.size = len(data)
            tf.addfile(m, io.BytesIO(data) if data is not None else None)


def _cli(args: list[str], *, fsize: int | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    def limit() -> None:
        if fsize is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    env = {**os.environ, "PYTHONIOENCODING": "utf-8", "COLUMNS": "200"}
    return subprocess.run(EVIDENCE + args, capture_output=True, preexec_fn=limit, env=env, cwd=cwd, timeout=300)


def _json_out(p: subprocess.CompletedProcess) -> dict:
    text = p.stdout.decode("utf-8")  # strict: --json is always valid UTF-8
    return json.loads(text)


def _sparse_member(name: str, claimed: int) -> tuple[tarfile.TarInfo, bytes]:
    """A PAX (GNU 1.0-style map) sparse member: 512 real bytes that expand to `claimed` bytes."""
    data = b"x" * 512
    m = tarfile.TarInfo(name)
    m.pax_headers = {"GNU.sparse.map": f"0,{len(data)}", "GNU.sparse.size": str(claimed),
                     "GNU.sparse.major": "0", "GNU.sparse.minor": "1"}
    m.size = len(data)
    return m, data


# --------------------------------------------------------------------------- archives

def test_sparse_member_claiming_8gib_writes_nothing_and_no_traceback(box):
    """Under a 64 MiB file-size limit: before the check, extraction wrote zeros until EFBIG and crashed."""
    members = _members(box / f"{TAG}.tar")
    members.append(_sparse_member(f"{TAG}/data/raw/{RUN_ID}/big.bin", 8 << 30))
    bad = box / "sparse.tar"
    _write(bad, members)
    p = _cli(["verify", "--json", "--no-regen", str(bad)], fsize=64 << 20)
    assert b"Traceback" not in p.stderr, p.stderr.decode(errors="replace")[-2000:]
    rep = _json_out(p)
    assert p.returncode == 1 and not rep["ok"]
    am = next(c for c in rep["checks"] if c["id"] == "archive.members")
    assert am["status"] == "fail" and any("sparse" in json.dumps(f) for f in am["findings"]), am
    assert all(c["status"] == "skip" for c in rep["checks"] if c["id"] != "archive.members")


def test_member_claiming_more_than_the_archive_holds(box):
    members = _members(box / f"{TAG}.tar")
    bad = box / "lying.tar"
    _write(bad, members)
    # the last file member's header claims 1 GiB; its data is the few bytes the archive holds
    raw = bytearray(bad.read_bytes())
    with tarfile.open(bad) as tf:
        last = [m for m in tf.getmembers() if m.isfile()][-1]
    pax = raw[last.offset:last.offset_data]
    assert b" size=" not in pax  # small file: the size is in the ustar header, octal at offset 124
    hdr = last.offset_data - 512
    raw[hdr + 124:hdr + 136] = b"%011o\0" % (1 << 30)
    raw[hdr + 148:hdr + 156] = b"        "
    raw[hdr + 148:hdr + 156] = b"%06o\0 " % sum(raw[hdr:hdr + 512])
    bad.write_bytes(bytes(raw))
    with pytest.raises(layout.ReleaseError) as e:  # could not verify (exit 2), nothing extracted
        verify.verify(bad, regen=False)
    assert e.value.code == 2 and "nothing was extracted" in str(e.value)


def test_member_size_checked_against_the_manifests_before_writing(box, monkeypatch):
    members = _members(box / f"{TAG}.tar")
    for i, (m, data) in enumerate(members):
        if m.name == f"{TAG}/{RAW_REQ}":
            members[i] = (m, data + b"x" * 4096)
    members.append((tarfile.TarInfo(f"{TAG}/data/raw/{RUN_ID}/unlisted.bin"), b"y" * 100))
    bad = box / "sizes.tar"
    _write(bad, members)
    written: list[str] = []
    real_open = os.open
    monkeypatch.setattr(os, "open", lambda p, flags, *a, **k: (written.append(str(p)) if flags & os.O_WRONLY else None)
                        or real_open(p, flags, *a, **k))
    rep = verify.verify(bad, regen=False)
    assert {c.id for c in rep.failed} == {"archive.members"}
    found = {f.path: f for f in rep.by_id()["archive.members"].findings}
    assert f"{TAG}/{RAW_REQ}" in found and f"{TAG}/data/raw/{RUN_ID}/unlisted.bin" in found
    assert not [w for w in written if "evidence-verify-" in w], written  # nothing was extracted


def test_payload_larger_than_payload_oxum(box):
    members = _members(box / f"{TAG}.tar")
    for i, (m, data) in enumerate(members):
        if m.name == f"{TAG}/{layout.BAG_INFO}":
            text = data.decode()
            octets, count = text.split("Payload-Oxum: ")[1].split()[0].split(".")
            members[i] = (m, text.replace(f"{octets}.{count}", f"{int(octets) - 1000}.{count}").encode())
    bad = box / "oxum.tar"
    _write(bad, members)
    rep = verify.verify(bad, regen=False)
    assert {c.id for c in rep.failed} == {"archive.members"}
    assert any("Payload-Oxum" in f.message for f in rep.by_id()["archive.members"].findings)


def test_compressed_archive_is_refused_before_inflating(box):
    import gzip

    gz = box / "release.tar.gz"
    gz.write_bytes(gzip.compress((box / f"{TAG}.tar").read_bytes()))
    with pytest.raises(layout.ReleaseError) as e:  # a compressed stream has no sizes to check before inflating it
        verify.verify(gz, regen=False)
    assert e.value.code == 2 and "compressed" in str(e.value)


def test_genuine_archive_under_a_small_file_size_limit_is_one_paragraph(box):
    p = _cli(["verify", "--no-regen", str(box / f"{TAG}.tar")], fsize=16 << 10)
    err = p.stderr.decode("utf-8")
    assert p.returncode == 2 and "Traceback" not in err, err[-2000:]
    assert "file-size limit" in err or "ulimit" in err, err


def test_genuine_archive_still_verifies(box):
    rep = verify.verify(box / f"{TAG}.tar", regen=False)
    assert rep.ok, [(c.id, c.findings[:2]) for c in rep.failed]


# --------------------------------------------------------------------------- names

NON_UTF8 = b"caf\xe9-\x1b[31mred.txt"


def _plant_non_utf8(rel_dir: Path) -> None:
    folder = os.fsencode(rel_dir / f"data/raw/{RUN_ID}")
    with open(os.path.join(folder, NON_UTF8), "wb") as f:
        f.write(b"planted\n")


def test_non_utf8_name_in_a_folder_json_is_utf8_and_text_does_not_crash(box):
    _plant_non_utf8(box / TAG)
    p = _cli(["verify", "--json", "--no-regen", str(box / TAG)])
    assert b"Traceback" not in p.stderr, p.stderr.decode(errors="replace")[-2000:]
    rep = _json_out(p)
    assert p.returncode == 1
    enc = next(c for c in rep["checks"] if c["id"] == "paths.encoding")
    assert enc["status"] == "fail"
    assert any("caf\\xe9-\\x1b[31mred.txt" in f["path"] for f in enc["findings"]), enc["findings"]
    p = _cli(["verify", "--no-regen", str(box / TAG)])
    out = p.stdout.decode("utf-8")
    assert p.returncode == 1 and b"Traceback" not in p.stderr and "NOT VALID" in out
    assert "caf\\xe9" in out and "\x1b[31m" not in out  # escaped, and no terminal escape gets through


def test_non_utf8_member_name_in_an_archive(box):
    members = _members(box / f"{TAG}.tar")
    m = tarfile.TarInfo(f"{TAG}/data/raw/{RUN_ID}/" + os.fsdecode(NON_UTF8))
    members.append((m, b"planted\n"))
    bad = box / "names.tar"
    _write(bad, members)
    p = _cli(["verify", "--json", "--no-regen", str(bad)])
    assert b"Traceback" not in p.stderr, p.stderr.decode(errors="replace")[-2000:]
    rep = _json_out(p)
    assert p.returncode == 1
    members = next(c for c in rep["checks"] if c["id"] == "archive.members")
    assert any("caf\\xe9-\\x1b[31mred.txt" in f["path"] for f in members["findings"]), members


# --------------------------------------------------------------------------- release.json

def _reseal(rel: Path, change) -> None:
    meta = json.loads((rel / layout.RELEASE_JSON).read_text())
    change(meta)
    metadata.seal(rel, meta)


@pytest.mark.parametrize("change, where", [
    (lambda m: m.update(extra_field="hello"), "extra_field"),
    (lambda m: m["freeze"].update(source_date_epoch=str(m["freeze"]["source_date_epoch"])), "freeze.source_date_epoch"),
    (lambda m: m.update(tag=42), "tag"),
    (lambda m: m["runs"][0].update(note="x"), "runs.0.note"),
    (lambda m: m["tool"].update(version=1), "tool.version"),
    (lambda m: m["runs"][0]["trials"].update(planned=True), "runs.0.trials.planned"),
], ids=["extra-field", "sde-string", "tag-int", "extra-run-field", "version-int", "planned-bool"])
def test_release_json_strict_schema_even_when_resealed(box, change, where):
    rel = box / TAG
    _reseal(rel, change)
    rep = verify.verify(rel, regen=False)
    assert not rep.ok
    schema = rep.by_id()["metadata.schema"]
    assert schema.status == "fail" and any(f.path.endswith(where) for f in schema.findings), schema.findings


def test_release_json_schema_passes_on_the_untouched_release(box):
    rep = verify.verify(box / TAG, regen=False)
    assert rep.by_id()["metadata.schema"].status == "pass"


@pytest.mark.parametrize("body", [b"[" * 200000 + b"]" * 200000, b'{"files": ' * 5000 + b"1" + b"}" * 5000,
                                  b"\xff\xfe not json", b'{"format": NaN}'], ids=["deep-array", "deep-object", "not-utf8", "nan"])
def test_hostile_release_json_is_a_failed_check_not_a_traceback(box, body):
    rel = box / TAG
    (rel / layout.RELEASE_JSON).write_bytes(body)
    p = _cli(["verify", "--json", "--no-regen", str(rel)])
    assert b"Traceback" not in p.stderr, p.stderr.decode(errors="replace")[-1500:]
    rep = _json_out(p)
    assert p.returncode == 1 and "metadata.canonical" in {c["id"] for c in rep["checks"] if c["status"] == "fail"}
    # and inside an archive, read before extraction
    members = [(m, body if m.name == f"{TAG}/{layout.RELEASE_JSON}" else d) for m, d in _members(box / f"{TAG}.tar")]
    _write(box / "hostile-json.tar", members)
    p = _cli(["verify", "--json", "--no-regen", str(box / "hostile-json.tar")])
    assert b"Traceback" not in p.stderr and p.returncode == 1, p.stderr.decode(errors="replace")[-1500:]
    _json_out(p)
