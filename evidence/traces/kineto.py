"""PyTorch profiler (Kineto) Chrome-trace JSON (`.json` or `.json.gz`) -> Trace.

`ph:"X"` kernel events, launches from `cuda_runtime`/`cuda_driver` events, and the
`user_annotation` ranges vLLM puts around each engine step
(`execute_context_N(T)_generation_M(G)`), paired with their GPU-side twins.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import numpy as np

from evidence.traces.model import (
    KernelTable, Range, Step, Trace, TraceError, graph_mask, normalize_launch_api, parse_step_name, short_kernel_name,
    steps_from_ranges,
)

__all__ = ["load_kineto_json"]

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
    steps = steps_from_ranges(ranges)
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
        "is_graph": graph_mask(graph_id, graph_node_id, api_codes, api_cats),
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
