"""The layout of a run directory, in one place (runner, analysis and release use it).

runs/<run-id>/
  run.json                 run id, spec name and sha256, status, code commit
  spec.yaml                the spec exactly as given
  spec.resolved.json       the validated spec with defaults filled
  plan.json                the trials in execution order
  provenance.json          environment, pins requested vs effective (provenance-2.json... after restarts)
  engine/server.log        the engine's own log (server-2.log... after restarts)
  engine/resolved.json     what the engine resolved, each value with where it was read
  warmup/requests.jsonl    warm-up requests, kept apart from every result
  trials/<r1-c128>/        requests.jsonl, telemetry.jsonl, meta.json, summary.json
  profile/                 diagnostic traces and their metadata (never mixed with trials)
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

RAW_FILES = ("run.json", "spec.yaml", "spec.resolved.json", "plan.json")
DERIVED_DIRS = ("analysis", "figures", "report")


@dataclass(frozen=True)
class RunDir:
    path: Path

    @property
    def id(self) -> str:
        return self.path.name

    # --- fixed names -------------------------------------------------------
    @property
    def run_json(self) -> Path:
        return self.path / "run.json"

    @property
    def spec_yaml(self) -> Path:
        return self.path / "spec.yaml"

    @property
    def spec_resolved(self) -> Path:
        return self.path / "spec.resolved.json"

    @property
    def plan_json(self) -> Path:
        return self.path / "plan.json"

    @property
    def events(self) -> Path:
        return self.path / "events.jsonl"

    @property
    def engine_dir(self) -> Path:
        return self.path / "engine"

    @property
    def trials_dir(self) -> Path:
        return self.path / "trials"

    @property
    def warmup_dir(self) -> Path:
        return self.path / "warmup"

    @property
    def profile_dir(self) -> Path:
        return self.path / "profile"

    @property
    def analysis_dir(self) -> Path:
        return self.path / "analysis"

    @property
    def figures_dir(self) -> Path:
        return self.path / "figures"

    @property
    def report_dir(self) -> Path:
        return self.path / "report"

    def trial_dir(self, trial_id: str) -> Path:
        return self.trials_dir / trial_id

    def trial_tmp(self, trial_id: str) -> Path:
        return self.trials_dir / f".tmp-{trial_id}"

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
    def completed_trials(self) -> list[str]:
        if not self.trials_dir.exists():
            return []
        return sorted(p.name for p in self.trials_dir.iterdir()
                      if p.is_dir() and not p.name.startswith(".") and (p / "summary.json").exists())

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
                if p.is_dir() and p.name.startswith(".tmp-"):
                    tid = p.name[len(".tmp-"):]
                    dest = self.numbered(self.path / "aborted" / tid)
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    os.replace(p, dest)
                    moved.append((tid, str(dest.relative_to(self.path))))
        return moved
