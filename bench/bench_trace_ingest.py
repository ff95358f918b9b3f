"""Benchmark: ingest + analyze synthetic Nsight Systems SQLite exports of growing size.

For each size it writes a vLLM-like nsys export (real table and column names:
StringIds, CUPTI_ACTIVITY_KIND_KERNEL, CUPTI_ACTIVITY_KIND_RUNTIME, NVTX_EVENTS),
then, in a fresh child process so peak memory is that size's alone, loads it with
evidence.traces.load.load_trace and runs evidence.traces.analyses.analyze_trace
(36 layers, budget 2048); in another fresh process, alternately, it reads the same
kernel columns bare with connectorx into one Arrow table, the baseline. Reported:
wall and CPU time of each, their ratio, rows/s, and peak RSS per kernel row above
the post-import baseline (resource.getrusage).

    python bench/bench_trace_ingest.py                  # 0.5M, 1M, 2M, 4M rows
    python bench/bench_trace_ingest.py --sizes 500000 1000000 --out bench/RESULTS-trace.md

The generated workload: engine steps of one 36-layer forward (GEMM, Triton, KV
write, FA2 split-KV attention, GEMM, Triton per layer) plus a sampler kernel;
four of five steps replay a CUDA graph (one cudaGraphLaunch for 216 kernels),
every fifth runs eagerly (one launch call per kernel), as vLLM does for decode vs
mixed batches. Each step is an NVTX range named like vLLM's step annotation.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
N_LAYERS = 36
PER_LAYER = 6
PER_STEP = N_LAYERS * PER_LAYER + 1  # + sampler
VM = 1 << 56
PID, TID = 633, 633
GPID = VM | (PID << 24)
GTID = GPID | TID

NAMES = [  # demangled, short
    ("nvjet_sm90_tst_128x64_64x8_1x2_h_bz_splitK_TNT", "nvjet_sm90_tst_128x64_64x8_1x2_h_bz_splitK_TNT"),
    ("triton_red_fused_fused_add_rms_norm_0", "triton_red_fused_fused_add_rms_norm_0"),
    ("void vllm::reshape_and_cache_flash_kernel<__nv_bfloat16, __nv_bfloat16, (vllm::Fp8KVCacheDataType)0>"
     "(__nv_bfloat16 const*, __nv_bfloat16 const*, __nv_bfloat16*, __nv_bfloat16*, long const*, long, long, long, long, "
     "long, int, int, int, float const*, float const*)", "reshape_and_cache_flash_kernel"),
    ("void flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4, false, false, cutlass::bfloat16_t, "
     "Flash_kernel_traits<128, 64, 128, 4, cutlass::bfloat16_t> >, false, true, false, false, true, true, false, false, "
     "false>(Flash_fwd_params)", "flash_fwd_splitkv_kernel"),
    ("void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_32x6_tn_align8>"
     "(cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_32x6_tn_align8::Params)", "Kernel2"),
    ("triton_poi_fused_mul_silu_slice_1", "triton_poi_fused_mul_silu_slice_1"),
    ("_gumbel_sample_kernel", "_gumbel_sample_kernel"),
]
API = {"cudaLaunchKernel_v7000": 100, "cudaGraphLaunch_v10000": 101}
DUR = np.array([20_000, 4_000, 3_000, 0, 15_000, 4_000], np.int64)  # attention filled per step
GAP = 1_000
STEP_IDLE = 200_000

KCOLS = ("start", "end", "deviceId", "contextId", "streamId", "correlationId", "globalPid", "demangledName",
         "shortName", "mangledName", "launchType", "cacheConfig", "registersPerThread", "gridX", "gridY", "gridZ",
         "blockX", "blockY", "blockZ", "staticSharedMemory", "dynamicSharedMemory", "localMemoryPerThread",
         "localMemoryTotal", "gridId", "sharedMemoryExecuted", "graphNodeId", "sharedMemoryLimitConfig", "graphId")


def _step_template(mixed: bool, nseq: int) -> dict[str, np.ndarray]:
    """Offsets, durations and per-kernel fields of one step (216 kernels + sampler)."""
    d = DUR.copy()
    d[3] = 40_000 if mixed else 10_000
    durs = np.append(np.tile(d, N_LAYERS), 5_000)
    starts = np.zeros(PER_STEP, np.int64)
    starts[1:-1] = np.cumsum(durs[:-2] + GAP)
    starts[-1] = starts[-2] + durs[-2] + STEP_IDLE // 2
    name = np.append(np.tile(np.arange(6), N_LAYERS), 6)
    gx = np.where(name == 3, 9 if mixed else 1, np.where(np.isin(name, (0, 4)), 132, nseq))
    gy = np.where(name == 3, nseq, 1)
    gz = np.where(name == 3, 16, 1)
    return {"start": starts, "dur": durs, "name": name, "gx": gx, "gy": gy, "gz": gz,
            "span": starts[-1] + 5_000 + STEP_IDLE // 2}


def generate(path: Path, n_rows: int, chunk_steps: int = 400) -> dict:
    """Write an nsys-like SQLite export with about n_rows kernels, in chunks."""
    if path.exists():
        path.unlink()
    con = sqlite3.connect(path)
    con.execute("PRAGMA journal_mode=OFF")
    con.execute("PRAGMA synchronous=OFF")
    con.execute(f"CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL ({', '.join(c + ' INTEGER' for c in KCOLS)})")
    con.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER, "
                "globalTid INTEGER, correlationId INTEGER, nameId INTEGER, returnValue INTEGER, callchainId INTEGER)")
    con.execute("CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, rangeId INTEGER, "
                "category INTEGER, color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER, domainId INTEGER)")
    con.execute("CREATE TABLE StringIds (id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL)")
    strings = [(i + 1, s) for i, (s, _) in enumerate(NAMES)] + [(i + 1 + len(NAMES), s) for i, (_, s) in enumerate(NAMES)]
    strings += [(v, k) for k, v in API.items()]
    con.executemany("INSERT INTO StringIds VALUES (?, ?)", strings)

    n_steps = -(-n_rows // PER_STEP)
    templates = {(m, s): _step_template(m, s) for m in (False, True) for s in (96, 128)}
    t = 5_379_696_866_955_351
    corr = 1
    rows_written = 0
    for c0 in range(0, n_steps, chunk_steps):
        kparts, rparts, nvtx = [], [], []
        for si in range(c0, min(c0 + chunk_steps, n_steps)):
            mixed = si % 5 == 0
            tpl = templates[(mixed, 128 if si % 3 else 96)]
            n = PER_STEP if rows_written + PER_STEP <= n_rows else n_rows - rows_written
            start = t + tpl["start"][:n]
            end = start + tpl["dur"][:n]
            fwd = min(n, PER_STEP - 1)
            corrs = np.empty(n, np.int64)
            graph_id = np.full(n, -1, np.int64)
            node_id = np.full(n, -1, np.int64)
            launch_start = np.empty(n, np.int64)
            if mixed:  # eager: one launch call per kernel, 50 us ahead of it
                corrs[:fwd] = corr + np.arange(fwd)
                launch_start[:fwd] = start[:fwd] - 50_000
                corr += fwd
            else:  # graph replay: one cudaGraphLaunch for the whole forward
                corrs[:fwd] = corr
                launch_start[:fwd] = start[0] - 50_000
                graph_id[:fwd] = 1 + si % 4
                node_id[:fwd] = np.arange(fwd) + 1
                corr += 1
            if n > fwd:  # sampler, launched after the step range
                corrs[fwd] = corr
                launch_start[fwd] = start[fwd] - 50_000
                corr += 1
            # Runtime rows: one per distinct correlation id.
            uc, first = np.unique(corrs, return_index=True)
            r_api = np.full(len(uc), API["cudaLaunchKernel_v7000"], np.int64)
            if not mixed:
                r_api[uc == corrs[0]] = API["cudaGraphLaunch_v10000"]
            rparts.append(np.stack([launch_start[first], launch_start[first] + 3_000, np.ones(len(uc), np.int64),
                                    np.full(len(uc), GTID), uc, r_api], axis=1))
            name = tpl["name"][:n]
            cols = np.stack([
                start, end, np.zeros(n, np.int64), np.ones(n, np.int64), np.full(n, 7), corrs, np.full(n, GPID),
                name + 1, name + 1 + len(NAMES), name + 1, np.zeros(n, np.int64), np.zeros(n, np.int64),
                np.where(name == 3, 128, 64), tpl["gx"][:n], tpl["gy"][:n], tpl["gz"][:n],
                np.full(n, 128), np.ones(n, np.int64), np.ones(n, np.int64), np.full(n, 1024),
                np.where(name == 3, 16384, 0), np.zeros(n, np.int64), np.zeros(n, np.int64), np.ones(n, np.int64),
                np.zeros(n, np.int64), node_id, np.zeros(n, np.int64), graph_id,
            ], axis=1)
            kparts.append(cols)
            n_dec = 128 if si % 3 else 96
            label = f"execute_context_2(2040)_generation_{n_dec - 2}({n_dec - 2})" if mixed else \
                f"execute_context_0(0)_generation_{n_dec}({n_dec})"
            s_cpu = start[0] - 100_000
            e_cpu = (launch_start[fwd - 1] if mixed else start[0] - 50_000) + 4_000
            nvtx.append((int(s_cpu), int(e_cpu), 59, None, None, None, label, GTID, None, 0))
            rows_written += n
            t += tpl["span"]
        k = np.concatenate(kparts)
        kl = k.tolist()
        # NULL graph ids for eager kernels, as nsys writes them.
        gi_node, gi_graph = KCOLS.index("graphNodeId"), KCOLS.index("graphId")
        for row in kl:
            if row[gi_graph] < 0:
                row[gi_graph] = None
                row[gi_node] = None
        con.executemany(f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES ({','.join('?' * len(KCOLS))})", kl)
        r = np.concatenate(rparts).tolist()
        con.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?,?,?,?,?,?,0,NULL)", r)
        con.executemany("INSERT INTO NVTX_EVENTS VALUES (?,?,?,?,?,?,?,?,?,?)", nvtx)
    con.commit()
    n_rt = con.execute("SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()[0]
    con.close()
    return {"kernels": rows_written, "runtime_rows": n_rt, "steps": n_steps, "bytes": path.stat().st_size}


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


# The kernel-table columns the reader fetches, read bare into one Arrow table: the baseline.
BARE_COLUMNS = ("start", "end", "deviceId", "streamId", "correlationId", "globalPid", "gridX", "gridY", "gridZ",
                "blockX", "blockY", "blockZ", "registersPerThread", "staticSharedMemory", "dynamicSharedMemory",
                "graphId", "graphNodeId", "demangledName", "shortName", "mangledName")


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _machine_busy_s() -> float:
    """CPU-seconds all processes of the host have used (/proc/stat; NaN where there is none)."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:9]]
    except (OSError, ValueError):
        return float("nan")
    return (sum(v) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")  # all but idle and iowait


def _others(busy0: float, cpu_s: float, wall_s: float) -> float:
    """Cores that other processes kept busy while a measurement ran: the host's busy time minus ours."""
    return max(_machine_busy_s() - busy0 - cpu_s, 0.0) / wall_s


def measure_one(path: Path) -> dict:
    """In this (fresh) process: ingest and analyze, with timings and peak RSS."""
    sys.path.insert(0, str(ROOT))
    import connectorx  # noqa: F401  the reader's libraries count as imports, as evidence's own do
    import pyarrow  # noqa: F401

    from evidence.traces.analyses import analyze_trace
    from evidence.traces.load import load_trace

    base_rss = _rss_mb()
    load0 = os.getloadavg()[0]
    b0, c0, t0 = _machine_busy_s(), _cpu(), time.perf_counter()
    tr = load_trace(path)
    c1, t1 = _cpu(), time.perf_counter()
    others = _others(b0, c1 - c0, t1 - t0)
    after_load_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    res = analyze_trace(tr, n_layers=N_LAYERS, budget=2048)
    c2, t2 = _cpu(), time.perf_counter()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    fw = res["forwards"]
    return {
        "rows": len(tr.kernels), "ingest_s": t1 - t0, "analyze_s": t2 - t1, "ingest_cpu_s": c1 - c0,
        "analyze_cpu_s": c2 - c1, "loadavg": max(load0, os.getloadavg()[0]), "others_cores": others,
        "table_mb": tr.kernels.nbytes / 2**20,
        "base_rss_mb": base_rss, "peak_rss_mb": peak, "peak_after_load_mb": after_load_peak,
        "forwards": len(fw["forwards"]), "rejected": len(fw["rejected"]), "steps": res["steps"]["steps"],
        "kernel_active": res["kernel_active"]["fraction"],
    }


def measure_breakdown(path: Path) -> dict:
    """In this (fresh) process: the ingest on one thread, its time split by phase (wall seconds; with
    one thread and a quiet host, about CPU seconds). It instruments the reader's internals: a
    benchmark's view, not an interface."""
    sys.path.insert(0, str(ROOT))
    import connectorx  # noqa: F401
    import pyarrow  # noqa: F401

    from evidence.traces import nsys
    from evidence.traces.load import load_trace

    nsys._WORKERS = 1
    acc: dict[str, float] = {}

    def timed(name: str, fn):
        def wrapper(*a, **k):
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                acc[name] = acc.get(name, 0.0) + time.perf_counter() - t0
        return wrapper

    read = nsys._Reader.read
    nsys._Reader.read = lambda self, sql: timed(
        "kernel slices: connectorx reads and Arrow buffers to numpy" if "_KIND_KERNEL" in sql.split("FROM")[-1]
        else "runtime table: connectorx reads", read)(self, sql)
    nsys._Launches = timed("runtime table: the join's index", nsys._Launches)
    nsys._load_nvtx = timed("NVTX ranges and steps (sqlite3, Python objects)", nsys._load_nvtx)
    nsys.steps_from_ranges = timed("NVTX ranges and steps (sqlite3, Python objects)", nsys.steps_from_ranges)
    nsys._recode = timed("string ids to codes", nsys._recode)
    b0, c0, t0 = _machine_busy_s(), _cpu(), time.perf_counter()
    load_trace(path)
    c1, t1 = _cpu(), time.perf_counter()
    others = _others(b0, c1 - c0, t1 - t0)
    acc["the rest: per-slice numpy (copies into the final dtypes, checks, the join's gathers), row count, queries"] = (
        t1 - t0 - sum(acc.values()))
    return {"one_thread_s": t1 - t0, "one_thread_cpu_s": c1 - c0, "phases_s": acc, "others_cores": others}


def measure_bare(path: Path, threads: int = 1) -> dict:
    """In this (fresh) process: the bare connectorx read of the same kernel columns into one Arrow table.
    threads=2: connectorx's own partitioned read (two rowid ranges on two threads of its own), which
    needs the rowid among the columns; the range is found outside the timing, as the ingest finds its."""
    import connectorx
    import pyarrow  # noqa: F401

    sql = f"SELECT {', '.join(chr(34) + c + chr(34) for c in BARE_COLUMNS)} FROM CUPTI_ACTIVITY_KIND_KERNEL"
    kw: dict = {}
    if threads > 1:
        sql = sql.replace("SELECT ", "SELECT rowid AS rid, ", 1)
        with sqlite3.connect(path) as con:
            lo = con.execute("SELECT MIN(rowid) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
            hi = con.execute("SELECT MAX(rowid) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
        kw = {"partition_on": "rid", "partition_range": (lo, hi), "partition_num": threads}
    base_rss = _rss_mb()
    load0 = os.getloadavg()[0]
    b0, c0, t0 = _machine_busy_s(), _cpu(), time.perf_counter()
    t = connectorx.read_sql(f"sqlite://{path.resolve()}", sql, return_type="arrow", **kw)
    c1, t1 = _cpu(), time.perf_counter()
    others = _others(b0, c1 - c0, t1 - t0)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"rows": t.num_rows, "bare_s": t1 - t0, "bare_cpu_s": c1 - c0, "bare_peak_mb": peak - base_rss,
            "bare_table_mb": t.nbytes / 2**20, "bare_others_cores": others,
            "bare_loadavg": max(load0, os.getloadavg()[0])}


def wait_for_quiet(cores: float, max_wait_s: float) -> float:
    """Wait until other processes kept fewer than `cores` CPUs busy over the last second (or max_wait_s
    passed): on a shared host, a measurement started while others compute says more about them than
    about the code. Returns the cores they used in the last second before going ahead."""
    t_end = time.monotonic() + max_wait_s
    while True:
        b0, t0 = _machine_busy_s(), time.monotonic()
        time.sleep(1.0)
        busy = (_machine_busy_s() - b0) / (time.monotonic() - t0)
        if busy < cores or time.monotonic() > t_end:
            return busy


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[500_000, 1_000_000, 2_000_000, 4_000_000])
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "RESULTS-trace.md")
    ap.add_argument("--tmp", type=Path, default=None, help="where the generated exports go (deleted after)")
    ap.add_argument("--runs", "--repeat", dest="repeat", type=int, default=5,
                    help="fresh-process measurements per size, each way; the fastest is kept")
    ap.add_argument("--quiet", type=float, default=None, metavar="CORES",
                    help="before each pair of runs, wait until other processes use fewer than CORES CPUs")
    ap.add_argument("--quiet-wait", type=float, default=120.0, metavar="S",
                    help="the longest wait for --quiet, after which the pair runs anyway (its load is recorded)")
    ap.add_argument("--measure", type=Path, help=argparse.SUPPRESS)  # child mode
    ap.add_argument("--measure-bare", type=Path, help=argparse.SUPPRESS)  # child mode
    ap.add_argument("--measure-bare2", type=Path, help=argparse.SUPPRESS)  # child mode
    ap.add_argument("--measure-breakdown", type=Path, help=argparse.SUPPRESS)  # child mode
    a = ap.parse_args()
    if a.measure:
        print(json.dumps(measure_one(a.measure)))
        return
    if a.measure_bare:
        print(json.dumps(measure_bare(a.measure_bare)))
        return
    if a.measure_bare2:
        print(json.dumps(measure_bare(a.measure_bare2, threads=2)))
        return
    if a.measure_breakdown:
        print(json.dumps(measure_breakdown(a.measure_breakdown)))
        return

    def child(flag: str, p: Path) -> dict:
        out = subprocess.run([sys.executable, __file__, flag, str(p)], capture_output=True, text=True, check=True)
        return json.loads(out.stdout.strip().splitlines()[-1])

    results = []
    with tempfile.TemporaryDirectory(dir=a.tmp) as td:
        for n in a.sizes:
            p = Path(td) / f"synthetic-{n}.sqlite"
            g0 = time.perf_counter()
            gen = generate(p, n)
            gen_s = time.perf_counter() - g0
            runs, bare, bare2 = [], [], []
            for k in range(a.repeat):  # interleaved, in turn first, so all see the same load on a shared host
                if a.quiet is not None:
                    wait_for_quiet(a.quiet, a.quiet_wait)
                order = [(runs, "--measure"), (bare, "--measure-bare"), (bare2, "--measure-bare2")]
                for out, flag in order[k % 3:] + order[:k % 3]:
                    out.append(child(flag, p))
            # On a shared machine wall time is noisy: keep the fastest run's times, the largest peak.
            m = min(runs, key=lambda r: r["ingest_s"] + r["analyze_s"])
            m = dict(m, peak_rss_mb=max(r["peak_rss_mb"] - r["base_rss_mb"] for r in runs) + m["base_rss_mb"],
                     peak_after_load_mb=max(r["peak_after_load_mb"] - r["base_rss_mb"] for r in runs) + m["base_rss_mb"],
                     ingest_s=min(r["ingest_s"] for r in runs), analyze_s=min(r["analyze_s"] for r in runs),
                     ingest_cpu_s=min(r["ingest_cpu_s"] for r in runs), analyze_cpu_s=min(r["analyze_cpu_s"] for r in runs),
                     loadavg=max([r["loadavg"] for r in runs] + [b["bare_loadavg"] for b in bare + bare2]), runs=len(runs),
                     bare_s=min(b["bare_s"] for b in bare), bare_cpu_s=min(b["bare_cpu_s"] for b in bare),
                     bare_peak_mb=max(b["bare_peak_mb"] for b in bare),
                     bare2_s=min(b["bare_s"] for b in bare2), bare2_cpu_s=min(b["bare_cpu_s"] for b in bare2),
                     # what else ran on the host during the two fastest runs, and each pair's ratio
                     others_ingest=min(runs, key=lambda r: r["ingest_s"])["others_cores"],
                     others_bare=min(bare, key=lambda b: b["bare_s"])["bare_others_cores"],
                     pair_ratio_median=statistics.median(b["bare_s"] / r["ingest_s"] for r, b in zip(runs, bare)),
                     run_log=[{"ingest_s": r["ingest_s"], "ingest_cpu_s": r["ingest_cpu_s"], "others": r["others_cores"],
                               "bare_s": b["bare_s"], "bare_cpu_s": b["bare_cpu_s"], "bare_others": b["bare_others_cores"],
                               "bare2_s": b2["bare_s"], "bare2_cpu_s": b2["bare_cpu_s"], "bare2_others": b2["bare_others_cores"],
                               "loadavg": max(r["loadavg"], b["bare_loadavg"], b2["bare_loadavg"])}
                              for r, b, b2 in zip(runs, bare, bare2)])
            if a.quiet is not None:
                wait_for_quiet(a.quiet, a.quiet_wait)
            m.update(gen, gen_s=gen_s, breakdown=child("--measure-breakdown", p))
            assert m["rows"] == n, (m["rows"], n)
            results.append(m)
            print(f"{n:>9,} rows: ingest {m['ingest_s']:.2f} s wall / {m['ingest_cpu_s']:.2f} s CPU, bare connectorx "
                  f"{m['bare_s']:.2f} s / {m['bare_cpu_s']:.2f} s (ingest is {m['bare_s'] / m['ingest_s']:.2f}x as fast "
                  f"wall, {m['bare_cpu_s'] / m['ingest_cpu_s']:.2f}x CPU), analyze {m['analyze_s']:.2f} s, ingest peak "
                  f"+{(m['peak_after_load_mb'] - m['base_rss_mb']) * 2**20 / n:.0f} B/row, file {m['bytes'] / 2**20:.0f} MB",
                  flush=True)
            p.unlink()
    write_report(a.out, results, " ".join(["python", "bench/bench_trace_ingest.py"] + sys.argv[1:]))


