"""Replication and sweeps through a real Slurm (slurmctld + two slurmd on this machine, see
slurm_cluster.py), submitted with submitit; the engine on each node is the stand-in server
(a spec can name it as `engine.launch.command`), so a run takes seconds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from evidence.analysis.hosts import compare_hosts
from evidence.execute.backends import Settings
from evidence.execute.jobs import execute, host_slots, read_execution, spec_slots, summary_rows
from conftest import skip_unless_ci
from slurm_cluster import ClusterUnavailable, start_cluster

ROOT = Path(__file__).resolve().parents[2]
SLURM = Settings(kind="slurm", partition="gpu", gres="gpu:h200:1", time_min=10)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    try:
        c = start_cluster(tmp_path_factory.mktemp("slurm"))
    except (ClusterUnavailable, OSError, subprocess.SubprocessError) as e:
        skip_unless_ci(f"the test Slurm cluster could not start: {e}")
    old = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = c.env["SLURM_CONF"]
    try:
        yield c
    finally:
        c.stop()
        if old is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = old


def _spec(folder: Path, name: str, *, prompts: int = 4, itl: float = 0.002, pin_gpu: bool = False) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    p = folder / f"{name}.yaml"
    hw = "hardware: {accelerator: NVIDIA H200, count: 1}\n" if pin_gpu else ""
    p.write_text(f"""name: {name}
title: stand-in as the engine, on a Slurm node
{hw}engine:
  kind: vllm
  launch:
    command: ["{sys.executable}", "-m", "evidence.tools.standin"]
  args:
    extra: ["--standin-itl", "{itl}", "--standin-ttft", "0.005"]
  readiness_timeout_s: 60
model:
  id: standin
  tokenizer: {ROOT / 'models' / 'tiny'}
code:
  allow_dirty: true
workload:
  input_len: 16
  output_len: 8
  seed: 1
sweep:
  points: [1, 4]
  prompts: {{per_concurrency: {prompts}}}
  repeats: 2
  sessions: 1
analysis:
  comparisons:
    - {{a: 4, b: 1}}
