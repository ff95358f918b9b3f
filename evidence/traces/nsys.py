"""Nsight Systems SQLite export (`nsys export --type sqlite`) -> Trace.

Kernels from `CUPTI_ACTIVITY_KIND_KERNEL`, names from `StringIds`, the launching
API call from `CUPTI_ACTIVITY_KIND_RUNTIME` (joined on correlationId within the
process), NVTX ranges from `NVTX_EVENTS`. Optional columns an export lacks are
filled with -1 and named in the trace's notes.

The kernel and runtime tables are read through connectorx into Arrow, a slice of
rowids at a time on two threads, and written straight into the kernel table's
numpy arrays, so no Python object is built per value and the peak stays near the
table's own size (bench/RESULTS-trace.md). The small tables (StringIds lookups,
NVTX, metadata) go through sqlite3, on the calling thread.
"""

from __future__ import annotations

import ctypes
import os
import sqlite3
import sys
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from threading import Lock
from typing import Any, Callable, Sequence
from urllib.parse import quote

import numpy as np

from evidence.traces.model import (
    NARROWED, NUMERIC_COLUMNS, KernelTable, Range, Trace, TraceError, check_fits, normalize_launch_api,
    reorder_in_place, short_names, steps_from_ranges, table_order,
)

__all__ = ["load_nsys_sqlite"]

# Kernel-table columns we read: output name -> (nsys column, required).
_NSYS_KERNEL_NUMERIC = (
    ("start_ns", "start", True), ("end_ns", "end", True), ("device", "deviceId", False),
    ("stream", "streamId", False), ("corr_id", "correlationId", False), ("gpid", "globalPid", False),
    ("grid_x", "gridX", False), ("grid_y", "gridY", False), ("grid_z", "gridZ", False),
    ("block_x", "blockX", False), ("block_y", "blockY", False), ("block_z", "blockZ", False),
    ("regs", "registersPerThread", False), ("smem_static", "staticSharedMemory", False),
    ("smem_dynamic", "dynamicSharedMemory", False), ("graph_id", "graphId", False),
    ("graph_node_id", "graphNodeId", False), ("name_id", "demangledName", False), ("short_id", "shortName", False),
    ("mangled_id", "mangledName", False),
)
_ROWS_PER_READ = 1 << 15  # rows per Arrow read: fewer calls cost less; each slice in flight holds ~190 B a row
_WORKERS = 2  # threads reading slices; each more holds a slice and connectorx's setup (~7 MB): memory
_WIDE_IDS = 2**31 - 2  # string ids above this do not fit the int32 code arrays they pass through


def _table_columns(con: sqlite3.Connection, table: str) -> set[str]:
    return {r[1] for r in con.execute(f'PRAGMA table_info("{table}")')}


def _strings_for(con: sqlite3.Connection, ids: Sequence[int]) -> dict[int, str]:
    """StringIds values for the given distinct ids."""
    uniq = [int(i) for i in ids if i >= 0]
    out: dict[int, str] = {}
    for k in range(0, len(uniq), 900):  # stay under SQLite's bound-parameter limit
        chunk = uniq[k:k + 900]
        q = f"SELECT id, value FROM StringIds WHERE id IN ({','.join('?' * len(chunk))})"
        out.update({int(i): str(v) for i, v in con.execute(q, chunk)})
    return out


