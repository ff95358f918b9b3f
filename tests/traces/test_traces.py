"""Loading kernel traces: nsys SQLite and Kineto JSON of the same events give the same table."""

from __future__ import annotations

import gzip
import json
import sqlite3

import numpy as np
import pytest

from evidence.traces.kineto import load_kineto_json
from evidence.traces.load import detect_format, load_trace
from evidence.traces.model import (
    COLUMNS, TraceError, normalize_launch_api, parse_step_name, place_kernels_in_steps, short_kernel_name,
)
from evidence.traces.nsys import load_nsys_sqlite
from conftest import skipif_unless_ci
from trace_fixtures import (
    BASE_NS, CACHE, REAL, FA2, GEMM_O, PID, SIDE, T0_REL_NS, TID, ForwardSpec, Kernel, Scenario, cpu_only_kineto,
    explicit, real_trace, vllm_scenario, write_kineto_json, write_nsys_sqlite,
)

STEP_DECODE = (0, 0, 8, 8)
STEP_MIXED = (2, 2042, 6, 6)  # T + G = 2048


def small_vllm() -> Scenario:
    return vllm_scenario([
        ForwardSpec(8, 1, True, STEP_DECODE),
        ForwardSpec(8, 9, False, STEP_MIXED),
        ForwardSpec(7, 1, True, (0, 0, 7, 7)),
    ])


@pytest.fixture(scope="module")
def three(tmp_path_factory):
    """The same scenario as nsys SQLite, nsys with optional columns missing, and Kineto JSON(.gz)."""
    d = tmp_path_factory.mktemp("three")
    sc = small_vllm()
    return {
        "sc": sc,
        "nsys": load_trace(write_nsys_sqlite(d / "t.sqlite", sc)),
        "lean": load_trace(write_nsys_sqlite(d / "lean.sqlite", sc, drop_optional=True)),
        "kineto": load_trace(write_kineto_json(d / "t.pt.trace.json", sc)),
        "kineto_gz": load_trace(write_kineto_json(d / "t.pt.trace.json.gz", sc, gz=True)),
    }


def test_formats_detected_by_content_not_name(tmp_path):
    sc = explicit([(7, 0, 100)])
    a = write_nsys_sqlite(tmp_path / "looks.json", sc)  # sqlite despite the name
    b = write_kineto_json(tmp_path / "looks.sqlite", sc, gz=True)  # gzip JSON despite the name
    assert detect_format(a) == "nsys-sqlite"
    assert detect_format(b) == "kineto-json"
    assert load_trace(a).format == "nsys-sqlite"
    assert load_trace(b).format == "kineto-json"


def test_nsys_and_kineto_load_to_the_same_table(three):
    a, b, c = three["nsys"].kernels, three["kineto"].kernels, three["kineto_gz"].kernels
    n = 3 * (36 * 6) + 3 + 1  # three forwards of 6 kernels per layer, a sampler per step, one side kernel
    assert len(a) == len(b) == len(c) == n
    for col in COLUMNS:
        if col == "source":
            continue
        assert np.array_equal(a[col], b[col]), col
        assert np.array_equal(b[col], c[col]), col
    assert set(a["source"]) == {"nsys"} and set(b["source"]) == {"kineto"}


def test_table_values_match_the_scenario(three):
    """Every field of every kernel is the scenario's, with exact integer nanoseconds."""
    sc = three["sc"]
    k = three["kineto"].kernels
    want = sorted(sc.kernels, key=lambda x: (x.start_ns, x.end_ns, x.device, x.stream))
    assert k["start_ns"].dtype == np.int64
    assert k["start_ns"].tolist() == [x.start_ns for x in want]
    assert k["end_ns"].tolist() == [x.end_ns for x in want]
    assert k["start_ns"][0] == BASE_NS + T0_REL_NS  # baseTimeNanoseconds + round(ts*1000), exactly
    assert list(k["name"]) == [x.name for x in want]
    assert list(k["short_name"]) == [x.short for x in want]
    assert k["grid_y"].tolist() == [x.grid[1] for x in want]
    assert k["smem_bytes"].tolist() == [x.smem_static + x.smem_dynamic for x in want]
    assert k["launch_ns"].tolist() == [x.launch_start_ns for x in want]
    assert set(k["pid"].tolist()) == {PID} and set(k["tid"].tolist()) == {TID}
    assert set(k["launch_api"]) == {"cudaGraphLaunch", "cudaLaunchKernel"}


