"""What a design can claim before it runs (validate and plan say it), and the declared equivalence margin."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from evidence.spec.model import SpecError, load_spec
from evidence.spec.plan import design_claim

ROOT = Path(__file__).resolve().parents[2]


def _spec(tmp_path: Path, repeats: int, sessions: int | None, extra: str = "") -> Path:
    text = (ROOT / "specs" / "article1.yaml").read_text()
    assert "repeats: 3" in text
    text = text.replace("repeats: 3", f"repeats: {repeats}" + (f"\n  sessions: {sessions}" if sessions else ""))
    p = tmp_path / "s.yaml"
    p.write_text(text + extra)
    return p


@pytest.mark.parametrize(
    "repeats,sessions,unit,n,scope,claims",
    [
        (3, 1, "repeat", 3, "this server start", False),
        (6, 2, "session", 2, "these 2 server starts", False),
        (6, 3, "session", 3, "these 3 server starts", True),
        (4, 4, "session", 4, "these 4 server starts", True),
    ],
)
def test_design_claim(tmp_path, repeats, sessions, unit, n, scope, claims) -> None:
    d = design_claim(load_spec(_spec(tmp_path, repeats, sessions)))
    assert (d["unit"], d["n"], d["df"], d["scope"]) == (unit, n, n - 1, scope)
    assert (d["claim_note"] is None) == claims
    if not claims:
        assert "sweep.sessions" in d["claim_note"] and "sweep.sessions" in d["text"]


def test_validate_and_plan_say_what_the_design_can_claim(tmp_path) -> None:
    p = _spec(tmp_path, 3, 1)
    r = subprocess.run(
        [sys.executable, "-m", "evidence.cli", "validate", str(p), "--json"], capture_output=True, text=True, cwd=ROOT
    )
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)["design"]
    assert d["scope"] == "this server start" and "one server start" in d["claim_note"]
    r = subprocess.run(
        [sys.executable, "-m", "evidence.cli", "plan", str(_spec(tmp_path, 6, 3))],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert r.returncode == 0, r.stderr
    assert "can claim: verdicts over 3 server starts (2 df); scope: these 3 server starts" in r.stdout


def test_margin_is_a_fraction(tmp_path) -> None:
    text = _spec(tmp_path, 3, None).read_text()
    assert "- {a: 128, b: 256}" in text
    ok = tmp_path / "ok.yaml"
    ok.write_text(text.replace("- {a: 128, b: 256}", "- {a: 128, b: 256, margin: 0.05}"))
    s = load_spec(ok)
    assert [c.margin for c in s.analysis.comparisons] == [0.05, None]
    bad = tmp_path / "bad.yaml"
    bad.write_text(ok.read_text().replace("margin: 0.05", "margin: 5"))
    with pytest.raises(SpecError, match="margin"):
        load_spec(bad)
