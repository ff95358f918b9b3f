"""The runner under faults (issue 23): one writer per run folder, no engine outliving its runner,
waits that a signal cuts, a missing endpoint named. Faults a real engine cannot do on demand use
the stand-in server (and, as the engine a runner starts, the stand-in under `engine.launch.command`)."""

from __future__ import annotations

import io
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rich.console import Console

from evidence.run import lock as run_lock
from evidence.run.runner import RunError, run_experiment
from evidence.tools.standin import StandinServer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_run import ROOT, events, trial_ids, write_spec  # noqa: E402

ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def _run_argv(spec: Path, runs_dir: Path, run_id: str) -> list[str]:
    """`evidence run SPEC` in its own process, into runs_dir/run_id, without progress bars."""
    return [
        sys.executable,
        "-m",
        "evidence.cli",
        "run",
        str(spec),
        "--runs-dir",
        str(runs_dir),
        "--run-id",
        run_id,
        "--no-progress",
    ]


def _console() -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    return Console(file=buf, width=300, color_system=None), buf


def _holder(folder: Path) -> subprocess.Popen:
    """Another process holding the run folder's lock (as a second `evidence run` would)."""
    code = (
        "import sys,time; from evidence.run import lock; lock.acquire(sys.argv[1]); print('held', flush=True); "
        "time.sleep(600)"
    )
    p = subprocess.Popen([sys.executable, "-c", code, str(folder)], stdout=subprocess.PIPE, text=True, env=ENV)
    assert p.stdout.readline().strip() == "held"
    return p


def _small_run(tmp_path: Path, url: str, tiny_model: Path, run_id: str, **kw) -> Path:
    spec = write_spec(
        tmp_path / "s.yaml",
        base_url=url,
        served="standin",
        model_dir=tiny_model,
        points=(1,),
        repeats=2,
        warmup=0,
        **kw,
    )
    return spec


def test_a_second_runner_on_a_held_folder_is_refused_naming_the_holder_and_writes_nothing(tmp_path, tiny_model):
    with StandinServer(model="standin") as url:
        spec = _small_run(tmp_path, url, tiny_model, "r")
        first = run_experiment(
            spec,
            runs_dir=tmp_path / "runs",
            repo_root=ROOT,
            progress=False,
            run_id="r",
            hooks={"after_trial": lambda tid: (_ for _ in ()).throw(KeyboardInterrupt)},
        )
        rd = first.run_dir
        assert first.status == "interrupted" and trial_ids(rd) == ["r1-c1"]
        assert not (rd / run_lock.LOCK_NAME).exists()  # released (and removed) when the runner ended
        # an in-progress trial of the holder: a second runner must not move it aside
        (rd / "trials" / ".tmp-r2-c1").mkdir()
        before = (rd / "events.jsonl").read_bytes()
        holder = _holder(rd)
        try:
            with pytest.raises(RunError) as ei:
                run_experiment(spec, runs_dir=tmp_path / "runs", repo_root=ROOT, progress=False, run_id="r")
            msg = str(ei.value)
            assert f"pid {holder.pid} on host {socket.gethostname()}" in msg and "one writer" in msg, msg
            assert ei.value.code == 2
            assert (rd / "events.jsonl").read_bytes() == before
            assert (rd / "trials" / ".tmp-r2-c1").is_dir() and not (rd / "aborted").exists()
            # the command line: exit 2, one paragraph, no traceback
            p = subprocess.run(
                _run_argv(spec, tmp_path / "runs", "r"),
                capture_output=True,
                text=True,
                env=ENV,
                cwd=ROOT,
            )
            assert p.returncode == 2, p.stderr
            assert "Traceback" not in p.stderr and f"pid {holder.pid}" in p.stderr
        finally:
            holder.kill()
            holder.wait()