class _Reader:
    """Integer columns of one SQLite file as numpy arrays, read through connectorx into Arrow.

    sqlite3 builds a Python object per fetched value, which was nearly all of the
    cost of an ingest; connectorx reads in Rust straight into Arrow buffers (with
    the GIL released, so two slices read at once), and numpy takes those buffers
    without a copy. NULL becomes -1, as everywhere in the kernel table.
    """

    def __init__(self, path: Path) -> None:
        try:
            import connectorx
            import pyarrow
        except ImportError as e:
            raise TraceError(
                f"Reading an Nsight Systems export needs the connectorx and pyarrow packages ({e}); "
                "install them with `pip install connectorx pyarrow` (they are dependencies of evidence)."
            ) from None
        self._cx, self._int64, self._null = connectorx, pyarrow.int64(), pyarrow.null()
        self.url = "sqlite://" + quote(str(path.resolve()))  # connectorx reads the path from a URL

    def read(self, sql: str) -> tuple[list[np.ndarray], dict[int, np.ndarray]]:
        """The columns (read-only where no NULL was replaced), and for those that held NULLs, where."""
        try:
            t = self._cx.read_sql(self.url, sql, return_type="arrow")
        except Exception as e:  # connectorx raises plain RuntimeError/ValueError from Rust
            raise sqlite3.DatabaseError(str(e).splitlines()[0] if str(e) else type(e).__name__) from None
        got = [self._column(t.schema.field(i).name, col) for i, col in enumerate(t.columns)]
        return [v for v, _ in got], {i: null for i, (_, null) in enumerate(got) if null is not None}

    def _column(self, name: str, col) -> tuple[np.ndarray, np.ndarray | None]:
        if col.type.equals(self._null) or col.null_count == len(col):
            return np.full(len(col), -1, np.int64), np.ones(len(col), bool)
        if not col.type.equals(self._int64):
            raise sqlite3.DatabaseError(f"column {name} holds {col.type} values, not integers")
        # The buffers straight into numpy: pyarrow's own to_numpy imports pandas (0.4 s) on first use.
        parts, null_parts = [], []
        for chunk in col.chunks:  # NULLs: the validity bitmap, unpacked by numpy (no pyarrow.compute)
            valid_buf, data_buf = chunk.buffers()
            off, n = chunk.offset, len(chunk)
            if not n:
                continue
            v = np.frombuffer(data_buf, np.int64, count=off + n)[off:]
            null = np.zeros(n, bool)
            if valid_buf is not None and chunk.null_count:
                null = np.unpackbits(np.frombuffer(valid_buf, np.uint8), count=off + n, bitorder="little")[off:] == 0
                v = np.where(null, -1, v)
            parts.append(v)
            null_parts.append(null)
        if not col.null_count:
            return (np.concatenate(parts) if len(parts) != 1 else parts[0]), None
        return np.concatenate(parts), np.concatenate(null_parts)


