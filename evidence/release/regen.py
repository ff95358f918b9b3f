"""Regeneration of a run's derived outputs from its raw files, the same way for freeze and verify."""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
from pathlib import Path
from typing import Iterable, Iterator

from evidence.release.files import inventory
from evidence.release.layout import DERIVED_ROLES, ReleaseError


@contextlib.contextmanager
def _source_date_epoch(sde: int | None) -> Iterator[None]:
    old = os.environ.get("SOURCE_DATE_EPOCH")
    if sde is not None:
        os.environ["SOURCE_DATE_EPOCH"] = str(int(sde))
    try:
        yield
    finally:
        if sde is not None:
            if old is None:
                os.environ.pop("SOURCE_DATE_EPOCH", None)
            else:
                os.environ["SOURCE_DATE_EPOCH"] = old


def copy_tree_files(src: Path, dst: Path, *, skip_top: Iterable[str] = ()) -> list[str]:
    """Copy regular files (bytes only, no metadata) from src to dst; refuse links and special files."""
    skip = set(skip_top)
    inv = inventory(src)
    bad = {**inv.symlinks, **inv.special}
    bad = {k: v for k, v in bad.items() if k.split("/")[0] not in skip}
    if bad:
        raise ReleaseError(f"{src} holds links or special files ({', '.join(sorted(bad)[:5])}); a release copies "
                           "regular files only. Replace the links with the files they point to.")
    copied = []
    for rel in inv.files:
        if rel.split("/")[0] in skip:
            continue
        out = dst / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src / rel, out, follow_symlinks=False)
        copied.append(rel)
    return copied


def regenerate(raw_dir: Path, work: Path, *, sde: int | None = None) -> dict[str, Path | Exception]:
    """Rebuild the derived outputs of one run from its raw files, the same way for freeze and verify:
    copy raw to work/<run-id>/, then analysis -> figures -> report, each into work/<run-id>/<role>/.
    Returns role -> output folder, or the exception that role raised."""
    run_id = Path(raw_dir).name
    ws = Path(work) / run_id
    copy_tree_files(Path(raw_dir), ws, skip_top=DERIVED_ROLES)
    out: dict[str, Path | Exception] = {}

    def analysis() -> None:
        from evidence.analysis.core import analyze_run
        analyze_run(ws, ws / "analysis")

    def figures() -> None:
        from evidence.figures import render_figures
        render_figures(ws, ws / "figures")

    def report() -> None:
        from evidence.report.context import render_report
        # in a release the report sits in data/report/<run-id>/, its figures in data/figures/<run-id>/
        render_report(ws, ws / "report", figures_rel=f"../../figures/{run_id}")

    steps = [("analysis", analysis), ("figures", figures), ("report", report)]
    with _source_date_epoch(sde):
        for role, fn in steps:
            try:
                (ws / role).mkdir(parents=True, exist_ok=True)
                fn()
                out[role] = ws / role
            except Exception as e:  # reported per role by the caller
                out[role] = e
    return out


def current_render_environment() -> dict:
    from evidence.figures import render_environment
    env = dict(render_environment())
    env.setdefault("python", sys.version.split()[0])
    return env
