"""The engine session: start, stop and restart a server, and what the sweep and the profile share.

Both the measured sweep (runner) and the diagnostic profile (profiling) start servers and make
prompts the same way; the shared pieces live here so neither imports the other.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

from evidence.canon import write_json
from evidence.rundir import RunDir
from evidence.spec.model import Spec


class RunError(Exception):
    """The run cannot start or go on; the message is one paragraph for the user."""

    def __init__(self, message: str, code: int = 2):
        super().__init__(message)
        self.code = code


Hooks = dict[str, Callable[..., Any]]  # test hooks: "after_trial"(trial_id) may raise to simulate a kill


def served_name(spec: Spec) -> str:
    """The model name requests carry (what the server was told to serve it as)."""
    return spec.model.served_name or spec.model.id


def make_prompts(spec: Spec, repo_root: Path, base_url: str, model: str, n: int, seed: int):
    """The trial's prompts: ids bounded by a local tokenizer, one in the HF cache, or the server's own
    /detokenize (an endpoint needs nothing local); see evidence.loadgen.vocab."""
    from evidence.loadgen.prompts import PromptError
    from evidence.loadgen.vocab import prompts_for_spec

    try:
        return prompts_for_spec(spec, repo_root=repo_root, base_url=base_url, model=model, n=n, seed=seed,
                                api_key=api_key(spec))
    except PromptError as e:
        raise RunError(f"cannot make the prompts: {e}") from None


def start_engine(engine, rd: RunDir, spec: Spec, say, hooks: Hooks | None = None, what: str = "") -> None:
    """Start the engine with its own numbered log, wait until ready, record what it resolved.

    `what`: which start this is, for the progress line (e.g. "server start 2 of 3, arm fast")."""
    from evidence.engines import EngineError

    rd.engine_dir.mkdir(parents=True, exist_ok=True)
    log = rd.numbered(rd.engine_log)
    rd.event("engine_starting", command=engine.command(), log=str(log.relative_to(rd.path)))
    say(f"starting engine ({spec.engine.kind}{'; ' + what if what else ''}); log: {log}")
    t = time.monotonic()

    def waiting(line: str) -> None:
        say(line)
        rd.event("engine_waiting", said=line)

    if hasattr(engine, "notify"):
        engine.notify = waiting
    try:
        engine.start(log)
        record_engine_process(rd, engine)
        engine.wait_ready(spec.engine.readiness_timeout_s)
    except EngineError as e:
        rd.event("engine_failed", error=str(e)[-4000:])
        engine.stop()
        raise RunError(f"the engine did not become ready: {e}") from None
    resolved = engine.resolved()
    write_json(rd.numbered(rd.engine_resolved), resolved)
    if hooks and "engine_ready" in hooks:
        hooks["engine_ready"](engine)
    rd.event("engine_ready", seconds=round(time.monotonic() - t, 3), base_url=engine.base_url,
             version=engine.version())
    say(f"engine ready after {time.monotonic() - t:.0f} s at {engine.base_url}")


def record_engine_process(rd: RunDir, engine) -> None:
    """Record the started engine's pid, process group, start time and host (for a later runner of
    this folder to find it, should this runner die without stopping it)."""
    import socket

    from evidence.run.lock import proc_start

    proc = getattr(engine, "proc", None)
    if proc is None:
        return  # nothing started here (an endpoint)
    rd.event("engine_process", pid=proc.pid, pgid=getattr(engine, "pgid", None), proc_start=proc_start(proc.pid),
             host=socket.gethostname())


def stop_orphaned_engines(rd: RunDir, say) -> list[int]:
    """Stop every engine an earlier runner of this folder started on this host and left running.

    Called on resume, under the folder's lock (so no live runner owns them), before an engine
    starts: a second server beside a leftover one would run out of accelerator memory or be
    measured next to a live server. Returns the pids stopped.
    """
    import os
    import signal
    import socket

    from evidence.run.lock import same_process_alive

    host = socket.gethostname()
    stopped = []
    for e in rd.read_events():
        if e.get("event") != "engine_process" or e.get("host") != host:
            continue
        pid, pgid = int(e.get("pid") or 0), e.get("pgid")
        if not same_process_alive(pid, e.get("proc_start")):
            continue
        target = int(pgid) if pgid else None
        try:
            os.killpg(target, signal.SIGTERM) if target else os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            continue
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and same_process_alive(pid, e.get("proc_start")):
            time.sleep(0.1)
        how = "SIGTERM"
        if same_process_alive(pid, e.get("proc_start")):
            try:
                os.killpg(target, signal.SIGKILL) if target else os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            how = "SIGKILL after 15 s"
        rd.event("orphan_engine_stopped", pid=pid, pgid=pgid, how=how)
        say(f"stopped engine pid {pid} (process group {pgid}) left running by an earlier runner of {rd.path} ({how})")
        stopped.append(pid)
    return stopped


def log_tail(rd: RunDir, n: int = 30) -> str:
    """The last lines of the newest engine log (for messages about a dead engine)."""
    logs = sorted(rd.engine_logs(), key=lambda p: p.stat().st_mtime)
    if not logs:
        return "(no engine log)"
    lines = logs[-1].read_text(encoding="utf-8", errors="replace").splitlines()
    return "\n".join(lines[-n:])


def api_key(spec: Spec) -> str | None:
    """The API key's value, read from the environment at run time (never recorded anywhere)."""
    import os

    return os.environ.get(spec.engine.api_key_env_name()) or None