def test_a_stale_lock_left_by_a_killed_runner_is_reported_and_taken_over(tmp_path, tiny_model):
    with StandinServer(model="standin") as url:
        spec = _small_run(tmp_path, url, tiny_model, "s")
        run_experiment(
            spec,
            runs_dir=tmp_path / "runs",
            repo_root=ROOT,
            progress=False,
            run_id="s",
            hooks={"after_trial": lambda tid: (_ for _ in ()).throw(KeyboardInterrupt)},
        )
        rd = tmp_path / "runs" / "s"
        holder = _holder(rd)
        holder.send_signal(signal.SIGKILL)  # dies holding it: the kernel frees the flock, the file stays
        holder.wait()
        assert json.loads((rd / run_lock.LOCK_NAME).read_text())["pid"] == holder.pid
        con, buf = _console()
        out = run_experiment(spec, runs_dir=tmp_path / "runs", repo_root=ROOT, progress=False, run_id="s", console=con)
    assert out.status == "complete" and trial_ids(rd) == ["r1-c1", "r2-c1"]
    (ev,) = [e for e in events(rd) if e["event"] == "stale_lock_taken_over"]
    assert ev["previous"]["pid"] == holder.pid
    assert "stale run lock" in buf.getvalue() and f"pid {holder.pid}" in buf.getvalue()
    assert "is no longer running" in buf.getvalue()
    assert not (rd / run_lock.LOCK_NAME).exists()


def test_the_lock_is_taken_before_the_first_file_of_a_new_run(tmp_path, tiny_model, monkeypatch):
    from evidence.run import prepare

    spec = write_spec(tmp_path / "s.yaml", base_url="http://127.0.0.1:9", served="x", model_dir=tiny_model)
    seen = []
    real = prepare.write_atomic

    def spy(path, data, *a, **k):
        seen.append((Path(path).name, (Path(path).parent / run_lock.LOCK_NAME).exists()))
        return real(path, data, *a, **k)

    monkeypatch.setattr(prepare, "write_atomic", spy)
    from evidence.spec.model import load_spec

    rd, resumed = prepare.prepare_run_dir(load_spec(spec), spec, tmp_path / "runs", run_id="n", resume=None)
    try:
        assert seen and seen[0] == ("spec.yaml", True)
        held = run_lock.held(rd.path)
        assert held is not None and held.path == rd.path / run_lock.LOCK_NAME
        assert json.loads(held.path.read_text())["pid"] == os.getpid()
    finally:
        run_lock.release(rd.path)
    assert not (rd.path / run_lock.LOCK_NAME).exists()


def _standin_engine_spec(path: Path, tiny_model: Path, *, itl: float, prompts: int) -> Path:
    """A spec whose engine the runner starts itself: the stand-in, named as `engine.launch.command`."""
    path.write_text(
        f"""name: orphan
title: the stand-in as the engine a runner starts
engine:
  kind: vllm
  launch:
    command: ["{sys.executable}", "-m", "evidence.tools.standin"]
  args:
    extra: ["--standin-itl", "{itl}", "--standin-ttft", "0.005"]
  readiness_timeout_s: 60
model:
  id: standin
  tokenizer: {tiny_model}
code:
  allow_dirty: true
workload: {{input_len: 16, output_len: 8, seed: 1}}
sweep:
  points: [1]
  prompts: {{per_concurrency: {prompts}}}
  repeats: 2
  sessions: 1
  warmup: {{requests: 0}}
""",
        encoding="utf-8",
    )
    return path


def _wait_event(rd: Path, kind: str, timeout: float = 120) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (rd / "events.jsonl").is_file():
            for e in events(rd):
                if e["event"] == kind:
                    return e
        time.sleep(0.2)
    raise AssertionError(f"no {kind} event in {rd} after {timeout} s")


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] not in "ZX"


