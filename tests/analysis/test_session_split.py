"""A resume that restarted the engine inside a planned session (issue 27's H100 run: server start 3 of the arms run
ran its two trials on two machines) is said in the caveats; a run whose sessions each had one start says nothing."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rundir_fixtures import build_run  # noqa: E402

from evidence.analysis.analyze import compute_analysis  # noqa: E402
from evidence.analysis.load import load_run  # noqa: E402


def _events(run: Path, starts: list[tuple[int, str]]) -> None:
    with (run / "events.jsonl").open("a", encoding="utf-8") as f:
        for session, before in starts:
            f.write(json.dumps({"event": "session_start", "session": session, "before": before}) + "\n")
        f.write("not json\n")  # a torn line is skipped, never an error


def test_a_session_cut_by_a_resume_is_a_caveat(tmp_path: Path) -> None:
    run = build_run(tmp_path)
    _events(run, [(1, "r1-c1"), (1, "r2-c16")])
    data = load_run(run)
    assert data.session_starts == {1: ["r1-c1", "r2-c16"]}
    res = compute_analysis(data)
    (i,) = [i for i, k in enumerate(res["caveat_kinds"]) if k["kind"] == "session_split"]
    assert (
        "Server start 1 was cut by a resume: its trials ran on 2 engine starts (started before r1-c1, r2-c16)"
        in (res["caveats"][i])
    )


def test_one_start_per_session_says_nothing(tmp_path: Path) -> None:
    run = build_run(tmp_path)
    _events(run, [(1, "r1-c1")])
    res = compute_analysis(load_run(run))
    assert all(k["kind"] != "session_split" for k in res["caveat_kinds"])


def test_an_endpoints_sessions_are_said_to_be_blocks_of_one_server(tmp_path: Path) -> None:
    """An endpoint's server is never restarted by this tool: its sessions' verdicts carry a caveat saying so."""
    from rundir_fixtures import demo_spec  # noqa: E402

    spec = demo_spec(sessions=3)
    res = compute_analysis(load_run(build_run(tmp_path / "vllm", spec=spec)))
    assert all(k["kind"] != "sessions_not_restarted" for k in res["caveat_kinds"])
    endpoint = spec.engine.model_copy(update={"kind": "endpoint", "base_url": "http://127.0.0.1:9"})
    res = compute_analysis(
        load_run(build_run(tmp_path / "endpoint", spec=spec.model_copy(update={"engine": endpoint})))
    )
    (i,) = [i for i, k in enumerate(res["caveat_kinds"]) if k["kind"] == "sessions_not_restarted"]
    assert "its 3 sessions are blocks of one server" in res["caveats"][i]
