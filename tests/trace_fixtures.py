"""Synthetic GPU traces with the real table and field names, in both formats.

A `Scenario` is a list of kernel executions (with the CPU launch call behind
each) and CPU annotations. `write_nsys_sqlite` writes it the way
`nsys export --type sqlite` lays it out (StringIds, CUPTI_ACTIVITY_KIND_KERNEL,
CUPTI_ACTIVITY_KIND_RUNTIME, NVTX_EVENTS, ...); `write_kineto_json` writes the
same events as a PyTorch-profiler Chrome trace. Both must load to the same table.

`vllm_scenario` builds vLLM-like engine steps: 36-layer forwards of GEMM, Triton,
KV-cache write and FA2 split-KV attention with grid (1|9, nseq, heads), decode
forwards replayed from CUDA graphs (one cudaGraphLaunch, shared correlation id),
mixed forwards launched eagerly, a sampler kernel after each step and a
side-stream kernel that overlaps the main stream. Timing constants are module
level so tests can compute expected numbers by hand.
"""

from __future__ import annotations

import functools
import gzip
import json
import sqlite3
from dataclasses import dataclass, field, replace
from pathlib import Path

SHARED = Path(__file__).resolve().parents[2] / "shared"
REAL = SHARED / "data" / "h200-vllm0.26-torch-profiler"

# Kineto's baseTimeNanoseconds, and trace-relative times of realistic magnitude
# (microsecond timestamps near 5.4e12, where float64 has ~1 ns resolution).
BASE_NS = 1_790_857_026_000_000_000
T0_REL_NS = 5_379_696_866_955_351
PID = 633
TID = 633
DEVICE = 0
STREAM = 7
SIDE_STREAM = 13
HEADS = 16
VM_BITS = 1 << 56  # nsys puts a hardware/VM id above the pid in globalTid

# Demangled name -> nsys shortName, as nsys reports them.
FA2 = ("void flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4, false, false, cutlass::bfloat16_t, "
       "Flash_kernel_traits<128, 64, 128, 4, cutlass::bfloat16_t> >, false, true, false, false, true, true, false, "
       "false, false>(Flash_fwd_params)", "flash_fwd_splitkv_kernel")
GEMM_QKV = ("nvjet_sm90_tst_128x64_64x8_1x2_h_bz_splitK_TNT", "nvjet_sm90_tst_128x64_64x8_1x2_h_bz_splitK_TNT")
GEMM_O = ("void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_32x6_tn_align8>"
          "(cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_32x6_tn_align8::Params)", "Kernel2")
TRITON = ("triton_red_fused_fused_add_rms_norm_0", "triton_red_fused_fused_add_rms_norm_0")
CACHE = ("void vllm::reshape_and_cache_flash_kernel<__nv_bfloat16, __nv_bfloat16, (vllm::Fp8KVCacheDataType)0>"
         "(__nv_bfloat16 const*, __nv_bfloat16 const*, __nv_bfloat16*, __nv_bfloat16*, long const*, long, long, "
         "long, long, long, int, int, int, float const*, float const*)", "reshape_and_cache_flash_kernel")
SAMPLER = ("_gumbel_sample_kernel", "_gumbel_sample_kernel")
SIDE = ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<int>, std::array<char*, 1ul> >"
        "(int, at::native::FillFunctor<int>, std::array<char*, 1ul>)", "vectorized_elementwise_kernel")

# Per-layer kernel sequence on the compute stream: (name, duration ns); None = attention.
GAP_NS = 1_000  # idle between consecutive kernels of a forward
LAYER = ((GEMM_QKV, 20_000), (TRITON, 4_000), (CACHE, 3_000), (None, 0), (GEMM_O, 15_000), (TRITON, 4_000))
ATTN_DECODE_NS = 10_000
ATTN_MIXED_NS = 40_000
STEP_IDLE_NS = 200_000  # GPU idle between forwards (the sampler kernel sits in it)
SAMPLER_NS = 5_000
LAUNCH_LEAD_NS = 50_000  # a launch call precedes its kernel by this much
LAUNCH_DUR_NS = 3_000


