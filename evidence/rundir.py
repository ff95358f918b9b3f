"""The layout of a run directory, in one place (runner, analysis and release use it).

runs/<run-id>/
  run.json                 run id, spec name and sha256, status, code commit
  spec.yaml                the spec exactly as given
  spec.resolved.json       the validated spec with defaults filled
  plan.json                the trials in execution order (--until-decided appends its blocks to it)
  provenance.json          environment, pins requested vs effective (provenance-2.json... after restarts)
  engine/server.log        the engine's own log (server-2.log... after restarts)
  engine/resolved.json     what the engine resolved, each value with where it was read
  warmup/requests.jsonl    warm-up requests, kept apart from every result
  trials/<r1-c128>/        requests.jsonl, telemetry.jsonl, meta.json, summary.json
  profile/                 diagnostic traces and their metadata (never mixed with trials)
  aborted/<id>/            trials cut off (interrupt, dead engine) with the requests they completed; never analysed
  interleaved/<id>/        another client run right after trial <id> (--interleave): command.json, output.log
  looks.jsonl              --until-decided: every look of the sequential procedure and its decision
  events.jsonl             what happened when (append-only)
  analysis/ figures/ report/   derived outputs (pure functions of the above)

A trial is complete or absent: it is written under trials/.tmp-<id>/ and renamed
to trials/<id>/ once summary.json is in place. Nothing complete is ever rewritten.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evidence.records import dumps_line

# Every name inside a run directory, spelled once. Other modules use these (or RunDir's
# properties) and never the literals, so the layout can be read and changed here alone.
RUN_JSON = "run.json"
SPEC_YAML = "spec.yaml"
SPEC_RESOLVED = "spec.resolved.json"
PLAN_JSON = "plan.json"
PROVENANCE_JSON = "provenance.json"  # provenance-2.json ... after engine restarts
PROVENANCE_GLOB = "provenance*.json"
EVENTS = "events.jsonl"
LOOKS = "looks.jsonl"  # --until-decided: every look of the sequential procedure
ENGINE = "engine"
SERVER_LOG = "server.log"  # server-2.log ... after restarts
SERVER_LOG_GLOB = "server*.log"
RESOLVED_JSON = "resolved.json"
RESOLVED_GLOB = "resolved*.json"  # resolved-2.json ... after restarts
TRIALS = "trials"
ABORTED = "aborted"
WARMUP = "warmup"
PROFILE = "profile"
PROFILE_STAGING = ".profile-staging"
INTERLEAVED = "interleaved"
INTERLEAVED_COMMAND = "command.json"  # interleaved/<trial>/: the command, its exit code and time
INTERLEAVED_LOG = "output.log"
ANALYSIS = "analysis"
FIGURES = "figures"
REPORT = "report"
TMP_PREFIX = ".tmp-"
# A parent of several runs (evidence run --hosts N, evidence sweep): its bookkeeping beside the run folders
EXECUTION_JSON = "execution.json"
# the files of one trial (trials/<id>/, aborted/<id>/) and of a profiled point (profile/c<point>/)
REQUESTS = "requests.jsonl"
TELEMETRY = "telemetry.jsonl"
META = "meta.json"
SUMMARY = "summary.json"  # written last: its presence marks a complete trial
PROFILE_JSON = "profile.json"  # raw: profile/profile.json, what the profiler recorded (tool, settings, files)
# derived: analysis/profile.json, the trace analyses of those files. The same file name as the raw one: both
# are named in committed releases' manifests and read back by their frozen regenerators, so renaming either
# would break verifying them; in code the two are told apart by these two constants.
TRACE_ANALYSES_JSON = "profile.json"

RAW_FILES = (RUN_JSON, SPEC_YAML, SPEC_RESOLVED, PLAN_JSON)
DERIVED_DIRS = (ANALYSIS, FIGURES, REPORT)


def is_run_dir(path: Path) -> bool:
    """A folder `evidence run` created and finished creating (its run.json is written last)."""
    return (Path(path) / RUN_JSON).is_file()


@dataclass(frozen=True)
class RunDir:
    path: Path

    @property
    def id(self) -> str:
        return self.path.name

    # --- fixed names -------------------------------------------------------
    @property
    def run_json(self) -> Path:
        return self.path / RUN_JSON

    @property
    def spec_yaml(self) -> Path:
        return self.path / SPEC_YAML

    @property
    def spec_resolved(self) -> Path:
        return self.path / SPEC_RESOLVED

    @property
    def plan_json(self) -> Path:
        return self.path / PLAN_JSON

    @property
    def events(self) -> Path:
        return self.path / EVENTS

    @property
    def engine_dir(self) -> Path:
        return self.path / ENGINE

    @property
    def trials_dir(self) -> Path:
        return self.path / TRIALS

    @property
    def warmup_dir(self) -> Path:
        return self.path / WARMUP

    @property
    def profile_dir(self) -> Path:
        return self.path / PROFILE

    @property
    def aborted_dir(self) -> Path:
        return self.path / ABORTED

    @property
    def interleaved_dir(self) -> Path:
        return self.path / INTERLEAVED

    @property
    def provenance(self) -> Path:
        """The first provenance file (a restart's is numbered: rd.numbered(rd.provenance))."""
        return self.path / PROVENANCE_JSON

    @property
    def looks(self) -> Path:
        return self.path / LOOKS

    @property
    def engine_log(self) -> Path:
        return self.engine_dir / SERVER_LOG

    @property
    def engine_resolved(self) -> Path:
        return self.engine_dir / RESOLVED_JSON

    @property
    def profile_staging(self) -> Path:
        return self.path / PROFILE_STAGING

    def engine_logs(self) -> list[Path]:
        return sorted(self.engine_dir.glob(SERVER_LOG_GLOB)) if self.engine_dir.is_dir() else []

    def provenance_files(self) -> list[Path]:
        return sorted(self.path.glob(PROVENANCE_GLOB))

    def trial_dir(self, trial_id: str) -> Path:
        return self.trials_dir / trial_id

    def trial_tmp(self, trial_id: str) -> Path:
        return self.trials_dir / f"{TMP_PREFIX}{trial_id}"

    def numbered(self, base: Path) -> Path:
        """base, or base-2, base-3... : the first name not yet taken (never overwrite)."""
        if not base.exists():
            return base
        n = 2
        while True:
            cand = base.with_name(f"{base.stem}-{n}{base.suffix}")
            if not cand.exists():
                return cand
            n += 1

    # --- state -------------------------------------------------------------
    def set_status(self, status: str, **extra: Any) -> None:
        """Rewrite run.json's status (the one field of run.json that changes over a run)."""
        from evidence.canon import read_json, write_json

        info = read_json(self.run_json)
        info["status"] = status
        info.update(extra)
        write_json(self.run_json, info)

    def completed_trials(self) -> list[str]:
        if not self.trials_dir.exists():
            return []
        return sorted(p.name for p in self.trials_dir.iterdir()
                      if p.is_dir() and not p.name.startswith(".") and (p / SUMMARY).exists())

    def event(self, kind: str, **data: Any) -> None:
        """Append one event; O_APPEND writes of one line are not interleaved."""
        self.path.mkdir(parents=True, exist_ok=True)
        rec = {"t_unix": round(time.time(), 6), "event": kind, **data}
        fd = os.open(self.events, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, dumps_line(rec).encode("utf-8"))
            os.fsync(fd)
        finally:
            os.close(fd)

    def read_events(self) -> list[dict]:
        if not self.events.exists():
            return []
        out = []
        for line in self.events.read_text(encoding="utf-8").splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                # a line cut by a kill mid-write: keep going, it is reported by analysis
                out.append({"event": "unreadable_line", "text": line[:200]})
        return out

    def commit_trial(self, trial_id: str) -> Path:
        """Rename the finished temporary trial folder into place (atomic on one filesystem)."""
        tmp, final = self.trial_tmp(trial_id), self.trial_dir(trial_id)
        if final.exists():
            raise FileExistsError(f"trial {trial_id} is already complete in {self.path}; refusing to overwrite it")
        os.replace(tmp, final)
        return final

    def set_aside_partial(self) -> list[tuple[str, str]]:
        """Move unfinished trial folders of an interrupted run to aborted/ (kept, never analysed).

        Returns (trial id, where it went). The trial itself is run again in full.
        """
        moved = []
        if self.trials_dir.exists():
            for p in sorted(self.trials_dir.iterdir()):
                if p.is_dir() and p.name.startswith(TMP_PREFIX):
                    tid = p.name[len(TMP_PREFIX):]
                    dest = self.numbered(self.aborted_dir / tid)
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    os.replace(p, dest)
                    moved.append((tid, str(dest.relative_to(self.path))))
        return moved
