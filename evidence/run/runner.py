"""Plan + engine -> runs/<run-id>/ : execute the trials, record everything, resume.

The run directory is append-only: every file is written under a temporary name
and renamed into place, a trial appears only once complete, and nothing already
recorded is rewritten. An interrupted run (Ctrl-C, SIGTERM, a kill, a dead engine)
is continued by running `evidence run` on the same spec again (or `--resume RUN`):
the trials already complete are kept and never run twice; a trial that was cut
off is moved to aborted/ (with the requests it completed) and run again in full.

The parts: prepare (the run directory), session (engine start, prompts, provenance),
sweep (the trials), signals (SIGINT/SIGTERM as a flag), decide (--until-decided),
profiling (the diagnostic run), progress (what the user sees).
"""

from __future__ import annotations

import errno
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evidence.canon import read_json
from evidence.run import lock as run_lock
from evidence.run.prepare import find_resumable, prepare_run_dir, recorded_design
from evidence.run.progress import point_rows
from evidence.run.session import Hooks, RunError, record_provenance, stop_orphaned_engines
from evidence.run.signals import Interrupts
from evidence.run.sweep import RunContext, run_trials
from evidence.rundir import PROFILE_JSON, SUMMARY, RunDir
from evidence.spec.model import load_spec
from evidence.spec.plan import Trial, make_plan

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


def recorded_trials(rd: RunDir, planned: tuple[Trial, ...]) -> list[Trial]:
    """The run's trials: the spec's plan, plus any blocks --until-decided added (recorded in plan.json)."""
    rec = read_json(rd.plan_json).get("trials", [])
    if len(rec) <= len(planned):
        return list(planned)
    names = set(Trial.__dataclass_fields__)
    return list(planned) + [Trial(**{k: v for k, v in d.items() if k in names}) for d in rec[len(planned):]]


#: A write that failed for these reasons is the environment's fault, said in one paragraph (never a traceback).
_WRITE_ERRNOS = {errno.ENOSPC, errno.EROFS, errno.EACCES, errno.EPERM, errno.EDQUOT}


def run_experiment(*args: Any, **kwargs: Any) -> RunOutcome:
    """Run (or continue) the spec's sweep into a run directory (see _run_experiment).

    A full disk, a read-only or forbidden runs folder ends the run with a RunError (exit 2) that says
    what failed and what to do; every file is written under a temporary name and renamed into place,
    so nothing recorded before is lost and the same command continues once the cause is fixed.
    """
    held = run_lock.held_folders()
    try:
        return _run_experiment(*args, **kwargs)
    except OSError as e:
        if e.errno not in _WRITE_ERRNOS:
            raise
        what = {errno.ENOSPC: "the disk is full", errno.EDQUOT: "the disk quota is used up",
                errno.EROFS: "the file system is read-only"}.get(e.errno, "permission denied")
        raise RunError(
            f"the run stopped: could not write {e.filename or 'a file of the run'} ({what}: "
            f"{e.strerror or e}). Everything recorded before is intact: a trial is written under a temporary "
            "name and appears only once complete, and the trial that was being written is set aside and run again "
            "in full on resume. Free space or make the runs folder writable, then run the same command again to "
            "continue.") from None
    finally:
        run_lock.release_all_but(held)  # the run folder's one writer is done (however it ended)


