"""`evidence run --until-decided --max-repeats N` against the stand-in (issue 12): a clear effect stops at
the first look, a null one runs to its budget; every look and the rule are recorded; refusals."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from evidence.analysis.sequential import look
from evidence.canon import read_json
from evidence.run.runner import RunError, run_experiment
from evidence.tools.standin import StandinServer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_run import ROOT, events, trial_ids, write_spec  # noqa: E402


def _looks(rd: Path) -> list[dict]:
    return [json.loads(ln) for ln in (rd / "looks.jsonl").read_text().splitlines()]


def test_a_clear_effect_stops_at_the_first_look(tmp_path, tiny_model):
    # C4 has four times C1's throughput (no cap on the stand-in): decided after the planned repeats
    with StandinServer(model="standin", itl_s=0.01) as url:
        spec = write_spec(tmp_path / "s.yaml", base_url=url, served="standin", model_dir=tiny_model, points=(1, 4),
                          repeats=4, per=4, output_len=20, warmup=0,
                          extra="analysis:\n  comparisons: [{a: 4, b: 1}]\n")
        out = run_experiment(spec, runs_dir=tmp_path / "runs", repo_root=ROOT, progress=False, run_id="c",
                             until_decided=look, max_repeats=7)
    rd = out.run_dir
    assert out.status == "complete" and out.exit_code == 0
    looks = _looks(rd)
    assert [ln.get("look") for ln in looks] == [1, 1] and looks[0]["max_looks"] == 4
    (c,) = looks[0]["comparisons"]
    assert (c["a"], c["b"], c["n_pairs"], c["decided"], c["verdict"]) == (4, 1, 4, True, "finding")
    assert c["look"]["effect"] > 2  # C4 over C1: about +300%
    stop = looks[1]
    assert stop["stop"] == "every comparison decided" and stop["repeats"] == 4 and "O'Brien-Fleming" in stop["rule"]
    assert len(trial_ids(rd)) == 8 and "until_decided" not in read_json(rd / "plan.json")
    ev = [e["event"] for e in events(rd)]
    assert ev.count("look") == 1 and "until_decided_stop" in ev and "plan_extended" not in ev
    # running the same command again: nothing to do, nothing recorded twice
    again = run_experiment(spec, runs_dir=tmp_path / "runs", repo_root=ROOT, progress=False, run_id="c",
                           until_decided=look, max_repeats=7)
    assert again.status == "complete" and len(_looks(rd)) == 2


def test_a_null_effect_runs_to_its_budget_in_latin_square_blocks(tmp_path, tiny_model):
    # One request at a time on the server, each with its own random speed: every point has the same
    # throughput, with noise. Two comparisons would both have to cross early to stop the run.
    with StandinServer(model="standin", itl_s=0.005, itl_jitter=0.3, max_running=1) as url:
        spec = write_spec(tmp_path / "s.yaml", base_url=url, served="standin", model_dir=tiny_model,
                          points=(1, 2, 3), repeats=2, per=3, output_len=20, warmup=0,
                          extra="analysis:\n  comparisons: [{a: 1, b: 2}, {a: 2, b: 3}]\n")

        stopped = []

        def stop_once(tid):  # interrupt inside the first added block, then resume with the same command
            if tid.startswith("r3-") and not stopped:
                stopped.append(tid)
                raise KeyboardInterrupt

        first = run_experiment(spec, runs_dir=tmp_path / "runs", repo_root=ROOT, progress=False, run_id="n",
                               until_decided=look, max_repeats=4, hooks={"after_trial": stop_once})
        assert first.status == "interrupted"
        out = run_experiment(spec, runs_dir=tmp_path / "runs", repo_root=ROOT, progress=False, run_id="n",
                             until_decided=look, max_repeats=4)
    rd = out.run_dir
    assert out.status == "complete", out
    looks = _looks(rd)
    assert [ln["look"] for ln in looks if "stop" not in ln] == [1, 2, 3]  # each look recorded once
    assert looks[-1]["stop"] == "budget spent (4 repeats)" and looks[-1]["repeats"] == 4
    assert not looks[0]["all_decided"] and looks[0]["comparisons"][0]["verdict"] == "continue"
    plan = read_json(rd / "plan.json")
    assert plan["until_decided"]["max_repeats"] == 4 and plan["until_decided"]["planned_repeats"] == 2
    order = {r: [t["point"] for t in plan["trials"] if t["repeat"] == r] for r in (1, 2, 3, 4)}
    assert order == {1: [1, 2, 3], 2: [2, 3, 1], 3: [3, 1, 2], 4: [1, 2, 3]}  # the cyclic Latin square goes on
    assert [t["index"] for t in plan["trials"]] == list(range(12))
    assert len(trial_ids(rd)) == 12
    ev = events(rd)
    assert [e["repeat"] for e in ev if e["event"] == "plan_extended"] == [3, 4]
    starts = [e["trial"] for e in ev if e["event"] == "trial_start"]
    assert len(starts) == len(set(starts)) == 12  # nothing ran twice across the interrupt
    from evidence.analysis.analyze import analyze_run  # the extended run is an ordinary run to the analysis

    analyze_run(rd)


def test_until_decided_refuses_what_cannot_work(tmp_path, tiny_model):
    spec = write_spec(tmp_path / "s.yaml", base_url="http://127.0.0.1:9", served="x", model_dir=tiny_model)
    with pytest.raises(RunError, match="analysis.comparisons"):
        run_experiment(spec, runs_dir=tmp_path / "runs", repo_root=ROOT, progress=False, until_decided=look,
                       max_repeats=4)
    spec2 = write_spec(tmp_path / "t.yaml", base_url="http://127.0.0.1:9", served="x", model_dir=tiny_model,
                       repeats=3, extra="analysis:\n  comparisons: [{a: 1, b: 4}]\n")
    with pytest.raises(RunError, match="below the spec's planned repeats"):
        run_experiment(spec2, runs_dir=tmp_path / "runs", repo_root=ROOT, progress=False, until_decided=look,
                       max_repeats=2)
    with pytest.raises(RunError, match="--max-repeats"):
        run_experiment(spec2, runs_dir=tmp_path / "runs", repo_root=ROOT, progress=False, until_decided=look)
    assert not (tmp_path / "runs").exists()  # refused before any folder was made


def test_an_added_block_is_a_session_of_its_own_when_the_spec_has_sessions(tmp_path):
    from evidence.run.decide import next_block
    from evidence.spec.model import load_spec
    from evidence.spec.plan import make_plan

    spec = write_spec(tmp_path / "s.yaml", base_url="http://x", served="x", model_dir=tmp_path, points=(1, 2, 4),
                      repeats=2, extra="")
    spec.write_text(spec.read_text().replace("  repeats: 2\n", "  repeats: 2\n  sessions: 2\n"))
    s = load_spec(spec)
    trials = list(make_plan(s).trials)
    block = next_block(s, trials)
    assert [(t.repeat, t.point, t.position, t.session, t.index) for t in block] == [
        (3, 4, 1, 3, 6), (3, 1, 2, 3, 7), (3, 2, 3, 3, 8)]
    s1 = load_spec(write_spec(tmp_path / "t.yaml", base_url="http://x", served="x", model_dir=tmp_path, repeats=2))
    assert all(t.session is None and "session" not in t.as_dict() for t in next_block(s1, list(make_plan(s1).trials)))


def test_cli_until_decided_wires_the_sequential_look(tmp_path, tiny_model):
    from typer.testing import CliRunner

    from evidence.cli.main import app

    with StandinServer(model="standin", itl_s=0.01) as url:
        spec = write_spec(tmp_path / "s.yaml", base_url=url, served="standin", model_dir=tiny_model, points=(1, 4),
                          repeats=4, per=4, output_len=20, warmup=0,
                          extra="analysis:\n  comparisons: [{a: 4, b: 1}]\n")
        r = CliRunner().invoke(app, ["run", str(spec), "--runs-dir", str(tmp_path / "runs"), "--run-id", "u",
                                     "--no-progress", "--max-repeats", "6"])
        assert r.exit_code != 0 and "budget of --until-decided" in str(r.exception)  # the CLI's one-paragraph error
        r = CliRunner().invoke(app, ["run", str(spec), "--runs-dir", str(tmp_path / "runs"), "--run-id", "u",
                                     "--no-progress", "--until-decided", "--max-repeats", "6"])
    assert r.exit_code == 0, r.output
    assert "look 1 of at most 3 after 4 repeat(s): C4 vs C1: finding" in r.output
    assert "stopped after 4 repeat(s): every comparison decided" in r.output
    assert _looks(tmp_path / "runs" / "u")[-1]["stop"] == "every comparison decided"


def test_looks_over_server_starts_fixed_looks_and_the_analysis_uses_every_unit(tmp_path, tiny_model):
    # sweep.sessions 2: the looks test server starts (each added block is a start of its own); a change of the
    # budget on resume is refused; the analysis reads every repeat the loop added and shows the looks
    with StandinServer(model="standin", itl_s=0.005, itl_jitter=0.3, max_running=1) as url:
        spec = write_spec(tmp_path / "s.yaml", base_url=url, served="standin", model_dir=tiny_model,
                          points=(1, 2), repeats=2, per=2, output_len=10, warmup=0,
                          extra="analysis:\n  comparisons: [{a: 1, b: 2}]\n")
        spec.write_text(spec.read_text().replace("  repeats: 2\n", "  repeats: 2\n  sessions: 2\n"))
        stopped = []

        def stop_once(tid):
            if tid.startswith("r3-") and not stopped:
                stopped.append(tid)
                raise KeyboardInterrupt

        first = run_experiment(spec, runs_dir=tmp_path / "runs", repo_root=ROOT, progress=False, run_id="s",
                               until_decided=look, max_repeats=4, hooks={"after_trial": stop_once})
        assert first.status == "interrupted"
        with pytest.raises(RunError, match="fixed at its first look"):
            run_experiment(spec, runs_dir=tmp_path / "runs", repo_root=ROOT, progress=False, run_id="s",
                           until_decided=look, max_repeats=6)
        out = run_experiment(spec, runs_dir=tmp_path / "runs", repo_root=ROOT, progress=False, run_id="s",
                             until_decided=look, max_repeats=4)
    rd = out.run_dir
    assert out.status == "complete", out
    looks = [ln for ln in _looks(rd) if "stop" not in ln]
    (c1,) = looks[0]["comparisons"]
    assert (c1["unit"], c1["n_units"], c1["n_pairs"]) == ("session", 2, 2)
    assert c1["look"]["scope"] == "these 2 server starts" and "alpha_spent" in c1["look"]
    assert looks[0]["max_looks"] == 3 and looks[0]["max_repeats"] == 4
    from evidence.analysis.analyze import analyze_run

    res = analyze_run(rd)
    reps = max(ln["repeats"] for ln in looks)
    c = res["comparisons"][0]
    assert c["pairs"] == reps and c["unit"] == "session" and c["n_units"] == reps  # one repeat per added start
    assert res["completeness"]["plan_matches_spec"] is True
    sq = res["sequential"]
    assert [ln["look"] for ln in sq["looks"]] == [ln["look"] for ln in looks] and sq["stop"]["stop"]
    assert c["sequential"]["verdict"] == looks[-1]["comparisons"][0]["verdict"]
    assert "until-decided: " in c["statement"]
    from evidence.report.context import render_report

    md = next(p for p in render_report(rd, tmp_path / "report") if p.suffix == ".md").read_text()
    assert "Until decided: the looks" in md and "server starts" in md and "Stopped after" in md
