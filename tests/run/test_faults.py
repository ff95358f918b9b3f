"""The runner under faults and with the user's own commands (issue 14): pin refusals that say what
was probed and what to do, a warm-up that shows the server's answer, a run directory cut off in
its first milliseconds, one line per trial without a progress bar, the closing table."""

from __future__ import annotations

import io
import re
import sys
from pathlib import Path

import pytest
from rich.console import Console

from evidence.canon import read_json
from evidence.run import prepare
from evidence.run.runner import RunError, run_experiment
from evidence.tools.standin import StandinServer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_run import ROOT, events, trial_ids, write_spec, write_vllm_spec  # noqa: E402


def _console() -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    return Console(file=buf, width=300, color_system=None), buf


def test_engine_pin_refusal_names_the_python_probed_and_the_next_steps(tmp_path):
    spec = tmp_path / "s.yaml"
    spec.write_text(f"""
name: pins
title: a vLLM pin this Python cannot satisfy
hardware: {{count: 0}}
engine: {{kind: vllm, version: 0.27.1, launch: {{python: {sys.executable}}}}}
model: {{id: tiny, path: {tmp_path}}}
code: {{allow_dirty: true}}
workload: {{input_len: 8, output_len: 4, seed: 1}}
sweep: {{points: [1], prompts: {{per_concurrency: 1}}}}
""", encoding="utf-8")
    with pytest.raises(RunError) as ei:
        run_experiment(spec, runs_dir=tmp_path / "runs", repo_root=ROOT, progress=False)
    msg = str(ei.value)
    assert "engine version: requested '0.27.1', found nothing" in msg
    assert f"probed the Python {sys.executable}" in msg and "--which" in msg and "no vLLM installed" in msg
    for step in ("engine.launch.python", "evidence engine install-cpu", "--allow-drift"):
        assert step in msg, step
    assert "found None" not in msg


def test_code_pin_refusal_points_at_article_commit(tmp_path):
    spec = write_spec(tmp_path / "s.yaml", base_url="http://127.0.0.1:9", served="x", model_dir=tmp_path)
    text = spec.read_text().replace("code:\n  allow_dirty: true", "code:\n  allow_dirty: true\n  commit: '" + "1" * 40 + "'")
    spec.write_text(text)
    with pytest.raises(RunError) as ei:
        run_experiment(spec, runs_dir=tmp_path / "runs", repo_root=ROOT, progress=False)
    msg = str(ei.value)
    assert "code commit: requested '1111" in msg and "code.article_commit" in msg and "--allow-drift" in msg


