"""The release committed in this repository stays intact: every file, manifest, metadata, path and
git check passes on releases/*/ as committed. A clone without the release's tag skips git.tag with
the note "tag binding not checked" (tags do not travel with every clone; --require-tag fails it) and
compares the folder with what HEAD commits at its path instead (git.head).
Regeneration through the release's own code is tested in test_regen.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from evidence.release.verify import verify

ROOT = Path(__file__).resolve().parents[2]
RELEASES = sorted(p for p in (ROOT / "releases").iterdir() if p.is_dir()) if (ROOT / "releases").is_dir() else []


@pytest.mark.parametrize("release", RELEASES, ids=[p.name for p in RELEASES])
def test_committed_release_verifies(release):
    import git

    rep = verify(release, regen=False)
    tag_present = release.name in {t.name for t in git.Repo(ROOT, search_parent_directories=True).tags}
    assert not rep.failed, {c.id: c.message for c in rep.failed}
    if not tag_present:
        assert any("tag binding not checked" in n for n in rep.notes)
        assert "git.tag" in {c.id for c in verify(release, regen=False, require_tag=True).failed}
        assert rep.by_id()["git.tag"].status == "skip" and rep.by_id()["git.head"].status == "pass"
    passed = {c.id for c in rep.checks if c.status == "pass"}
    assert {"complete.missing", "complete.unexpected", "fixity.payload", "fixity.tag", "metadata.canonical",
            "metadata.agrees", "bagit.oxum", "paths.symlink", "paths.dotdot", "git.name"} <= passed