def _likely_cause(status: int | None, error: str, spec: Spec, key_set: bool) -> str:
    env = spec.engine.api_key_env_name()
    if status in (401, 403):
        if key_set:
            return (f"the server refused the API key from ${env}; check that it is the key the server was started with "
                    "(or name another variable with engine.api_key_env)")
        return (f"the server requires an API key: export it as ${env} (or name another variable with "
                "engine.api_key_env); it is sent as `Authorization: Bearer` and never recorded")
    if status == 404:
        return (f"the server does not serve the model name {served_name(spec)!r} or the completions endpoint; "
                "compare model.served_name (or model.id) with the server's /v1/models")
    if status == 400 or status == 422:
        return ("the server rejected the request body: check input_len + output_len against the server's "
                "max_model_len, and any workload.extra_body fields")
    if status is not None and status >= 500:
        return "the server failed while answering; its log (engine/server*.log for an engine we started) says why"
    if "timeout" in error.lower() or "timed out" in error.lower():
        return "no answer within workload.request_timeout_s; the server may be overloaded or stuck"
    return f"the server could not be reached or broke the connection; is it listening at {spec.engine.base_url or 'its URL'}?"


def warmup_failure(records, spec: Spec) -> str | None:
    """When every warm-up request failed, the reason the sweep must not start (None otherwise).

    A sweep whose every request fails measures nothing; stopping here shows the server's
    answer (its status and body) while nothing has been spent on the trials.
    """
    if not records or any(r.ok for r in records):
        return None
    from collections import Counter

    answers = Counter((r.status, (r.error or "").strip()[:300]) for r in records)
    (status, error), n = answers.most_common(1)[0]
    said = f"HTTP {status}" if status is not None else "no HTTP answer"
    return (f"all {len(records)} warm-up requests failed, so the sweep was not started. The server's answer "
            f"({n} of {len(records)}): {said}: {error or '(no body)'}. Likely cause: "
            f"{_likely_cause(status, error, spec, api_key(spec) is not None)}.")


def trial_config(spec: Spec, base_url: str, prompts, *, max_concurrency: int | None, phase: str,
                 seed: int, stop=None, **overrides):
    """The load generator's TrialConfig for this spec (TrialConfig.from_spec: the workload's request
    fields, timeout and API key), the served model name and the run's stop flag.

    Every caller (trials, warm-up, profile) builds its config here, so what a spec says about
    requests reaches all of them alike.
    """
    from evidence.engines import adapter_class
    from evidence.loadgen.trial import TrialConfig

    overrides.setdefault("telemetry_series", adapter_class(spec.engine.kind).telemetry_series)  # the adapter's names
    return TrialConfig.from_spec(spec, base_url=base_url, model=served_name(spec), prompts=prompts,
                                 max_concurrency=max_concurrency, seed=seed, phase=phase, stop=stop, **overrides)


def _tree_sha256(folder: Path, skip_suffixes: tuple[str, ...] = ()) -> tuple[str, int]:
    """One sha256 over a folder's files (relative path and content hash of each, sorted); links followed."""
    import hashlib

    from evidence.canon import sha256_file

    h = hashlib.sha256()
    n = 0
    for f in sorted(folder.rglob("*")):
        rel = f.relative_to(folder)
        if "__pycache__" in rel.parts or f.suffix == ".pyc" or f.name.endswith(skip_suffixes) or not f.is_file():
            continue
        h.update(f"{rel.as_posix()}\0{sha256_file(f)}\n".encode("utf-8"))
        n += 1
    return h.hexdigest(), n


def harness_sha256() -> str:
    """The content hash of the harness package's files (code changed while its version did not)."""
    import evidence

    return _tree_sha256(Path(evidence.__file__).resolve().parent)[0]


