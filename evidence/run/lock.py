"""One writer per run folder: an exclusive `flock` on <run>/.runner.lock, held for the runner's life.

Two runners on one folder would move each other's in-progress trial aside and commit records
measured while the other had requests in flight on the same server. The lock is taken before
anything else is written (for a new run, in its creation folder before the first file). The
file holds the holder's pid, host, process start time and command, so a refusal names it.

The kernel releases a flock when its holder dies, even by kill -9; a lock file still holding a
holder's details when we get the lock was left by a runner that ended without cleaning up: it is
reported (a stale lock, taken over) and overwritten. On a clean exit the file is removed.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path

LOCK_NAME = ".runner.lock"


class LockHeld(Exception):
    """Another live runner holds the folder; the message is one paragraph naming it."""


def proc_start(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (/proc/<pid>/stat field 22), or None.

    With the pid it names one process: a pid reused later has another start time.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    rest = stat[stat.rfind(")") + 2 :].split()
    try:
        return int(rest[19])
    except (IndexError, ValueError):
        return None


def _state(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rfind(")") + 2 :][:1]


def same_process_alive(pid: int, start: int | None) -> bool:
    """Whether the process `pid` that started at `start` (proc_start) still runs on this host."""
    if pid <= 0:
        return False
    now = proc_start(pid)
    if now is not None and _state(pid) in ("Z", "X"):
        return False  # exited, not yet reaped (a container's init may never reap it)
    if now is None:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return start is None  # no /proc: the pid alone says it
    return start is None or now == start


def holder_text(h: dict) -> str:
    since = h.get("started_unix")
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(since)) if isinstance(since, (int, float)) else "?"
    cmd = h.get("argv")
    return f"pid {h.get('pid')} on host {h.get('host')}, since {when}" + (
        f", command {' '.join(map(str, cmd))!r}" if isinstance(cmd, list) and cmd else ""
    )


@dataclass
class RunLock:
    path: Path  # the lock file
    fd: int
    taken_over: dict | None = None  # the details a dead holder left, when there were any

    def moved(self, folder: Path) -> None:
        """The folder was renamed (creation folder -> run folder): the fd still holds the same file."""
        self.path = Path(folder) / LOCK_NAME

    def release(self) -> None:
        if self.fd < 0:
            return
        try:
            # unlink before unlocking: a runner that opened the old file sees another inode and retries
            if os.path.exists(self.path) and os.stat(self.path).st_ino == os.fstat(self.fd).st_ino:
                os.unlink(self.path)
        except OSError:
            pass
        finally:
            os.close(self.fd)
            self.fd = -1


#: locks this process holds, by folder (one process never locks a folder twice)
_HELD: dict[str, RunLock] = {}


def _key(folder: Path) -> str:
    return str(Path(folder).resolve())


def acquire(folder: Path) -> RunLock:
    """Lock `folder` for this process (reentrant within it); raise LockHeld naming a live holder."""
    folder = Path(folder)
    path = folder / LOCK_NAME
    held = _HELD.pop(_key(folder), None)
    if held is not None and held.fd >= 0:
        try:
            if os.stat(path).st_ino == os.fstat(held.fd).st_ino:
                _HELD[_key(folder)] = held
                return held
        except OSError:
            pass
        held.release()  # the folder was removed and made again: that lock holds nothing
    for _ in range(20):
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read(fd)
            os.close(fd)
            raise LockHeld(
                f"{folder} is being written by another `evidence run` ({holder_text(holder) if holder else 'holder unknown'}). "
                "A run folder has one writer at a time: two runners would move each other's trials aside and measure "
                "next to each other's requests. Wait for that run to end, stop it (it resumes later where it was cut), "
                "or start a separate run with another --run-id."
            ) from None
        except BaseException:
            os.close(fd)
            raise
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if not same:  # the previous holder removed the file as we opened it: lock the new one
            os.close(fd)
            continue
        break
    else:  # pragma: no cover - twenty races in a row
        raise LockHeld(f"{folder}: could not take the run lock {path} (it kept being replaced)")
    previous = _read(fd)
    me = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "proc_start": proc_start(os.getpid()),
        "started_unix": round(time.time(), 3),
        "argv": list(sys.argv),
    }
    os.ftruncate(fd, 0)
    os.pwrite(fd, (json.dumps(me, sort_keys=True) + "\n").encode("utf-8"), 0)
    lock = RunLock(path, fd, taken_over=previous or None)
    _HELD[_key(folder)] = lock
    return lock


def rekey(old: Path, new: Path) -> None:
    """After renaming a locked folder: the lock now belongs to `new`."""
    lock = _HELD.pop(_key(old), None)
    if lock is None:
        return
    lock.moved(new)
    _HELD[_key(new)] = lock


def held(folder: Path) -> RunLock | None:
    return _HELD.get(_key(folder))


def held_folders() -> set[str]:
    return set(_HELD)


def release_all_but(keep: set[str]) -> None:
    """Release every lock this process took since `held_folders()` returned `keep`."""
    for k in [k for k in _HELD if k not in keep]:
        _HELD.pop(k).release()


def release(folder: Path) -> None:
    lock = _HELD.pop(_key(folder), None)
    if lock is not None:
        lock.release()


def _read(fd: int) -> dict:
    try:
        raw = os.pread(fd, 65536, 0)
        d = json.loads(raw.decode("utf-8")) if raw.strip() else {}
        return d if isinstance(d, dict) else {}
    except (OSError, ValueError):
        return {}


def stale_note(prev: dict) -> str:
    """What to say about a lock left by a runner that ended without releasing it."""
    host = prev.get("host")
    if host == socket.gethostname():
        alive = same_process_alive(int(prev.get("pid") or 0), prev.get("proc_start"))
        state = "still runs but no longer holds the lock" if alive else "is no longer running"
    else:
        state = "left no lock behind it (its process ended)"
    return f"took over a stale run lock: the previous runner ({holder_text(prev)}) {state}"
