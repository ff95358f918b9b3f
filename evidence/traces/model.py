"""Load GPU kernel traces into one kernel table.

Two sources, one table, times in int64 nanoseconds:

- Nsight Systems SQLite export (`nsys export --type sqlite`): kernels from
  `CUPTI_ACTIVITY_KIND_KERNEL`, names from `StringIds`, the launching API call from
  `CUPTI_ACTIVITY_KIND_RUNTIME` (joined on correlationId within the process),
  NVTX ranges from `NVTX_EVENTS`.
- PyTorch profiler (Kineto) Chrome-trace JSON (`.json` or `.json.gz`): `ph:"X"`
  kernel events, launches from `cuda_runtime`/`cuda_driver` events, and the
  `user_annotation` ranges vLLM puts around each engine step
  (`execute_context_N(T)_generation_M(G)`).

The table is a set of numpy column arrays (no pandas): millions of rows stay cheap.
Strings (kernel names, launch API, source) are stored as int32 codes into a small
tuple of distinct values, because a trace has millions of kernels but only a few
hundred distinct names.

Column meaning, both sources:
  pid, tid     the CPU process/thread that launched the kernel (-1 if unknown);
  launch_ns    start of that launch call (-1 if unknown), used to place a kernel
               under the engine step that launched it;
  is_graph     replayed from a CUDA graph (graph id/node id set, or launched by
               cudaGraphLaunch);
  launch_api   the runtime/driver call, with nsys's `_vNNNN` suffix removed so both
               sources agree ("cudaLaunchKernel", "cudaGraphLaunch", ...).
Missing numbers are -1, missing strings "".
"""

from __future__ import annotations

import gzip
import json
import re
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

__all__ = [
    "TraceError",
    "KernelTable",
    "Step",
    "Range",
    "Trace",
    "NUMERIC_COLUMNS",
    "STRING_COLUMNS",
    "COLUMNS",
    "STEP_PATTERN",
    "load_trace",
    "load_nsys_sqlite",
    "load_kineto_json",
    "detect_format",
    "parse_step_name",
    "short_kernel_name",
    "normalize_launch_api",
    "place_kernels_in_steps",
]


class TraceError(Exception):
    """A trace file that cannot be read as either supported format.

    The message is one paragraph a user can act on; the CLI prints it and exits 2.
    """


# Numeric columns and their dtypes. int32 where values are small by nature (grid,
# block, registers), int64 for times and ids; this keeps a row near 110 bytes.
NUMERIC_COLUMNS: dict[str, np.dtype] = {
    "device": np.dtype(np.int32),
    "stream": np.dtype(np.int64),
    "start_ns": np.dtype(np.int64),
    "end_ns": np.dtype(np.int64),
    "grid_x": np.dtype(np.int32),
    "grid_y": np.dtype(np.int32),
    "grid_z": np.dtype(np.int32),
    "block_x": np.dtype(np.int32),
    "block_y": np.dtype(np.int32),
    "block_z": np.dtype(np.int32),
    "regs": np.dtype(np.int32),
    "smem_bytes": np.dtype(np.int64),
    "corr_id": np.dtype(np.int64),
    "graph_id": np.dtype(np.int64),
    "graph_node_id": np.dtype(np.int64),
    "is_graph": np.dtype(np.bool_),
    "pid": np.dtype(np.int64),
    "tid": np.dtype(np.int64),
    "launch_ns": np.dtype(np.int64),
}
STRING_COLUMNS: tuple[str, ...] = ("source", "name", "short_name", "launch_api")
COLUMNS: tuple[str, ...] = (
    "source", "device", "stream", "start_ns", "end_ns", "name", "short_name",
    "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z", "regs", "smem_bytes",
    "corr_id", "graph_id", "graph_node_id", "is_graph", "launch_api", "pid", "tid", "launch_ns",
)


