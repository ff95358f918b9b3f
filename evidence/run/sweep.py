"""The measured trials: engine sessions, warm-up, one trial after another, each complete or set aside.

Each trial is written under trials/.tmp-<id>/ and renamed into place once its summary is
written; a trial cut off (a signal, a dead engine) goes to aborted/<id>/ with the
requests that completed, and runs again in full on resume. With `sweep.sessions: K`
the plan's trials carry their session, and the engine is restarted (with provenance
recorded again) whenever the session changes.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from evidence.canon import write_atomic, write_json
from evidence.engines import adapter_class
from evidence.records import dumps_line, write_records
from evidence.run.interleave import run_interleaved
from evidence.run.progress import SweepProgress
from evidence.run.session import (Hooks, RunError, log_tail, make_prompts, record_provenance, served_name,
                                  start_engine, trial_config, warmup_failure)
from evidence.run.signals import Interrupts
from evidence.rundir import META, REQUESTS, SUMMARY, TELEMETRY, RunDir
from evidence.spec.model import Spec
from evidence.spec.plan import Trial


@dataclass
class RunContext:
    """What every stage of one `evidence run` shares."""

    spec: Spec
    spec_path: Path
    rd: RunDir
    engine: Any
    repo_root: Path
    intr: Interrupts
    say: Callable[..., Any]
    hooks: Hooks = field(default_factory=dict)
    interleave: str | None = None
    http_stack: str = "auto"
    code_commit: str | None = None
    allow_drift: bool = False
    session: int | None = None  # the session the running engine serves (None: not started)
    warmed: bool = False


def trial_session(t: Trial) -> int:
    return int(getattr(t, "session", 1) or 1)


def _ensure_session(ctx: RunContext, trial: Trial, first_in_call: bool) -> None:
    """Start the engine, or restart it when the trial belongs to another session (or per_trial restarts)."""
    sess = trial_session(trial)
    restart_each = ctx.spec.engine.restart == "per_trial" and not first_in_call
    if ctx.session is not None and ctx.session == sess and not restart_each:
        return
    if ctx.session is not None:
        ctx.engine.stop()
        reason = "per_trial restart" if ctx.session == sess else f"session {ctx.session} done; session {sess} starts"
        ctx.rd.event("engine_stopped", reason=reason)
    new_session = ctx.session != sess
    arm = getattr(trial, "arm", None)
    run_spec, own_build = ctx.spec, False
    if arm is not None and hasattr(ctx.engine, "spec"):
        # this start runs the trial's arm: the adapter reads its spec (command, env, launch) when it starts
        from evidence.spec.plan import spec_for_arm

        run_spec = ctx.engine.spec = spec_for_arm(ctx.spec, arm)
        own_build = any(a.name == arm and (a.launch or a.version) for a in ctx.spec.arms)
        ctx.rd.event("arm_start", arm=arm, session=sess, before=trial.id)
    k, local = ctx.spec.sweep.sessions, adapter_class(ctx.spec.engine.kind).local_process
    noun = "server start" if local else "session"  # an endpoint's server is someone else's: never restarted
    what = ("per_trial restart" if not new_session else f"{noun} {sess} of {k}" if k > 1 and sess <= k
            else f"{noun} {sess}, added by --until-decided" if k > 1 else "")
    start_engine(ctx.engine, ctx.rd, run_spec, ctx.say, ctx.hooks, what=what + (f", arm {arm}" if arm else ""))
    if new_session and (ctx.session is not None or own_build):
        # a new server for a new block of repeats: what it runs on is recorded again; an arm with its own build
        # (launch, version) is held to its pins as the run start is (a mismatch refuses unless --allow-drift)
        record_provenance(run_spec, ctx.spec_path, ctx.rd, ctx.engine, ctx.repo_root, code_commit=ctx.code_commit,
                          allow_drift=ctx.allow_drift if own_build else True,
                          reason=f"session {sess}" + (f", arm {arm}" if arm else ""))
    if new_session:
        if not local:
            # not our server: nothing restarts; the session still marks the block for the analysis
            ctx.rd.event("session_start", session=sess, before=trial.id, restarted=False,
                         note=f"engine.kind {ctx.spec.engine.kind}: the server is not started by this tool, so it is "
                              "not restarted")
        else:
            ctx.rd.event("session_start", session=sess, before=trial.id, restarted=True)
    ctx.session = sess
    ctx.warmed = False


def run_trials(ctx: RunContext, total: int, todo: list[Trial], *, progress: bool) -> None:
    """Run `todo` in order (each complete or set aside); `total`: trials in the whole plan (for progress)."""
    sw = ctx.spec.sweep
    bar = SweepProgress(total, total - len(todo), enabled=progress, say=ctx.say)
    try:
        for k, trial in enumerate(todo):
            _ensure_session(ctx, trial, first_in_call=(k == 0))
            if sw.warmup.requests and (not ctx.warmed or sw.warmup.when == "each_trial"):
                warmup(ctx, trial)
                ctx.warmed = True
            if sw.cooldown_s and k > 0:
                time.sleep(sw.cooldown_s)
            measure(ctx, trial, bar)
            if ctx.interleave:
                run_interleaved(ctx.interleave, ctx.spec, ctx.rd, ctx.engine, trial)
            if "after_trial" in ctx.hooks:
                ctx.hooks["after_trial"](trial.id)
            ctx.intr.check()
    finally:
        bar.close()


def measure(ctx: RunContext, trial: Trial, bar: SweepProgress) -> dict:
    """One trial: complete under trials/<id>/, or set aside under aborted/<id>/ (and raise)."""
    from evidence.loadgen import trial as loadgen
    from evidence.metrics import trial_metrics

    spec, rd, engine = ctx.spec, ctx.rd, ctx.engine
    # Outside the shield: a signal cuts the prompt making at once (a hung /v1/models or tokenizer
    # call would otherwise hold it for request_timeout_s); nothing of the trial is written yet.
    prompts = make_prompts(spec, ctx.repo_root, engine.base_url, served_name(spec), trial.prompts, trial.seed)
    with ctx.intr.shielded() as stop:
        tmp = rd.trial_tmp(trial.id)
        if tmp.exists():
            shutil.rmtree(tmp)  # our own leftover from this very process (cannot hold a complete trial)
        tmp.mkdir(parents=True)
        rd.event("trial_start", trial=trial.id, index=trial.index, prompts=trial.prompts)
        bar.start_trial(trial)
        res = loadgen.run_trial(trial_config(spec, engine.base_url, prompts, max_concurrency=trial.point,
                                             phase="measure", seed=trial.seed, http_stack=ctx.http_stack, stop=stop,
                                             processes=_processes(engine)),
                                on_request_done=bar.request_done)
        write_records(tmp / REQUESTS, res.records)
        write_atomic(tmp / TELEMETRY, "".join(dumps_line(r) for r in res.telemetry))
        meta = res.meta.as_dict()
        meta["trial"] = trial.as_dict()
        write_json(tmp / META, meta)
        summary = trial_metrics(res.records, spec.analysis.percentiles)
        summary["trial_id"] = trial.id
        if stop.is_set():
            # Cut off by a signal: the requests that completed are kept apart (never analysed);
            # the trial runs again in full on resume.
            dest = _set_aside(rd, tmp, trial, summary)
            rd.event("trial_interrupted", trial=trial.id, reason=stop.reason, records_moved_to=dest,
                     completed=summary["completed"], requests=summary["requests"])
            raise KeyboardInterrupt
        if not engine.alive():
            # A trial during which the engine died does not measure the point: keep its records
            # apart and stop; a resume restarts the engine and runs the trial again.
            dest = _set_aside(rd, tmp, trial, summary)
            rd.event("engine_died", trial=trial.id, records_moved_to=dest, log_tail=log_tail(rd))
            raise RunError(
                f"the engine died during trial {trial.id}; its records are kept in {rd.path / dest} and the trial will "
                f"run again on resume. Last engine log lines:\n{log_tail(rd)}", code=1)
        write_json(tmp / SUMMARY, summary)  # written last: its presence marks completeness
        rd.commit_trial(trial.id)
    rd.event("trial_complete", trial=trial.id, completed=summary["completed"], failed=summary["failed"],
             output_throughput=summary["output_throughput"])
    bar.end_trial(trial, summary)
    return summary


def _processes(engine):
    """The engine's processes by role for the host telemetry, or why there are none."""
    f = getattr(engine, "processes", None)
    return f() if f is not None else f"the {type(engine).__name__} engine declares no process roles"


