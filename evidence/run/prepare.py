"""Open the run directory: create a new one atomically, find the one to resume, or clean a stillborn one.

A run directory is created whole: its first files (spec.yaml, spec.resolved.json, plan.json,
run.json) are written into runs/.creating-<id>/ and the folder is renamed into place, so a
kill in the first milliseconds leaves either nothing under the run's name or a complete
start. Folders left by an older version, or by a kill during creation, hold only those
first files and no run.json ("stillborn"): nothing ran in them, so they are removed with a
message and the run is created afresh, never refused forever.
"""

from __future__ import annotations

import datetime as _dt
import fnmatch
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any, Callable

from evidence.canon import dumps, read_json, sha256_file, write_atomic, write_json
from evidence.run import lock as run_lock
from evidence.run.session import RunError
from evidence.rundir import RAW_FILES, RUN_JSON, SPEC_YAML, RunDir, is_run_dir
from evidence.spec.model import Spec, spec_from_json, spec_to_json
from evidence.spec.plan import make_plan

CREATING_PREFIX = ".creating-"

Say = Callable[..., Any]


def utc_stamp() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def json_roundtrip(obj: Any) -> Any:
    """obj as it reads back from the canonical JSON we write (tuples become lists, ...)."""
    return json.loads(dumps(obj))


def tool_info() -> dict:
    from evidence import __version__

    return {"name": "evidence", "version": __version__}


def _creation_file(name: str) -> bool:
    """A file the creation of a run directory writes (or its write_atomic temporary)."""
    return (name in RAW_FILES or name == run_lock.LOCK_NAME
            or any(fnmatch.fnmatch(name, f".{n}.*.tmp") for n in RAW_FILES))


def stillborn(path: Path) -> bool:
    """A folder without run.json holding nothing but the first files of a run's creation."""
    path = Path(path)
    if not path.is_dir() or is_run_dir(path):
        return False
    entries = list(path.iterdir())
    return bool(entries) and all(p.is_file() and _creation_file(p.name) for p in entries)


def _spec_sha_of(path: Path) -> str | None:
    """The sha256 of the spec a stillborn folder was created from, when it got that far."""
    if (path / SPEC_YAML).is_file():
        return sha256_file(path / SPEC_YAML)
    return None


def _remove_stillborn(path: Path) -> list[str]:
    names = sorted(p.name for p in path.iterdir())
    for n in names:
        (path / n).unlink()
    path.rmdir()
    return names


def _clean_stillborn(path: Path, say: Say, why: str) -> None:
    names = _remove_stillborn(path)
    say(f"{path} had no run.json: {why} (it held only {', '.join(names)}; nothing had run). Removed it; the run "
        "starts afresh.")


def _clean_staging(runs_dir: Path, say: Say, rid: str | None = None) -> None:
    """Remove creation folders (runs/.creating-<id>-<pid>/) whose process is gone: a kill cut them off."""
    if not runs_dir.is_dir():
        return
    prefix = CREATING_PREFIX + (f"{rid}-" if rid is not None else "")
    for p in sorted(runs_dir.iterdir()):
        if not (p.is_dir() and p.name.startswith(prefix)):
            continue
        pid = p.name.rsplit("-", 1)[-1]
        if pid.isdigit() and int(pid) != os.getpid() and run_lock.same_process_alive(int(pid), None):
            continue  # another process is creating it right now
        if all(q.is_file() and _creation_file(q.name) for q in p.iterdir()):
            shutil.rmtree(p)
            say(f"removed {p}: the creation of a run directory that was cut off before it was complete")


def _clean_leftovers(runs_dir: Path, spec_sha: str, say: Say) -> None:
    """Stillborn folders and creation staging of this very spec: nothing ran in them; remove them."""
    if not runs_dir.is_dir():
        return
    _clean_staging(runs_dir, say)
    for p in sorted(runs_dir.iterdir()):
        if p.is_dir() and not p.name.startswith(CREATING_PREFIX) and stillborn(p) and _spec_sha_of(p) == spec_sha:
            _clean_stillborn(p, say, "its creation was cut off (a kill in the run's first milliseconds)")


def find_resumable(runs_dir: Path, spec_sha: str) -> Path | None:
    """The newest run of exactly this spec (by sha256) that is not complete."""
    if not runs_dir.exists():
        return None
    cands = []
    for rj in runs_dir.glob(f"*/{RUN_JSON}"):
        try:
            info = read_json(rj)
        except (OSError, ValueError):
            continue
        if info.get("spec_sha256") == spec_sha and info.get("status") != "complete":
            cands.append((info.get("created_unix", 0), rj.parent))
    return max(cands)[1] if cands else None