@dataclass
class Kernel:
    start_ns: int
    end_ns: int
    name: str
    short: str
    corr: int
    grid: tuple[int, int, int] = (1, 1, 1)
    block: tuple[int, int, int] = (128, 1, 1)
    regs: int = 32
    smem_static: int = 0
    smem_dynamic: int = 0
    device: int = DEVICE
    stream: int = STREAM
    graph_id: int | None = None
    graph_node_id: int | None = None
    pid: int = PID
    tid: int = TID
    api: str = "cudaLaunchKernel_v7000"  # nsys spelling; Kineto writes it without the suffix
    launch_start_ns: int = 0
    launch_end_ns: int = 0


@dataclass
class Annotation:
    start_ns: int
    end_ns: int
    text: str
    pid: int = PID
    tid: int = TID
    gpu_start_ns: int | None = None  # Kineto gpu_user_annotation twin, if any
    gpu_end_ns: int | None = None


@dataclass
class Scenario:
    kernels: list[Kernel] = field(default_factory=list)
    annotations: list[Annotation] = field(default_factory=list)
    extra_runtime: list[tuple[int, int, str, int, int, int]] = field(default_factory=list)  # start, end, api, corr, pid, tid
    cpu_ops: int = 3


@dataclass(frozen=True)
class ForwardSpec:
    nseq: int
    grid_x: int = 1  # 1 = decode-only, 9 = a 513-576-token chunk
    graph: bool = True  # replayed from a CUDA graph (decode) or launched eagerly
    step: tuple[int, int, int, int] | None = None  # (N, T, M, G); None = no step annotation
    drop_layer: int | None = None  # leave out this layer's attention launch
    nseq_from_layer: tuple[int, int] | None = None  # (layer, nseq): change nseq mid-forward
    stall_after_layer: int | None = None  # a 2 ms CPU stall after this layer


def abs_ns(rel: int) -> int:
    return BASE_NS + rel


def vllm_scenario(forwards: list[ForwardSpec], *, n_layers: int = 36, side_kernel: bool = True,
                  gpu_annotations: bool = True) -> Scenario:
    """Forwards back to back on the compute stream; returns the scenario."""
    sc = Scenario()
    corr = 1000
    t = abs_ns(T0_REL_NS)
    graph_seq = 0
    for fi, fs in enumerate(forwards):
        fw_start = t
        kernels: list[Kernel] = []
        nseq = fs.nseq
        for layer in range(n_layers):
            if fs.nseq_from_layer and layer >= fs.nseq_from_layer[0]:
                nseq = fs.nseq_from_layer[1]
            for (nm, dur) in LAYER:
                if nm is None:
                    if fs.drop_layer == layer:
                        continue
                    nm = FA2
                    dur = ATTN_MIXED_NS if fs.grid_x > 1 else ATTN_DECODE_NS
                    grid = (fs.grid_x, nseq, HEADS)
                    block = (128, 1, 1)
                else:
                    grid, block = ((132, 1, 1), (384, 1, 1)) if nm in (GEMM_QKV, GEMM_O) else ((nseq, 1, 1), (256, 1, 1))
                kernels.append(Kernel(t, t + dur, nm[0], nm[1], 0, grid, block, regs=128 if nm is FA2 else 64,
                                      smem_static=1024, smem_dynamic=16384 if nm is FA2 else 0))
                t += dur + GAP_NS
            if fs.stall_after_layer == layer:
                t += 2_000_000
        fw_end = t - GAP_NS
        # Launch calls: one per kernel (eager) or one cudaGraphLaunch for all (graph).
        cpu_start = fw_start - 2 * LAUNCH_LEAD_NS
        if fs.graph:
            graph_seq += 1
            corr += 1
            lt = fw_start - LAUNCH_LEAD_NS
            for node, k in enumerate(kernels):
                k.corr, k.api = corr, "cudaGraphLaunch_v10000"
                k.graph_id, k.graph_node_id = graph_seq, 10_000 + node
                k.launch_start_ns, k.launch_end_ns = lt, lt + LAUNCH_DUR_NS
            cpu_end = lt + LAUNCH_DUR_NS + 1_000
        else:
            for k in kernels:
                corr += 1
                k.corr = corr
                k.launch_start_ns = k.start_ns - LAUNCH_LEAD_NS
                k.launch_end_ns = k.launch_start_ns + LAUNCH_DUR_NS
            cpu_end = kernels[-1].launch_end_ns + 1_000
        sc.kernels.extend(kernels)
        if fs.step is not None:
            n, tt, m, g = fs.step
            sc.annotations.append(Annotation(
                cpu_start, cpu_end, f"execute_context_{n}({tt})_generation_{m}({g})",
                gpu_start_ns=fw_start - 500 if gpu_annotations else None, gpu_end_ns=fw_end + 500 if gpu_annotations else None))
        # Sampler after the step (launched after the annotation closed), then idle.
        s0 = fw_end + (STEP_IDLE_NS - SAMPLER_NS) // 2
        corr += 1
        sc.kernels.append(Kernel(s0, s0 + SAMPLER_NS, SAMPLER[0], SAMPLER[1], corr, (1, 1, 1), (1024, 1, 1),
                                 launch_start_ns=max(cpu_end + 2_000, s0 - LAUNCH_LEAD_NS),
                                 launch_end_ns=max(cpu_end + 2_000, s0 - LAUNCH_LEAD_NS) + LAUNCH_DUR_NS))
        if side_kernel and fi == 0:
            # Overlaps the first forward's first two kernels on another stream.
            a = fw_start + 10_000
            corr += 1
            sc.kernels.append(Kernel(a, a + 30_000, SIDE[0], SIDE[1], corr, (64, 1, 1), (128, 1, 1),
                                     stream=SIDE_STREAM, api="cudaLaunchKernel_v7000",
                                     launch_start_ns=cpu_start + 1_000, launch_end_ns=cpu_start + 1_000 + LAUNCH_DUR_NS))
        t = fw_end + STEP_IDLE_NS + GAP_NS
    # Runtime calls that launch nothing (must not confuse the join).
    sc.extra_runtime.append((abs_ns(T0_REL_NS) - 900_000, abs_ns(T0_REL_NS) - 890_000, "cudaStreamSynchronize_v3020", 1, PID, TID))
    return sc


