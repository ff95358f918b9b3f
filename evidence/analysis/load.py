"""Reading a run directory's raw files (and nothing it derived) into `RunData`."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evidence.records import RequestRecord, read_text, stored
from evidence.spec.model import Spec, spec_from_json
from evidence.rundir import (ENGINE, EVENTS, LOOKS, META, PLAN_JSON, PROFILE, REQUESTS, RUN_JSON, SPEC_RESOLVED, SUMMARY,
                             TELEMETRY, TRIALS)


class NotARunDir(ValueError):
    """The path is not a run directory (one paragraph, for the user)."""



@dataclass
class TrialData:
    id: str
    index: int
    repeat: int
    point: int
    position: int
    prompts: int
    present: bool
    records: list[RequestRecord] = field(default_factory=list)
    telemetry: list[dict] | None = None
    telemetry_absent: str | None = None
    meta: dict | None = None
    summary: dict | None = None
    load_problems: list[str] = field(default_factory=list)
    session: int = 1  # the engine session (server start) the trial ran in; plans before sweep.sessions have one
    arm: str | None = None  # the arm (spec.arms) its server start ran; None without arms


@dataclass
class RunData:
    spec: Spec
    plan: dict
    run_info: dict | None
    provenance: dict | None
    provenance_files: list[str]
    engine_resolved: dict | None
    engine_resolved_files: list[str]
    engine_resolved_later: list[dict]
    trials: list[TrialData]
    unexpected_trials: list[str]
    profile_files: list[str]
    load_problems: list[str]
    looks: list[dict] = field(default_factory=list)  # looks.jsonl of --until-decided (every look, then the stop)
    # session -> the trials before which an engine was started for it (events.jsonl session_start): more than one
    # when a resume restarted the engine in the middle of a session
    session_starts: dict[int, list[str]] = field(default_factory=dict)

    @property
    def run_id(self) -> str:
        return str((self.run_info or {}).get("run_id") or "")


def _read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def _numbered(folder: Path, stem: str) -> list[Path]:
    """stem.json, stem-2.json, stem-3.json ... in numeric order (the runner's numbering)."""
    out = []
    if (folder / f"{stem}.json").is_file():
        out.append((1, folder / f"{stem}.json"))
    if folder.is_dir():
        for p in folder.glob(f"{stem}-*.json"):
            tail = p.stem[len(stem) + 1:]
            if tail.isdigit():
                out.append((int(tail), p))
    return [p for _, p in sorted(out)]


def load_run(run_dir: Path) -> RunData:
    """Read the raw files of a run directory (and nothing it derived)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise NotARunDir(f"{run_dir} is not a folder. Give a run directory (runs/<run-id>/) that `evidence run` created; "
                         "it holds spec.resolved.json, plan.json and trials/.")
    missing = [n for n in (SPEC_RESOLVED, PLAN_JSON) if not (run_dir / n).is_file()]
    if missing:
        raise NotARunDir(f"{run_dir} is not a run directory: it has no {' and no '.join(missing)}. Give a folder under "
                         "runs/ that `evidence run` created (for a release, its run is under data/raw/<run-id>/).")
    problems: list[str] = []
    try:
        spec = spec_from_json((run_dir / SPEC_RESOLVED).read_text(encoding="utf-8"))
    except Exception as e:  # pydantic ValidationError or bad JSON: the run dir is unusable
        raise NotARunDir(f"{run_dir}/spec.resolved.json could not be read as a spec ({str(e).splitlines()[0]}); "
                         "the run directory is damaged or was written by an incompatible version.") from None
    try:
        plan = _read_json(run_dir / PLAN_JSON)
        plan_trials = plan["trials"]
    except Exception as e:
        raise NotARunDir(f"{run_dir}/plan.json is not a readable plan ({e}); the run directory is damaged.") from None
    run_info = _read_json(run_dir / RUN_JSON) if (run_dir / RUN_JSON).is_file() else None
    if run_info is None:
        problems.append("run.json is missing: run id and status unknown")
    prov_files = _numbered(run_dir, "provenance")
    provenance = _read_json(prov_files[0]) if prov_files else None
    res_files = _numbered(run_dir / ENGINE, "resolved")
    engine_resolved = _read_json(res_files[0]) if res_files else None
    later = [_read_json(p) for p in res_files[1:]]

    trials: list[TrialData] = []
    planned_ids = set()
    for t in plan_trials:
        tid = str(t["id"])
        planned_ids.add(tid)
        td = TrialData(tid, int(t["index"]), int(t["repeat"]), int(t["point"]), int(t["position"]), int(t["prompts"]),
                       present=False, session=int(t.get("session") or 1), arm=t.get("arm"))
        d = run_dir / TRIALS / tid
        if (d / SUMMARY).is_file():
            td.present = True
            _load_trial(td, d)
        trials.append(td)
    unexpected = []
    tdir = run_dir / TRIALS
    if tdir.is_dir():
        unexpected = sorted(p.name for p in tdir.iterdir()
                            if p.is_dir() and not p.name.startswith(".") and (p / SUMMARY).is_file()
                            and p.name not in planned_ids)
    profile_files = []
    if (run_dir / PROFILE).is_dir():
        profile_files = sorted(p.relative_to(run_dir).as_posix() for p in (run_dir / PROFILE).rglob("*") if p.is_file())
    looks: list[dict] = []
    if (run_dir / LOOKS).is_file():
        for n, line in enumerate((run_dir / LOOKS).read_text(encoding="utf-8").splitlines(), start=1):
            if line.strip():
                try:
                    looks.append(json.loads(line))
                except ValueError:
                    problems.append(f"looks.jsonl line {n} unreadable")
    return RunData(spec, plan, run_info, provenance, [p.relative_to(run_dir).as_posix() for p in prov_files],
                   engine_resolved, [p.relative_to(run_dir).as_posix() for p in res_files], later,
                   trials, unexpected, profile_files, problems, looks, _session_starts(run_dir / EVENTS))


def _session_starts(path: Path) -> dict[int, list[str]]:
    """Per session, the trial before which each of its engine starts happened (unreadable lines are skipped:
    events are a log, the trials' own files are the record)."""
    out: dict[int, list[str]] = {}
    if not path.is_file():
        return out
    for line in path.read_text(encoding="utf-8").splitlines():
        if '"session_start"' not in line:
            continue
        try:
            e = json.loads(line)
            out.setdefault(int(e["session"]), []).append(str(e.get("before")))
        except (ValueError, KeyError, TypeError):
            continue
    return out


def _load_trial(td: TrialData, d: Path) -> None:
    td.summary = _read_json(d / SUMMARY)
    if (d / META).is_file():
        td.meta = _read_json(d / META)
    else:
        td.load_problems.append("meta.json is missing")
    rq = stored(d / REQUESTS)  # requests.jsonl, or requests.jsonl.gz in a release
    if rq is not None:
        for n, line in enumerate(read_text(d / REQUESTS).splitlines(), start=1):
            if not line.strip():
                continue
            try:
                td.records.append(RequestRecord.from_dict(json.loads(line)))
            except (ValueError, TypeError) as e:
                td.load_problems.append(f"requests.jsonl line {n} unreadable ({type(e).__name__})")
    elif not (td.meta or {}).get("aggregate_only"):  # tables.AGGREGATE_ONLY: no records by design
        td.load_problems.append("requests.jsonl is missing")
    tl = d / TELEMETRY
    tmeta = (td.meta or {}).get("telemetry")
    why = tmeta.get("reason") if isinstance(tmeta, dict) and tmeta.get("reason") else None
    if stored(tl) is None:
        td.telemetry_absent = "no telemetry.jsonl in the trial" + (f" ({why})" if why else
                                                                   " (the server's metrics were not sampled)")
        return
    rows = []
    for line in read_text(tl).splitlines():
        if line.strip():
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if isinstance(obj, dict) and isinstance(obj.get("t_s"), (int, float)):
                rows.append(obj)
    rows.sort(key=lambda r: r["t_s"])
    td.telemetry = rows
    if not rows:
        td.telemetry_absent = "telemetry.jsonl holds no samples" + (f" ({why})" if why else "")