class KernelTable:
    """One row per kernel execution; columns are numpy arrays of equal length.

    `table["start_ns"]` gives a numeric column; `table["name"]` decodes a string
    column to an object array (use `codes()`/`categories()` to stay vectorized).
    Rows are sorted by (start_ns, end_ns, device, stream) at construction.
    """

    def __init__(
        self,
        numeric: dict[str, np.ndarray],
        codes: dict[str, np.ndarray],
        categories: dict[str, Sequence[str]],
        *,
        sort: bool = True,
    ) -> None:
        n = len(numeric["start_ns"]) if "start_ns" in numeric else 0
        self._num: dict[str, np.ndarray] = {}
        for col, dt in NUMERIC_COLUMNS.items():
            arr = numeric.get(col)
            self._num[col] = np.full(n, -1, dtype=dt) if arr is None else np.asarray(arr).astype(dt, copy=False)
            if col == "is_graph" and arr is None:
                self._num[col] = np.zeros(n, dtype=np.bool_)
        self._codes: dict[str, np.ndarray] = {}
        self._cats: dict[str, tuple[str, ...]] = {}
        for col in STRING_COLUMNS:
            cats = tuple(categories.get(col, ()))
            c = codes.get(col)
            if c is None:
                cats = cats or ("",)
                c = np.zeros(n, dtype=np.int32)
            self._codes[col] = np.asarray(c).astype(np.int32, copy=False)
            self._cats[col] = cats
        for col, arr in list(self._num.items()) + list(self._codes.items()):
            if len(arr) != n:
                raise ValueError(f"column {col} has {len(arr)} rows, expected {n}")
        self._decoded: dict[str, np.ndarray] = {}
        start = self._num["start_ns"]
        if sort and n > 1 and not (start[1:] > start[:-1]).all():  # strictly increasing: already in order
            order = np.lexsort((self._num["stream"], self._num["device"], self._num["end_ns"], start))
            if not np.array_equal(order, np.arange(n)):
                self._num = {k: v[order] for k, v in self._num.items()}
                self._codes = {k: v[order] for k, v in self._codes.items()}

    # -- access -------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._num["start_ns"])

    @property
    def columns(self) -> tuple[str, ...]:
        return COLUMNS

    def __getitem__(self, col: str) -> np.ndarray:
        if col in self._num:
            return self._num[col]
        if col in self._codes:
            if col not in self._decoded:
                values = np.empty(len(self._cats[col]), dtype=object)
                values[:] = self._cats[col]
                self._decoded[col] = values[self._codes[col]]
            return self._decoded[col]
        raise KeyError(f"no column {col!r}; columns are {', '.join(COLUMNS)}")

    def codes(self, col: str) -> np.ndarray:
        return self._codes[col]

    def categories(self, col: str) -> tuple[str, ...]:
        return self._cats[col]

    @property
    def duration_ns(self) -> np.ndarray:
        return self._num["end_ns"] - self._num["start_ns"]

    def filter(self, mask: np.ndarray) -> "KernelTable":
        """Rows where mask is true (or the given indices), in table order."""
        num = {k: v[mask] for k, v in self._num.items()}
        codes = {k: v[mask] for k, v in self._codes.items()}
        return KernelTable(num, codes, self._cats, sort=False)

    def row(self, i: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for col in COLUMNS:
            if col in self._num:
                v = self._num[col][i]
                out[col] = bool(v) if col == "is_graph" else int(v)
            else:
                out[col] = self._cats[col][self._codes[col][i]]
        return out

    def rows(self) -> list[dict[str, Any]]:
        return [self.row(i) for i in range(len(self))]

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self._num.values()) + sum(a.nbytes for a in self._codes.values())

    @classmethod
    def empty(cls, source: str = "") -> "KernelTable":
        return cls({"start_ns": np.zeros(0, np.int64)}, {"source": np.zeros(0, np.int32)}, {"source": (source,)})


@dataclass(frozen=True)
class Range:
    """A CPU-side annotated range: an NVTX range (nsys) or a user_annotation (Kineto)."""

    start_ns: int
    end_ns: int
    text: str
    pid: int
    tid: int
    kind: str  # "nvtx" | "user_annotation"
    domain: int = -1