def _span(values: list[float], fmt: str = "{:.2f}") -> str:
    lo, hi = min(values), max(values)
    return fmt.format(lo) if fmt.format(lo) == fmt.format(hi) else f"{fmt.format(lo)}-{fmt.format(hi)}"


def write_report(out: Path, results: list[dict], command: str) -> None:
    cpu = "unknown"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import connectorx
    import pyarrow

    mem_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    lines = [
        "# Trace ingest benchmark (evidence.traces: nsys reader and analyses)",
        "",
        f"Machine: {platform.machine()} {cpu}, {os.cpu_count()} CPUs, {mem_gb:.0f} GiB RAM, shared with other work; "
        f"Python {platform.python_version()}, numpy {np.__version__}, SQLite {sqlite3.sqlite_version}, "
        f"connectorx {connectorx.__version__}, pyarrow {pyarrow.__version__}.",
        f"Command: `{command}` (python: the project's virtualenv, `.venv/bin/python`, with evidence installed editable).",
        "",
        "Synthetic Nsight Systems SQLite exports (vLLM-like steps: 36-layer forwards, 4 of 5 replayed from CUDA graphs,",
        "NVTX step ranges), one per size. Three things are timed, each in its own fresh process, in turn (each first in",
        "turn), so all see the same load:",
        "",
        "- the ingest, `evidence.traces.load.load_trace`: 19 values a kernel row from the 20 kernel-table columns",
        "  below (the three name columns as `COALESCE(demangledName, mangledName, shortName)` and `shortName`), read",
        "  through connectorx into Arrow 32k rowids a slice, on two threads (connectorx and numpy release the GIL),",
        "  straight into the table's numpy arrays; plus the runtime table's 4 columns for the launch join, NVTX ranges",
        "  and steps, string ids to codes, NULLs to -1, the final dtypes. Then, not in the ingest's time,",
        "  `analyze_trace(n_layers=36, budget=2048)` (every analysis);",
        "- the baseline the issue names, a bare `connectorx.read_sql(..., return_type=\"arrow\")` of the 20",
        f"  kernel-table columns (`{', '.join(BARE_COLUMNS)}`) into one Arrow table: one call, one thread;",
        "- for reference, the same bare read on two threads of connectorx's own (`partition_on` the rowid,",
        "  `partition_num=2`, the rowid range given; the rowid is a 21st column there).",
        "",
        "Peak memory is the process's peak RSS (getrusage) minus its RSS after imports (numpy, pyarrow, connectorx,",
        f"evidence). Each size ran {results[0].get('runs', 1)} times each way; times are the fastest (wall) and the least",
        "CPU (user + system, all threads) of the runs, peaks the largest; 'paired' is the median over the runs of the",
        "bare read's wall time over the ingest's measured beside it. The host is shared: the 1-minute load average (the",
        "largest seen) and the CPUs other processes kept busy during the fastest ingest and bare runs (from",
        "/proc/stat) are in the last columns.",
        "",
        "| kernel rows | runtime rows | file MB | ingest s wall (CPU) | bare connectorx s wall (CPU) "
        "| ingest speed vs bare, wall (CPU) | paired, wall | bare on 2 threads s wall (CPU) | ingest vs bare on 2 threads, wall "
        "| ingest peak B/row | analyze s wall (CPU) | peak B/row incl. analysis | table B/row | forwards | load avg "
        "| other CPUs busy, ingest / bare |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for m in results:
        ingest_peak = (m["peak_after_load_mb"] - m["base_rss_mb"]) * 2**20 / m["rows"]
        peak = (m["peak_rss_mb"] - m["base_rss_mb"]) * 2**20 / m["rows"]
        lines.append(
            f"| {m['rows']:,} | {m['runtime_rows']:,} | {m['bytes'] / 2**20:,.0f} | {m['ingest_s']:.2f} ({m['ingest_cpu_s']:.2f}) | "
            f"{m['bare_s']:.2f} ({m['bare_cpu_s']:.2f}) | {m['bare_s'] / m['ingest_s']:.2f}x ({m['bare_cpu_s'] / m['ingest_cpu_s']:.2f}x) | "
            f"{m['pair_ratio_median']:.2f}x | {m['bare2_s']:.2f} ({m['bare2_cpu_s']:.2f}) | {m['bare2_s'] / m['ingest_s']:.2f}x | "
            f"{ingest_peak:,.0f} | {m['analyze_s']:.2f} ({m['analyze_cpu_s']:.2f}) | {peak:,.0f} | "
            f"{m['table_mb'] * 2**20 / m['rows']:,.0f} | {m['forwards']:,} | {m['loadavg']:.1f} | "
            f"{m['others_ingest']:.2f} / {m['others_bare']:.2f} |")
    # A computed reading, so the prose always matches the numbers above it.
    wall = [m["bare_s"] / m["ingest_s"] for m in results]
    paired = [m["pair_ratio_median"] for m in results]
    cpu_r = [m["bare_cpu_s"] / m["ingest_cpu_s"] for m in results]
    wall2 = [m["bare2_s"] / m["ingest_s"] for m in results]
    par = [m["ingest_cpu_s"] / m["ingest_s"] for m in results]
    ip = [(m["peak_after_load_mb"] - m["base_rss_mb"]) * 2**20 / m["rows"] for m in results]
    bp = [m["bare_peak_mb"] * 2**20 / m["rows"] for m in results]
    pa = [(m["peak_rss_mb"] - m["base_rss_mb"]) * 2**20 / m["rows"] for m in results]
    big = [m for m in results if m["rows"] >= 1_000_000] or results
    ip_big = [(m["peak_after_load_mb"] - m["base_rss_mb"]) * 2**20 / m["rows"] for m in big]
    others = [m["others_ingest"] for m in results] + [m["others_bare"] for m in results]
    rows_cpu = [m["rows"] / m["ingest_cpu_s"] for m in results]
    bd = min(results, key=lambda m: abs(m["rows"] - 1_000_000))
    lines += ["", "Against the goals of issue 15:", "",
              f"- Ingest at least as fast as a bare connectorx read of the same columns: in wall time "
              f"{'met' if min(wall) >= 1 else 'not met'} ({_span(wall)}x, the fastest runs; {_span(paired)}x, the "
              f"median of paired runs); in CPU time {'met' if min(cpu_r) >= 1 else 'not met'} ({_span(cpu_r)}x). "
              + ("It is met only because the ingest reads on two threads and the bare read on one: "
                 if min(wall) >= 1 and min(cpu_r) < 1 else "")
              + f"the ingest kept {_span(par)} CPUs busy on average over its wall time. Against the bare read on two "
              f"threads of connectorx's own, the ingest is {_span(wall2)}x as fast in wall time.",
              f"- Peak memory at most 150 bytes per kernel row: the ingest's peak is {_span(ip_big, '{:,.0f}')} bytes a row "
              f"from 1M rows up ({'met' if max(ip_big) <= 150 else 'not met'}), {_span(ip, '{:,.0f}')} over all sizes (fixed "
              "costs weigh more on fewer rows); the whole process, analysis included, peaks at "
              f"{_span(pa, '{:,.0f}')}."]
    lines += ["", "Reading:", "",
              f"- The ingest takes more CPU time than the bare read ({_span(cpu_r)}x as fast in CPU): it reads the "
              "runtime table too, and writes every value once more, from Arrow into the final, narrower arrays (the "
              "breakdown below). Its wall time is shorter only where the host has a second CPU free for it: the other "
              f"processes kept {_span(others)} CPUs busy during the fastest runs. On a host whose other CPU is taken, "
              "the ingest's wall time approaches its CPU time, and the bare read is faster.",
              f"- About {_span(rows_cpu, '{:,.0f}')} kernel rows per CPU-second; before the Arrow reader, sqlite3 built "
              "a Python object per fetched value, about 300,000-340,000 rows per CPU-second at 257-287 bytes a row at "
              "peak (bench/RESULTS-trace.md at commit 896da4d).",
              f"- Ingest peak memory against the bare Arrow read's own ({_span(bp, '{:,.0f}')} bytes a row): above the "
              "table (its 'table B/row' counts the source column, a broadcast that occupies 4 bytes a row less) are the "
              "runtime table kept for the join, connectorx's setup on each of the two threads, and the two slices in "
              "flight (bounded, not per row).",
              "- The analysis phase can raise the process's peak above the ingest's (its masks and sorts are "
              "full-length temporaries): the column 'peak B/row incl. analysis'.",
              "", f"Where the ingest's CPU time goes, {bd['rows']:,} kernel rows, the ingest on one thread in a fresh "
              f"process (seconds of wall time; other processes kept {bd['breakdown']['others_cores']:.2f} CPUs busy; "
              f"{bd['breakdown']['one_thread_s']:.2f} s wall, "
              f"{bd['breakdown']['one_thread_cpu_s']:.2f} s CPU; the bare read: {bd['bare_cpu_s']:.2f} s CPU):", ""]
    lines += [f"- {v:.3f} s: {k}" for k, v in sorted(bd["breakdown"]["phases_s"].items(), key=lambda kv: -kv[1])]
    ph = bd["breakdown"]["phases_s"]
    slices = next(v for k, v in ph.items() if k.startswith("kernel slices"))
    lines += ["",
              f"The kernel slices alone (19 values a row, 32k rows a call) take {slices / bd['bare_cpu_s']:.2f}x the bare "
              "read's one call of 20 values a row"
              + (": each call has connectorx count its rows and set up anew, and its Arrow buffers come back from "
                 "the allocator as fresh pages to fault in (with glibc told to keep freed memory, MALLOC_TRIM_THRESHOLD_ "
                 "and MALLOC_MMAP_THRESHOLD_, the ingest took about 0.06 s less CPU a million rows, measured aside; the "
                 "reader does not change the process's allocator settings). " if slices > 1.02 * bd["bare_cpu_s"] else ". ")
              +
              f"Everything else, {sum(ph.values()) - slices:.2f} s, is what the ingest does besides reading: the "
              "runtime table and its join, NVTX ranges and steps, the final arrays written (and faulted in), the "
              "codes. On one CPU that makes the ingest slower than the bare read; with a second CPU free, its two "
              "reading threads more than make up for it.",
              "", "<details><summary>raw results</summary>", "", "```json",
              json.dumps(results, indent=1, sort_keys=True), "```", "", "</details>"]
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
