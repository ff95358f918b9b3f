"""A lost host is data (issue 23): `evidence compare <parent>` names every host whose run is not
complete, in its text and its JSON, and exits non-zero unless --allow-partial. The host runs are
real runs against the stand-in server; the lost host is what execution.json records of a job that
died with its node (no Slurm needed to read it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from evidence.canon import dumps
from evidence.run.runner import run_experiment
from evidence.tools.standin import StandinServer

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "run"))
from test_run import write_spec  # noqa: E402


@pytest.fixture(scope="module")
def parent(tmp_path_factory, tiny_model) -> Path:
    tmp = tmp_path_factory.mktemp("repl")
    par = tmp / "runs" / "repl-3hosts"
    with StandinServer(model="standin", itl_s=0.001, itl_jitter=0.2) as url:
        spec = write_spec(
            tmp / "s.yaml",
            base_url=url,
            served="standin",
            model_dir=tiny_model,
            points=(1, 4),
            repeats=2,
            per=2,
            warmup=0,
            extra="analysis:\n  comparisons:\n    - {a: 4, b: 1}\n",
        )
        for h in ("host-1", "host-2"):
            out = run_experiment(spec, runs_dir=par, repo_root=ROOT, progress=False, run_id=h)
            assert out.status == "complete"
    slots = {
        h: {"spec": str(spec), "spec_sha256": "x", "attempts": [{"job_id": str(k), "state": "COMPLETED"}]}
        for k, h in enumerate(("host-1", "host-2"), start=1)
    }
    slots["host-3"] = {
        "spec": str(spec),
        "spec_sha256": "x",
        "attempts": [{"job_id": "3", "state": "NODE_FAIL", "error": "the node stopped answering"}],
    }
    (par / "execution.json").write_text(dumps({"mode": "replicate", "slots": slots}))
    return par


def _compare(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "evidence.cli", "compare", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def test_compare_names_a_lost_host_in_text_and_json_and_exits_non_zero(parent):
    p = _compare(str(parent))
    assert p.returncode == 1, p.stderr
    assert "LOST host-3: NODE_FAIL, run never created after 1 attempt(s): the node stopped answering" in p.stdout
    assert "same direction on" in p.stdout and "of 2 hosts (1 of 3 hosts lost: host-3 NODE_FAIL)" in p.stdout
    j = _compare(str(parent), "--json")
    assert j.returncode == 1
    res = json.loads(j.stdout)
    assert [h["host"] for h in res["lost_hosts"]] == ["host-3"] and res["lost_hosts"][0]["state"] == "NODE_FAIL"
    assert "1 of 3 hosts lost" in res["across_hosts"][0]["statement"]
    ok = _compare(str(parent), "--allow-partial")
    assert ok.returncode == 0 and "LOST host-3" in ok.stdout