# ---------------------------------------------------------------------------
# Writers
# ---------------------------------------------------------------------------

_KERNEL_COLS_FULL = (
    "start", "end", "deviceId", "contextId", "streamId", "correlationId", "globalPid", "demangledName",
    "shortName", "mangledName", "launchType", "cacheConfig", "registersPerThread", "gridX", "gridY", "gridZ",
    "blockX", "blockY", "blockZ", "staticSharedMemory", "dynamicSharedMemory", "localMemoryPerThread",
    "localMemoryTotal", "gridId", "sharedMemoryExecuted", "graphNodeId", "sharedMemoryLimitConfig", "graphId",
)
# What an older or leaner export lacks in the "missing optional columns" variant.
OPTIONAL_DROPPED = ("shortName", "mangledName", "registersPerThread", "dynamicSharedMemory", "graphNodeId", "graphId")


def global_tid(pid: int, tid: int) -> int:
    return VM_BITS | (pid << 24) | tid


def write_nsys_sqlite(path: Path, sc: Scenario, *, drop_optional: bool = False) -> Path:
    """Write the scenario as an nsys SQLite export (real table and column names)."""
    path = Path(path)
    if path.exists():
        path.unlink()
    con = sqlite3.connect(path)
    strings: dict[str, int] = {}

    def sid(s: str) -> int:
        if s not in strings:
            strings[s] = len(strings) + 1
        return strings[s]

    kcols = [c for c in _KERNEL_COLS_FULL if not (drop_optional and c in OPTIONAL_DROPPED)]
    con.execute(f"CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL ({', '.join(c + ' INTEGER' for c in kcols)})")
    con.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER, "
                "globalTid INTEGER, correlationId INTEGER, nameId INTEGER, returnValue INTEGER, callchainId INTEGER)")
    text_col = "textId INTEGER" if drop_optional else "text TEXT"
    con.execute(f"CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, rangeId INTEGER, "
                f"category INTEGER, color INTEGER, {text_col}, globalTid INTEGER, endGlobalTid INTEGER, domainId INTEGER)")
    con.execute("CREATE TABLE TARGET_INFO_SESSION_START_TIME (utcEpochNs INTEGER, utcTime TEXT, localTime TEXT)")
    con.execute("CREATE TABLE META_DATA_EXPORT (name TEXT, value TEXT)")
    con.execute("INSERT INTO META_DATA_EXPORT VALUES ('EXPORT_SCHEMA_VERSION', '3.11.1')")
    con.execute("INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (?, '', '')", (BASE_NS,))

    krows = []
    runtime: dict[tuple[int, int], tuple] = {}
    for k in sc.kernels:
        gpid = global_tid(k.pid, 0)
        full = {
            "start": k.start_ns, "end": k.end_ns, "deviceId": k.device, "contextId": 1, "streamId": k.stream,
            "correlationId": k.corr, "globalPid": gpid, "demangledName": sid(k.name), "shortName": sid(k.short),
            "mangledName": sid("_Z" + k.short), "launchType": 0, "cacheConfig": 0, "registersPerThread": k.regs,
            "gridX": k.grid[0], "gridY": k.grid[1], "gridZ": k.grid[2], "blockX": k.block[0], "blockY": k.block[1],
            "blockZ": k.block[2], "staticSharedMemory": k.smem_static, "dynamicSharedMemory": k.smem_dynamic,
            "localMemoryPerThread": 0, "localMemoryTotal": 0, "gridId": 1, "sharedMemoryExecuted": 0,
            "graphNodeId": k.graph_node_id, "sharedMemoryLimitConfig": 0, "graphId": k.graph_id,
        }
        krows.append(tuple(full[c] for c in kcols))
        runtime.setdefault((k.pid, k.corr), (k.launch_start_ns, k.launch_end_ns, 1, global_tid(k.pid, k.tid),
                                             k.corr, sid(k.api), 0, None))
    for (s, e, api, corr, pid, tid) in sc.extra_runtime:
        runtime.setdefault((pid, corr), (s, e, 1, global_tid(pid, tid), corr, sid(api), 0, None))
    con.executemany(f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES ({','.join('?' * len(kcols))})", krows)
    # Runtime rows in CPU time order, as nsys writes them.
    con.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?,?,?,?,?,?,?,?)",
                    sorted(runtime.values(), key=lambda r: (r[0], r[4])))
    for a in sc.annotations:
        txt = sid(a.text) if drop_optional else a.text
        con.execute("INSERT INTO NVTX_EVENTS VALUES (?,?,?,?,?,?,?,?,?,?)",
                    (a.start_ns, a.end_ns, 59, None, None, None, txt, global_tid(a.pid, a.tid), None, 0))
    # A mark (no end) must not become a range.
    if sc.annotations:
        con.execute("INSERT INTO NVTX_EVENTS VALUES (?,?,?,?,?,?,?,?,?,?)",
                    (sc.annotations[0].start_ns, None, 34, None, None, None,
                     sid("a mark") if drop_optional else "a mark", global_tid(PID, TID), None, 0))
    con.execute("CREATE TABLE StringIds (id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL)")
    con.executemany("INSERT INTO StringIds VALUES (?, ?)", [(i, s) for s, i in strings.items()])
    con.commit()
    con.close()
    return path