def _run_experiment(
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
    until_decided: Any = None,
    max_repeats: int | None = None,
) -> RunOutcome:
    """Run (or continue) the spec's sweep into a run directory.

    `until_decided`: the sequential procedure's `look` (evidence.analysis.sequential.look, given
    by the CLI), to add balanced blocks after the planned repeats until every declared
    comparison is decided or `max_repeats` is reached (see run.decide).
    """
    from evidence import engines as engine_mod

    hooks = hooks or {}
    spec_path = Path(spec_path)
    spec = load_spec(spec_path)
    say = (console.print if console is not None else (lambda *a, **k: None))
    if until_decided:
        from evidence.run.decide import check_request

        check_request(spec, max_repeats)
    rd, resumed = prepare_run_dir(spec, spec_path, Path(runs_dir), run_id=run_id, resume=resume, say=say)
    if resumed:
        spec = recorded_design(rd, spec)  # the design it started with, whatever today's defaults
        if until_decided:
            check_request(spec, max_repeats)  # again, against that design (the lock is released on the way out)
    plan = make_plan(spec)
    trials = recorded_trials(rd, plan.trials)
    done = set(rd.completed_trials())
    todo = [t for t in trials if t.id not in done]
    want_profile = profile and spec.profile.enabled and engine_mod.adapter_class(spec.engine.kind).can_profile
    decided = (not until_decided) or _decision_recorded(rd)
    if not todo and (not want_profile or _profile_done(rd)) and decided:
        # Nothing left to run: record nothing new (no provenance, no events), just say so.
        if read_json(rd.run_json).get("status") != "complete":
            rd.set_status("complete")
        return RunOutcome(rd.path, "complete", trials_done=sorted(done), trials_failed=_failed_trials(rd),
                          resumed=resumed, message="all trials were already complete",
                          points=point_rows(rd, trials))
    if resumed:
        moved = rd.set_aside_partial()
        for tid, dest in moved:
            rd.event("partial_trial_set_aside", trial=tid, moved_to=dest)
        rd.event("resume", completed=sorted(done), remaining=[t.id for t in todo])
        stop_orphaned_engines(rd, say)  # an engine a killed runner left: never two servers at once
        say(f"resuming {rd.path}: {len(done)} of {len(trials)} trials already complete"
            + (f"; set aside partial trial(s) {', '.join(t for t, _ in moved)} in aborted/" if moved else ""))

    outcome = RunOutcome(rd.path, "incomplete", trials_done=sorted(done), resumed=resumed)
    engine = None
    with Interrupts() as intr:
        try:
            engine = _make_engine(engine_mod, spec, repo_root)
            # Provenance and pins, before anything runs (a refusal raises RunError).
            record_provenance(spec, spec_path, rd, engine, repo_root, code_commit=code_commit,
                              allow_drift=allow_drift, reason="run start" if not resumed else "resume")
            ctx = RunContext(spec=spec, spec_path=spec_path, rd=rd, engine=engine, repo_root=repo_root, intr=intr,
                             say=say, hooks=hooks, interleave=interleave, http_stack=http_stack,
                             code_commit=code_commit, allow_drift=allow_drift)
            if todo:
                run_trials(ctx, len(trials), todo, progress=progress)
            if until_decided:
                from evidence.run.decide import run_until_decided

                trials = run_until_decided(ctx, trials, plan_repeats=spec.sweep.repeats, max_repeats=max_repeats,
                                           look=until_decided, progress=progress)
            if want_profile and not _profile_done(rd):
                from evidence.run.profiling import run_profile

                # The measuring server must be gone (and its accelerator memory freed) before the
                # profiling server starts: two servers at 0.5 memory utilization do not fit one GPU.
                engine.stop()
                ctx.session = None
                rd.event("engine_stopped", reason="sweep done; profiling starts its own server")
                run_profile(spec, rd, repo_root=repo_root, say=say, intr=intr)
            intr.check()
            with intr.closing():
                missing = [t.id for t in trials if t.id not in set(rd.completed_trials())]
                outcome.trials_done = rd.completed_trials()
                outcome.trials_failed = _failed_trials(rd)
                outcome.status = "complete" if not missing else "incomplete"
                rd.set_status(outcome.status)
                rd.event("run_" + outcome.status, missing=missing, trials_with_failures=outcome.trials_failed)
        except RunError:
            with intr.closing():
                if read_json(rd.run_json).get("status") != "refused":
                    rd.set_status("incomplete")
            raise
        except KeyboardInterrupt:
            with intr.closing():
                outcome.status = "interrupted"
                outcome.trials_done = rd.completed_trials()
                rd.event("interrupted", completed=outcome.trials_done, reason=intr.flag.reason or "KeyboardInterrupt")
                rd.set_status("incomplete")
                outcome.message = (f"interrupted; {len(outcome.trials_done)} of {len(trials)} trials are recorded "
                                   "(a trial cut off is kept under aborted/). Run the same command again to continue.")
        finally:
            with intr.closing():
                try:
                    if engine is not None:
                        engine.stop()
                except Exception:  # stopping must never hide the real outcome
                    pass
        with intr.closing():  # the outcome is recorded: a late signal must not cut the summary
            outcome.points = point_rows(rd, trials)
    return outcome


def _make_engine(engine_mod, spec, repo_root: Path):
    try:
        return engine_mod.make_engine(spec, repo_root, cache_dir=repo_root / ".cache" / "engine")
    except engine_mod.EngineError as e:
        raise RunError(f"the engine cannot be set up: {e}") from None


def _decision_recorded(rd: RunDir) -> bool:
    from evidence.run.decide import stopped

    return stopped(rd)


def _profile_done(rd: RunDir) -> bool:
    return (rd.profile_dir / PROFILE_JSON).exists()


def _failed_trials(rd: RunDir) -> list[str]:
    out = []
    for tid in rd.completed_trials():
        s = read_json(rd.trial_dir(tid) / SUMMARY)
        if s.get("failed", 0) > 0:
            out.append(tid)
    return out