def test_warmup_that_all_fails_stops_before_the_sweep_with_the_servers_answer(tmp_path, tiny_model, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with StandinServer(fault="http401", model="standin") as url:
        spec = write_spec(tmp_path / "s.yaml", base_url=url, served="standin", model_dir=tiny_model, warmup=3)
        with pytest.raises(RunError) as ei:
            run_experiment(spec, runs_dir=tmp_path / "runs", repo_root=ROOT, progress=False, run_id="w")
    msg = str(ei.value)
    assert "all 3 warm-up requests failed" in msg and "HTTP 401" in msg and "OPENAI_API_KEY" in msg
    rd = tmp_path / "runs" / "w"
    assert not (rd / "trials").exists() or trial_ids(rd) == []
    assert [e for e in events(rd) if e["event"] == "warmup_failed"]
    assert not any(e["event"] == "trial_start" for e in events(rd))
    assert read_json(rd / "run.json")["status"] == "incomplete"


def test_a_warmup_with_some_successes_goes_on(tmp_path, tiny_model):
    from evidence.run.session import warmup_failure
    from evidence.records import RequestRecord

    spec = write_spec(tmp_path / "s.yaml", base_url="http://x", served="standin", model_dir=tiny_model)
    from evidence.spec.model import load_spec

    s = load_spec(spec)
    ok = RequestRecord(i=0, phase="warmup", prompt_len=1, max_tokens=1, intended_s=0, slot_wait_s=0, send_s=0, ok=True)
    bad = RequestRecord(i=1, phase="warmup", prompt_len=1, max_tokens=1, intended_s=0, slot_wait_s=0, send_s=0,
                        status=404, error="model not found")
    assert warmup_failure([ok, bad], s) is None
    why = warmup_failure([bad, bad], s)
    assert "HTTP 404" in why and "served_name" in why
    assert warmup_failure([], s) is None


def _stillborn(rd: Path, spec: Path) -> None:
    """What a kill -9 in a run's first milliseconds left with older versions: the first files, no run.json."""
    rd.mkdir(parents=True)
    (rd / "spec.yaml").write_bytes(spec.read_bytes())
    (rd / ".plan.json.abc123.tmp").write_text("{")


def test_a_folder_without_run_json_is_cleaned_and_the_run_starts_afresh(tmp_path, tiny_model):
    con, buf = _console()
    with StandinServer(model="standin") as url:
        spec = write_spec(tmp_path / "s.yaml", base_url=url, served="standin", model_dir=tiny_model, points=(1,),
                          repeats=1, warmup=0)
        rd = tmp_path / "runs" / "k"
        _stillborn(rd, spec)
        with pytest.raises(RunError) as ei:  # --resume on it: nothing to resume, and says what to do
            run_experiment(spec, runs_dir=tmp_path / "runs", repo_root=ROOT, progress=False, resume=rd)
        assert "no run.json" in str(ei.value) and "--run-id" in str(ei.value)
        out = run_experiment(spec, runs_dir=tmp_path / "runs", repo_root=ROOT, progress=False, run_id="k",
                             console=con)
        assert out.status == "complete" and trial_ids(rd) == ["r1-c1"]
        assert "had no run.json" in buf.getvalue() and "starts afresh" in buf.getvalue()
        # without --run-id: a stillborn folder of this spec is cleaned too, one of another spec is left alone
        other = tmp_path / "other.yaml"
        other.write_text(spec.read_text() + "\n# another spec\n")
        _stillborn(tmp_path / "runs" / "mine", spec)
        _stillborn(tmp_path / "runs" / "theirs", other)
        (tmp_path / "runs" / "k" / "run.json").unlink()  # (k is now a folder that is not a run either)
        out2 = run_experiment(spec, runs_dir=tmp_path / "runs", repo_root=ROOT, progress=False)
        assert out2.status == "complete"
    assert not (tmp_path / "runs" / "mine").exists() and (tmp_path / "runs" / "theirs").exists()
    assert (tmp_path / "runs" / "k").exists()  # it held trials: not stillborn, never removed


def test_creation_is_atomic_a_kill_while_writing_leaves_no_run_folder(tmp_path, tiny_model, monkeypatch):
    spec = write_spec(tmp_path / "s.yaml", base_url="http://127.0.0.1:9", served="x", model_dir=tiny_model)
    real = prepare.write_json
    calls = []

    def die_on_run_json(path, obj, *a, **k):
        calls.append(Path(path).name)
        if Path(path).name == "run.json":
            raise KeyboardInterrupt  # as if killed right there
        return real(path, obj, *a, **k)

    monkeypatch.setattr(prepare, "write_json", die_on_run_json)
    with pytest.raises(KeyboardInterrupt):
        run_experiment(spec, runs_dir=tmp_path / "runs", repo_root=ROOT, progress=False, run_id="a")
    assert not (tmp_path / "runs" / "a").exists()
    assert [p.name for p in (tmp_path / "runs").iterdir()] == [f".creating-a-{__import__('os').getpid()}"]
    monkeypatch.setattr(prepare, "write_json", real)
    rd, resumed = prepare.prepare_run_dir(__import__("evidence.spec.model", fromlist=["load_spec"]).load_spec(spec),
                                          spec, tmp_path / "runs", run_id="a", resume=None)
    assert not resumed and (rd.path / "run.json").is_file()
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["a"]


def test_no_progress_prints_one_line_per_trial_and_the_outcome_has_the_point_table(tmp_path, tiny_model):
    con, buf = _console()
    with StandinServer(model="standin", itl_s=0.001) as url:
        spec = write_spec(tmp_path / "s.yaml", base_url=url, served="standin", model_dir=tiny_model)
        out = run_experiment(spec, runs_dir=tmp_path / "runs", repo_root=ROOT, progress=False, console=con)
    lines = [ln for ln in buf.getvalue().splitlines() if ln.startswith("[")]
    assert len(lines) == 4 and lines[0].startswith("[1/4] ") and lines[-1].startswith("[4/4] ")
    assert all(" tok/s, TTFT p50 " in ln and " 0 failed" in ln for ln in lines)
    assert [r["point"] for r in out.points] == [1, 4]
    for r in out.points:
        assert r["trials"] == 2 and r["failed"] == 0 and r["output_tok_s"] > 0
        assert r["ttft_p50_ms"] <= r["ttft_p99_ms"] and r["tpot_p50_ms"] <= r["tpot_p99_ms"]


def test_cli_run_ends_with_the_table_and_the_next_command(tmp_path, tiny_model):
    from typer.testing import CliRunner

    from evidence.cli.main import app

    with StandinServer(model="standin") as url:
        spec = write_spec(tmp_path / "s.yaml", base_url=url, served="standin", model_dir=tiny_model, repeats=1)
        r = CliRunner().invoke(app, ["run", str(spec), "--runs-dir", str(tmp_path / "runs"), "--run-id", "t",
                                     "--no-progress"])
    assert r.exit_code == 0, r.output
    assert "per point: medians over its n trials" in r.output and "TTFT p99" in r.output
    assert re.search(r"│ +C4 │ +1 │ +[\d,.]+ │.*│ +0/8 │", r.output), r.output
    assert f"next: evidence report {tmp_path / 'runs' / 't'}" in r.output


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("sig,delay,stack", [("SIGTERM", 0.3, "h1"), ("SIGTERM", 1.1, "aiohttp"), ("SIGINT", 0.6, "h1"),
                                             ("SIGINT", 1.9, "aiohttp"), ("SIGTERM", 2.3, "h1")])
def test_a_signal_mid_trial_stops_between_requests_and_keeps_what_completed(tmp_path, tiny_model, sig, delay, stack):
    """SIGTERM/SIGINT during a measured trial: no traceback, exit 130, never 'complete'; the trial's
    completed requests are kept under aborted/ (all of them answered), and the same command resumes."""
    import signal
    import subprocess
    import time

    with StandinServer(model="standin", itl_s=0.02) as url:
        spec = write_spec(tmp_path / "s.yaml", base_url=url, served="standin", model_dir=tiny_model, points=(2,),
                          repeats=1, per=8, output_len=40, warmup=0)
        rd = tmp_path / "runs" / "s"
        cmd = [sys.executable, "-m", "evidence.cli", "run", str(spec), "--runs-dir", str(tmp_path / "runs"),
               "--run-id", "s", "--no-progress", "--http-stack", stack]
        p = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if (rd / "events.jsonl").exists() and any(e["event"] == "trial_start" for e in events(rd)):
                break
            time.sleep(0.01)
        time.sleep(delay)
        p.send_signal(getattr(signal, sig))
        out, err = p.communicate(timeout=60)
        assert p.returncode == 130, (out, err)
        assert "Traceback" not in err and "Traceback" not in out, err
        assert read_json(rd / "run.json")["status"] == "incomplete"
        ev = [e["event"] for e in events(rd)]
        assert "trial_interrupted" in ev and ev[-1] == "interrupted" and "run_complete" not in ev
        assert not (rd / "trials" / "r1-c2").exists()
        from evidence.records import read_records

        kept = read_records(rd / "aborted" / "r1-c2" / "requests.jsonl")
        assert 0 < len(kept) < 16 and all(r.ok and r.completion_tokens == 40 for r in kept)
        assert read_json(rd / "aborted" / "r1-c2" / "meta.json")["interrupted"]["reason"] == f"{sig} received"
        r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert trial_ids(rd) == ["r1-c2"] and (rd / "aborted" / "r1-c2").exists()


def test_sessions_restart_between_blocks_and_record_provenance_again(tmp_path, tiny_model):
    with StandinServer(model="standin") as url:
        spec = write_spec(tmp_path / "s.yaml", base_url=url, served="standin", model_dir=tiny_model, repeats=3)
        spec.write_text(spec.read_text().replace("  repeats: 3\n", "  repeats: 3\n  sessions: 2\n"))
        out = run_experiment(spec, runs_dir=tmp_path / "runs", repo_root=ROOT, progress=False, run_id="s")
    rd = out.run_dir
    assert out.status == "complete" and len(trial_ids(rd)) == 6
    ev = events(rd)
    sessions = [(e["session"], e["before"]) for e in ev if e["event"] == "session_start"]
    assert sessions == [(1, "r1-c1"), (2, "r3-c1")]  # blocks of 2 and 1 repeats, the rotation running on
    kinds = [e["event"] for e in ev]
    i = kinds.index("trial_complete", max(i for i, k in enumerate(kinds) if k == "trial_start" and ev[i]["trial"] == "r2-c1"))
    assert kinds[i + 1:i + 3] == ["engine_stopped", "engine_starting"]
    assert [e["reason"] for e in ev if e["event"] == "provenance_recorded"] == ["run start", "session 2"]
    assert (rd / "provenance-2.json").is_file() and (rd / "engine" / "resolved-2.json").is_file()
    assert (rd / "warmup" / "requests-2.jsonl").is_file()  # the new server is warmed up again
    assert all(e.get("restarted") is False for e in ev if e["event"] == "session_start")  # an endpoint: not ours
    assert [t["session"] for t in read_json(rd / "plan.json")["trials"]] == [1, 1, 1, 1, 2, 2]


@pytest.mark.engine
def test_real_vllm_with_an_api_key_in_two_sessions(tiny_model, tmp_path, monkeypatch):
    """With VLLM_API_KEY set, the server we start requires it and our client sends it: the demo-shaped
    run completes with no failed request, the server is restarted between the two sessions, and the
    key is nowhere in the run directory. (Two server starts: a minute or two.)"""
    import urllib.error
    import urllib.request

    key = "sk-evidence-test-" + "k" * 24
    monkeypatch.setenv("VLLM_API_KEY", key)
    spec = write_vllm_spec(tmp_path / "v.yaml", tiny_model, name="vllm-key",
                           title="runner with an API key and two sessions",
                           workload="{input_len: 32, output_len: 16, seed: 3}",
                           sweep="{points: [1, 2], prompts: {per_concurrency: 2}, repeats: 2, sessions: 2, "
                                 "warmup: {requests: 2}}")
    refused = []

    def without_key(engine):
        try:
            urllib.request.urlopen(engine.base_url + "/v1/models", timeout=10)
        except urllib.error.HTTPError as e:
            refused.append(e.code)

    out = run_experiment(spec, runs_dir=tmp_path / "runs", repo_root=ROOT, progress=False, run_id="v",
                         hooks={"engine_ready": without_key})
    rd = out.run_dir
    assert out.status == "complete" and out.exit_code == 0, out
    assert refused == [401, 401]  # each server required the key
    assert all(r["failed"] == 0 for r in out.points) and len(trial_ids(rd)) == 4
    assert [e["restarted"] for e in events(rd) if e["event"] == "session_start"] == [True, True]
    assert (rd / "engine" / "server-2.log").is_file() and (rd / "provenance-2.json").is_file()
    blob = b"".join(p.read_bytes() for p in rd.rglob("*") if p.is_file())
    assert key.encode() not in blob


def test_kill_9_while_the_run_folder_is_being_created_then_the_same_command_runs(tmp_path, tiny_model):
    import os
    import signal
    import subprocess
    import time

    with StandinServer(model="standin") as url:
        spec = write_spec(tmp_path / "s.yaml", base_url=url, served="standin", model_dir=tiny_model, points=(1,),
                          repeats=1, warmup=0)
        runs = tmp_path / "runs"
        cmd = [sys.executable, "-m", "evidence.cli", "run", str(spec), "--runs-dir", str(runs), "--run-id", "k",
               "--no-progress"]
        p = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (runs.exists() and any(runs.iterdir())):
            time.sleep(0.0005)
        os.kill(p.pid, signal.SIGKILL)  # the first moment anything of the run exists
        p.wait()
        left = sorted(q.name for q in runs.iterdir())
        assert left and all(n == "k" or n.startswith(".creating-k-") for n in left), left
        r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert trial_ids(runs / "k") == ["r1-c1"] and read_json(runs / "k" / "run.json")["status"] == "complete"
    assert sorted(q.name for q in runs.iterdir()) == ["k"]  # the cut-off creation was cleaned up


def test_a_creation_folder_whose_creator_is_a_zombie_is_cleaned(tmp_path):
    """A creator killed but not yet reaped (a container's init may never reap it) no longer creates anything:
    its folder is a leftover, as the run lock judges the same process (run.lock.same_process_alive)."""
    import subprocess
    import time

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 10
    state = ""
    while time.monotonic() < deadline:  # exited, not reaped: /proc says Z while we do not wait()
        state = Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        if state == "Z":
            break
        time.sleep(0.02)
    try:
        assert state == "Z"
        staging = tmp_path / "runs" / f"{prepare.CREATING_PREFIX}z-{child.pid}"
        staging.mkdir(parents=True)
        (staging / "plan.json").write_text("{}")
        said: list[str] = []
        prepare._clean_staging(tmp_path / "runs", said.append)
        assert not staging.exists() and "cut off" in said[0]
    finally:
        child.wait()
