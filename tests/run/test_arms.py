"""Arms (issue 21): specs/standin-arms.yaml runs two variants of the engine section start by start against the
stand-in server; the analysis compares the arms with the block of server starts as the unit. Arms that differ by
the stand-in's speed are told apart; identical arms are not, and with the spec's margin they are equivalent."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from evidence.analysis.analyze import analyze_run
from evidence.canon import read_json
from evidence.run.runner import RunError, run_experiment
from evidence.spec.model import SpecError, load_spec
from evidence.spec.plan import arm_of_session, design_claim, make_plan

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_run import ROOT  # noqa: E402

SPEC = ROOT / "specs" / "standin-arms.yaml"


def test_arms_are_balanced_blocks_of_starts() -> None:
    assert [arm_of_session(s, ["a", "b"]) for s in range(1, 7)] == ["a", "b", "b", "a", "a", "b"]
    assert [arm_of_session(s, ["a", "b", "c"]) for s in range(1, 7)] == ["a", "b", "c", "b", "c", "a"]
    s = load_spec(SPEC)
    plan = make_plan(s)
    assert {(t.session, t.arm) for t in plan.trials} == {(1, "fast"), (2, "slow"), (3, "slow"), (4, "fast"),
                                                         (5, "fast"), (6, "slow")}
    d = design_claim(s)["arms"]
    assert (d["unit"], d["n"], d["df"], d["scope"]) == ("block", 3, 2, "these 3 blocks of server starts")


def test_arms_refuse_what_cannot_be_blocked(tmp_path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(SPEC.read_text().replace("sessions: 6", "sessions: 3").replace("repeats: 6", "repeats: 3"))
    with pytest.raises(SpecError, match="multiple of 2"):
        load_spec(bad)


def _run(spec: Path, runs: Path, run_id: str):
    out = run_experiment(spec, runs_dir=runs, repo_root=ROOT, progress=False, run_id=run_id)
    assert out.status == "complete", out
    return out.run_dir


def test_arms_that_differ_are_found_and_identical_arms_are_equivalent(tmp_path, tiny_model) -> None:
    rd = _run(SPEC, tmp_path / "runs", "arms")
    plan = read_json(rd / "plan.json")
    assert {t["arm"] for t in plan["trials"]} == {"fast", "slow"}
    ev = [ln for ln in (rd / "events.jsonl").read_text().splitlines() if '"arm_start"' in ln]
    assert len(ev) == 6  # one server start per session, each with its arm
    res = analyze_run(rd)
    arms = res["arms"]
    assert arms["arms"] == ["fast", "slow"] and arms["blocks"] == 3
    for c in arms["comparisons"]:
        assert (c["unit"], c["n_units"], c["df"], c["scope"]) == ("block", 3, 2, "these 3 blocks of server starts")
        assert c["verdict"] == "finding" and c["better"] == "fast"  # 4 ms against 6 ms between tokens
        assert c["equivalent"] is False  # +50% slower tokens are not within the margin
    # the same spec with identical arms, and a margin wide enough for 3 blocks on a shared machine
    same = tmp_path / "same.yaml"
    same.write_text(SPEC.read_text().replace('"--standin-itl", "0.006"', '"--standin-itl", "0.004"')
                    .replace("margin: 0.10", "margin: 0.25"))
    res2 = analyze_run(_run(same, tmp_path / "runs", "same"))
    for c in res2["arms"]["comparisons"]:
        assert c["verdict"] != "finding"  # identical arms are not called different
        assert c["verdict"] == "equivalent" and c["margin"] == 0.25, c["statement"]


def test_until_decided_with_arms_is_refused(tmp_path) -> None:
    from evidence.analysis.sequential import look

    with pytest.raises(RunError, match="blocks of arms"):
        run_experiment(SPEC, runs_dir=tmp_path / "runs", repo_root=ROOT, progress=False, until_decided=look,
                       max_repeats=8)