def test_graph_replayed_rows(three):
    k = three["nsys"].kernels
    graph = k["is_graph"]
    # Two decode forwards replayed from graphs: 2 x 216 kernels, one correlation id per replay.
    assert int(graph.sum()) == 2 * 36 * 6
    assert set(k["launch_api"][graph]) == {"cudaGraphLaunch"}
    assert len(set(k["corr_id"][graph].tolist())) == 2
    assert (k["graph_node_id"][graph] >= 10_000).all() and (k["graph_id"][~graph] == -1).all()
    # Kineto traces without "graph id" args (as in the real H200 traces) still tag
    # replays by their cudaGraphLaunch.
    assert np.array_equal(three["kineto"].kernels["is_graph"], graph)


def test_kineto_without_graph_args_tags_replays_by_launch_api(tmp_path):
    p = write_kineto_json(tmp_path / "nog.json", small_vllm(), graph_args=False)
    k = load_trace(p).kernels
    assert int(k["is_graph"].sum()) == 2 * 36 * 6
    assert (k["graph_id"] == -1).all()


def test_missing_optional_columns_are_filled(three):
    full, lean = three["nsys"].kernels, three["lean"].kernels
    assert any("lacks optional column" in n for n in three["lean"].notes)
    assert (lean["regs"] == -1).all() and (lean["graph_id"] == -1).all() and (lean["graph_node_id"] == -1).all()
    # shortName missing: derived from the demangled name, same as nsys's.
    assert list(lean["short_name"]) == list(full["short_name"])
    # dynamicSharedMemory missing: static only (FA2 has 16 KiB dynamic in the scenario).
    fa2 = full["name"] == FA2[0]
    assert (full["smem_bytes"][fa2] == 1024 + 16384).all() and (lean["smem_bytes"][fa2] == 1024).all()
    # Graph replays still recognised through the runtime launch API.
    assert np.array_equal(lean["is_graph"], full["is_graph"])
    for col in ("start_ns", "end_ns", "name", "grid_x", "grid_y", "grid_z", "corr_id", "launch_api", "pid", "tid", "launch_ns"):
        assert np.array_equal(lean[col], full[col]), col


def test_nvtx_text_or_text_id_give_the_same_steps(three):
    a, lean, k = three["nsys"].steps, three["lean"].steps, three["kineto"].steps
    assert [s.name for s in a] == [s.name for s in lean] == [s.name for s in k]
    assert [(s.start_ns, s.end_ns) for s in a] == [(s.start_ns, s.end_ns) for s in k]
    assert [(s.n_prefill, s.prefill_tokens, s.n_decode, s.decode_tokens) for s in a] == [
        STEP_DECODE, STEP_MIXED, (0, 0, 7, 7)]
    # Marks (eventType 34, no end) are not ranges.
    assert all(r.text != "a mark" for r in three["nsys"].ranges)
    # Only Kineto has GPU-side step spans (gpu_user_annotation).
    assert all(s.gpu_start_ns is not None for s in k) and all(s.gpu_start_ns is None for s in a)


def test_kernels_placed_under_their_step_by_launch(three):
    for key in ("nsys", "kineto"):
        tr = three[key]
        at = place_kernels_in_steps(tr.kernels, tr.steps)
        names = tr.kernels["name"]
        # Each forward's 216 kernels (and the side kernel launched in step 0) are in
        # their step; samplers are launched after the step annotation closes.
        assert np.bincount(at[at >= 0]).tolist() == [217, 216, 216], key
        assert set(names[at < 0]) == {"_gumbel_sample_kernel"}
        assert at[names == SIDE[0]].tolist() == [0]


def test_runtime_join_is_per_process(tmp_path):
    """Two processes reuse the same correlation ids: each kernel gets its own process's launch."""
    sc = Scenario()
    t = BASE_NS + T0_REL_NS
    sc.kernels.append(Kernel(t, t + 100, CACHE[0], CACHE[1], 5, pid=PID, tid=TID, api="cudaLaunchKernel_v7000",
                             launch_start_ns=t - 50, launch_end_ns=t - 40))
    sc.kernels.append(Kernel(t + 10, t + 90, GEMM_O[0], GEMM_O[1], 5, device=1, pid=700, tid=701,
                             api="cudaLaunchKernelExC_v11060", launch_start_ns=t - 30, launch_end_ns=t - 20))
    k = load_nsys_sqlite(write_nsys_sqlite(tmp_path / "two.sqlite", sc)).kernels
    assert k["pid"].tolist() == [PID, 700]
    assert k["tid"].tolist() == [TID, 701]
    assert list(k["launch_api"]) == ["cudaLaunchKernel", "cudaLaunchKernelExC"]
    assert k["launch_ns"].tolist() == [t - 50, t - 30]


def test_kineto_capital_kernel_category(tmp_path):
    p = write_kineto_json(tmp_path / "old.json", explicit([(7, 0, 100), (7, 200, 300)]), kernel_cat="Kernel")
    assert len(load_kineto_json(p).kernels) == 2


