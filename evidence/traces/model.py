"""The kernel table both trace readers produce, and the steps and ranges around it.

Two sources (readers in nsys.py and kineto.py), one table, times in int64 nanoseconds:

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

import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import numpy as np

__all__ = [
    "TraceError",
    "KernelTable",
    "Step",
    "Range",
    "Trace",
    "NUMERIC_COLUMNS",
    "NARROWED",
    "check_fits",
    "table_order",
    "reorder_in_place",
    "STRING_COLUMNS",
    "COLUMNS",
    "STEP_PATTERN",
    "parse_step_name",
    "short_kernel_name",
    "short_names",
    "normalize_launch_api",
    "graph_mask",
    "steps_from_ranges",
    "place_kernels_in_steps",
]


class TraceError(Exception):
    """A trace file that cannot be read as either supported format.

    The message is one paragraph a user can act on; the CLI prints it and exits 2.
    """


# Numeric columns and their dtypes: int16 for block dimensions (<= 1024) and
# registers (<= 255), int32 for other small values (grid, shared memory, stream
# ids, the 24-bit process and thread ids), int64 for times and the other ids; a
# row takes 105 bytes.
NUMERIC_COLUMNS: dict[str, np.dtype] = {
    "device": np.dtype(np.int32),
    "stream": np.dtype(np.int32),
    "start_ns": np.dtype(np.int64),
    "end_ns": np.dtype(np.int64),
    "grid_x": np.dtype(np.int32),
    "grid_y": np.dtype(np.int32),
    "grid_z": np.dtype(np.int32),
    "block_x": np.dtype(np.int16),
    "block_y": np.dtype(np.int16),
    "block_z": np.dtype(np.int16),
    "regs": np.dtype(np.int16),
    "smem_bytes": np.dtype(np.int32),
    "corr_id": np.dtype(np.int64),
    "graph_id": np.dtype(np.int64),
    "graph_node_id": np.dtype(np.int64),
    "is_graph": np.dtype(np.bool_),
    "pid": np.dtype(np.int32),
    "tid": np.dtype(np.int32),
    "launch_ns": np.dtype(np.int64),
}
# Columns narrower than the values a reader hands over: values that do not fit are refused, never wrapped.
NARROWED = ("stream", "smem_bytes", "pid", "tid", "block_x", "block_y", "block_z", "regs")
STRING_COLUMNS: tuple[str, ...] = ("source", "name", "short_name", "launch_api")
COLUMNS: tuple[str, ...] = (
    "source", "device", "stream", "start_ns", "end_ns", "name", "short_name",
    "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z", "regs", "smem_bytes",
    "corr_id", "graph_id", "graph_node_id", "is_graph", "launch_api", "pid", "tid", "launch_ns",
)


def check_fits(col: str, arr: np.ndarray) -> None:
    """ValueError if an integer array holds values its table column cannot (they would wrap silently)."""
    info = np.iinfo(NUMERIC_COLUMNS[col])
    if arr.dtype.itemsize > info.bits // 8 and len(arr):
        lo, hi = int(arr.min()), int(arr.max())
        if lo < info.min or hi > info.max:
            raise ValueError(f"column {col} holds values outside the {info.bits}-bit range ({lo}..{hi})")


def table_order(num: dict[str, np.ndarray]) -> np.ndarray | None:
    """The order of a kernel table's rows: by start, end, device, stream (ties keep their input order);
    None where the rows are in it already."""
    start = num["start_ns"]
    if len(start) < 2 or (start[1:] > start[:-1]).all():  # strictly increasing: in order
        return None
    order = np.lexsort((num["stream"], num["device"], num["end_ns"], start))
    return None if np.array_equal(order, np.arange(len(start))) else order


def reorder_in_place(columns: dict[str, np.ndarray], order: np.ndarray) -> None:
    """Put a dict's columns in the given row order, one at a time: the peak holds one column more
    (where the dict holds the only reference), not a second table."""
    for k in columns:
        columns[k] = columns[k][order]


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
            if arr is not None and col in NARROWED:
                check_fits(col, np.asarray(arr))
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
        order = table_order(self._num) if sort else None
        if order is not None:
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


def short_names(name_cats: Sequence[str]) -> tuple[tuple[str, ...], np.ndarray]:
    """Short names derived from demangled ones (for a source without them): their sorted distinct
    values, and each name code's short-name code."""
    short_of = [short_kernel_name(c) for c in name_cats]
    cats = tuple(sorted(set(short_of))) or ("",)
    index = {v: i for i, v in enumerate(cats)}
    return cats, np.array([index[v] for v in short_of], dtype=np.int32)


def graph_mask(graph_id: np.ndarray, node_id: np.ndarray, api_codes: np.ndarray, api_cats: Sequence[str]) -> np.ndarray:
    """is_graph for both sources: a graph id or node id is set, or the launch call was a graph launch."""
    graph_api = np.array(["GraphLaunch" in a for a in api_cats], dtype=bool)
    return (graph_id > 0) | (node_id > 0) | graph_api[api_codes]


def steps_from_ranges(ranges: Iterable[Range]) -> list[Step]:
    """The vLLM engine steps among the annotated ranges, in time order, numbered from 0."""
    steps = []
    for r in sorted(ranges, key=lambda r: (r.start_ns, r.end_ns)):
        parsed = parse_step_name(r.text)
        if parsed:
            n, t, m, g = parsed
            steps.append(Step(len(steps), r.text, r.start_ns, r.end_ns, r.pid, r.tid, n, t, m, g))
    return steps


# ---------------------------------------------------------------------------
# Kernels under steps
# ---------------------------------------------------------------------------

_PLACE_ROWS = 1 << 18


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
    per_pid = []
    for spid in sorted({s.pid for s in steps}):
        ss = [s for s in steps if s.pid == spid]
        per_pid.append((spid, np.array([s.start_ns for s in ss], np.int64), np.array([s.end_ns for s in ss], np.int64),
                        np.array([s.index for s in ss], np.int64)))
    for a in range(0, n, _PLACE_ROWS):  # a slice of kernels at a time: the temporaries stay small
        la, pa, oa = launch[a:a + _PLACE_ROWS], kpid[a:a + _PLACE_ROWS], out[a:a + _PLACE_ROWS]
        for spid, starts, ends, idx in per_pid:
            sel = (la >= 0) & ((pa == spid) | (pa < 0) | (spid < 0))
            ls = la[sel]
            j = np.searchsorted(starts, ls, side="right") - 1
            ok = (j >= 0) & (ls < ends[np.maximum(j, 0)])
            where = np.flatnonzero(sel)
            oa[where[ok]] = idx[j[ok]]
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
