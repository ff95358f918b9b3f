"""The staging folder freeze builds a release in, and what happens when freeze is interrupted.

The staging folder (releases/.tmp-<tag>-XXXX/) carries a mark naming the freeze that made it, so a
folder left by a killed freeze (SIGKILL, power loss) is recognised and named by the next one.
SIGTERM and SIGHUP become `Interrupted`, raised in the main thread, so every `finally` on the way
removes what was written; inside a critical section (the commit and the tag) they are held until
the section ends, so a release is never committed without its tag."""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import signal
import tempfile
import threading
from pathlib import Path
from typing import Any, Iterator

STAGING_PREFIX = ".tmp-"
STAGING_MARK = ".evidence-freeze-staging.json"


class Interrupted(BaseException):
    """SIGTERM/SIGHUP during freeze: a BaseException so that no `except Exception` on the way swallows it."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def make_staging(releases: Path, tag: str) -> Path:
    """A fresh staging folder in releases/, marked with the tag, this pid and the time."""
    staging = Path(tempfile.mkdtemp(prefix=f"{STAGING_PREFIX}{tag}-", dir=releases))
    mark = {"tag": tag, "pid": os.getpid(),
            "started": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}
    (staging / STAGING_MARK).write_text(json.dumps(mark) + "\n", encoding="utf-8")
    return staging


def placing_mark(releases: Path, tag: str, paths: list[Path]) -> Path:
    """A mark beside the release while it is in place but not yet committed: a freeze killed in that
    window leaves it, and the next freeze names the release files it left."""
    mark = releases / f"{STAGING_PREFIX}{tag}-placing.json"
    body = {"tag": tag, "pid": os.getpid(), "paths": [str(p) for p in paths],
            "started": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}
    mark.write_text(json.dumps(body) + "\n", encoding="utf-8")
    return mark


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


@contextlib.contextmanager
def interruptible(state: dict) -> Iterator[None]:
    """Turn SIGTERM and SIGHUP into Interrupted (so every `finally` cleans up), except inside a critical
    section (state['critical']), where the signal is held until the section ends."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        if state.get("critical"):
            state["pending"] = signum
            return
        raise Interrupted(signum)

    sigs = [s for s in (getattr(signal, "SIGTERM", None), getattr(signal, "SIGHUP", None)) if s is not None]
    old = {s: signal.signal(s, handler) for s in sigs}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


@contextlib.contextmanager
def critical(state: dict) -> Iterator[None]:
    """A section SIGTERM/SIGHUP do not cut (see interruptible): they are held in state['pending']."""
    state["critical"] = True
    try:
        yield
    finally:
        state["critical"] = False


def stale_staging(releases: Path) -> list[tuple[str, list[str]]]:
    """What a killed freeze left in releases/ (staging folders, each named with what its mark says;
    partly written archives; release files placed but not committed): (what it is, paths to remove)."""
    out = []
    if not releases.is_dir():
        return out
    for p in sorted(releases.glob(".*.tar.*.tmp")):  # archive.build_tar's temporary file
        if p.is_file():
            out.append((f"{p} (a partly written archive)", [str(p)]))
    for p in sorted(releases.glob(f"{STAGING_PREFIX}*")):
        mark: Any = {}
        with contextlib.suppress(OSError, ValueError):
            mark = json.loads((p / STAGING_MARK if p.is_dir() else p).read_text(encoding="utf-8"))
        mark = mark if isinstance(mark, dict) else {}
        if not p.is_dir():
            if p.name.endswith("-placing.json"):
                left = [x for x in mark.get("paths", []) if isinstance(x, str) and os.path.lexists(x)]
                out.append((f"{p} (release files of tag {mark.get('tag')!r} put in place by pid {mark.get('pid')} but never "
                            f"committed: {', '.join(left) if left else 'none left'})", [str(p), *left]))
            continue
        pid = mark.get("pid")
        alive = False
        if isinstance(pid, int):
            try:
                os.kill(pid, 0)
                alive = True
            except ProcessLookupError:
                pass
            except PermissionError:
                alive = True
        who = (f"freeze of tag {mark.get('tag')!r} by pid {pid}, started {mark.get('started')}" if mark
               else "no freeze mark inside")
        out.append((f"{p} ({who}{', still running' if alive else ''})", [str(p)]))
    return out