def test_cpu_only_trace_loads_empty_with_a_note(tmp_path):
    tr = load_trace(cpu_only_kineto(tmp_path / "cpu.json"))
    assert len(tr.kernels) == 0
    assert any(n.startswith("no GPU kernels") for n in tr.notes)
    assert len(tr.steps) == 3  # step annotations still load
    for col in COLUMNS:
        assert len(tr.kernels[col]) == 0


def test_nsys_without_kernel_table_is_empty_not_an_error(tmp_path):
    p = tmp_path / "cpu.sqlite"
    con = sqlite3.connect(p)
    con.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT)")
    con.commit()
    con.close()
    tr = load_trace(p)
    assert len(tr.kernels) == 0 and any("no GPU kernels" in n for n in tr.notes)


@pytest.mark.parametrize("content,needle", [
    (b"\x00\x01garbage bytes", "neither an Nsight Systems"),
    (b'{"traceEvents": [', "not valid JSON"),
    (b'{"foo": 1}', "no 'traceEvents'"),
    (gzip.compress(b'{"traceEvents": [{"ph": "X"')[:-8], "truncated"),
])
def test_bad_files_raise_trace_error_with_one_paragraph(tmp_path, content, needle):
    p = tmp_path / "bad.json"
    p.write_bytes(content)
    with pytest.raises(TraceError) as e:
        load_trace(p)
    msg = str(e.value)
    assert needle in msg and "\n" not in msg


def test_sqlite_that_is_not_nsys(tmp_path):
    p = tmp_path / "other.sqlite"
    con = sqlite3.connect(p)
    con.execute("CREATE TABLE t (x)")
    con.commit()
    con.close()
    with pytest.raises(TraceError, match="StringIds"):
        load_trace(p)


def test_missing_file_and_folder(tmp_path):
    with pytest.raises(TraceError, match="does not exist"):
        load_trace(tmp_path / "nope.json")
    with pytest.raises(TraceError, match="folder"):
        load_trace(tmp_path)


def test_malformed_kernel_event(tmp_path):
    p = tmp_path / "m.json"
    p.write_text(json.dumps({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": "soon", "dur": 1}]}))
    with pytest.raises(TraceError, match="malformed"):
        load_trace(p)


@pytest.mark.parametrize("demangled,short", [
    (FA2[0], "flash_fwd_splitkv_kernel"),
    (CACHE[0], "reshape_and_cache_flash_kernel"),
    (GEMM_O[0], "Kernel2"),
    ("triton_poi_fused_3", "triton_poi_fused_3"),
    ("void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<int> > >"
     "(flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<int> >::Params)", "device_kernel"),
    ("void (anonymous namespace)::elementwise_kernel_with_index<int, at::native::arange_cuda_out(c10::Scalar const&)"
     "::{lambda()#1}::operator()() const::{lambda()#1}>(int, int)", "elementwise_kernel_with_index"),
])
def test_short_kernel_name(demangled, short):
    assert short_kernel_name(demangled) == short


def test_small_helpers():
    assert normalize_launch_api("cudaLaunchKernel_v7000") == "cudaLaunchKernel"
    assert normalize_launch_api("cuLaunchKernelEx") == "cuLaunchKernelEx"
    assert parse_step_name("execute_context_5(1822)_generation_226(226)") == (5, 1822, 226, 226)
    assert parse_step_name("aten::mm") is None


# ---------------------------------------------------------------------------
# The real H200 traces (facts from their README)
# ---------------------------------------------------------------------------

real = skipif_unless_ci(not REAL.is_dir(), f"shared trace data not found at {REAL}")


@real
@pytest.mark.parametrize("name,kernels,steps,prefill", [
    ("trace-c128.pt.trace.json.gz", 68_019, 150, 34),
    ("trace-c256.pt.trace.json.gz", 68_789, 150, 10),
])
def test_real_trace_loads(name, kernels, steps, prefill):
    tr = real_trace(name)
    assert tr.format == "kineto-json"
    assert len(tr.kernels) == kernels
    assert len(tr.steps) == steps
    assert sum(s.has_prefill for s in tr.steps) == prefill
    assert all(s.gpu_start_ns is not None for s in tr.steps)  # every step has its GPU twin
    k = tr.kernels
    assert (k["end_ns"] >= k["start_ns"]).all()
    assert (k["graph_id"] == -1).all()  # no "graph id" args in these traces ...
    assert k["is_graph"].any()  # ... yet replays are tagged through cudaGraphLaunch
    assert set(k["is_graph"].nonzero()[0].tolist()) == set(np.flatnonzero(k["launch_api"] == "cudaGraphLaunch").tolist())
    assert (k["launch_api"] != "").all() and set(k["pid"].tolist()) == {633}
