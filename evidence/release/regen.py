"""Regeneration of a run's derived outputs from its raw files, the same way for freeze and verify.

`regenerate` is the in-process pass (freeze uses it; it is also what a release's own regenerator
runs). `run_regeneration` runs several runs in parallel, each in a subprocess under a chosen
environment (evidence.release.regenerator: the release's wheel, the commit that froze it, or this
code), through the driver programs in evidence/release/drivers/, and reports one progress bar per run."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from evidence.release.drivers import ENTRY_DRIVER, LEGACY_DRIVER, RELEASE_DRIVER
from evidence.release.files import inventory
from evidence.release.layout import DERIVED_ROLES, ReleaseError
from evidence.release.phases import NoPhases, Phases


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


def regenerate(raw_dir: Path, work: Path, *, sde: int | None = None,
               step: Callable[[str], None] | None = None) -> dict[str, Path | Exception]:
    """Rebuild the derived outputs of one run from its raw files, the same way for freeze and verify:
    copy raw to work/<run-id>/, then one analysis -> figures -> report pass (evidence.derive), each part
    into work/<run-id>/<role>/. Returns role -> output folder, or the exception that stopped it.

    This is the regenerator's entry point (ENTRY): a release records it, and verify calls the
    release's own copy of it in a subprocess (see run_regeneration)."""
    from evidence.derive import derive_run

    run_id = Path(raw_dir).name
    ws = Path(work) / run_id
    copy_tree_files(Path(raw_dir), ws, skip_top=DERIVED_ROLES)
    for role in DERIVED_ROLES:
        (ws / role).mkdir(parents=True, exist_ok=True)
    with _source_date_epoch(sde):
        try:
            # in a release the report sits in data/report/<run-id>/, its figures in data/figures/<run-id>/
            derive_run(ws, ws, figures_rel=f"../../figures/{run_id}", step=step)
        except Exception as e:  # reported per role by the caller
            return {role: e for role in DERIVED_ROLES}
    return {role: ws / role for role in DERIVED_ROLES}


ENTRY = "evidence.release.regen:regenerate"
RELEASE_ENTRY = "evidence.release.regen:regenerate_release"


def regenerate_release(data_dir: Path, work: Path, *, sde: int | None = None, tag: str = "") -> dict[str, Path | Exception]:
    """The release-level files from a payload folder (data/): data/release/ (the index page over every run,
    compare.json when there are exactly two runs; data/release/notes.md is read, never written) into
    work/release/, and the RO-Crate into work/crate/. Inputs: data/analysis/<id>/analysis.json (checked
    byte for byte by regen.analysis) and data/raw/. Returns role -> output folder, or the exception."""
    import json as _json

    from evidence import __version__
    from evidence.analysis.compare import compare_runs
    from evidence.canon import dumps
    from evidence.release.crate import crate_json
    from evidence.release.layout import CRATE, NOTES, RELEASE_DIR
    from evidence.report.index import index_entry, render_index

    data_dir, work = Path(data_dir), Path(work)
    out_r, out_c = work / "release", work / "crate"
    out_r.mkdir(parents=True, exist_ok=True)
    out_c.mkdir(parents=True, exist_ok=True)
    with _source_date_epoch(sde):
        try:
            ids = sorted(p.name for p in (data_dir / "raw").iterdir() if p.is_dir())
            runs = [index_entry(rid, _json.loads((data_dir / "analysis" / rid / "analysis.json").read_text(encoding="utf-8")),
                                f"../report/{rid}/report.html") for rid in ids]
            cmp = None
            if len(ids) == 2:
                cmp = _json.loads(_json.dumps(compare_runs(data_dir / "raw" / ids[0], data_dir / "raw" / ids[1])))
                (out_r / "compare.json").write_text(dumps(cmp), encoding="utf-8")
            notes_p = data_dir / RELEASE_DIR / NOTES
            notes = notes_p.read_text(encoding="utf-8") if notes_p.is_file() else None
            render_index(runs, cmp, out_r, title=tag or None, notes=notes)
        except Exception as e:
            return {"release": e, "crate": e}
        try:
            title = next((ln[2:].strip() for ln in (notes or "").splitlines() if ln.startswith("# ")), tag)
            (out_c / CRATE).write_text(crate_json(data_dir, tag=tag, title=title, date_unix=int(sde or 0), runs=ids,
                                                  tool_version=__version__), encoding="utf-8")
        except Exception as e:
            return {"release": out_r, "crate": e}
    return {"release": out_r, "crate": out_c}

N_STEPS = 5  # the steps each driver announces (evidence.derive.STEPS)