def input_hashes(spec: Spec, repo_root: Path) -> dict:
    """What the prompts and the client depend on, hashed: the harness code and the local tokenizer
    folder (weights skipped: they do not make prompts; provenance's model section hashes them)."""
    from evidence.loadgen.vocab import hf_cached_dir
    from evidence.run.provenance.packages import WEIGHT_SUFFIXES

    out: dict = {"harness_sha256": harness_sha256(), "tokenizer": None}
    m = spec.model
    for p in (m.tokenizer, m.path):
        q = Path(p).expanduser() if p else None
        if q is not None and not q.is_absolute():
            q = repo_root / q
        if q is None or not q.is_dir():
            q = hf_cached_dir(p, m.revision if p == m.id else None) if p else None
        if q is not None and q.is_dir():
            sha, n = _tree_sha256(q, WEIGHT_SUFFIXES)
            out["tokenizer"] = {"path": str(q), "sha256": sha, "files": n}
            break
    return out


def inputs_changed(rd: RunDir, now: dict) -> list[dict]:
    """What changed since the run started, against its first provenance.json (nothing for runs without one)."""
    from evidence.canon import read_json

    try:
        before = read_json(rd.provenance).get("inputs")
    except (OSError, ValueError):
        return []
    if not isinstance(before, dict):
        return []
    out = []
    if before.get("harness_sha256") != now.get("harness_sha256"):
        out.append({"input": "harness code (content hash of the evidence package)",
                    "recorded": before.get("harness_sha256"), "now": now.get("harness_sha256")})
    tb, tn = before.get("tokenizer") or {}, now.get("tokenizer") or {}
    if tb.get("sha256") != tn.get("sha256"):
        out.append({"input": f"tokenizer/model folder {tn.get('path') or tb.get('path')} (hash of its files)",
                    "recorded": tb.get("sha256"), "now": tn.get("sha256")})
    return out


def record_provenance(spec: Spec, spec_path: Path, rd: RunDir, engine, repo_root: Path, *,
                      code_commit: str | None, allow_drift: bool, reason: str) -> Path:
    """Collect provenance and check the pins; write provenance.json (numbered after the first).

    Called before anything runs (a refusal raises RunError with what was probed and what to
    do) and again when a new engine session starts (the record of what that server ran on).
    """
    from evidence.canon import sha256_file
    from evidence.run.provenance import collect as prov_mod
    from evidence.run.provenance.pins import refusal_message

    inputs = input_hashes(spec, repo_root)
    changed = inputs_changed(rd, inputs) if reason == "resume" else []
    if changed and not allow_drift:
        rd.event("refused_inputs_changed", changes=changed)
        raise RunError(
            f"refusing to resume {rd.path}: what its results depend on changed since it started: "
            + "; ".join(f"{c['input']}: recorded {str(c['recorded'])[:12]}..., now {str(c['now'])[:12]}..."
                        for c in changed)
            + ". Trials made before and after would not be comparable. Restore what changed, start a new run "
            "(another --run-id or --new), or resume with --allow-drift to record the change as provenance and a "
            "caveat.")
    prov = prov_mod.collect_provenance(spec, repo_root=repo_root, engine=engine,
                                       engine_python=getattr(engine, "python", None), code_commit=code_commit)
    prov["spec_sha256"] = sha256_file(spec_path)
    prov["inputs"] = inputs
    if changed:
        prov["inputs_changed"] = changed
    pins = prov_mod.check_pins(spec, prov)
    prov["pins"] = pins
    bad = [p for p in pins if not p["ok"]]
    prov["drift_allowed"] = bool(bad) and allow_drift
    prov_path = rd.numbered(rd.provenance)
    write_json(prov_path, prov)
    rd.event("provenance_recorded", file=str(prov_path.relative_to(rd.path)), reason=reason)
    if bad and not allow_drift:
        rd.event("refused_pins", mismatches=bad)
        rd.set_status("refused")
        raise RunError(refusal_message(spec, prov, bad, prov_path))
    if bad:
        rd.event("drift_allowed", mismatches=bad)
    if changed:
        from evidence.canon import read_json

        rd.event("inputs_drift_allowed", changes=changed)
        # kept in run.json too, where the analysis reads it for a caveat
        info = read_json(rd.run_json)
        rd.set_status(info.get("status", "running"), inputs_changed=list(info.get("inputs_changed") or []) + [
            {"provenance": str(prov_path.relative_to(rd.path)), "changes": changed}])
    return prov_path
