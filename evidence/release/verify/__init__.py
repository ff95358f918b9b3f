"""`verify`: run every check, in registry order, on a release folder or its .tar; returns data (the CLI
renders it). Checks live one module per area (checks_*.py); the order is registry.ORDER."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from evidence.release.archive import safe_extract
from evidence.release.chain import supersession
from evidence.release.files import HashProgress
from evidence.release.phases import Phases
from evidence.release.regenerator import ENV_MODES
from evidence.release.layout import BAGIT_TXT, MANIFEST, RELEASE_JSON, REQUIRED_FILES, TAGMANIFEST, ReleaseError
from evidence.release.verify.context import CheckResult, VerifyContext, VerifyReport
from evidence.release.verify.registry import CHECK_IDS, CHECKS

__all__ = ["CHECK_IDS", "CHECKS", "CheckResult", "VerifyReport", "verify"]


def verify(path: str | Path, *, repo: Any = None, regen: bool = True, workers: int | None = None,
           progress: HashProgress | None = None, regen_env: str = "auto", phases: Phases | None = None,
           require_tag: bool = False) -> VerifyReport:
    """Run every check on a release folder or a release .tar; returns the report (never raises for a
    failed check). Raises ReleaseError (exit 2) when the path cannot be verified at all.

    regen_env: "auto" regenerates with the release's own regenerator when it is bound to this repository
    (see release/regenerator.py), "current" with this code, "unverified" with the release's own code even
    when unbound (--run-unverified-code: never VALID, exit 3 at best). phases: where progress goes (one bar per phase). require_tag: a release
    tag absent from the repository (or no repository) fails git.tag instead of passing with a note."""
    if regen_env not in ENV_MODES:
        raise ReleaseError(f"unknown regeneration environment {regen_env!r}; known: {', '.join(ENV_MODES)}.")
    path = Path(path)
    if not path.exists():
        raise ReleaseError(f"{path} does not exist; give a release folder (releases/<tag>) or its .tar.")
    tmp: tempfile.TemporaryDirectory | None = None
    try:
        archive_problems = None
        if path.is_file():
            tmp = tempfile.TemporaryDirectory(prefix="evidence-verify-")
            root, archive_problems = safe_extract(path, Path(tmp.name))
            is_archive = True
        elif path.is_dir():
            root, is_archive = path.resolve(), False  # '.' has no name; the release folder's name is its tag
            names = set(os.listdir(path))
            if not names & {BAGIT_TXT, RELEASE_JSON, MANIFEST, TAGMANIFEST}:
                raise ReleaseError(f"{path} is not a release: it has none of {', '.join(REQUIRED_FILES)}.")
        else:
            raise ReleaseError(f"{path} is neither a folder nor a file; give a release folder or its .tar.")
        try:
            ctx = VerifyContext(root, path.resolve(), repo=repo, regen=regen, workers=workers, progress=progress,
                                archive_problems=archive_problems, is_archive=is_archive, regen_env=regen_env,
                                phases=phases, require_tag=require_tag)
        except OSError as e:
            raise ReleaseError(f"could not read {path} ({e}).")
        results = []
        try:
            for cid, (title, fn) in CHECKS.items():
                if root is None and cid != "archive.members":
                    results.append(CheckResult(cid, title, "skip", "the archive was rejected: nothing was extracted"))
                    continue
                if cid.startswith("regen.") and ctx.gate_failures is None:
                    # the release's code runs only after every fixity, completeness, path, schema and tag check passed
                    ctx.gate_failures = [r.id for r in results if r.status == "fail"]
                try:
                    status, message, findings = fn(ctx)
                except Exception as e:  # a check that cannot run is a failure, never a silent pass
                    status, message, findings = "fail", f"the check could not run: {type(e).__name__}: {e}", []
                results.append(CheckResult(cid, title, status, message, findings))
            env = ctx.regen_env().as_dict() if ctx.regen_started else None
            regeneration = ctx.regeneration() if root is not None else None
        finally:
            ctx.close()
        # said first, never part of the verdict: a newer release beside this one declares that it supersedes it
        beside = (path.resolve() if path.name in ("", ".", "..") else path).parent  # releases/, as the user named it
        superseded = supersession(beside / root.name, ctx.tag) if root is not None else None
        return VerifyReport(str(path), str(root) if root is not None and not is_archive else None, ctx.tag, results, env,
                            ctx.notes, regeneration, superseded)
    finally:
        if tmp is not None:
            tmp.cleanup()