def check_same_plan(rd: RunDir, planned: list[dict]) -> None:
    """The recorded plan must begin with the plan this spec gives now (--until-decided may have added blocks)."""
    recorded = read_json(rd.plan_json)
    rec_trials = recorded.get("trials", []) if isinstance(recorded, dict) else []
    now = json_roundtrip(planned)
    if rec_trials[: len(now)] != now:
        raise RunError(f"the plan recorded in {rd.plan_json} differs from the plan this spec gives now; refusing to resume.")


def recorded_design(rd: RunDir, spec: Spec) -> Spec:
    """The spec a resumed run goes on with: the resolved spec it recorded when it was created.

    The spec file's bytes are the run's (checked by sha256), so the two can only differ where this
    tool's defaults changed since (say the design a spec gets when it does not give sweep.sessions):
    a run keeps the design it started with. One that cannot be read back gives the file's."""
    try:
        return spec_from_json(rd.spec_resolved.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return spec


def _lock(folder: Path) -> run_lock.RunLock:
    try:
        return run_lock.acquire(folder)
    except run_lock.LockHeld as e:
        raise RunError(str(e)) from None


def prepare_run_dir(spec: Spec, spec_path: Path, runs_dir: Path, *, run_id: str | None, resume: Path | None,
                    say: Say = lambda *a, **k: None) -> tuple[RunDir, bool]:
    """Create a new run directory, or open the one to resume; never overwrite."""
    spec_sha = sha256_file(spec_path)
    plan = make_plan(spec)
    target: Path | None = None
    if resume is not None:
        target = Path(resume)
        if not is_run_dir(target):
            if stillborn(target):
                raise RunError(f"{target} has no run.json: its creation was cut off before anything ran (it holds only "
                               "the spec and plan). There is nothing to resume: run the spec again without --resume "
                               "(with --run-id to reuse the name; the folder is then cleaned and created afresh).")
            raise RunError(f"{target} is not a run directory (no run.json); give a folder under runs/ that `evidence run` created.")
    elif run_id is not None:
        cand = runs_dir / run_id
        if is_run_dir(cand):
            target = cand
        elif stillborn(cand):
            _clean_stillborn(cand, say, "its creation was cut off (a kill in the run's first milliseconds)")
        elif cand.exists() and any(cand.iterdir()):
            raise RunError(f"{cand} exists and is not a run directory; refusing to write into it. Choose another --run-id.")
    else:
        _clean_leftovers(runs_dir, spec_sha, say)
        target = find_resumable(runs_dir, spec_sha)
    if target is not None:
        rd = RunDir(target)
        lock = _lock(target)  # before anything is written (or a leftover trial moved aside)
        try:
            info = read_json(rd.run_json)
            if info.get("spec_sha256") != spec_sha:
                raise RunError(
                    f"{target} was run from a different spec (sha256 {str(info.get('spec_sha256'))[:12]}..., this one is "
                    f"{spec_sha[:12]}...). A run is never continued with a changed spec: start a new run (another --run-id) "
                    "or restore the original spec.")
            check_same_plan(rd, make_plan(recorded_design(rd, spec)).as_dict()["trials"])
        except BaseException:
            run_lock.release(target)
            raise
        if lock.taken_over:
            note = run_lock.stale_note(lock.taken_over)
            rd.event("stale_lock_taken_over", previous=lock.taken_over)
            say(f"{target}: {note}")
        return rd, True
    rid = run_id or f"{spec.name}-{utc_stamp()}"
    final = runs_dir / rid
    if final.exists() and any(final.iterdir()):
        raise RunError(f"{final} already exists; refusing to overwrite it.")
    spec_bytes = spec_path.read_bytes()
    _clean_staging(runs_dir, say, rid)
    staging = runs_dir / f"{CREATING_PREFIX}{rid}-{os.getpid()}"
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir(parents=True)
    _lock(staging)  # the creation folder's lock travels with it when it is renamed into place
    try:
        st = RunDir(staging)
        write_atomic(st.spec_yaml, spec_bytes)
        write_atomic(st.spec_resolved, spec_to_json(spec))
        write_json(st.plan_json, plan.as_dict())
        write_json(st.run_json, {
            "run_id": rid,
            "spec_name": spec.name,
            "spec_file": str(spec_path),
            "spec_sha256": spec_sha,
            "created_unix": round(time.time(), 3),
            "status": "running",
            "tool": tool_info(),
        })
        if final.exists():
            final.rmdir()  # empty (checked above): a rename onto it would fail on some systems
        os.rename(staging, final)
        run_lock.rekey(staging, final)
    except BaseException:
        run_lock.release(staging)
        raise
    rd = RunDir(final)
    rd.event("run_created", run_id=rid, trials=len(plan.trials))
    return rd, False
