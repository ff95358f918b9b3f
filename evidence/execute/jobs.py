"""Many runs at once: the same spec on N hosts (replication), or several specs as one job array (sweep).

Both write one parent folder under runs/:

    runs/<parent>/
      execution.json        what was asked (mode, specs, executor, hosts), every submission and every
                            outcome per slot: job id, node, state, exit code, run status, the error
      <slot>/               one complete run directory per host or per spec (its own provenance)

Every slot is an ordinary run directory that `evidence run` wrote on its node, so the guarantees of
a run (atomic trials, no trial twice, resume) hold per slot; the parent adds only the bookkeeping.
Running the same command again submits only the slots whose run is not complete: a lost job, a
preempted or timed-out one, a node that died. Failures are data: each is kept in execution.json
with the scheduler's state and the runner's own message, and reported per slot.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from evidence.canon import dumps, read_json, sha256_file, write_atomic
from evidence.execute.backends import (ExecuteError, Settings, folder_visibility_note, make_executor, run_job,
                                       slurm_state)
from evidence.rundir import EXECUTION_JSON, RunDir
from evidence.spec.errors import SpecError
from evidence.spec.model import load_spec

SCHEDULER_ENDED = {"CANCELLED", "TIMEOUT", "PREEMPTED", "NODE_FAIL", "FAILED", "OUT_OF_MEMORY", "BOOT_FAIL",
                   "DEADLINE"}


@dataclass(frozen=True)
class Slot:
    name: str  # the run directory's name under the parent (host-1, or the spec's name)
    spec: Path


def _run_status(run: Path) -> str | None:
    p = RunDir(run).run_json
    if not p.is_file():
        return None
    try:
        return read_json(p).get("status")
    except (OSError, ValueError):
        return "unreadable"


def _load(parent: Path) -> dict:
    p = parent / EXECUTION_JSON
    return read_json(p) if p.is_file() else {}


def _save(parent: Path, doc: dict) -> None:
    write_atomic(parent / EXECUTION_JSON, dumps(doc))


def _check_specs(slots: Sequence[Slot]) -> dict[str, str]:
    out = {}
    for s in slots:
        try:
            load_spec(s.spec)
        except SpecError as e:
            raise ExecuteError(f"{s.spec} is not a valid spec; `evidence validate {s.spec}` lists every problem "
                               f"({str(e).splitlines()[0]}).") from None
        out[s.name] = sha256_file(Path(s.spec))
    return out


def execute(mode: str, slots: Sequence[Slot], parent: Path, settings: Settings, *, repo_root: Path,
            run_args: Sequence[str] = (), say: Callable[[str], None] = lambda s: None) -> dict:
    """Submit every slot whose run is not complete, wait, and record each outcome; returns execution.json."""
    settings.check()
    parent = Path(parent)
    shas = _check_specs(slots)
    parent.mkdir(parents=True, exist_ok=True)
    doc = _load(parent)
    if doc and (doc.get("mode") != mode or sorted(doc.get("slots", {})) != sorted(s.name for s in slots)):
        raise ExecuteError(f"{parent} holds a {doc.get('mode')} of slots {sorted(doc.get('slots', {}))}; this "
                           "command asks for another. Give a new --run-id to start a new one.")
    doc.setdefault("mode", mode)
    doc.setdefault("slots", {s.name: {"spec": str(s.spec), "spec_sha256": shas[s.name], "attempts": []}
                             for s in slots})
    for s in slots:
        prev = doc["slots"][s.name]["spec_sha256"]
        if prev != shas[s.name]:
            raise ExecuteError(f"{s.spec} changed since {parent} was started (sha256 {prev[:12]} then, "
                               f"{shas[s.name][:12]} now); a run continues only with the spec it began with.")
    doc["executor"] = settings.as_dict()
    todo = [s for s in slots if _run_status(parent / s.name) != "complete"]
    done = [s.name for s in slots if s not in todo]
    if done:
        say(f"complete already, not submitted again: {', '.join(done)}")
    if not todo:
        _save(parent, doc)
        return doc
    visibility = folder_visibility_note(parent) if settings.kind == "slurm" else None
    if visibility:
        say(f"warning: {visibility}")  # named before submitting, and kept with each outcome that is LOST
    ex = make_executor(settings, parent / ".submitit")
    cwd = str(Path(repo_root).resolve())
    args = [[str(s.spec.resolve()), str(parent.resolve()), s.name, cwd, list(run_args)] for s in todo]
    if settings.kind == "slurm" and len(todo) > 1:
        jobs = ex.map_array(run_job, *zip(*args))  # one job array: one submission for the whole set
    else:
        jobs = [ex.submit(run_job, *a) for a in args]
    for s, j in zip(todo, jobs):
        doc["slots"][s.name]["attempts"].append({"job_id": str(j.job_id), "submitted_unix": round(time.time(), 3)})
        say(f"{s.name}: submitted as job {j.job_id}")
    _save(parent, doc)
    for s, j in zip(todo, jobs):
        att = doc["slots"][s.name]["attempts"][-1]
        att.update(_outcome(j, settings))
        att["run_status"] = _run_status(parent / s.name)
        if visibility and att["run_status"] is None and att["state"] not in ("COMPLETED",):
            att["error"] = f"{att.get('error') or 'no result'}; likely cause: {visibility}"
        _save(parent, doc)
        say(f"{s.name}: {att['state']}" + (f" (run {att['run_status']})" if att.get("run_status") else ""))
    return doc


#: Scheduler states of a job that is not over (a preempted job Slurm requeued is PENDING again).
SCHEDULER_ALIVE = {"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD",
                   "RESIZING", "SUSPENDED", "STAGE_OUT", "SIGNALING", "PREEMPTED_REQUEUED"}
#: How long a job may be unknown to the scheduler without a result before it is recorded as vanished.
VANISHED_S = 180.0
#: How long a result may take to appear on the shared file system after the scheduler says the job ended.
RESULT_GRACE_S = 60.0
POLL_S = 5.0


def _wait_slurm(job: Any) -> tuple[dict, str | None]:
    """Wait for a Slurm job's real end: (its last scheduler state, why there is no result, or None).

    submitit's own wait never ends for a job that died without its result file on a cluster without
    accounting, and it returns the first attempt's result while a preempted job Slurm requeued runs
    again; so the scheduler is asked until the job is over, with a bound where it no longer knows it.
    """
    unknown_since = ended_since = None
    last: dict = {}
    while True:
        st = slurm_state(str(job.job_id))
        now = time.monotonic()
        state = st.get("JobState")
        if st:
            last = st
            unknown_since = None
        if state in SCHEDULER_ALIVE:
            ended_since = None
        elif st:  # over, by the scheduler's word: its result, if any, is there or comes soon
            if job.done():
                return last, None
            ended_since = ended_since or now
            if now - ended_since > RESULT_GRACE_S:
                return last, (f"the scheduler says job {job.job_id} ended ({state}) but it left no result within "
                              f"{RESULT_GRACE_S:g} s")
        else:  # the scheduler does not know it (never accounted, or forgotten after MinJobAge)
            if job.done():
                return last, None
            unknown_since = unknown_since or now
            if now - unknown_since > VANISHED_S:
                return last, (f"job {job.job_id} vanished: the scheduler no longer knows it and it left no result "
                              f"after {VANISHED_S:g} s (a node that died, or a run folder the node cannot write)")
        time.sleep(POLL_S)


def _outcome(job: Any, settings: Settings) -> dict:
    """The job's outcome as data, whatever happened to it."""
    last: dict = {}
    try:
        if settings.kind == "slurm":
            last, missing = _wait_slurm(job)
            if missing is not None:
                raise RuntimeError(missing)
        res = job.result()
        state = "COMPLETED" if res["exit_code"] == 0 else ("INTERRUPTED" if res["exit_code"] == 130 else
                                                           "RUN_FAILED" if res["exit_code"] == 2 else "INCOMPLETE")
        out: dict[str, Any] = {"state": state, "exit_code": res["exit_code"], "node": res["node"],
                               "run": res.get("run"), "error": res["stderr_tail"] if res["exit_code"] else None}
    except Exception as e:  # submitit's UncompletedJobError/FailedJobError: the job never returned
        out = {"state": "LOST", "exit_code": None, "node": None, "run": None,
               "error": " ".join(str(e).split())[:2000]}
    if settings.kind == "slurm":
        st = slurm_state(str(job.job_id)) or last
        restarts = int(st.get("Restarts") or 0) if str(st.get("Restarts") or "0").isdigit() else 0
        if restarts:
            out["requeues"] = restarts  # preempted (or requeued) and run again: this is the last attempt's outcome
        if st:
            out["slurm"] = st
            # The scheduler's word wins where it ended the job (the runner may still have exited
            # cleanly, 130, on the SIGTERM that scancel, a preemption or a time limit sends first).
            if st.get("JobState") in SCHEDULER_ENDED or (out["state"] == "LOST" and st.get("JobState")):
                out["state"] = st["JobState"]
    return out