def _us(abs_time_ns: int) -> float:
    return (abs_time_ns - BASE_NS) / 1000


def write_kineto_json(path: Path, sc: Scenario, *, gz: bool = False, graph_args: bool = True,
                      kernel_cat: str = "kernel") -> Path:
    """Write the scenario as a PyTorch-profiler (Kineto) Chrome trace."""
    ev: list[dict] = [
        {"name": "process_name", "ph": "M", "ts": 0, "pid": PID, "tid": 0, "args": {"name": "VLLM::EngineCore"}},
    ]
    for i in range(sc.cpu_ops):
        ev.append({"ph": "X", "cat": "cpu_op", "name": "aten::slice", "pid": PID, "tid": TID,
                   "ts": _us(abs_ns(T0_REL_NS) - 800_000 + i * 1000), "dur": 0.5, "args": {"External id": i}})
    seen_launch: set[tuple[int, int]] = set()
    for k in sc.kernels:
        args = {"queued": 0, "device": k.device, "context": 1, "stream": k.stream, "correlation": k.corr,
                "registers per thread": k.regs, "shared memory": k.smem_static + k.smem_dynamic,
                "blocks per SM": 0.5, "warps per SM": 2.0, "grid": list(k.grid), "block": list(k.block),
                "est. achieved occupancy %": 0}
        if graph_args and k.graph_id is not None:
            args["graph id"] = k.graph_id
            args["graph node id"] = k.graph_node_id
        ev.append({"ph": "X", "cat": kernel_cat, "name": k.name, "pid": k.device, "tid": k.stream,
                   "ts": _us(k.start_ns), "dur": (k.end_ns - k.start_ns) / 1000, "args": args})
        if (k.pid, k.corr) not in seen_launch:
            seen_launch.add((k.pid, k.corr))
            api = k.api.rsplit("_v", 1)[0]
            ev.append({"ph": "X", "cat": "cuda_driver" if api.startswith("cu") and not api.startswith("cuda") else "cuda_runtime",
                       "name": api, "pid": k.pid, "tid": k.tid, "ts": _us(k.launch_start_ns),
                       "dur": (k.launch_end_ns - k.launch_start_ns) / 1000, "args": {"cbid": 211, "correlation": k.corr}})
            ev.append({"ph": "f", "id": k.corr, "pid": k.pid, "tid": k.tid, "ts": _us(k.launch_start_ns), "cat": "ac2g",
                       "name": "ac2g", "bp": "e"})
    for (s, e, api, corr, pid, tid) in sc.extra_runtime:
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": api.rsplit("_v", 1)[0], "pid": pid, "tid": tid,
                   "ts": _us(s), "dur": (e - s) / 1000, "args": {"cbid": 1, "correlation": corr}})
    for a in sc.annotations:
        ev.append({"ph": "X", "cat": "user_annotation", "name": a.text, "pid": a.pid, "tid": a.tid,
                   "ts": _us(a.start_ns), "dur": (a.end_ns - a.start_ns) / 1000, "args": {"External id": 1}})
        if a.gpu_start_ns is not None:
            ev.append({"ph": "X", "cat": "gpu_user_annotation", "name": a.text, "pid": DEVICE, "tid": STREAM,
                       "ts": _us(a.gpu_start_ns), "dur": (a.gpu_end_ns - a.gpu_start_ns) / 1000, "args": {}})
    doc = {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "NVIDIA H200", "numSms": 132, "computeMajor": 9, "computeMinor": 0}],
        "cupti_version": 130001, "cuda_driver_version": 13000,
        "traceEvents": ev,
        "displayTimeUnit": "ms",
        "baseTimeNanoseconds": BASE_NS,
    }
    data = json.dumps(doc).encode()
    path = Path(path)
    if gz:
        path.write_bytes(gzip.compress(data))
    else:
        path.write_bytes(data)
    return path


