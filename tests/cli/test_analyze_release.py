"""`evidence analyze` never writes into a release (like `report`); --out writes elsewhere."""

from __future__ import annotations

import json
from pathlib import Path

from clirun import ROOT, ev
from conftest import skip_unless_ci

RELEASE = ROOT / "releases" / "article1-h200-v1.1"


def _files(p: Path) -> list[str]:
    return sorted(str(q.relative_to(p)) for q in p.rglob("*"))


def test_analyze_refuses_a_run_inside_a_release_and_offers_out(tmp_path: Path) -> None:
    if not (RELEASE / "bagit.txt").is_file():
        skip_unless_ci(f"the committed release {RELEASE} is missing")
    run = next(p for p in sorted((RELEASE / "data" / "raw").iterdir()) if (p / "plan.json").is_file())
    before = _files(RELEASE)
    p = ev("analyze", str(run), cwd=tmp_path)
    assert p.returncode == 2 and "inside the release" in p.stderr and "--out" in p.stderr, p.stderr
    p = ev("analyze", str(run), "--out", str(RELEASE / "data" / "x"), cwd=tmp_path)
    assert p.returncode == 2 and "inside the release" in p.stderr
    assert _files(RELEASE) == before
    p = ev("analyze", str(run), "--out", str(tmp_path / "a"), "--json", cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-2000:]
    assert json.loads(p.stdout)["comparisons"] and (tmp_path / "a" / "analysis.json").is_file()
    assert _files(RELEASE) == before