class _Launches:
    """The runtime table, keyed for the kernel join on (globalPid, correlationId).

    The runtime side's globalPid is globalTid & 0xFFFFFFFFFF000000. The process is
    mapped to a dense index so the pair packs into one int64 and the join is a
    lookup table (one process, compact correlation ids: the usual case) or a sort +
    searchsorted; with no globalPid on the kernel side, correlation ids alone. What
    a kernel takes from its launch (thread, process, start, API name id + 1) is kept
    per runtime row, with one more row for "no launch call" at the end, so the join
    is a gather at index -1 for a kernel without one.
    """

    def __init__(self, cols: list[np.ndarray], corr_only: bool, id_type: type) -> None:
        """cols: correlationId, globalTid, nameId, start; taken over (emptied) to keep the peak low."""
        corr, gtid, name_id, start = cols
        cols.clear()
        mask = np.int64(-0x1000000)  # == 0x...FFFFFF000000 as a signed int64
        gpid = np.zeros_like(gtid) if corr_only else np.where(gtid < 0, -1, gtid & mask)
        self.corr_only = corr_only
        self.procs = np.unique(gpid)
        key = np.searchsorted(self.procs, gpid) if len(self.procs) > 1 else np.zeros_like(gpid)
        key = (key << 32) | (corr & 0xFFFFFFFF)
        del gpid, corr
        n = len(key)
        # nsys appends launch calls as they happen, so keys usually already ascend: no sort.
        order = None if n < 2 or bool((key[1:] > key[:-1]).all()) else np.argsort(key, kind="stable")
        first = None
        if order is not None:  # first runtime row wins on duplicates
            key = key[order]
            first = np.ones(n, bool)
            first[1:] = key[1:] != key[:-1]

        def per_row(values: np.ndarray, dtype: type, none: int) -> np.ndarray:
            out = np.empty(n + 1, dtype)
            out[:n] = values if order is None else values[order]
            out[n] = none
            return out

        has = gtid >= 0
        self.tid = per_row(np.where(has, gtid & 0xFFFFFF, -1), np.int32, -1)
        self.pid = per_row(np.where(has, (gtid >> 24) & 0xFFFFFF, -1), np.int32, -1)
        del gtid, has
        self.start = per_row(start, np.int64, -1)
        self.api1 = per_row(name_id + 1, id_type, 0)
        del start, name_id
        self.n = n
        self.lut = None
        if len(self.procs) == 1 and n and int(key[-1]) < 4 * n + (1 << 20):
            # Each key's first row; the last entry (-1) answers every key outside the table.
            self.lut = np.full(int(key[-1]) + 2, -1, np.int64)
            if first is None:
                self.lut[key] = np.arange(n)
            else:
                self.lut[key[first]] = np.flatnonzero(first)
        else:
            self.keys = key

    def match(self, k_corr: np.ndarray, k_gpid: np.ndarray) -> np.ndarray:
        """For each kernel, its launch call's row, or -1 (the "no launch call" row)."""
        if self.n == 0:
            return np.full(len(k_corr), -1, np.int64)
        if self.lut is not None:
            last = len(self.lut) - 1
            c = k_corr & 0xFFFFFFFF
            c[k_corr < 0] = last
            if not self.corr_only:
                c[k_gpid != self.procs[0]] = last
            np.minimum(c, last, out=c)
            return self.lut[c]
        if self.corr_only:
            k_gpid = np.zeros_like(k_gpid)
        pi = np.searchsorted(self.procs, k_gpid)
        known = self.procs[np.minimum(pi, len(self.procs) - 1)] == k_gpid
        k_key = (pi.astype(np.int64) << 32) | (k_corr & 0xFFFFFFFF)
        pos = np.minimum(np.searchsorted(self.keys, k_key), self.n - 1)
        hit = known & (k_corr >= 0) & (self.keys[pos] == k_key)
        pos[~hit] = -1
        return pos


def _dictionary(con: sqlite3.Connection, ids1: np.ndarray, seen: np.ndarray | None,
                transform=None) -> tuple[tuple[str, ...], np.ndarray]:
    """The sorted distinct strings of a column of string ids + 1 (0: none), and the lookup table
    from id + 1 to their codes. seen: which ids + 1 occur, if the reader marked them (else np.unique).

    Distinct ids may map to the same string (e.g. after transform, or ids StringIds lacks: ""):
    they share a code.
    """
    if len(ids1) == 0:
        return ("",), np.zeros(1, ids1.dtype)
    used = np.flatnonzero(seen) if seen is not None else np.unique(ids1)
    lookup = _strings_for(con, used - 1)
    values = [lookup.get(int(u) - 1, "") for u in used]
    if transform:
        values = [transform(v) for v in values]
    cats = tuple(sorted(set(values)))
    index = {v: i for i, v in enumerate(cats)}
    lut = np.zeros(int(used[-1]) + 1, ids1.dtype)
    lut[used] = [index[v] for v in values]
    return cats, lut


def _settle(fut: Future, fn: Callable[[], Any]) -> None:
    """Run fn and hand its result, or its exception, to fut: threads waiting on fut raise the same."""
    try:
        fut.set_result(fn())
    except BaseException as e:
        fut.set_exception(e)
        raise


def _recode(ids1: np.ndarray, lut: np.ndarray) -> None:
    """ids + 1 to codes, in place, a slice at a time: no second full-length array."""
    for a in range(0, len(ids1), _ROWS_PER_READ):
        ids1[a:a + _ROWS_PER_READ] = lut[ids1[a:a + _ROWS_PER_READ]]