def cpu_only_kineto(path: Path) -> Path:
    """A CPU-build trace: CPU ops and step annotations, no kernels at all."""
    sc = Scenario(cpu_ops=5)
    t = abs_ns(T0_REL_NS)
    for i in range(3):
        sc.annotations.append(Annotation(t + i * 1_000_000, t + i * 1_000_000 + 500_000,
                                         "execute_context_1(16)_generation_0(0)" if i == 0 else "execute_context_0(0)_generation_1(1)"))
    return write_kineto_json(path, sc)


def explicit(kernels: list[tuple[int, int, int]], **kw) -> Scenario:
    """A scenario of bare kernels: (stream, start_rel_ns, end_rel_ns) on top of T0."""
    sc = Scenario()
    for i, (stream, s, e) in enumerate(kernels):
        a = abs_ns(T0_REL_NS) + s
        sc.kernels.append(Kernel(a, abs_ns(T0_REL_NS) + e, GEMM_QKV[0], GEMM_QKV[1], 100 + i, stream=stream,
                                 launch_start_ns=a - 10_000, launch_end_ns=a - 9_000, **kw))
    return sc


def with_kernels(sc: Scenario, **changes) -> Scenario:
    return Scenario([replace(k, **changes) for k in sc.kernels], list(sc.annotations), list(sc.extra_runtime), sc.cpu_ops)


@functools.lru_cache(maxsize=None)
def real_trace(name: str):
    """A real H200 trace, loaded once per test session (each takes seconds to parse)."""
    from evidence.traces.load import load_trace

    return load_trace(REAL / name)
