"""A spec that does not give its repeats or server starts gets a design that can speak for the configuration.

evidence.spec.design: one repeat per server start; 3 starts when neither is given; 3 blocks of one
start per arm with arms; an endpoint keeps its one server. Values a spec gives are never changed,
and a run keeps the design it was created with (its stored spec.resolved.json), whatever today's
defaults: runs stored before sweep.sessions existed read as one server start.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from evidence.run import lock as run_lock
from evidence.run.prepare import prepare_run_dir, recorded_design
from evidence.spec.model import SpecError, load_spec, spec_from_json, spec_to_json
from evidence.spec.plan import design_claim, make_plan

ROOT = Path(__file__).resolve().parents[2]
ARTICLE = ROOT / "specs" / "article1.yaml"


def _article(tmp_path: Path, sweep_lines: str, name: str = "s.yaml", extra: str = "") -> Path:
    """article1.yaml with its `repeats: 3` line replaced by `sweep_lines` (may be empty)."""
    text = ARTICLE.read_text()
    assert "\n  repeats: 3\n" in text and "sessions:" not in text
    p = tmp_path / name
    p.write_text(text.replace("\n  repeats: 3\n", "\n" + sweep_lines, 1) + extra)
    return p


@pytest.mark.parametrize(
    "lines,repeats,sessions",
    [
        ("", 3, 3),  # nothing given: 3 server starts of 1 repeat, the least that can speak for the configuration
        ("  repeats: 6\n", 6, 6),  # repeats given: one server start each
        ("  repeats: 1\n", 1, 1),  # one repeat can only be one start (validate says what it can claim)
        ("  sessions: 4\n", 4, 4),  # starts given: one repeat each
        ("  sessions: 1\n", 3, 1),  # one start given: 3 repeats of it, so there is an interval
        ("  repeats: 6\n  sessions: 2\n", 6, 2),  # both given: never changed
        ("  repeats: 100\n", 100, 64),  # at most 64 starts in one run
    ],
)
def test_what_is_not_given_takes_the_generalising_design(tmp_path, lines, repeats, sessions) -> None:
    s = load_spec(_article(tmp_path, lines))
    assert (s.sweep.repeats, s.sweep.sessions) == (repeats, sessions)


def test_the_default_design_can_claim_for_the_configuration(tmp_path) -> None:
    d = design_claim(load_spec(_article(tmp_path, "")))
    assert (d["unit"], d["n"], d["df"], d["scope"], d["claim_note"]) == ("session", 3, 2, "these 3 server starts", None)
    plan = make_plan(load_spec(_article(tmp_path, "")))
    assert [t.session for t in plan.trials] == [1, 1, 1, 2, 2, 2, 3, 3, 3]


def test_an_endpoint_keeps_one_server_and_says_why(tmp_path) -> None:
    text = (ROOT / "specs" / "endpoint-example.yaml").read_text()
    bare = re.sub(r"\n\s+sessions:[^\n]*", "", text)
    assert bare != text and "sessions:" not in bare
    (tmp_path / "e.yaml").write_text(bare)
    s = load_spec(tmp_path / "e.yaml")
    assert (s.sweep.repeats, s.sweep.sessions) == (3, 1)
    d = design_claim(s)
    assert d["scope"] == "this server start" and "never restarted by this tool" in d["claim_note"]


def test_arms_get_three_blocks_and_uneven_repeats_are_explained(tmp_path) -> None:
    text = (ROOT / "specs" / "standin-arms.yaml").read_text()
    bare = re.sub(r"\n\s+(repeats|sessions):[^\n]*", "", text)
    assert "repeats:" not in bare and "sessions:" not in bare
    p = tmp_path / "arms.yaml"
    p.write_text(bare)
    s = load_spec(p)
    assert (s.sweep.repeats, s.sweep.sessions) == (6, 6)  # 2 arms x 3 blocks, one repeat per start
    assert design_claim(s)["arms"]["n"] == 3
    p.write_text(bare.replace("sweep:\n", "sweep:\n  repeats: 5\n", 1))
    with pytest.raises(SpecError) as ei:
        load_spec(p)
    [(_, field, msg)] = ei.value.problems
    assert field == "sweep.sessions" and "multiple of 2" in msg and "not given" in msg


def test_validate_names_what_it_filled_in(tmp_path) -> None:
    def validate(p: Path) -> dict:
        r = subprocess.run(
            [sys.executable, "-m", "evidence.cli", "validate", "--json", str(p)],
            capture_output=True,
            text=True,
            cwd=ROOT,
        )
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)

    assert validate(_article(tmp_path, ""))["design_defaults"] == {"repeats": 3, "sessions": 3}
    assert validate(_article(tmp_path, "  repeats: 6\n  sessions: 2\n"))["design_defaults"] == {}
    r = subprocess.run(
        [sys.executable, "-m", "evidence.cli", "validate", str(_article(tmp_path, ""))],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"COLUMNS": "400", "PATH": ""},
    )
    assert r.returncode == 0 and "sweep.repeats 3, sweep.sessions 3: not in the spec" in r.stdout


def test_stored_specs_keep_their_design(tmp_path) -> None:
    # a resolved spec gives both; one stored before sweep.sessions existed (v1.0's) ran one server start
    s = load_spec(_article(tmp_path, ""))
    assert spec_from_json(spec_to_json(s)) == s
    v10 = ROOT / "releases/article1-h200-v1.0/data/raw/h200-default/spec.resolved.json"
    if v10.is_file():
        text = v10.read_text()
        assert '"sessions"' not in text
        assert spec_from_json(text).sweep.sessions == 1
    d = json.loads(spec_to_json(s))
    del d["sweep"]["sessions"]
    assert spec_from_json(json.dumps(d)).sweep.sessions == 1


def test_a_run_resumes_with_the_design_it_was_created_with(tmp_path) -> None:
    """A run made when a spec without sweep.sessions meant one start goes on as one start."""
    path = _article(tmp_path, "  repeats: 3\n")
    now = load_spec(path)
    then = now.model_copy(update={"sweep": now.sweep.model_copy(update={"sessions": 1})})
    assert now.sweep.sessions == 3
    rd, resumed = prepare_run_dir(then, path, tmp_path / "runs", run_id="old", resume=None)
    run_lock.release(rd.path)
    assert not resumed and "session" not in rd.plan_json.read_text()
    rd2, resumed = prepare_run_dir(now, path, tmp_path / "runs", run_id=None, resume=rd.path)
    try:
        assert resumed and recorded_design(rd2, now) == then
    finally:
        run_lock.release(rd2.path)