def test_a_runner_killed_with_9_takes_its_engine_with_it_and_resume_stops_a_leftover_one(tmp_path, tiny_model):
    spec = _standin_engine_spec(tmp_path / "o.yaml", tiny_model, itl=0.2, prompts=4)
    rd = tmp_path / "runs" / "o"
    runner = subprocess.Popen(
        _run_argv(spec, rd.parent, "o"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=ENV,
        cwd=ROOT,
    )
    try:
        proc = _wait_event(rd, "engine_process")
        _wait_event(rd, "trial_start")
        assert _alive(proc["pid"]) and proc["pgid"] == proc["pid"] and proc["proc_start"]
    finally:
        runner.send_signal(signal.SIGKILL)
        runner.wait()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and _alive(proc["pid"]):
        time.sleep(0.1)
    if _alive(proc["pid"]):
        os.killpg(proc["pgid"], signal.SIGKILL)  # leave nothing behind, then fail
        raise AssertionError("the engine outlived its runner")
    # An engine an earlier runner left (e.g. where the parent-death signal is not available): resume
    # finds it in the folder's record and stops it before starting another.
    left = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    try:
        from evidence.rundir import RunDir

        RunDir(rd).event(
            "engine_process",
            pid=left.pid,
            pgid=left.pid,
            proc_start=run_lock.proc_start(left.pid),
            host=socket.gethostname(),
        )
        con, buf = _console()
        out = run_experiment(spec, runs_dir=rd.parent, repo_root=ROOT, progress=False, run_id="o", console=con)
        assert out.status == "complete", out
        assert left.wait(timeout=5) == -signal.SIGTERM
        (ev,) = [e for e in events(rd) if e["event"] == "orphan_engine_stopped"]
        assert ev["pid"] == left.pid and "left running by an earlier runner" in buf.getvalue()
        resume_at = [i for i, e in enumerate(events(rd)) if e["event"] == "resume"][-1]
        stop_at = [i for i, e in enumerate(events(rd)) if e["event"] == "orphan_engine_stopped"][0]
        start_at = [i for i, e in enumerate(events(rd)) if e["event"] == "engine_starting"][-1]
        assert resume_at < stop_at < start_at
    finally:
        if left.poll() is None:
            left.kill()
            left.wait()


class _HangingModels:
    """A fault server (not an engine): /health answers, /v1/models never does (a stuck server)."""

    def __init__(self) -> None:
        import http.server
        import threading

        hits = self.models_hits = []

        class H(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                if self.path == "/health":
                    self.send_response(200)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                elif self.path == "/v1/models":
                    hits.append(time.monotonic())
                    time.sleep(3600)
                else:
                    self.send_error(404)

            def log_message(self, *a) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def test_sigterm_while_prompts_wait_on_a_hung_model_list_stops_at_once(tmp_path, tiny_model):
    srv = _HangingModels()
    try:
        spec = write_spec(
            tmp_path / "s.yaml",
            base_url=srv.url,
            served="standin",
            model_dir=tiny_model,
            points=(1,),
            repeats=1,
            warmup=0,
        )  # request_timeout_s: the default (600 s)
        rd = tmp_path / "runs" / "h"
        p = subprocess.Popen(
            _run_argv(spec, rd.parent, "h"),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=ENV,
            cwd=ROOT,
        )
        try:
            ready = _wait_event(rd, "engine_ready")
            deadline = time.monotonic() + 60
            # the prompt maker's own /v1/models call (after the engine was found ready)
            while time.monotonic() < deadline and not [
                h for h in srv.models_hits if h > time.monotonic() - (time.time() - ready["t_unix"])
            ]:
                time.sleep(0.1)
            time.sleep(0.5)
            p.send_signal(signal.SIGTERM)
            code = p.wait(timeout=60)  # far below the 600 s the request may wait
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        assert code == 130, p.stderr.read()[-2000:]
        assert [e for e in events(rd) if e["event"] == "interrupted"]
    finally:
        srv.close()


def test_an_endpoint_with_nothing_listening_is_named_at_once_and_again_while_waiting(tmp_path, tiny_model, monkeypatch):
    from evidence.engines.endpoint import EndpointEngine

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    spec = write_spec(tmp_path / "s.yaml", base_url=url, served="x", model_dir=tiny_model, warmup=0)
    spec.write_text(spec.read_text().replace("readiness_timeout_s: 60", "readiness_timeout_s: 3"))
    monkeypatch.setattr(EndpointEngine, "NOTIFY_EVERY_S", 1.0)
    con, buf = _console()
    with pytest.raises(RunError) as ei:
        run_experiment(spec, runs_dir=tmp_path / "runs", repo_root=ROOT, progress=False, run_id="e", console=con)
    said = f"connection refused at {url}/"
    assert said in str(ei.value)
    lines = [l for l in buf.getvalue().splitlines() if said in l]
    assert len(lines) >= 2 and lines[0].startswith("waiting for the endpoint (0 s"), buf.getvalue()
    assert [e for e in events(tmp_path / "runs" / "e") if e["event"] == "engine_waiting" and said in e["said"]]


@pytest.mark.parametrize("err", ["ENOSPC", "EROFS", "EACCES"])
def test_a_full_or_read_only_disk_stops_with_one_paragraph_loses_nothing_and_resume_works(
    tmp_path, tiny_model, monkeypatch, err
):
    """The fault is injected at the write (this machine's disk cannot be filled or made read-only on demand)."""
    import errno

    from evidence.run import sweep

    real = sweep.write_records
    calls = []

    def failing(path, records):
        calls.append(path)
        if len(calls) == 2:  # the second trial's records
            raise OSError(getattr(errno, err), os.strerror(getattr(errno, err)), str(path))
        return real(path, records)

    with StandinServer(model="standin") as url:
        spec = _small_run(tmp_path, url, tiny_model, "d")
        monkeypatch.setattr(sweep, "write_records", failing)
        with pytest.raises(RunError) as ei:
            run_experiment(spec, runs_dir=tmp_path / "runs", repo_root=ROOT, progress=False, run_id="d")
        msg = str(ei.value)
        assert "could not write" in msg and "requests.jsonl" in msg and "same command again" in msg
        assert os.strerror(getattr(errno, err)) in msg and ei.value.code != 0
        rd = tmp_path / "runs" / "d"
        assert trial_ids(rd) == ["r1-c1"]
        kept = {p.name: p.read_bytes() for p in (rd / "trials" / "r1-c1").iterdir()}
        monkeypatch.setattr(sweep, "write_records", real)  # the cause is fixed
        out = run_experiment(spec, runs_dir=tmp_path / "runs", repo_root=ROOT, progress=False, run_id="d")
    assert out.status == "complete" and trial_ids(rd) == ["r1-c1", "r2-c1"]
    assert {p.name: p.read_bytes() for p in (rd / "trials" / "r1-c1").iterdir()} == kept
    assert (rd / "aborted" / "r2-c1").is_dir()  # the trial being written was set aside, not lost


def test_a_read_only_runs_folder_is_one_paragraph(tmp_path, tiny_model, monkeypatch):
    import errno

    from evidence.run import prepare

    def ro(*a, **k):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(tmp_path / "runs"))

    monkeypatch.setattr(prepare, "write_atomic", ro)
    spec = write_spec(tmp_path / "s.yaml", base_url="http://127.0.0.1:9", served="x", model_dir=tiny_model)
    with pytest.raises(RunError) as ei:
        run_experiment(spec, runs_dir=tmp_path / "runs", repo_root=ROOT, progress=False, run_id="ro")
    assert "read-only" in str(ei.value) and "Traceback" not in str(ei.value)
    assert not (tmp_path / "runs" / "ro").exists()


def _stop_after_first(tid):
    raise KeyboardInterrupt


def test_resume_refuses_when_the_tokenizer_or_the_harness_code_changed_and_records_an_allowed_drift(
    tmp_path, tiny_model, monkeypatch
):
    import shutil

    from evidence.canon import read_json
    from evidence.run import session

    tok = tmp_path / "tok"
    shutil.copytree(tiny_model, tok)
    with StandinServer(model="standin") as url:
        spec = _small_run(tmp_path, url, tok, "t")
        run_experiment(
            spec,
            runs_dir=tmp_path / "runs",
            repo_root=ROOT,
            progress=False,
            run_id="t",
            hooks={"after_trial": _stop_after_first},
        )
        rd = tmp_path / "runs" / "t"
        first = read_json(rd / "provenance.json")["inputs"]
        assert first["tokenizer"]["path"] == str(tok) and len(first["harness_sha256"]) == 64
        # the tokenizer folder changes (the prompts would come from another vocabulary)
        cfg = tok / "tokenizer_config.json"
        cfg.write_text(cfg.read_text() + "\n")
        with pytest.raises(RunError) as ei:
            run_experiment(spec, runs_dir=tmp_path / "runs", repo_root=ROOT, progress=False, run_id="t")
        assert "tokenizer/model folder" in str(ei.value) and "--allow-drift" in str(ei.value)
        assert trial_ids(rd) == ["r1-c1"] and not (rd / "provenance-2.json").exists()
        # the harness code changes too (its version did not)
        monkeypatch.setattr(session, "harness_sha256", lambda: "0" * 64)
        with pytest.raises(RunError) as ei:
            run_experiment(spec, runs_dir=tmp_path / "runs", repo_root=ROOT, progress=False, run_id="t")
        assert "harness code" in str(ei.value) and "tokenizer/model folder" in str(ei.value)
        out = run_experiment(
            spec, runs_dir=tmp_path / "runs", repo_root=ROOT, progress=False, run_id="t", allow_drift=True
        )
    assert out.status == "complete" and trial_ids(rd) == ["r1-c1", "r2-c1"]
    later = read_json(rd / "provenance-2.json")
    assert {c["input"].split(" ")[0] for c in later["inputs_changed"]} == {"harness", "tokenizer/model"}
    assert [e for e in events(rd) if e["event"] == "inputs_drift_allowed"]
    # and a caveat of the analysis
    from evidence.analysis.analyze import compute_analysis
    from evidence.analysis.load import load_run

    res = compute_analysis(load_run(rd))
    (cav,) = [c for c in res["caveats"] if c.startswith("Resumed after what the results depend on changed")]
    assert "harness code" in cav and "tokenizer/model folder" in cav


_SIGNAL_AT = """
import os, signal, sys
from evidence.run import runner, prepare
sig = getattr(signal, sys.argv[2])
where = sys.argv[1]
if where == "after":  # right after the run completed: its summary is being made
    real = runner.point_rows
    def point_rows(*a, **k):
        os.kill(os.getpid(), sig)
        return real(*a, **k)
    runner.point_rows = point_rows
else:  # before anything ran: the run folder is being opened
    real = runner.prepare_run_dir
    def prepare_run_dir(*a, **k):
        os.kill(os.getpid(), sig)
        return real(*a, **k)
    runner.prepare_run_dir = prepare_run_dir
from evidence.cli.main import main
sys.argv = ["evidence", "run", *sys.argv[3:]]
main()
"""


@pytest.mark.parametrize(
    "where,sig,code",
    [("after", "SIGTERM", 0), ("after", "SIGUSR2", 0), ("before", "SIGTERM", 130), ("before", "SIGUSR2", 130)],
)
def test_a_signal_from_the_first_instruction_to_the_last_is_a_clean_stop(tmp_path, tiny_model, where, sig, code):
    with StandinServer(model="standin") as url:
        spec = write_spec(
            tmp_path / "s.yaml", base_url=url, served="standin", model_dir=tiny_model, points=(1,), repeats=1, warmup=0
        )
        p = subprocess.run(
            [
                sys.executable,
                "-c",
                _SIGNAL_AT,
                where,
                sig,
                str(spec),
                "--runs-dir",
                str(tmp_path / "runs"),
                "--run-id",
                "g",
                "--no-progress",
            ],
            capture_output=True,
            text=True,
            env=ENV,
            cwd=ROOT,
            timeout=300,
        )
    assert p.returncode == code, (p.returncode, p.stderr[-2000:])
    assert "Traceback" not in p.stderr
    rd = tmp_path / "runs" / "g"
    if where == "after":
        assert "complete" in p.stdout and trial_ids(rd) == ["r1-c1"]
    else:  # stopped before the run folder was opened: nothing of it exists
        assert not rd.exists()
    assert not (rd / run_lock.LOCK_NAME).exists()


def test_sigusr2_in_a_trial_stops_cleanly_and_the_same_command_resumes(tmp_path, tiny_model):
    """Slurm's time-limit warning (submitit's --signal USR2@90) mid-trial: what a requeued job sees."""
    with StandinServer(model="standin", itl_s=0.05) as url:
        spec = write_spec(
            tmp_path / "s.yaml",
            base_url=url,
            served="standin",
            model_dir=tiny_model,
            points=(1,),
            repeats=2,
            per=4,
            warmup=0,
            output_len=16,
        )
        rd = tmp_path / "runs" / "u"
        cmd = _run_argv(spec, rd.parent, "u")
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=ENV, cwd=ROOT)
        try:
            _wait_event(rd, "trial_start")
            p.send_signal(signal.SIGUSR2)
            assert p.wait(timeout=120) == 130, p.stderr.read()[-2000:]
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        (ev,) = [e for e in events(rd) if e["event"] == "interrupted"]
        assert ev["reason"] == "SIGUSR2 received"
        assert [e for e in events(rd) if e["event"] == "trial_interrupted"]
        again = subprocess.run(cmd, capture_output=True, text=True, env=ENV, cwd=ROOT, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    assert trial_ids(rd) == ["r1-c1", "r2-c1"] and (rd / "aborted" / "r1-c1").is_dir()


def test_a_runner_killed_in_every_phase_loses_nothing_and_leaves_no_engine(tmp_path, tiny_model):
    """kill -9 as each phase begins (folder made, engine starting, engine ready, warm-up, a trial, a trial
    done), then the same command again: every planned trial exactly once and whole, no engine left."""
    spec = _standin_engine_spec(tmp_path / "p.yaml", tiny_model, itl=0.02, prompts=3)
    spec.write_text(spec.read_text().replace("warmup: {requests: 0}", "warmup: {requests: 2}"))
    rd = tmp_path / "runs" / "p"
    cmd = _run_argv(spec, rd.parent, "p")
    engines = []
    for k, phase in enumerate(
        ("run_created", "engine_starting", "engine_ready", "warmup_start", "trial_start", "trial_complete")
    ):
        seen = len([e for e in events(rd) if e["event"] == phase]) if rd.is_dir() else 0
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV, cwd=ROOT)
        try:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and p.poll() is None:
                if (
                    rd.is_dir()
                    and (rd / "events.jsonl").is_file()
                    and len([e for e in events(rd) if e["event"] == phase]) > seen
                ):
                    break
                time.sleep(0.02)
        finally:
            p.send_signal(signal.SIGKILL)
            p.wait()
        engines += [e for e in events(rd) if e["event"] == "engine_process" and e not in engines]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(_alive(e["pid"]) for e in engines):
        time.sleep(0.1)
    left = [e["pid"] for e in engines if _alive(e["pid"])]
    for pid in left:
        os.killpg(pid, signal.SIGKILL)  # leave nothing behind, then fail
    assert not left, "an engine outlived its runner"
    done = subprocess.run(cmd, capture_output=True, text=True, env=ENV, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert trial_ids(rd) == ["r1-c1", "r2-c1"]
    for tid in trial_ids(rd):
        recs = (rd / "trials" / tid / "requests.jsonl").read_text().splitlines()
        assert len(recs) == 3 and all(json.loads(r)["ok"] for r in recs)
    assert len([e for e in events(rd) if e["event"] == "trial_complete"]) == 2  # none ran twice
    assert len([e for e in events(rd) if e["event"] == "stale_lock_taken_over"]) >= 5
    assert not (rd / run_lock.LOCK_NAME).exists()