@dataclass(frozen=True)
class Step:
    """One vLLM engine step, parsed from `execute_context_N(T)_generation_M(G)`.

    N requests in prefill with T prompt tokens, M requests in decode with G tokens.
    start/end are the CPU range; gpu_start/gpu_end the matching GPU-side annotation
    (Kineto `gpu_user_annotation`) when the trace has one, else None.
    """

    index: int
    name: str
    start_ns: int
    end_ns: int
    pid: int
    tid: int
    n_prefill: int
    prefill_tokens: int
    n_decode: int
    decode_tokens: int
    gpu_start_ns: int | None = None
    gpu_end_ns: int | None = None

    @property
    def tokens(self) -> int:
        return self.prefill_tokens + self.decode_tokens

    @property
    def has_prefill(self) -> bool:
        return self.n_prefill > 0


@dataclass
class Trace:
    path: str
    format: str  # "nsys-sqlite" | "kineto-json"
    kernels: KernelTable
    steps: list[Step] = field(default_factory=list)
    ranges: list[Range] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)


STEP_PATTERN = re.compile(r"execute_context_(\d+)\((\d+)\)_generation_(\d+)\((\d+)\)")


def parse_step_name(text: str) -> tuple[int, int, int, int] | None:
    """(N, T, M, G) from a vLLM step annotation, or None if the text is not one."""
    m = STEP_PATTERN.search(text)
    return tuple(int(g) for g in m.groups()) if m else None  # type: ignore[return-value]


_API_SUFFIX = re.compile(r"_v\d+$")


def normalize_launch_api(name: str) -> str:
    """Drop nsys's API version suffix: "cudaLaunchKernel_v7000" -> "cudaLaunchKernel"."""
    return _API_SUFFIX.sub("", name)


def short_kernel_name(demangled: str) -> str:
    """The bare function name of a demangled kernel, as nsys's shortName gives it.

    "void cutlass::device_kernel<flash::X<...>>(P)" -> "device_kernel";
    "triton_poi_fused_3" -> itself. Template arguments and parameter lists are
    removed by bracket depth (they nest and contain "::"), then the return type
    and the namespace qualifiers.
    """
    s = demangled.strip()
    buf: list[str] = []
    depth = 0
    for ch in s:
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth = max(depth - 1, 0)
        elif depth == 0:
            buf.append(ch)
    top = "".join(buf).strip()
    if not top:
        return s
    top = top.split()[-1]  # drop the return type ("void")
    name = top.split("::")[-1]
    return name or s


# ---------------------------------------------------------------------------
# Format detection
# ---------------------------------------------------------------------------

_SQLITE_MAGIC = b"SQLite format 3\x00"


