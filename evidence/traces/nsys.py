"""Nsight Systems SQLite export (`nsys export --type sqlite`) -> Trace.

Kernels from `CUPTI_ACTIVITY_KIND_KERNEL`, names from `StringIds`, the launching
API call from `CUPTI_ACTIVITY_KIND_RUNTIME` (joined on correlationId within the
process), NVTX ranges from `NVTX_EVENTS`. Optional columns an export lacks are
filled with -1 and named in the trace's notes.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from evidence.traces.model import (
    NUMERIC_COLUMNS, KernelTable, Range, Trace, TraceError, graph_mask, normalize_launch_api, short_kernel_name,
    steps_from_ranges,
)

__all__ = ["load_nsys_sqlite"]

# Kernel-table columns we read: output name -> (nsys column, required).
_NSYS_KERNEL_NUMERIC = (
    ("start_ns", "start", True),
    ("end_ns", "end", True),
    ("device", "deviceId", False),
    ("stream", "streamId", False),
    ("corr_id", "correlationId", False),
    ("gpid", "globalPid", False),
    ("grid_x", "gridX", False),
    ("grid_y", "gridY", False),
    ("grid_z", "gridZ", False),
    ("block_x", "blockX", False),
    ("block_y", "blockY", False),
    ("block_z", "blockZ", False),
    ("regs", "registersPerThread", False),
    ("smem_static", "staticSharedMemory", False),
    ("smem_dynamic", "dynamicSharedMemory", False),
    ("graph_id", "graphId", False),
    ("graph_node_id", "graphNodeId", False),
    ("name_id", "demangledName", False),
    ("short_id", "shortName", False),
    ("mangled_id", "mangledName", False),
)
_CHUNK = 100_000  # rows per fetchmany: bounds the Python-tuple overhead of a fetch


def _table_columns(con: sqlite3.Connection, table: str) -> set[str]:
    return {r[1] for r in con.execute(f'PRAGMA table_info("{table}")')}


def _fetch_int_columns(con: sqlite3.Connection, sql: str, ncols: int, nrows: int | None = None) -> np.ndarray:
    """Run a query whose columns are all integers (NULLs already COALESCEd) into an (n, ncols) int64 array.

    Fetched in chunks so the transient Python objects stay bounded; each chunk is
    converted by numpy in C.
    """
    cur = con.execute(sql)
    if nrows is not None:
        out = np.empty((nrows, ncols), dtype=np.int64)
        pos = 0
        while True:
            rows = cur.fetchmany(_CHUNK)
            if not rows:
                break
            k = len(rows)
            if pos + k > nrows:  # table grew under us; fall back to appending
                out = np.concatenate([out[:pos], np.array(rows, dtype=np.int64).reshape(k, ncols)])
                pos += k
                continue
            out[pos:pos + k] = np.array(rows, dtype=np.int64).reshape(k, ncols)
            pos += k
        return out[:pos]
    parts = []
    while True:
        rows = cur.fetchmany(_CHUNK)
        if not rows:
            break
        parts.append(np.array(rows, dtype=np.int64).reshape(len(rows), ncols))
    return np.concatenate(parts) if parts else np.zeros((0, ncols), dtype=np.int64)


def _fetch_packed(con: sqlite3.Connection, table: str, exprs: Sequence[str | None], nrows: int,
                  dtypes: Sequence[np.dtype] | None = None) -> list[np.ndarray]:
    """Integer SQL expressions over a table as int64 columns, NULL (or a None expr) -> -1.

    sqlite3 builds a Python int per value and a tuple per row, which is nearly all
    of the cost of a fetch. So a first pass takes each expression's range, and the
    second fetches the expressions shifted to start at 1 (0 = NULL) and bit-packed,
    several to a 62-bit word; numpy unpacks them. Exact for any values: an
    expression whose range needs more than 62 bits is fetched as it is. Falls back
    to a plain fetch if a column holds non-integers.
    """
    out = _LazyMissing(nrows, len(exprs), dtypes)
    live = [(i, e) for i, e in enumerate(exprs) if e is not None]
    if nrows == 0 or not live:
        return out.done()
    agg = ", ".join(f"min({e}), max({e})" for _, e in live)
    bounds = con.execute(f"SELECT {agg} FROM {table}").fetchone()
    if not all(b is None or isinstance(b, int) for b in bounds):
        raw = _fetch_int_columns(con, f"SELECT {', '.join(f'COALESCE({e}, -1)' for _, e in live)} FROM {table}", len(live), nrows)
        for j, (i, _) in enumerate(live):
            out[i] = raw[:, j]
        return out.done()
    words: list[list[tuple[int, int, int, int]]] = []  # per word: (column, lo, width, shift)
    raw_cols: list[tuple[int, str]] = []
    used = 63
    for j, (i, e) in enumerate(live):
        lo, hi = bounds[2 * j], bounds[2 * j + 1]
        if lo is None:  # all NULL
            continue
        lo -= 1  # so the smallest value packs as 1 and NULL as 0
        width = (hi - lo).bit_length()
        if width > 62 or lo < -(2**63):
            raw_cols.append((i, e))
            continue
        if used + width > 62:
            words.append([])
            used = 0
        words[-1].append((i, lo, width, used))
        used += width
    sql = [f"COALESCE({exprs[i]}, -1)" for i, _ in raw_cols]
    for w in words:
        sql.append(" | ".join(f"((COALESCE({exprs[i]}, {lo}) - ({lo})) << {sh})" for i, lo, _, sh in w))
    if not sql:
        return out.done()
    data = _fetch_int_columns(con, f"SELECT {', '.join(sql)} FROM {table}", len(sql), nrows)
    for j, (i, _) in enumerate(raw_cols):
        out[i] = data[:, j]
    for k, w in enumerate(words):
        word = data[:, len(raw_cols) + k]
        for i, lo, width, sh in w:
            v = (word >> sh) & ((1 << width) - 1)
            null = v == 0
            v += lo
            v[null] = -1
            out[i] = v
    del data
    return out.done()


class _LazyMissing(dict):
    """Columns by index, cast to their final dtype as they are set (so one int64
    temporary at a time, not a whole int64 table); unset ones become -1 at the end."""

    def __init__(self, nrows: int, ncols: int, dtypes: Sequence[np.dtype] | None) -> None:
        super().__init__()
        self.nrows, self.ncols = nrows, ncols
        self.dtypes = list(dtypes) if dtypes is not None else [np.dtype(np.int64)] * ncols

    def __setitem__(self, i: int, arr: np.ndarray) -> None:
        super().__setitem__(i, np.ascontiguousarray(arr, dtype=self.dtypes[i]))

    def done(self) -> list[np.ndarray]:
        return [self[i] if i in self else np.full(self.nrows, -1, self.dtypes[i]) for i in range(self.ncols)]


def _strings_for(con: sqlite3.Connection, ids: np.ndarray) -> dict[int, str]:
    """StringIds values for the given ids (only the distinct ones are looked up)."""
    uniq = [int(i) for i in np.unique(ids) if i >= 0]
    out: dict[int, str] = {}
    for k in range(0, len(uniq), 900):  # stay under SQLite's bound-parameter limit
        chunk = uniq[k:k + 900]
        q = f"SELECT id, value FROM StringIds WHERE id IN ({','.join('?' * len(chunk))})"
        out.update({int(i): str(v) for i, v in con.execute(q, chunk)})
    return out


def _encode(ids: np.ndarray, lookup: dict[int, str], transform=None) -> tuple[np.ndarray, tuple[str, ...]]:
    """Map integer string ids to dense codes into a tuple of distinct strings."""
    uniq, inverse = np.unique(ids, return_inverse=True)
    values = []
    for u in uniq:
        s = lookup.get(int(u), "")
        values.append(transform(s) if transform else s)
    # Distinct ids may map to the same string (e.g. after transform): merge them.
    cats = tuple(sorted(set(values)))
    index = {v: i for i, v in enumerate(cats)}
    remap = np.array([index[v] for v in values], dtype=np.int32)
    return (remap[inverse] if len(uniq) else np.zeros(len(ids), np.int32)), (cats or ("",))


def load_nsys_sqlite(path: str | Path) -> Trace:
    """Load an Nsight Systems SQLite export. Raises TraceError on a bad file."""
    p = Path(path)
    try:
        con = sqlite3.connect(f"file:{p}?mode=ro", uri=True)
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type IN ('table','view')")}
    except sqlite3.DatabaseError as e:
        raise TraceError(f"{p} is not a readable SQLite database ({e}); re-export it with `nsys export --type sqlite`.") from None
    try:
        return _load_nsys(con, p, tables)
    except sqlite3.DatabaseError as e:
        raise TraceError(
            f"Reading the Nsight Systems export {p} failed ({e}). The file may be truncated or from an "
            "unsupported nsys schema; re-export it with `nsys export --type sqlite`."
        ) from None
    finally:
        con.close()


def _load_nsys(con: sqlite3.Connection, p: Path, tables: set[str]) -> Trace:
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

    ranges = _load_nvtx(con, tables, notes)
    steps = steps_from_ranges(ranges)

    if "CUPTI_ACTIVITY_KIND_KERNEL" not in tables:
        notes.append(
            "no GPU kernels: the export has no CUPTI_ACTIVITY_KIND_KERNEL table (CUDA tracing off, "
            "or a CPU-only run); the kernel table is empty."
        )
        return Trace(str(p), "nsys-sqlite", KernelTable.empty("nsys"), steps, ranges, notes, meta)

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

    # end is fetched as the duration: a small range, so it packs into few bits.
    exprs = [("\"end\" - \"start\"" if c == "end" else f'"{c}"') if c in have else None for _, c, _ in _NSYS_KERNEL_NUMERIC]
    nrows = con.execute("SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    dtypes = [NUMERIC_COLUMNS.get(key, np.dtype(np.int64)) for key, _, _ in _NSYS_KERNEL_NUMERIC]
    raw = _fetch_packed(con, "CUPTI_ACTIVITY_KIND_KERNEL", exprs, nrows, dtypes)
    col = {key: raw[i] for i, (key, _, _) in enumerate(_NSYS_KERNEL_NUMERIC)}
    col["end_ns"] = col["start_ns"] + col["end_ns"]
    n = nrows

    # Names: demangled if the export has it, else mangled, else short.
    name_ids = col["name_id"].copy()
    for alt in ("mangled_id", "short_id"):
        m = name_ids < 0
        name_ids[m] = col[alt][m]
    lookup = _strings_for(con, np.concatenate([name_ids, col["short_id"]]))
    name_codes, name_cats = _encode(name_ids, lookup)
    if "shortName" in have:
        short_codes, short_cats = _encode(col["short_id"], lookup)
    else:
        # Derive from the demangled name, the same way the Kineto loader does.
        short_map = {c: short_kernel_name(c) for c in name_cats}
        short_cats = tuple(sorted(set(short_map.values()))) or ("",)
        idx = {v: i for i, v in enumerate(short_cats)}
        remap = np.array([idx[short_map[c]] for c in name_cats], dtype=np.int32)
        short_codes = remap[name_codes]

    # Launching API call: join to the runtime table on (process, correlationId).
    launch_api_codes = np.zeros(n, np.int32)
    launch_cats: tuple[str, ...] = ("",)
    pid = np.full(n, -1, np.int64)
    tid = np.full(n, -1, np.int64)
    launch_ns = np.full(n, -1, np.int64)
    gpid = col["gpid"]
    has_pid = gpid >= 0
    pid[has_pid] = (gpid[has_pid] >> 24) & 0xFFFFFF
    if "CUPTI_ACTIVITY_KIND_RUNTIME" in tables and n:
        rcols = _table_columns(con, "CUPTI_ACTIVITY_KIND_RUNTIME")
        need = {"correlationId", "nameId", "start"}
        if need <= rcols:
            nrt = con.execute("SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()[0]
            rt = np.stack(_fetch_packed(con, "CUPTI_ACTIVITY_KIND_RUNTIME", [
                '"correlationId"', '"globalTid"' if "globalTid" in rcols else None, '"nameId"', '"start"'], nrt), axis=1)
            match = _join_runtime(col["corr_id"], gpid, rt[:, 0], rt[:, 1])
            ok = match >= 0
            names = _strings_for(con, rt[match[ok], 2])
            api_ids = np.full(n, -1, np.int64)
            api_ids[ok] = rt[match[ok], 2]
            launch_api_codes, launch_cats = _encode(api_ids, names, normalize_launch_api)
            gtid = rt[match[ok], 1]
            tid[ok] = np.where(gtid >= 0, gtid & 0xFFFFFF, -1)
            pid[ok & ~has_pid] = np.where(gtid >= 0, (gtid >> 24) & 0xFFFFFF, -1)[~has_pid[ok]]
            launch_ns[ok] = rt[match[ok], 3]
            if (~ok).any():
                notes.append(f"{int((~ok).sum())} kernel(s) have no matching runtime launch call (launch_api empty).")
        else:
            notes.append("CUPTI_ACTIVITY_KIND_RUNTIME lacks correlationId/nameId/start: launch APIs unknown.")
    elif n:
        notes.append("no CUPTI_ACTIVITY_KIND_RUNTIME table: launch APIs, threads and launch times unknown.")

    smem = np.where(col["smem_static"] > 0, col["smem_static"], 0) + np.where(col["smem_dynamic"] > 0, col["smem_dynamic"], 0)
    smem[(col["smem_static"] < 0) & (col["smem_dynamic"] < 0)] = -1
    graph_id = np.where(col["graph_id"] > 0, col["graph_id"], -1)
    graph_node_id = np.where(col["graph_node_id"] > 0, col["graph_node_id"], -1)
    numeric = {
        "device": col["device"], "stream": col["stream"], "start_ns": col["start_ns"], "end_ns": col["end_ns"],
        "grid_x": col["grid_x"], "grid_y": col["grid_y"], "grid_z": col["grid_z"],
        "block_x": col["block_x"], "block_y": col["block_y"], "block_z": col["block_z"],
        "regs": col["regs"], "smem_bytes": smem, "corr_id": col["corr_id"],
        "graph_id": graph_id, "graph_node_id": graph_node_id,
        "is_graph": graph_mask(graph_id, graph_node_id, launch_api_codes, launch_cats),
        "pid": pid, "tid": tid, "launch_ns": launch_ns,
    }
    del raw, col
    kt = KernelTable(
        numeric,
        {"source": np.zeros(n, np.int32), "name": name_codes, "short_name": short_codes, "launch_api": launch_api_codes},
        {"source": ("nsys",), "name": name_cats, "short_name": short_cats, "launch_api": launch_cats},
    )
    if n == 0:
        notes.append("no GPU kernels: CUPTI_ACTIVITY_KIND_KERNEL is empty; the kernel table is empty.")
    elif not kt["is_graph"].any() and "CUPTI_ACTIVITY_KIND_GRAPH_TRACE" in tables:
        notes.append(
            "CUDA graphs were traced whole (CUPTI_ACTIVITY_KIND_GRAPH_TRACE present, no graph node rows): "
            "replayed kernels are missing; profile with --cuda-graph-trace=node for per-kernel analysis."
        )
    return Trace(str(p), "nsys-sqlite", kt, steps, ranges, notes, meta)


def _join_runtime(k_corr: np.ndarray, k_gpid: np.ndarray, r_corr: np.ndarray, r_gtid: np.ndarray) -> np.ndarray:
    """Index into the runtime rows for each kernel, -1 where none matches.

    Key: (globalPid, correlationId), with the runtime side's globalPid being
    globalTid & 0xFFFFFFFFFF000000. The process is mapped to a dense index so the
    pair packs into one int64 and the join is a sort + searchsorted.
    """
    mask = np.int64(-0x1000000)  # == 0x...FFFFFF000000 as a signed int64
    r_gpid = np.where(r_gtid >= 0, r_gtid & mask, -1)
    if (k_gpid < 0).all():  # no globalPid column: correlation ids alone
        k_gpid = np.zeros_like(k_gpid)
        r_gpid = np.zeros_like(r_gpid)
    procs = np.unique(np.concatenate([k_gpid, r_gpid]))
    k_key = (np.searchsorted(procs, k_gpid).astype(np.int64) << 32) | (k_corr & 0xFFFFFFFF)
    r_key = (np.searchsorted(procs, r_gpid).astype(np.int64) << 32) | (r_corr & 0xFFFFFFFF)
    order = np.argsort(r_key, kind="stable")  # first runtime row wins on duplicates
    sorted_keys = r_key[order]
    pos = np.searchsorted(sorted_keys, k_key)
    pos_c = np.minimum(pos, len(sorted_keys) - 1) if len(sorted_keys) else pos
    hit = (pos < len(sorted_keys)) & (k_corr >= 0)
    if len(sorted_keys):
        hit &= sorted_keys[pos_c] == k_key
    out = np.full(len(k_corr), -1, np.int64)
    out[hit] = order[pos_c[hit]]
    return out


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

