"""a. The analysis window and the kernel-active fraction.

Kernel-active is the union of kernel intervals across all streams, clipped to the
window, over the window's length: never a sum of durations (overlap would count twice).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from evidence.traces.model import KernelTable

__all__ = ["Window", "KernelActive", "resolve_window", "select_kernels", "union_length", "clipped_ns", "kernel_active"]


@dataclass(frozen=True)
class Window:
    start_ns: int
    end_ns: int
    source: str  # "explicit" or how the default was derived

    @property
    def length_ns(self) -> int:
        return max(self.end_ns - self.start_ns, 0)


def resolve_window(kernels: KernelTable, window: tuple[int | None, int | None] | Window | None = None) -> Window:
    """An explicit [start, end] ns window, or first kernel start .. last kernel end.

    Either side of an explicit window may be None, meaning the default for that side.
    """
    if isinstance(window, Window):
        return window
    lo = int(kernels["start_ns"].min()) if len(kernels) else 0
    hi = int(kernels["end_ns"].max()) if len(kernels) else 0
    if window is None or (window[0] is None and window[1] is None):
        return Window(lo, hi, "default: first kernel start to last kernel end")
    s = lo if window[0] is None else int(window[0])
    e = hi if window[1] is None else int(window[1])
    if e <= s:
        raise ValueError(f"window end {e} is not after its start {s}")
    return Window(s, e, "explicit")


def select_kernels(
    kernels: KernelTable, window: Window | None = None, *, device: int | None = None, pid: int | None = None,
    inside: bool = False,
) -> np.ndarray:
    """Boolean mask: kernels overlapping the window (or fully inside it), on device/pid if given."""
    mask = np.ones(len(kernels), dtype=bool)
    if window is not None:
        s, e = kernels["start_ns"], kernels["end_ns"]
        mask &= (s >= window.start_ns) & (e <= window.end_ns) if inside else (e > window.start_ns) & (s < window.end_ns)
    if device is not None:
        mask &= kernels["device"] == device
    if pid is not None:
        mask &= kernels["pid"] == pid
    return mask


def union_length(starts: np.ndarray, ends: np.ndarray, lo: int | None = None, hi: int | None = None) -> int:
    """Length of the union of [start, end) intervals, clipped to [lo, hi]: sort + merge, vectorized.

    A new merged block starts wherever an interval begins after every earlier
    interval has ended (running maximum of ends); the union is the sum of blocks.
    """
    s = np.array(starts, dtype=np.int64)  # own copies: clipped and merged in place
    e = np.array(ends, dtype=np.int64)
    for bound, clip in ((lo, np.maximum), (hi, np.minimum)):
        if bound is not None:
            clip(s, bound, out=s)
            clip(e, bound, out=e)
    return _merged_length(s, e)


def _merged_length(s: np.ndarray, e: np.ndarray) -> int:
    """union_length of intervals already clipped; s and e are consumed (changed in place)."""
    keep = e > s
    if not keep.all():
        s, e = s[keep], e[keep]
    del keep
    if len(s) == 0:
        return 0
    if not (s[1:] >= s[:-1]).all():  # a kernel table is sorted by start already: no sort, no copies
        order = np.argsort(s, kind="stable")
        s, e = s[order], e[order]
    run_end = np.maximum.accumulate(e, out=e)
    new_block = np.empty(len(s), dtype=bool)
    new_block[0] = True
    np.greater(s[1:], run_end[:-1], out=new_block[1:])
    # A block ends where the next one starts (or at the last interval), at the running max
    # of ends; summed with where= masks, so no per-block arrays (one per kernel when none overlap).
    last = np.empty(len(s), dtype=bool)
    last[:-1] = new_block[1:]
    last[-1] = True
    return int(np.sum(run_end, where=last)) - int(np.sum(s, where=new_block))


def clipped_ns(kernels: KernelTable, m: np.ndarray, w: Window) -> np.ndarray:
    """Durations of the masked kernels, clipped to the window (computed in place: two copies at most)."""
    d = kernels["end_ns"][m]
    np.minimum(d, w.end_ns, out=d)
    s = kernels["start_ns"][m]
    np.maximum(s, w.start_ns, out=s)
    np.subtract(d, s, out=d)
    del s
    return np.maximum(d, 0, out=d)


@dataclass(frozen=True)
class KernelActive:
    window: Window
    device: int | None
    pid: int | None
    kernels: int
    active_ns: int  # union of kernel intervals inside the window
    sum_kernel_ns: int  # plain sum of clipped durations (counts overlap twice)
    overlap_ns: int  # sum - union: time where two or more kernels ran at once
    fraction: float | None
    reason: str | None = None


def kernel_active(
    kernels: KernelTable, window: tuple[int | None, int | None] | Window | None = None,
    *, device: int | None = None, pid: int | None = None,
) -> KernelActive:
    """Fraction of the window in which at least one kernel ran, across all streams."""
    w = resolve_window(kernels, window)
    m = select_kernels(kernels, w, device=device, pid=pid)
    # Selected kernels overlap the window, so clipping raises starts and lowers ends only;
    # done in place on one copy of each column (a million kernels: 16 MB, not 80).
    s, e = kernels["start_ns"][m], kernels["end_ns"][m]
    np.maximum(s, w.start_ns, out=s)
    np.minimum(e, w.end_ns, out=e)
    pos = e > s
    total = int(np.sum(e, where=pos)) - int(np.sum(s, where=pos))
    del pos
    active = _merged_length(s, e)
    if w.length_ns == 0:
        return KernelActive(w, device, pid, int(m.sum()), active, total, total - active, None,
                            "empty window (no kernels, or start == end)")
    return KernelActive(w, device, pid, int(m.sum()), active, total, total - active, active / w.length_ns)

