"""First contact: the stand-in demo from a bare install, and launch commands that cannot start."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from clirun import ROOT, ev

from evidence.spec.model import PYTHON_PLACEHOLDER, Launch

DEMO = ROOT / "specs" / "standin-demo.yaml"


def test_placeholder_is_this_interpreter_and_paths_are_checked(tmp_path: Path) -> None:
    launch = Launch(command=[PYTHON_PLACEHOLDER, "-m", "evidence.tools.standin"])
    assert launch.argv() == [sys.executable, "-m", "evidence.tools.standin"]
    assert launch.missing_program(tmp_path) is None
    why = Launch(command=[".venv/bin/python", "-m", "x"]).missing_program(tmp_path)
    assert why is not None and str(tmp_path / ".venv/bin/python") in why and PYTHON_PLACEHOLDER in why
    assert "not on PATH" in (Launch(command=["no-such-program-xyz"]).missing_program(tmp_path) or "")
    (tmp_path / "bin").mkdir()
    prog = tmp_path / "bin" / "serve"
    prog.write_text("#!/bin/sh\n")
    assert "not an executable" in (Launch(command=["bin/serve"]).missing_program(tmp_path) or "")
    prog.chmod(0o755)
    assert Launch(command=["bin/serve"]).missing_program(tmp_path) is None


def test_validate_names_the_fix_for_a_launch_command_that_cannot_start(tmp_path: Path) -> None:
    text = DEMO.read_text(encoding="utf-8").replace(f'"{PYTHON_PLACEHOLDER}"', '".venv/bin/python"')
    assert ".venv/bin/python" in text
    spec = tmp_path / "spec.yaml"
    spec.write_text(text, encoding="utf-8")
    p = ev("validate", str(spec), cwd=tmp_path)
    assert p.returncode == 2, p.stdout + p.stderr
    assert "engine.launch.command" in p.stderr and PYTHON_PLACEHOLDER in p.stderr and "Traceback" not in p.stderr
    p = ev("validate", str(spec), "--json", cwd=tmp_path)
    assert p.returncode == 2
    doc = json.loads(p.stdout)
    assert doc["ok"] is False and doc["errors"][0]["field"] == "engine.launch.command"
    p = ev("run", str(spec), "--no-progress", cwd=tmp_path)
    assert p.returncode == 2 and "engine.launch.command" in p.stderr and not (tmp_path / "runs").exists()


def test_standin_demo_end_to_end_from_a_bare_folder(tmp_path: Path) -> None:
    """No .venv, no models/tiny, no git: run (--json: stdout is one JSON document), analyze, report."""
    p = ev("validate", str(DEMO), cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    p = ev("run", str(DEMO), "--json", "--run-id", "demo", cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    res = json.loads(p.stdout)
    assert res["status"] == "complete" and len(res["trials_done"]) == 9
    # the demo gives no sweep.sessions: the default design, one server start per repeat, and progress says which
    assert "server start 1 of 3" in p.stderr and "server start 3 of 3" in p.stderr
    run = tmp_path / "runs" / "demo"
    p = ev("analyze", str(run), "--json", cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    (c,) = json.loads(p.stdout)["comparisons"]
    assert c["ci95"] is not None
    assert (c["unit"], c["n_units"], c["scope"]) == ("session", 3, "these 3 server starts")
    p = ev("report", str(run), cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    assert (run / "report" / "report.html").is_file()


@pytest.mark.parametrize("bad", [[]])
def test_an_empty_launch_command_is_refused(bad: list) -> None:
    with pytest.raises(ValueError, match="empty"):
        Launch(command=bad)


def test_validate_checks_an_arms_own_launch_too(tmp_path: Path) -> None:
    """An arm that is another build starts its own program: validate checks it as it checks the engine's."""
    text = (ROOT / "specs" / "standin-arms.yaml").read_text(encoding="utf-8")
    assert "  - name: slow " in text
    spec = tmp_path / "arms.yaml"
    spec.write_text(
        text.replace("  - name: slow ", '  - name: slow\n    launch: {command: ["no-such-prog-xyz"]}\n#', 1)
    )
    p = ev("validate", str(spec), "--json", cwd=tmp_path)
    assert p.returncode == 2
    (e,) = json.loads(p.stdout)["errors"]
    assert e["field"] == "arms.1.launch.command" and "not on PATH" in e["message"]
