"""Which runs `freeze --tag NAME` freezes when no run is named, and how the release is published.

The tag names a spec: the tag without its version (article1-v1.0 -> spec article1). The one
complete run of that spec is frozen; with none, or several, freeze lists the candidates with their
status and refuses, because which run is the evidence is the author's call."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evidence.release.layout import ReleaseError
from evidence.rundir import RunDir

_VERSION_SUFFIX = re.compile(r"[-_.]v?\d+(?:\.\d+)*(?:[-.]?(?:rc|alpha|beta|a|b|post|dev)\.?\d*)?$")


def spec_of_tag(tag: str) -> str:
    """The spec a release tag names: the tag without its version (article1-v1.0 -> article1)."""
    return _VERSION_SUFFIX.sub("", tag) or tag


@dataclass(frozen=True)
class Candidate:
    path: Path
    spec: str | None
    status: str | None
    planned: int
    present: int
    complete: bool

    def line(self) -> str:
        return (f"{self.path.name} (spec {self.spec}, status {self.status}, {self.present}/{self.planned} trials"
                f"{'' if self.complete else ', not complete'})")


def run_candidates(runs_dir: Path) -> list[Candidate]:
    """Every run directory under runs_dir, with what freeze needs to choose among them."""
    out = []
    if not Path(runs_dir).is_dir():
        return out
    for p in sorted(Path(runs_dir).iterdir(), key=lambda q: q.name):
        rd = RunDir(p)
        if p.name.startswith(".") or not p.is_dir() or not rd.run_json.is_file():
            continue
        try:
            info = json.loads(rd.run_json.read_text(encoding="utf-8"))
            plan = json.loads(rd.plan_json.read_text(encoding="utf-8")) if rd.plan_json.is_file() else {}
        except (OSError, ValueError):
            info, plan = {}, {}
        info = info if isinstance(info, dict) else {}
        planned = [t.get("id") for t in plan.get("trials", []) if isinstance(t, dict)] if isinstance(plan, dict) else []
        present = set(rd.completed_trials())
        done = sum(1 for t in planned if t in present)
        complete = info.get("status") == "complete" and bool(planned) and done == len(planned)
        out.append(Candidate(p, info.get("spec_name"), info.get("status"), len(planned), done, complete))
    return out


def runs_for_tag(tag: str, runs_dir: Path) -> list[Path]:
    """The complete run of the spec the tag names; refuses (ReleaseError) with the candidates listed
    when there is none or more than one."""
    how = f"name the runs to freeze: `evidence freeze --tag {tag} {runs_dir}/<run-id> ...`"
    if re.fullmatch(r"v?\d+(?:\.\d+)*", tag):
        raise ReleaseError(f"tag {tag} is a version alone, so it names no spec whose runs could be frozen; {how} "
                           "(or use a tag that starts with the spec's name, e.g. article1-v1.0).")
    spec = spec_of_tag(tag)
    cands = run_candidates(runs_dir)
    mine = [c for c in cands if c.spec == spec]
    complete = [c for c in mine if c.complete]
    if len(complete) == 1:
        return [complete[0].path]
    if len(complete) > 1:
        raise ReleaseError(f"tag {tag} names spec {spec!r}, which has {len(complete)} complete runs: "
                           + "; ".join(c.line() for c in complete) + f". Which one is the evidence is your call: {how}.")
    if mine:
        raise ReleaseError(f"tag {tag} names spec {spec!r}, which has no complete run in {runs_dir}: "
                           + "; ".join(c.line() for c in mine)
                           + f". Finish one (`evidence run --resume`), or {how} (with --allow incomplete).")
    specs = sorted({c.spec for c in cands if c.spec})
    raise ReleaseError(f"tag {tag} names spec {spec!r} (the tag without its version), and no run in {runs_dir} is of that spec"
                       + (f"; the runs there are of: {', '.join(specs)}" if specs else f"; {runs_dir} holds no run")
                       + f". Use a tag that starts with the spec's name (e.g. {specs[0] if specs else 'article1'}-v1.0), or {how}.")


def publish_command(repo: Any, tag: str) -> str:
    """The command that publishes the release: the branch (its commit) and the tag, to the usual remote."""
    remotes = [r.name for r in repo.remotes]
    remote = "origin" if "origin" in remotes or not remotes else remotes[0]
    try:
        branch = repo.active_branch.name
    except TypeError:  # detached HEAD: push the tag alone
        return f"git push {remote} {tag}"
    return f"git push {remote} {branch} {tag}"