def _set_aside(rd: RunDir, tmp: Path, trial: Trial, summary: dict) -> str:
    dest = rd.numbered(rd.aborted_dir / trial.id)
    dest.parent.mkdir(parents=True, exist_ok=True)
    write_json(tmp / SUMMARY, summary)
    os.replace(tmp, dest)
    return str(dest.relative_to(rd.path))


def warmup(ctx: RunContext, trial: Trial) -> None:
    """The warm-up requests (kept under warmup/, never in a trial); all failing stops the run."""
    from evidence.loadgen import trial as loadgen

    spec, rd, engine = ctx.spec, ctx.rd, ctx.engine
    wu = spec.sweep.warmup
    conc = wu.concurrency or trial.point
    # Warm-up prompts use their own seed so they never coincide with measured prompts (made
    # outside the shield, so a signal cuts them at once).
    prompts = make_prompts(spec, ctx.repo_root, engine.base_url, served_name(spec), wu.requests,
                           spec.workload.seed ^ 0x5EED)
    with ctx.intr.shielded() as stop:
        rd.event("warmup_start", requests=wu.requests, concurrency=conc, before=trial.id)
        res = loadgen.run_trial(trial_config(spec, engine.base_url, prompts, max_concurrency=conc, phase="warmup",
                                             request_rate="inf", burstiness=1.0, seed=0, telemetry=False,
                                             http_stack=ctx.http_stack, stop=stop))
        rd.warmup_dir.mkdir(parents=True, exist_ok=True)
        path = rd.numbered(rd.warmup_dir / REQUESTS)
        tmp = path.with_name("." + path.name + ".tmp")
        write_records(tmp, res.records)
        os.replace(tmp, path)
    failed = sum(1 for r in res.records if not r.ok)
    rd.event("warmup_done", file=str(path.relative_to(rd.path)), failed=failed)
    ctx.intr.check()  # a warm-up cut by a signal says nothing about the server
    why = warmup_failure(res.records, spec)
    if why is not None:
        rd.event("warmup_failed", requests=len(res.records), reason=why)
        raise RunError(why)