def summary_rows(doc: dict, parent: Path) -> list[dict]:
    rows = []
    for name, s in sorted(doc.get("slots", {}).items()):
        last = (s.get("attempts") or [{}])[-1]
        node = (last.get("node") or {})
        rows.append({"slot": name, "attempts": len(s.get("attempts") or []), "state": last.get("state", "not run"),
                     "node": node.get("slot_node") or node.get("slurm_node") or node.get("hostname"),
                     "run_status": _run_status(parent / name), "error": last.get("error")})
    return rows


def host_slots(spec: Path, hosts: int) -> list[Slot]:
    if hosts < 1 or hosts > 1024:
        raise ExecuteError(f"--hosts is between 1 and 1024, not {hosts}.")
    return [Slot(f"host-{k}", Path(spec)) for k in range(1, hosts + 1)]


def spec_slots(specs: Sequence[Path]) -> list[Slot]:
    names: dict[str, Path] = {}
    for p in specs:
        try:
            n = load_spec(p).name
        except SpecError as e:
            raise ExecuteError(f"{p} is not a valid spec ({str(e).splitlines()[0]}).") from None
        if n in names:
            raise ExecuteError(f"{names[n]} and {p} have the same spec name {n!r}; each spec of a sweep needs its own.")
        names[n] = Path(p)
    return [Slot(n, p) for n, p in names.items()]


def read_execution(parent: Path) -> dict:
    doc = _load(Path(parent))
    if not doc:
        raise ExecuteError(f"{parent} has no {EXECUTION_JSON}; it is not a replication or sweep folder.")
    return doc


__all__ = ["execute", "host_slots", "spec_slots", "summary_rows", "read_execution", "Slot", "EXECUTION_JSON"]
