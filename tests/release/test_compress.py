"""Raw records stored compressed: `freeze --compress-raw` stores request records, telemetry and server logs
as deterministic .gz (level 9, mtime 0, no name), the manifests hash the compressed bytes, release.json keeps
each original's size and sha256, and analysis, regeneration and verify read them as if they were plain."""

from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path

import pytest

from evidence.release import verify
from evidence.release.compress import NAMES, gzip_bytes
from regen_fixtures import RUN_ID, freeze_in_new_repo

SDE = 1780000000


def _freeze(repo: Path, tag: str, compress: bool) -> Path:
    return freeze_in_new_repo(repo, tag, SDE, compress_raw=compress) / "releases" / tag


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    base = tmp_path_factory.mktemp("compress")
    return _freeze(base / "plain", "v1", False), _freeze(base / "gz", "v1", True)


def test_large_raw_files_are_stored_gzipped_and_their_originals_named(pair):
    plain, gz = pair
    meta = json.loads((gz / "release.json").read_text())
    originals = {o["path"]: o for o in meta["raw_compressed"]["originals"]}
    assert originals and meta["raw_compressed"]["names"] == list(NAMES)
    assert any(p.endswith("/requests.jsonl.gz") for p in originals)
    listed = {f["path"]: f for f in meta["files"]}
    for path, o in originals.items():
        body = (gz / path).read_bytes()
        assert body[3] == 0 and body[4:8] == b"\0\0\0\0"  # no file name, mtime 0
        raw = gzip.decompress(body)
        assert hashlib.sha256(raw).hexdigest() == o["sha256"] and len(raw) == o["bytes"]
        assert raw == (plain / path.removesuffix(".gz")).read_bytes()  # the bytes as recorded, unchanged
        assert body == gzip_bytes(raw)  # deterministic: the same bytes give the same .gz
        assert listed[path]["sha256"] == hashlib.sha256(body).hexdigest()  # manifests hash what is stored
        assert path.removesuffix(".gz") not in listed
    assert "raw_compressed" not in json.loads((plain / "release.json").read_text())


def test_analysis_of_the_compressed_release_is_the_analysis_of_the_plain_one(pair):
    plain, gz = pair
    a, b = plain / "data/analysis" / RUN_ID, gz / "data/analysis" / RUN_ID
    names = sorted(p.name for p in a.iterdir())
    assert names == sorted(p.name for p in b.iterdir()) and "points.csv" in names
    for n in names:
        assert (a / n).read_bytes() == (b / n).read_bytes(), n
    assert "is missing" not in (b / "analysis.json").read_text()


def test_the_compressed_release_verifies_with_regeneration(pair):
    _, gz = pair
    rep = verify.verify(gz, regen_env="current")
    assert rep.ok, {c.id: c.message for c in rep.failed}
    assert rep.by_id()["regen.analysis"].status == "pass" and rep.by_id()["metadata.schema"].status == "pass"


def test_a_resealed_edit_of_a_compressed_file_fails_its_original(pair, tmp_path):
    import shutil

    from evidence.release import metadata

    _, gz = pair
    rel = tmp_path / "v1"
    shutil.copytree(gz, rel)
    meta = json.loads((rel / "release.json").read_text())
    path = next(o["path"] for o in meta["raw_compressed"]["originals"] if o["path"].endswith("requests.jsonl.gz"))
    raw = gzip.decompress((rel / path).read_bytes())
    (rel / path).write_bytes(gzip_bytes(raw.replace(b'"', b"'", 1)))  # an edited record, same size
    metadata.seal(rel, meta)  # manifests and release.json files rewritten to agree: fixity passes
    rep = verify.verify(rel, regen=False)
    assert {c.id for c in rep.failed} >= {"metadata.originals"}
    assert rep.by_id()["fixity.payload"].status == "pass"
    assert rep.by_id()["metadata.originals"].findings[0].path == path
    # a stream that is not gzip is said to be one, never a traceback
    (rel / path).write_bytes(b"not gzip")
    metadata.seal(rel, meta)
    rep = verify.verify(rel, regen=False)
    assert "does not decompress" in rep.by_id()["metadata.originals"].findings[0].message