def load_nsys_sqlite(path: str | Path) -> Trace:
    """Load an Nsight Systems SQLite export. Raises TraceError on a bad file."""
    p = Path(path)
    try:
        # Quoted: an unquoted '#' or '?' in the path would cut it short and open (create) another file.
        con = sqlite3.connect(f"file:{quote(str(p.resolve()))}?mode=ro", uri=True)
        con.execute("PRAGMA cache_size = -512")  # 512 KiB: every query here is one pass, none re-reads a page
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type IN ('table','view')")}
    except sqlite3.DatabaseError as e:
        raise TraceError(f"{p} is not a readable SQLite database ({e}); re-export it with `nsys export --type sqlite`.") from None
    try:
        return _load_nsys(con, p, tables)
    except (sqlite3.DatabaseError, ValueError) as e:
        raise TraceError(
            f"Reading the Nsight Systems export {p} failed ({e}). The file may be truncated or from an "
            "unsupported nsys schema; re-export it with `nsys export --type sqlite`."
        ) from None
    finally:
        con.close()
        _return_freed_memory()


def _return_freed_memory() -> None:
    """Hand the memory the read freed back to the OS (glibc keeps it in per-thread arenas,
    where the analyses that follow could not reuse most of it). A no-op elsewhere."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libc.so.6").malloc_trim(0)
        except (OSError, AttributeError):  # not glibc (musl, ...)
            pass


def _load_nsys(con: sqlite3.Connection, p: Path, tables: set[str]) -> Trace:
    nvtx_notes: list[str] = []
    notes: list[str] = []
    meta: dict[str, Any] = {"format": "nsys-sqlite"}
    if "META_DATA_EXPORT" in tables:
        try:
            meta["export"] = {str(k): str(v) for k, v in con.execute("SELECT name, value FROM META_DATA_EXPORT")}
        except sqlite3.DatabaseError:
            pass
    if "TARGET_INFO_SESSION_START_TIME" in tables:
        cols = _table_columns(con, "TARGET_INFO_SESSION_START_TIME")
        if "utcEpochNs" in cols:
            row = con.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME LIMIT 1").fetchone()
            if row:
                meta["session_start_utc_ns"] = int(row[0])
    if "StringIds" not in tables:
        raise TraceError(
            f"{p} is a SQLite file but has no StringIds table, so it is not an Nsight Systems export "
            "(or an unsupported schema). Export with `nsys export --type sqlite`."
        )

    if "CUPTI_ACTIVITY_KIND_KERNEL" not in tables:
        ranges = _load_nvtx(con, tables, nvtx_notes)
        nvtx_notes.append(
            "no GPU kernels: the export has no CUPTI_ACTIVITY_KIND_KERNEL table (CUDA tracing off, "
            "or a CPU-only run); the kernel table is empty."
        )
        return Trace(str(p), "nsys-sqlite", KernelTable.empty("nsys"), steps_from_ranges(ranges), ranges, nvtx_notes,
                     meta)

    have = _table_columns(con, "CUPTI_ACTIVITY_KIND_KERNEL")
    missing_required = [c for key, c, req in _NSYS_KERNEL_NUMERIC if req and c not in have]
    if missing_required:
        raise TraceError(
            f"{p}: CUPTI_ACTIVITY_KIND_KERNEL lacks the required column(s) {', '.join(missing_required)}; "
            "this is not a kernel table nsys writes."
        )
    if not ({"demangledName", "shortName", "mangledName"} & have):
        raise TraceError(f"{p}: CUPTI_ACTIVITY_KIND_KERNEL has no name column (demangledName, shortName or mangledName).")
    absent = [c for key, c, req in _NSYS_KERNEL_NUMERIC if c not in have]
    if absent:
        notes.append(f"nsys kernel table lacks optional column(s) {', '.join(absent)}: filled with -1.")

    # Whether there are kernels at all; how many, the threads count while the runtime table is read.
    any_rows = con.execute("SELECT 1 FROM CUPTI_ACTIVITY_KIND_KERNEL LIMIT 1").fetchone() is not None
    reader = _Reader(p)
    rt_notes: list[str] = []
    runtime = _runtime_plan(con, tables, have, any_rows, rt_notes)
    nvtx: dict[str, Any] = {}

    def main_thread_share() -> None:  # the NVTX ranges and steps (Python objects) while the slices are read
        nvtx["ranges"] = _load_nvtx(con, tables, nvtx_notes)
        nvtx["steps"] = steps_from_ranges(nvtx["ranges"])

    kt, unmatched = _read_kernels(con, reader, have, runtime, main_thread_share)
    if unmatched:
        rt_notes.append(f"{unmatched} kernel(s) have no matching runtime launch call (launch_api empty).")
    notes = nvtx_notes + notes + rt_notes
    if len(kt) == 0:
        notes.append("no GPU kernels: CUPTI_ACTIVITY_KIND_KERNEL is empty; the kernel table is empty.")
    elif not kt["is_graph"].any() and "CUPTI_ACTIVITY_KIND_GRAPH_TRACE" in tables:
        notes.append(
            "CUDA graphs were traced whole (CUPTI_ACTIVITY_KIND_GRAPH_TRACE present, no graph node rows): "
            "replayed kernels are missing; profile with --cuda-graph-trace=node for per-kernel analysis."
        )
    return Trace(str(p), "nsys-sqlite", kt, nvtx["steps"], nvtx["ranges"], notes, meta)


def _runtime_plan(con: sqlite3.Connection, tables: set[str], have: set[str], any_rows: bool,
                  notes: list[str]) -> tuple[str, list[tuple[str, int, int]], int, bool] | None:
    """How to read the runtime launch calls for the join: (query, slices, rows, join on correlation ids
    alone); None, with a note, where they cannot be joined."""
    if "CUPTI_ACTIVITY_KIND_RUNTIME" not in tables:
        if any_rows:
            notes.append("no CUPTI_ACTIVITY_KIND_RUNTIME table: launch APIs, threads and launch times unknown.")
        return None
    if not any_rows:
        return None
    rcols = _table_columns(con, "CUPTI_ACTIVITY_KIND_RUNTIME")
    if not {"correlationId", "nameId", "start"} <= rcols:
        notes.append("CUPTI_ACTIVITY_KIND_RUNTIME lacks correlationId/nameId/start: launch APIs unknown.")
        return None
    gtid = '"globalTid"' if "globalTid" in rcols else "-1"
    nrt = con.execute("SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()[0]
    # Without any kernel globalPid the join falls back to correlation ids alone.
    corr_only = "globalPid" not in have or con.execute(
        'SELECT 1 FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE "globalPid" >= 0 LIMIT 1').fetchone() is None
    sql = f'SELECT "correlationId", {gtid}, "nameId", "start" FROM CUPTI_ACTIVITY_KIND_RUNTIME'
    return sql, _slices(con, "CUPTI_ACTIVITY_KIND_RUNTIME", nrt), nrt, corr_only


def _read_runtime(reader: _Reader, plan: tuple[str, list[tuple[str, int, int]], int, bool], id_type: type) -> _Launches:
    sql, slices, nrt, corr_only = plan
    cols = [np.empty(nrt, np.int64) for _ in range(4)]  # correlationId, globalTid, nameId, start
    for where, pos, k in slices:
        got, _ = reader.read(sql + where)
        if len(got[0]) != k:
            raise sqlite3.DatabaseError("the runtime table changed while it was read")
        for out, col in zip(cols, got):
            out[pos:pos + k] = col
    return _Launches(cols, corr_only, id_type)


def _slices(con: sqlite3.Connection, table: str, nrows: int) -> list[tuple[str, int, int]]:
    """(WHERE clause, first row, rows) that read a table a slice of rowids at a time.

    Where rowids run densely (nsys appends rows), each slice's place in the table is
    known before it is read, so slices can be read in any order, and in parallel.
    Otherwise (a view, deleted rows), one read of everything.
    """
    try:
        # Two queries: SQLite answers MIN or MAX of the rowid from the b-tree alone, not both at once.
        lo = con.execute(f"SELECT MIN(rowid) FROM {table}").fetchone()[0]
        hi = con.execute(f"SELECT MAX(rowid) FROM {table}").fetchone()[0]
    except sqlite3.DatabaseError:
        lo = hi = None
    if lo is None or hi - lo + 1 != nrows:
        return [("", 0, nrows)]
    step = _ROWS_PER_READ
    return [(f" WHERE rowid >= {r} AND rowid < {r + step}", r - lo, min(step, hi + 1 - r)) for r in range(lo, hi + 1, step)]


def _read_kernels(con: sqlite3.Connection, reader: _Reader, have: set[str], runtime: tuple | None,
                  main_thread_share: Callable[[], None]) -> tuple[KernelTable, int]:
    """The kernel table, read a slice of rowids at a time straight into its final arrays, on up to
    two threads (connectorx and numpy release the GIL). This thread counts the rows, allocates the
    table and runs main_thread_share while a helper reads the runtime table; then both take slices
    from one queue. Peak memory: the table plus the slices in flight. Returns it and the count of
    kernels with no launch call."""
    # (output key, SQL expression) for each column read; optional columns the export lacks stay -1.
    exprs = {"start_ns": '"start"', "end_ns": '"end"'}
    for key, c, _ in _NSYS_KERNEL_NUMERIC[2:]:
        if c in have and key not in ("name_id", "short_id", "mangled_id"):
            exprs[key] = f'"{c}"'
    # Names: demangled if the export has it, else mangled, else short.
    names = [f'"{c}"' for c in ("demangledName", "mangledName", "shortName") if c in have]
    exprs["name_id"] = f"COALESCE({', '.join(names)}, -1)"
    if "shortName" in have:
        exprs["short_id"] = '"shortName"'
    sql = f"SELECT {', '.join(exprs.values())} FROM CUPTI_ACTIVITY_KIND_KERNEL"
    direct = [k for k in ("start_ns", "device", "stream", "corr_id", "grid_x", "grid_y", "grid_z", "block_x",
                          "block_y", "block_z", "regs") if k in exprs]
    smem_read = "smem_static" in exprs or "smem_dynamic" in exprs
    end_at = list(exprs).index("end_ns")
    max_id = con.execute("SELECT MAX(id) FROM StringIds").fetchone()[0] or 0
    id_type = np.int64 if max_id > _WIDE_IDS else np.int32  # ids + 1 pass through the code arrays
    # Which string ids occur, marked slice by slice (ids + 1; 0: none); very large ids: np.unique at the end.
    mark = max_id < 1 << 26
    code_cols = ["name"] + (["short"] if "short_id" in exprs else []) + (["api"] if runtime is not None else [])
    seen = {c: np.zeros(max(max_id, 0) + 2 if mark else 0, bool) for c in code_cols}
    t: dict[str, Any] = {}  # the table's arrays and the slices still to read, once counted
    allocated: Future = Future()
    launches: Future = Future()

    def allocate() -> None:
        n = t["n"] = con.execute("SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
        # Arrays every slice writes whole start empty; the rest -1 (missing).
        whole = set(direct) | {"end_ns", "pid", "graph_id", "graph_node_id", "is_graph"}
        whole |= ({"smem_bytes"} if smem_read else set()) | ({"tid", "launch_ns"} if runtime is not None else set())
        t["num"] = {c: np.empty(n, dt) if c in whole else np.full(n, -1, dt) for c, dt in NUMERIC_COLUMNS.items()}
        t["name"] = np.empty(n, id_type)
        t["short"] = np.empty(n, id_type) if "short_id" in exprs else np.zeros(n, id_type)
        t["api"] = np.empty(n, id_type) if runtime is not None else np.zeros(n, id_type)
        t["todo"] = iter(_slices(con, "CUPTI_ACTIVITY_KIND_KERNEL", n))

    missing = np.full(_ROWS_PER_READ, -1, np.int64)

    def one(where: str, pos: int, k: int) -> int:
        cols, nulls = reader.read(sql + where)
        if len(cols[0]) != k:
            raise sqlite3.DatabaseError("the kernel table changed while it was read")
        got = dict(zip(exprs, cols))
        num, sl = t["num"], slice(pos, pos + k)
        none = missing[:k] if k <= len(missing) else np.full(k, -1, np.int64)
        for key in direct:
            if key in NARROWED:
                check_fits(key, got[key])
            num[key][sl] = got[key]
        end = num["end_ns"][sl]
        end[:] = got["end_ns"]
        if end_at in nulls:  # no end: one before the start, so the kernel has no duration
            end[nulls[end_at]] = got["start_ns"][nulls[end_at]] - 1
        if smem_read:
            static, dynamic = got.get("smem_static", none), got.get("smem_dynamic", none)
            total = np.maximum(static, 0)
            total += np.maximum(dynamic, 0)
            check_fits("smem_bytes", total)
            smem = num["smem_bytes"][sl]
            smem[:] = total
            smem[(static < 0) & (dynamic < 0)] = -1
        for key in ("graph_id", "graph_node_id"):
            out, g = num[key][sl], got.get(key, none)
            out[:] = g
            out[g <= 0] = -1
        # Replayed from a graph: a graph or node id here; a graph launch call is added at the end.
        isg = num["is_graph"][sl]
        np.greater(num["graph_id"][sl], 0, out=isg)
        isg |= num["graph_node_id"][sl] > 0
        np.add(got["name_id"], 1, out=t["name"][sl], casting="unsafe")
        if "short_id" in got:
            np.add(got["short_id"], 1, out=t["short"][sl], casting="unsafe")
        gpid = got.get("gpid", none)
        has_pid = gpid >= 0
        pid = num["pid"][sl]
        rt = launches.result()
        if rt is None:
            np.copyto(pid, np.where(has_pid, (gpid >> 24) & 0xFFFFFF, -1))
            unmatched = 0
        else:
            at = rt.match(got.get("corr_id", none), gpid)
            # The kernel's own process where the export has it, else its launching thread's.
            np.copyto(pid, np.where(has_pid, (gpid >> 24) & 0xFFFFFF, rt.pid[at]))
            np.take(rt.tid, at, out=num["tid"][sl])
            np.take(rt.start, at, out=num["launch_ns"][sl])
            np.take(rt.api1, at, out=t["api"][sl])
            unmatched = int(np.count_nonzero(at < 0))
        for c in code_cols:
            ids1 = t[c][sl]
            if k and ids1.min() < 0:  # a negative string id names no string
                np.maximum(ids1, 0, out=ids1)
            if mark and k and ids1.max() < len(seen[c]):
                seen[c][ids1] = True
            elif k:
                t["unmarked"] = True  # an id StringIds does not hold: np.unique at the end
        return unmatched

    def read_runtime() -> None:  # the slices, waiting for the join, raise what it raises
        _settle(launches, lambda: _read_runtime(reader, runtime, id_type) if runtime else None)

    lock = Lock()

    def drain() -> int:  # slices until none is left, shared by both threads
        allocated.result()
        unmatched = 0
        while True:
            with lock:
                sl = next(t["todo"], None)
            if sl is None:
                return unmatched
            unmatched += one(*sl)

    def main_first() -> None:
        _settle(allocated, allocate)
        main_thread_share()

    def recode(cols: list[str]) -> None:
        for c in cols:
            _recode(t[c], dicts[c][1])
        if "api" in cols:  # replayed from a graph: launched by a graph launch call
            graph_api = np.array(["GraphLaunch" in a for a in dicts["api"][0]], dtype=bool)
            if graph_api.any():
                isg = t["num"]["is_graph"]
                for a in range(0, len(isg), _ROWS_PER_READ):
                    isg[a:a + _ROWS_PER_READ] |= graph_api[t["api"][a:a + _ROWS_PER_READ]]

    two = min(_WORKERS, os.cpu_count() or 1) > 1
    with ThreadPoolExecutor(1 if two else None) as ex:
        if two:
            helper = ex.submit(lambda: (read_runtime(), drain())[1])
            try:
                main_first()
                unmatched = drain()
            except BaseException:
                t["todo"] = iter(())  # the helper takes no further slice
                raise
            unmatched += helper.result()
        else:
            read_runtime()
            main_first()
            unmatched = drain()
        # Strings to codes: the dictionaries here (sqlite3 stays on its thread), then the other columns
        # recoded on the helper while this one recodes the names.
        unmarked = not mark or t.get("unmarked", False)
        dicts = {c: _dictionary(con, t[c], None if unmarked else seen[c], normalize_launch_api if c == "api" else None)
                 for c in code_cols}
        rest = ex.submit(recode, code_cols[1:]) if two else None
        recode(["name"] if two else code_cols)
        if rest is not None:
            rest.result()
    num, ids = t.pop("num"), {c: t.pop(c) for c in ("name", "api") + (("short",) if "short" in dicts else ())}
    order = table_order(num)  # nsys writes rows per buffer flush, not always in time order
    if order is not None:
        reorder_in_place(num, order)
        reorder_in_place(ids, order)
    name_cats = dicts["name"][0]
    if "short" in dicts:
        short_cats = dicts["short"][0]
    else:  # derived from the demangled name, the same way the Kineto loader does
        short_cats, remap = short_names(name_cats)
        ids["short"] = remap[ids["name"]]
    launch_cats = dicts["api"][0] if "api" in dicts else ("",)
    kt = KernelTable(
        num,
        {"source": np.broadcast_to(np.int32(0), t["n"]), "name": ids["name"], "short_name": ids["short"],
         "launch_api": ids["api"]},
        {"source": ("nsys",), "name": name_cats, "short_name": short_cats, "launch_api": launch_cats}, sort=False,
    )
    return kt, unmatched


def _load_nvtx(con: sqlite3.Connection, tables: set[str], notes: list[str]) -> list[Range]:
    if "NVTX_EVENTS" not in tables:
        return []
    cols = _table_columns(con, "NVTX_EVENTS")
    if not {"start", "end"} <= cols:
        notes.append("NVTX_EVENTS lacks start/end columns: NVTX ranges not loaded.")
        return []
    # The text is inline (`text`) or registered once and referenced (`textId`).
    texts = []
    join = ""
    if "text" in cols:
        texts.append('e."text"')
    if "textId" in cols:
        join = 'LEFT JOIN StringIds s ON s.id = e."textId"'
        texts.append("s.value")
    text = f"COALESCE({', '.join(texts + [chr(39) * 2])})"
    gtid = 'e."globalTid"' if "globalTid" in cols else "NULL"
    dom = 'e."domainId"' if "domainId" in cols else "NULL"
    # Ranges only: push/pop (59) and start/end (60) have an end, marks (34) do not.
    q = (
        f"SELECT e.start, e.end, {text}, {gtid}, {dom} FROM NVTX_EVENTS e {join} "
        "WHERE e.end IS NOT NULL AND e.end >= e.start ORDER BY e.start, e.end"
    )
    out = []
    for start, end, txt, gt, d in con.execute(q):
        gt = -1 if gt is None else int(gt)
        pid = (gt >> 24) & 0xFFFFFF if gt >= 0 else -1
        tid = gt & 0xFFFFFF if gt >= 0 else -1
        out.append(Range(int(start), int(end), str(txt), pid, tid, "nvtx", -1 if d is None else int(d)))
    return out