def detect_format(path: Path) -> str:
    """'nsys-sqlite' or 'kineto-json', from the file's first bytes (not its name)."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)
    except OSError as e:
        raise TraceError(f"Cannot read trace file {path}: {e.strerror or e}.") from None
    if head.startswith(_SQLITE_MAGIC):
        return "nsys-sqlite"
    if head[:2] == b"\x1f\x8b":
        try:
            with gzip.open(path, "rb") as f:
                head = f.read(64)
        except (OSError, EOFError) as e:
            raise TraceError(f"{path} starts like a gzip file but cannot be decompressed ({e}); is it truncated?") from None
    if head.lstrip()[:1] in (b"{", b"["):
        return "kineto-json"
    raise TraceError(
        f"{path} is neither an Nsight Systems SQLite export nor a PyTorch profiler (Kineto) "
        "Chrome-trace JSON (.json or .json.gz): its first bytes match neither. For nsys, export "
        "the report with `nsys export --type sqlite`; for the PyTorch profiler, pass the "
        "`*.pt.trace.json[.gz]` file it wrote."
    )


def load_trace(path: str | Path) -> Trace:
    """Load a trace, detecting its format by content. Raises TraceError on bad input."""
    p = Path(path)
    if not p.exists():
        raise TraceError(f"Trace file {p} does not exist.")
    if p.is_dir():
        raise TraceError(f"{p} is a folder; pass one trace file (an nsys .sqlite export or a Kineto .json/.json.gz).")
    fmt = detect_format(p)
    return load_nsys_sqlite(p) if fmt == "nsys-sqlite" else load_kineto_json(p)


# ---------------------------------------------------------------------------
# Nsight Systems SQLite
# ---------------------------------------------------------------------------

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
    steps = _steps_from_ranges(ranges)

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
        "is_graph": _is_graph(graph_id, graph_node_id, launch_api_codes, launch_cats),
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


def _is_graph(graph_id: np.ndarray, node_id: np.ndarray, api_codes: np.ndarray, api_cats: Sequence[str]) -> np.ndarray:
    graph_api = np.array(["GraphLaunch" in a for a in api_cats], dtype=bool)
    return (graph_id > 0) | (node_id > 0) | graph_api[api_codes]


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


def _steps_from_ranges(ranges: Iterable[Range]) -> list[Step]:
    steps = []
    for r in sorted(ranges, key=lambda r: (r.start_ns, r.end_ns)):
        parsed = parse_step_name(r.text)
        if parsed:
            n, t, m, g = parsed
            steps.append(Step(len(steps), r.text, r.start_ns, r.end_ns, r.pid, r.tid, n, t, m, g))
    return steps


# ---------------------------------------------------------------------------
# Kineto Chrome-trace JSON
# ---------------------------------------------------------------------------

_KERNEL_CATS = ("kernel", "Kernel")
_LAUNCH_CATS = ("cuda_runtime", "cuda_driver", "Runtime", "Driver")


def _us_to_ns(ts: np.ndarray) -> np.ndarray:
    """Microsecond floats (3 decimals) to exact integer nanoseconds.

    ts*1000 in float64 loses the last nanosecond once ts is ~5e12 us (Kineto's
    monotonic clock after a few weeks of uptime). Splitting off the integer part
    keeps the fraction exact enough to round to the written decimals.
    """
    whole = np.floor(ts)
    return whole.astype(np.int64) * 1000 + np.rint((ts - whole) * 1000).astype(np.int64)


def load_kineto_json(path: str | Path) -> Trace:
    """Load a PyTorch profiler (Kineto) Chrome trace (.json or .json.gz)."""
    p = Path(path)
    try:
        with open(p, "rb") as f:
            gz = f.read(2) == b"\x1f\x8b"
        opener = gzip.open if gz else open
        with opener(p, "rt", encoding="utf-8") as f:  # type: ignore[operator]
            doc = json.load(f)
    except (OSError, EOFError) as e:
        raise TraceError(f"Cannot read {p} ({e}); is the file truncated or not gzip despite its name?") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise TraceError(
            f"{p} is not valid JSON ({e}). A PyTorch profiler trace is one JSON object with a "
            "'traceEvents' list; a partially written trace (profiler stopped mid-write) cannot be read."
        ) from None
    if isinstance(doc, list):
        doc = {"traceEvents": doc}
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise TraceError(f"{p} is JSON but has no 'traceEvents' list, so it is not a Chrome trace from the PyTorch profiler.")
    return _kineto_from_doc(doc, str(p))


def _kineto_from_doc(doc: dict[str, Any], path: str) -> Trace:
    events = doc["traceEvents"]
    notes: list[str] = []
    base = doc.get("baseTimeNanoseconds")
    if base is None:
        base = 0
        notes.append("no baseTimeNanoseconds: times are the trace's own microsecond clock, in ns.")
    base = int(base)
    meta: dict[str, Any] = {"format": "kineto-json", "base_time_ns": base}
    for k in ("schemaVersion", "cuda_driver_version", "cuda_runtime_version", "cupti_version", "deviceProperties"):
        if k in doc:
            meta[k] = doc[k]

    kernels: list[dict] = []
    launches: dict[int, dict] = {}
    annotations: list[dict] = []
    gpu_annotations: list[dict] = []
    n_cpu_ops = 0
    for e in events:
        if not isinstance(e, dict) or e.get("ph") != "X":
            continue
        cat = e.get("cat")
        if cat in _KERNEL_CATS:
            kernels.append(e)
        elif cat in _LAUNCH_CATS:
            c = (e.get("args") or {}).get("correlation")
            if c is not None:
                launches.setdefault(int(c), e)  # first launch call with this id wins
        elif cat == "user_annotation":
            annotations.append(e)
        elif cat == "gpu_user_annotation":
            gpu_annotations.append(e)
        elif cat == "cpu_op":
            n_cpu_ops += 1

    try:
        kt = _kineto_kernel_table(kernels, launches, base)
    except (TypeError, ValueError, KeyError) as e:
        raise TraceError(f"{path}: a kernel event is malformed ({e}); expected ts/dur numbers and args as Kineto writes them.") from None
    if len(kt) == 0:
        notes.append(
            f"no GPU kernels: the trace has {n_cpu_ops} CPU op(s) and no kernel events "
            "(a CPU-only build such as vLLM's CPU backend, or CUDA activity not recorded); "
            "the kernel table is empty."
        )

    ranges = []
    for e in annotations:
        s = base + int(_us_to_ns(np.array([float(e["ts"])]))[0])
        ranges.append(Range(s, s + int(round(float(e.get("dur", 0)) * 1000)), str(e.get("name", "")),
                            _int(e.get("pid")), _int(e.get("tid")), "user_annotation"))
    ranges.sort(key=lambda r: (r.start_ns, r.end_ns, r.text))
    steps = _steps_from_ranges(ranges)
    steps = _attach_gpu_spans(steps, gpu_annotations, base, notes)
    return Trace(path, "kineto-json", kt, steps, ranges, notes, meta)


def _int(v: Any, default: int = -1) -> int:
    try:
        return int(v)
    except (TypeError, ValueError):
        return default


def _kineto_kernel_table(kernels: list[dict], launches: dict[int, dict], base: int) -> KernelTable:
    n = len(kernels)
    if n == 0:
        return KernelTable.empty("kineto")
    ts = np.fromiter((float(e["ts"]) for e in kernels), dtype=np.float64, count=n)
    dur = np.fromiter((float(e.get("dur", 0)) for e in kernels), dtype=np.float64, count=n)
    start = base + _us_to_ns(ts)
    end = start + np.rint(dur * 1000).astype(np.int64)

    ints = np.full((n, 15), -1, dtype=np.int64)
    names: list[str] = []
    apis: list[str] = []
    for i, e in enumerate(kernels):
        a = e.get("args") or {}
        names.append(str(e.get("name", "")))
        grid = a.get("grid") or (-1, -1, -1)
        block = a.get("block") or (-1, -1, -1)
        corr = _int(a.get("correlation"))
        row = ints[i]
        row[0] = _int(a.get("device", e.get("pid")))
        row[1] = _int(a.get("stream", e.get("tid")))
        row[2:5] = grid[:3]
        row[5:8] = block[:3]
        row[8] = _int(a.get("registers per thread"))
        row[9] = _int(a.get("shared memory"))
        row[10] = corr
        row[11] = _int(a.get("graph id"))
        row[12] = _int(a.get("graph node id"))
        launch = launches.get(corr) if corr >= 0 else None
        if launch is not None:
            row[13] = _int(launch.get("pid"))
            row[14] = _int(launch.get("tid"))
            apis.append(str(launch.get("name", "")))
        else:
            apis.append("")
    launch_ns = np.full(n, -1, np.int64)
    have_launch = np.array([a != "" for a in apis])
    if have_launch.any():
        lts = np.array([float(launches[int(c)]["ts"]) for c in ints[have_launch, 10]], dtype=np.float64)
        launch_ns[have_launch] = base + _us_to_ns(lts)

    name_cats = tuple(sorted(set(names)))
    name_idx = {v: i for i, v in enumerate(name_cats)}
    name_codes = np.fromiter((name_idx[s] for s in names), dtype=np.int32, count=n)
    short_of = [short_kernel_name(s) for s in name_cats]
    short_cats = tuple(sorted(set(short_of)))
    sidx = {v: i for i, v in enumerate(short_cats)}
    short_codes = np.array([sidx[s] for s in short_of], dtype=np.int32)[name_codes]
    apis = [normalize_launch_api(a) for a in apis]
    api_cats = tuple(sorted(set(apis)))
    aidx = {v: i for i, v in enumerate(api_cats)}
    api_codes = np.fromiter((aidx[a] for a in apis), dtype=np.int32, count=n)

    graph_id = np.where(ints[:, 11] > 0, ints[:, 11], -1)
    graph_node_id = np.where(ints[:, 12] > 0, ints[:, 12], -1)
    numeric = {
        "device": ints[:, 0], "stream": ints[:, 1], "start_ns": start, "end_ns": end,
        "grid_x": ints[:, 2], "grid_y": ints[:, 3], "grid_z": ints[:, 4],
        "block_x": ints[:, 5], "block_y": ints[:, 6], "block_z": ints[:, 7],
        "regs": ints[:, 8], "smem_bytes": ints[:, 9], "corr_id": ints[:, 10],
        "graph_id": graph_id, "graph_node_id": graph_node_id,
        "is_graph": _is_graph(graph_id, graph_node_id, api_codes, api_cats),
        "pid": ints[:, 13], "tid": ints[:, 14], "launch_ns": launch_ns,
    }
    return KernelTable(
        numeric,
        {"source": np.zeros(n, np.int32), "name": name_codes, "short_name": short_codes, "launch_api": api_codes},
        {"source": ("kineto",), "name": name_cats, "short_name": short_cats, "launch_api": api_cats},
    )


def _attach_gpu_spans(steps: list[Step], gpu_annotations: list[dict], base: int, notes: list[str]) -> list[Step]:
    """Pair each CPU step annotation with its GPU-side twin, in order, when names agree."""
    if not steps or not gpu_annotations:
        return steps
    g = sorted(
        ((base + int(_us_to_ns(np.array([float(e["ts"])]))[0]), float(e.get("dur", 0)), str(e.get("name", "")))
         for e in gpu_annotations if parse_step_name(str(e.get("name", "")))),
    )
    if len(g) != len(steps) or any(gn != s.name for (_, _, gn), s in zip(g, steps)):
        notes.append(
            f"GPU-side step annotations ({len(g)}) do not pair one-to-one with the CPU step annotations "
            f"({len(steps)}); steps carry CPU times only."
        )
        return steps
    out = []
    for (gs, gd, _), s in zip(g, steps):
        out.append(Step(s.index, s.name, s.start_ns, s.end_ns, s.pid, s.tid, s.n_prefill, s.prefill_tokens,
                        s.n_decode, s.decode_tokens, gs, gs + int(round(gd * 1000))))
    return out


# ---------------------------------------------------------------------------
# Kernels under steps
# ---------------------------------------------------------------------------

def place_kernels_in_steps(kernels: KernelTable, steps: Sequence[Step]) -> np.ndarray:
    """Step index for each kernel (-1 if none), by where its launch call falls.

    A kernel belongs to the step whose CPU range contains its launch (same process
    when both are known): graph replays, asynchrony and queueing make the kernel's
    own GPU time a poor guide. Kernels with no launch time fall back to the step's
    GPU-side span when the trace has one.
    """
    n = len(kernels)
    out = np.full(n, -1, np.int64)
    if not steps or n == 0:
        return out
    launch = kernels["launch_ns"]
    kpid = kernels["pid"]
    step_pids = sorted({s.pid for s in steps})
    for spid in step_pids:
        ss = [s for s in steps if s.pid == spid]
        starts = np.array([s.start_ns for s in ss], np.int64)
        ends = np.array([s.end_ns for s in ss], np.int64)
        idx = np.array([s.index for s in ss], np.int64)
        sel = (launch >= 0) & ((kpid == spid) | (kpid < 0) | (spid < 0))
        j = np.searchsorted(starts, launch[sel], side="right") - 1
        ok = (j >= 0) & (launch[sel] < ends[np.maximum(j, 0)])
        where = np.flatnonzero(sel)
        out[where[ok]] = idx[j[ok]]
    # GPU-span fallback for kernels without a launch record.
    spans = [(s.gpu_start_ns, s.gpu_end_ns, s.index) for s in steps if s.gpu_start_ns is not None]
    rest = np.flatnonzero((out < 0) & (launch < 0))
    if spans and len(rest):
        spans.sort()
        gs = np.array([a for a, _, _ in spans], np.int64)
        ge = np.array([b for _, b, _ in spans], np.int64)
        gi = np.array([i for _, _, i in spans], np.int64)
        st = kernels["start_ns"][rest]
        j = np.searchsorted(gs, st, side="right") - 1
        ok = (j >= 0) & (st < ge[np.maximum(j, 0)])
        out[rest[ok]] = gi[j[ok]]
    return out