def _child_environ(env: Any, sde: int | None) -> dict[str, str]:
    """The regenerating subprocess's environment: the code only from env's path, the freeze's date, agg."""
    environ = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")}
    if env.pythonpath:
        environ["PYTHONPATH"] = env.pythonpath
    if sde is not None:
        environ["SOURCE_DATE_EPOCH"] = str(int(sde))
    environ["MPLBACKEND"] = "agg"
    return environ


def run_release_regeneration(data_dir: Path, work: Path, *, sde: int | None, tag: str, env: Any) -> dict[str, Path | Exception]:
    """regenerate_release under `env` (the release's own code, as for the runs); role -> folder or exception."""
    work = Path(work)
    work.mkdir(parents=True, exist_ok=True)
    environ = _child_environ(env, sde)
    p = subprocess.run([env.python, "-P", str(RELEASE_DRIVER), str(data_dir), str(work), str(sde or ""), tag,
                        RELEASE_ENTRY], capture_output=True, text=True, env=environ, cwd=work)
    done = None
    for line in p.stdout.splitlines():
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        if isinstance(msg, dict) and isinstance(msg.get("done"), dict):
            done = msg["done"]
    roles = ("release", "crate")
    if done is None:
        tail = p.stderr.strip().splitlines()[-1:] if p.stderr.strip() else []
        why = RegenerationFailed(f"the regenerating process ({env.describe}) exited with status {p.returncode} before "
                                 f"finishing{': ' + tail[0] if tail else ''}")
        return {r: why for r in roles}
    return {r: (work / r) if done.get(r) is None else RegenerationFailed(str(done[r])) for r in roles}


class RegenerationFailed(Exception):
    """A role could not be regenerated (the message is what the regenerating process said)."""


def _run_one(rid: str, raw: Path, work: Path, sde: int | None, env: Any, phases: Phases) -> dict[str, Path | Exception]:
    key = f"regen:{rid}"
    phases.start(key, f"regenerating {rid}", N_STEPS)
    ws = work / rid
    try:
        if env.driver == "legacy":
            copy_tree_files(raw, ws, skip_top=DERIVED_ROLES)
            argv = [str(LEGACY_DRIVER), str(ws), str(work), str(sde or ""), rid]
        else:
            argv = [str(ENTRY_DRIVER), str(raw), str(work), str(sde or ""), env.entry]
    except (OSError, ReleaseError) as e:
        phases.finish(key, f"{rid}: could not start")
        return {r: e for r in DERIVED_ROLES}
    environ = _child_environ(env, sde)
    done: dict[str, str | None] | None = None
    with tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace") as errf:
        # -P: never import from the driver's folder or the working directory; the code comes from PYTHONPATH
        # (or the interpreter's own site)
        proc = subprocess.Popen([env.python, "-P", *argv], stdout=subprocess.PIPE, stderr=errf, text=True,
                                env=environ, cwd=work)
        assert proc.stdout is not None
        for line in proc.stdout:
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            if isinstance(msg, dict) and "step" in msg:
                phases.advance(key, 1, f"{rid}: {msg['step']}")
            elif isinstance(msg, dict) and isinstance(msg.get("done"), dict):
                done = msg["done"]
        rc = proc.wait()
        errf.seek(0)
        tail = errf.read()[-1500:].strip()
    phases.finish(key, f"{rid}: regenerated" if done and not any(done.values()) else f"{rid}: failed")
    if done is None:
        why = RegenerationFailed(f"the regenerating process ({env.describe}) exited with status {rc} before finishing"
                                 + (f": {tail.splitlines()[-1]}" if tail else ""))
        return {r: why for r in DERIVED_ROLES}
    return {r: (ws / r) if done.get(r) is None else RegenerationFailed(str(done[r])) for r in DERIVED_ROLES}


def run_regeneration(jobs: dict[str, Path], work: Path, *, sde: int | None, env: Any, phases: Phases | None = None,
                     workers: int | None = None) -> dict[str, dict[str, Path | Exception]]:
    """Regenerate several runs in parallel, each in its own process under `env` (a regenerator.RegenEnv:
    the interpreter, the code on its path, the driver). run id -> role -> output folder or exception."""
    phases = phases or NoPhases()
    work = Path(work)
    work.mkdir(parents=True, exist_ok=True)
    if not jobs:
        return {}
    n = max(1, min(len(jobs), workers or os.cpu_count() or 1))
    with ThreadPoolExecutor(max_workers=n) as pool:
        futs = {rid: pool.submit(_run_one, rid, Path(raw), work, sde, env, phases) for rid, raw in jobs.items()}
        return {rid: f.result() for rid, f in futs.items()}


def current_render_environment() -> dict:
    from evidence.figures import render_environment
    env = dict(render_environment())
    env.setdefault("python", sys.version.split()[0])
    return env