""")
    return p


def test_two_host_replication_gathers_both_runs_and_compares_them(cluster, tmp_path: Path) -> None:
    spec = _spec(tmp_path / "specs", "repl")
    parent = tmp_path / "runs" / "repl-2hosts"
    # the user's command: the same spec on two hosts, one exclusive job each
    p = subprocess.run([sys.executable, "-m", "evidence.cli", "run", str(spec), "--executor", "slurm", "--hosts", "2",
                        "--partition", "gpu", "--gres", "gpu:h200:1", "--time", "10", "--runs-dir", str(parent.parent),
                        "--run-id", parent.name], capture_output=True, text=True, cwd=ROOT, env=cluster.env)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert "host-1" in p.stdout and "host-2" in p.stdout and "evidence compare" in p.stdout
    doc = read_execution(parent)
    rows = {r["slot"]: r for r in summary_rows(doc, parent)}
    assert set(rows) == {"host-1", "host-2"}
    assert all(r["state"] == "COMPLETED" and r["run_status"] == "complete" for r in rows.values()), rows
    # one job per host, exclusive: the two ran on the two nodes
    nodes = {doc["slots"][s]["attempts"][-1]["node"]["slurm_node"] for s in rows}
    assert nodes == {"n1", "n2"}
    assert all(doc["slots"][s]["attempts"][-1]["node"]["cuda_visible_devices"] == "0" for s in rows)
    # each host's run has its own provenance
    for s in rows:
        assert (parent / s / "provenance.json").is_file()
    res = compare_hosts([parent / "host-1", parent / "host-2"])
    (c,) = res["across_hosts"]
    assert c["hosts"] == 2 and c["n_pairs"] == 2 and c["verdict"] in ("finding", "not significant")
    assert {v["point"] for v in res["variance"]} == {1, 4}
    # the CLI's compare takes the replication folder
    p = subprocess.run([sys.executable, "-m", "evidence.cli", "compare", str(parent)], capture_output=True,
                       text=True, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    assert "same direction on" in p.stdout and "between-host CV" in p.stdout


def test_sweep_as_job_array_resumes_only_what_is_missing(cluster, tmp_path: Path) -> None:
    fast = _spec(tmp_path / "specs", "fast")
    slow = _spec(tmp_path / "specs", "slow", prompts=40, itl=0.02)  # ~20 s of streaming: time to kill it
    parent = tmp_path / "runs" / "sweep"
    import threading

    # kill the slow spec's job while it runs: the scheduler cancels it (a lost job, as a preemption is)
    def killer() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            d = read_execution(parent) if (parent / "execution.json").is_file() else {}
            att = (d.get("slots", {}).get("slow", {}).get("attempts") or [])
            if att and list((parent / "slow" / "trials").glob("r*")) if (parent / "slow").is_dir() else False:
                subprocess.run(["scancel", att[-1]["job_id"]], env=cluster.env, check=False)
                return
            time.sleep(0.2)

    t = threading.Thread(target=killer)
    t.start()
    doc = execute("sweep", spec_slots([fast, slow]), parent, SLURM, repo_root=ROOT)
    t.join()
    rows = {r["slot"]: r for r in summary_rows(doc, parent)}
    assert rows["fast"]["run_status"] == "complete"
    assert rows["slow"]["run_status"] != "complete"
    # the scheduler's word when slurmctld has marked the job by the time it is asked, else the runner's own
    # (scancel's SIGTERM reached it first and it stopped cleanly): either way the lost job is recorded
    assert rows["slow"]["state"] in ("CANCELLED", "INTERRUPTED"), rows
    assert doc["slots"]["slow"]["attempts"][-1]["exit_code"] == 130
    fast_bytes = {p: p.read_bytes() for p in (parent / "fast" / "trials").rglob("*") if p.is_file()}
    # the same command again submits the missing one only, and the run resumes where it was cut
    said: list[str] = []
    doc = execute("sweep", spec_slots([fast, slow]), parent, SLURM, repo_root=ROOT, say=said.append)
    assert any("not submitted again: fast" in s for s in said)
    assert len(doc["slots"]["fast"]["attempts"]) == 1 and len(doc["slots"]["slow"]["attempts"]) == 2
    assert summary_rows(doc, parent)[1]["run_status"] == "complete"
    assert {p: p.read_bytes() for p in (parent / "fast" / "trials").rglob("*") if p.is_file()} == fast_bytes
    trials = sorted(p.name for p in (parent / "slow" / "trials").iterdir() if not p.name.startswith("."))
    assert trials == ["r1-c1", "r1-c4", "r2-c1", "r2-c4"]  # every trial once


def test_a_host_whose_pins_do_not_hold_is_a_recorded_failure(cluster, tmp_path: Path) -> None:
    spec = _spec(tmp_path / "specs", "pinned", pin_gpu=True)  # the nodes' GPUs are fake: no H200 is found
    parent = tmp_path / "runs" / "pinned"
    doc = execute("replicate", host_slots(spec, 1), parent, SLURM, repo_root=ROOT)
    att = doc["slots"]["host-1"]["attempts"][-1]
    assert att["state"] == "RUN_FAILED" and att["exit_code"] == 2
    assert "accelerator" in att["error"].lower() or "gpu" in att["error"].lower(), att["error"]
    on_disk = json.loads((parent / "execution.json").read_text())
    assert on_disk["slots"]["host-1"]["attempts"][-1]["state"] == "RUN_FAILED"


def test_debug_executor_runs_the_same_jobs_in_process(tmp_path: Path) -> None:
    """submitit's debug executor: the same submission path, no scheduler (no cluster needed)."""
    spec = _spec(tmp_path / "specs", "dbg")
    parent = tmp_path / "runs" / "dbg"
    doc = execute("replicate", host_slots(spec, 1), parent, Settings(kind="debug"), repo_root=ROOT)
    (row,) = summary_rows(doc, parent)
    assert row["state"] == "COMPLETED" and row["run_status"] == "complete", row
    assert doc["executor"]["kind"] == "debug"
