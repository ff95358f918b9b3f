"""Plan + engine -> runs/<run-id>/ : execute the trials, record everything, resume.

The run directory is append-only: every file is written under a temporary name
and renamed into place, a trial appears only once complete, and nothing already
recorded is rewritten. An interrupted run (Ctrl-C, a kill, a dead engine) is
continued by running `evidence run` on the same spec again (or `--resume RUN`):
the trials already complete are kept and never run twice; a trial that was cut
off is moved to aborted/ and run again in full.
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evidence.canon import read_json, sha256_file, write_atomic, write_json
from evidence.records import write_records
from evidence.run.interleave import run_interleaved
from evidence.run.prepare import find_resumable, prepare_run_dir, set_status
from evidence.run.progress import Progress, point_rows
from evidence.run.provenance.pins import refusal_message
from evidence.run.session import Hooks, RunError, log_tail, make_prompts, start_engine, warmup_failure
from evidence.run.session import served_name as _served  # the name the load-generator call lines use
from evidence.rundir import META, PROFILE_JSON, REQUESTS, SUMMARY, TELEMETRY, RunDir
from evidence.spec.model import Spec, load_spec
from evidence.spec.plan import Plan, Trial, make_plan

__all__ = ["RunError", "RunOutcome", "Hooks", "run_experiment", "prepare_run_dir", "find_resumable"]


@dataclass
class RunOutcome:
    run_dir: Path
    status: str  # complete | incomplete | interrupted
    trials_done: list[str] = field(default_factory=list)
    trials_failed: list[str] = field(default_factory=list)  # complete, but with failed requests
    resumed: bool = False
    message: str = ""
    points: list[dict] = field(default_factory=list)  # per point: medians of its complete trials (progress.point_rows)

    @property
    def exit_code(self) -> int:
        if self.status == "interrupted":
            return 130
        if self.status != "complete" or self.trials_failed:
            return 1
        return 0


def run_experiment(
    spec_path: Path,
    *,
    runs_dir: Path,
    repo_root: Path,
    run_id: str | None = None,
    resume: Path | None = None,
    allow_drift: bool = False,
    code_commit: str | None = None,
    progress: bool = True,
    profile: bool = True,
    hooks: Hooks | None = None,
    console: Any = None,
    interleave: str | None = None,
    http_stack: str = "auto",
) -> RunOutcome:
    from evidence import engines as engine_mod
    from evidence.run.provenance import collect as prov_mod

    hooks = hooks or {}
    spec_path = Path(spec_path)
    spec = load_spec(spec_path)
    plan = make_plan(spec)
    say = (console.print if console is not None else (lambda *a, **k: None))
    rd, resumed = prepare_run_dir(spec, spec_path, Path(runs_dir), run_id=run_id, resume=resume, say=say)
    done = set(rd.completed_trials())
    todo = [t for t in plan.trials if t.id not in done]
    if not todo and (not profile or not spec.profile.enabled or spec.engine.kind != "vllm" or _profile_done(rd)):
        # Nothing left to run: record nothing new (no provenance, no events), just say so.
        if read_json(rd.run_json).get("status") != "complete":
            set_status(rd, "complete")
        return RunOutcome(rd.path, "complete", trials_done=sorted(done), trials_failed=_failed_trials(rd),
                          resumed=resumed, message="all trials were already complete")
    if resumed:
        moved = rd.set_aside_partial()
        for tid, dest in moved:
            rd.event("partial_trial_set_aside", trial=tid, moved_to=dest)
        rd.event("resume", completed=sorted(done), remaining=[t.id for t in plan.trials if t.id not in done])
        say(f"resuming {rd.path}: {len(done)} of {len(plan.trials)} trials already complete"
            + (f"; set aside partial trial(s) {', '.join(t for t, _ in moved)} in aborted/" if moved else ""))

    # Provenance and pins, before anything runs.
    engine = engine_mod.make_engine(spec, repo_root, cache_dir=repo_root / ".cache" / "engine")
    prov = prov_mod.collect_provenance(spec, repo_root=repo_root, engine=engine,
                                       engine_python=getattr(engine, "python", None), code_commit=code_commit)
    prov["spec_sha256"] = sha256_file(spec_path)
    pins = prov_mod.check_pins(spec, prov)
    prov["pins"] = pins
    bad = [p for p in pins if not p["ok"]]
    prov["drift_allowed"] = bool(bad) and allow_drift
    prov_path = rd.numbered(rd.provenance)
    write_json(prov_path, prov)
    if bad and not allow_drift:
        rd.event("refused_pins", mismatches=bad)
        set_status(rd, "refused")
        raise RunError(refusal_message(spec, prov, bad, prov_path))
    if bad:
        rd.event("drift_allowed", mismatches=bad)

    outcome = RunOutcome(rd.path, "incomplete", trials_done=sorted(done), resumed=resumed)

    def _on_term(signum, frame):  # SIGTERM behaves like Ctrl-C: stop cleanly, keep what is recorded
        raise KeyboardInterrupt

    old_term = signal.signal(signal.SIGTERM, _on_term)
    try:
        if todo:
            _sweep(spec, plan, todo, rd, engine, repo_root, progress=progress, hooks=hooks, say=say,
                   interleave=interleave, http_stack=http_stack)
        if profile and spec.profile.enabled and spec.engine.kind == "vllm" and not _profile_done(rd):
            from evidence.run.profiling import run_profile

            # The measuring server must be gone (and its accelerator memory freed) before the
            # profiling server starts: two servers at 0.5 memory utilization do not fit one GPU.
            engine.stop()
            rd.event("engine_stopped", reason="sweep done; profiling starts its own server")

            run_profile(spec, rd, repo_root=repo_root, say=say)
        missing = [t.id for t in plan.trials if t.id not in set(rd.completed_trials())]
        outcome.trials_done = rd.completed_trials()
        outcome.trials_failed = _failed_trials(rd)
        outcome.status = "complete" if not missing else "incomplete"
        set_status(rd, outcome.status)
        rd.event("run_" + outcome.status, missing=missing, trials_with_failures=outcome.trials_failed)
    except RunError:
        set_status(rd, "incomplete")
        raise
    except KeyboardInterrupt:
        outcome.status = "interrupted"
        outcome.trials_done = rd.completed_trials()
        rd.event("interrupted", completed=outcome.trials_done)
        set_status(rd, "incomplete")
        outcome.message = f"interrupted; {len(outcome.trials_done)} of {len(plan.trials)} trials are recorded. Run the same command again to continue."
    finally:
        signal.signal(signal.SIGTERM, old_term)
        try:
            engine.stop()
        except Exception:  # stopping must never hide the real outcome
            pass
    outcome.points = point_rows(rd, list(plan.trials))
    return outcome


def _profile_done(rd: RunDir) -> bool:
    return (rd.profile_dir / PROFILE_JSON).exists()


def _failed_trials(rd: RunDir) -> list[str]:
    out = []
    for tid in rd.completed_trials():
        s = read_json(rd.trial_dir(tid) / SUMMARY)
        if s.get("failed", 0) > 0:
            out.append(tid)
    return out


def _sweep(spec: Spec, plan: Plan, todo: list[Trial], rd: RunDir, engine, repo_root: Path, *,
           progress: bool, hooks: Hooks, say, interleave: str | None = None, http_stack: str = "auto") -> None:
    from evidence.loadgen import trial as loadgen

    w, sw = spec.workload, spec.sweep
    start_engine(engine, rd, spec, say, hooks)
    warmed = False
    bar = Progress(len(plan.trials), len(plan.trials) - len(todo), enabled=progress, say=say)
    try:
        for k, trial in enumerate(todo):
            if spec.engine.restart == "per_trial" and k > 0:
                engine.stop()
                start_engine(engine, rd, spec, say, hooks)
                warmed = False
            if sw.warmup.requests and (not warmed or sw.warmup.when == "each_trial"):
                _warmup(spec, rd, engine, repo_root, trial)
                warmed = True
            if sw.cooldown_s and k > 0:
                time.sleep(sw.cooldown_s)
            prompts = make_prompts(spec, repo_root, engine.base_url, _served(spec), trial.prompts, trial.seed)
            tmp = rd.trial_tmp(trial.id)
            if tmp.exists():
                shutil.rmtree(tmp)  # our own leftover from this very process (cannot hold a complete trial)
            tmp.mkdir(parents=True)
            rd.event("trial_start", trial=trial.id, index=trial.index, prompts=trial.prompts)
            bar.start_trial(trial)
            res = loadgen.run_trial(loadgen.TrialConfig(
                base_url=engine.base_url, model=_served(spec), prompts=prompts,
                max_concurrency=trial.point, request_rate=w.request_rate, burstiness=w.burstiness,
                seed=trial.seed, ignore_eos=w.ignore_eos, temperature=w.temperature, phase="measure",
                http_stack=http_stack,
            ), on_request_done=bar.request_done)
            write_records(tmp / REQUESTS, res.records)
            _write_jsonl(tmp / TELEMETRY, res.telemetry)
            meta = res.meta.as_dict()
            meta["trial"] = trial.as_dict()
            write_json(tmp / META, meta)
            from evidence.metrics import trial_metrics

            summary = trial_metrics(res.records, spec.analysis.percentiles)
            summary["trial_id"] = trial.id
            if not engine.alive():
                # A trial during which the engine died does not measure the point: keep its records
                # apart and stop; a resume restarts the engine and runs the trial again.
                dest = rd.numbered(rd.aborted_dir / trial.id)
                dest.parent.mkdir(parents=True, exist_ok=True)
                write_json(tmp / SUMMARY, summary)
                os.replace(tmp, dest)
                rd.event("engine_died", trial=trial.id, records_moved_to=str(dest.relative_to(rd.path)),
                         log_tail=log_tail(rd))
                raise RunError(
                    f"the engine died during trial {trial.id}; its records are kept in {dest} and the trial will run "
                    f"again on resume. Last engine log lines:\n{log_tail(rd)}", code=1)
            write_json(tmp / SUMMARY, summary)  # written last: its presence marks completeness
            rd.commit_trial(trial.id)
            rd.event("trial_complete", trial=trial.id, completed=summary["completed"], failed=summary["failed"],
                     output_throughput=summary["output_throughput"])
            bar.end_trial(trial, summary)
            if interleave:
                run_interleaved(interleave, spec, rd, engine, trial)
            if "after_trial" in hooks:
                hooks["after_trial"](trial.id)
    finally:
        bar.close()


def _warmup(spec: Spec, rd: RunDir, engine, repo_root: Path, trial: Trial) -> None:
    from evidence.loadgen import trial as loadgen

    wu = spec.sweep.warmup
    conc = wu.concurrency or trial.point
    # Warm-up prompts use their own seed so they never coincide with measured prompts.
    prompts = make_prompts(spec, repo_root, engine.base_url, _served(spec), wu.requests, spec.workload.seed ^ 0x5EED)
    rd.event("warmup_start", requests=wu.requests, concurrency=conc, before=trial.id)
    res = loadgen.run_trial(loadgen.TrialConfig(
        base_url=engine.base_url, model=_served(spec), prompts=prompts, max_concurrency=conc,
        request_rate="inf", burstiness=1.0, seed=0, ignore_eos=spec.workload.ignore_eos,
        temperature=spec.workload.temperature, phase="warmup", telemetry=False))
    rd.warmup_dir.mkdir(parents=True, exist_ok=True)
    path = rd.numbered(rd.warmup_dir / REQUESTS)
    tmp = path.with_name("." + path.name + ".tmp")
    write_records(tmp, res.records)
    os.replace(tmp, path)
    failed = sum(1 for r in res.records if not r.ok)
    rd.event("warmup_done", file=str(path.relative_to(rd.path)), failed=failed)
    why = warmup_failure(res.records, spec)
    if why is not None:
        rd.event("warmup_failed", requests=len(res.records), reason=why)
        raise RunError(why)


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    from evidence.records import dumps_line

    write_atomic(path, "".join(dumps_line(r) for r in rows))
