"""Kernel-trace analyses against answers computed by hand, the real H200 traces, and the CLI.

Timing of the synthetic vLLM scenario (tests/trace_fixtures.py): per layer, on the
compute stream, GEMM 20 us, Triton 4, KV write 3, attention A, GEMM 15, Triton 4,
each followed by 1 us idle; A = 10 us (decode) or 40 us (mixed). So a layer spans
52 us + A, and the idle between two attention launches of one forward is 52 us.
Forwards are 201 us apart (the sampler, 5 us, sits in the middle of the idle).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import typer
from typer.testing import CliRunner

from evidence.canon import dumps
from evidence.cli.trace import parse_window, register
from evidence.traces.analyses import (
    DEFAULT_RULES, FamilyRule, Forward, Window, analyze_trace, classify, families, geometry_meaning,
    geometry_split, kernel_active, load_rules, reconstruct_forwards, resolve_window, step_analysis, sustained_regime,
    union_length,
)
from evidence.traces.load import load_trace
from evidence.traces.model import TraceError
from conftest import skip_unless_ci, skipif_unless_ci
from trace_fixtures import (
    BASE_NS, REAL, T0_REL_NS, ForwardSpec, cpu_only_kineto, explicit, real_trace, vllm_scenario, write_kineto_json,
    write_nsys_sqlite,
)

T0 = BASE_NS + T0_REL_NS
DECODE_LAYER = 62_000  # 52 us + 10 us attention
MIXED_LAYER = 92_000  # 52 us + 40 us attention
FWD_DECODE = 36 * DECODE_LAYER - 1_000  # first kernel start to last kernel end
FWD_MIXED = 36 * MIXED_LAYER - 1_000
BETWEEN = 201_000  # last kernel of a forward to the first of the next


def dec(n, step=True):
    return ForwardSpec(n, 1, True, (0, 0, n, n) if step else None)


def mixed(n, step=True):
    return ForwardSpec(n, 9, False, (2, 2042, n - 2, n - 2) if step else None)


def load(tmp_path, forwards, fmt="kineto", **kw):
    sc = vllm_scenario(forwards, **kw)
    if fmt == "kineto":
        return load_trace(write_kineto_json(tmp_path / "t.json", sc))
    return load_trace(write_nsys_sqlite(tmp_path / "t.sqlite", sc))


@pytest.fixture(scope="module")
def three_fw(tmp_path_factory):
    """decode(8, graph) - mixed(8, eager, gridX=9) - decode(7, graph), with step annotations."""
    d = tmp_path_factory.mktemp("fw")
    sc = vllm_scenario([dec(8), mixed(8), dec(7)])
    return {"kineto": load_trace(write_kineto_json(d / "t.json", sc)),
            "nsys": load_trace(write_nsys_sqlite(d / "t.sqlite", sc))}


# ---------------------------------------------------------------------------
# a. kernel-active
# ---------------------------------------------------------------------------

def test_union_length_by_hand():
    assert union_length(np.array([0, 150, 50]), np.array([100, 250, 200])) == 250
    assert union_length(np.array([0, 10]), np.array([100, 20])) == 100  # nested
    assert union_length(np.array([0, 100]), np.array([100, 200])) == 200  # touching
    assert union_length(np.array([0, 300]), np.array([100, 400])) == 200  # disjoint
    assert union_length(np.array([], np.int64), np.array([], np.int64)) == 0
    assert union_length(np.array([0, 150, 50]), np.array([100, 250, 200]), 75, 175) == 100  # clipped


@pytest.mark.parametrize("seed", range(20))
def test_union_length_against_a_unit_grid(seed):
    """Random intervals, sorted or not, overlapping, empty, clipped: the union counted unit by unit."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 60))
    s = rng.integers(0, 400, n)
    e = s + rng.integers(-5, 60, n)  # some empty or reversed
    if seed % 2:
        order = np.argsort(s, kind="stable")
        s, e = s[order], e[order]
    lo, hi = (None, None) if seed % 3 == 0 else (int(rng.integers(0, 200)), int(rng.integers(200, 480)))
    grid = np.zeros(500, bool)
    for a, b in zip(s.tolist(), e.tolist()):
        a, b = max(a, lo if lo is not None else a), min(b, hi if hi is not None else b)
        grid[a:max(a, b)] = True
    s0, e0 = s.copy(), e.copy()
    assert union_length(s, e, lo, hi) == int(grid.sum())
    assert np.array_equal(s, s0) and np.array_equal(e, e0)  # inputs untouched


def test_kernel_active_overlapping_streams(tmp_path):
    # stream 7: [0,100) [150,250); stream 13: [50,200) -> union [0,250) = 250; sum 350.
    tr = load_trace(write_kineto_json(tmp_path / "u.json", explicit([(7, 0, 100), (7, 150, 250), (13, 50, 200)])))
    ka = kernel_active(tr.kernels, (T0, T0 + 300))
    assert (ka.active_ns, ka.sum_kernel_ns, ka.overlap_ns, ka.kernels) == (250, 350, 100, 3)
    assert ka.fraction == 250 / 300
    # Default window: first start to last end = 250 ns, all active.
    d = kernel_active(tr.kernels)
    assert d.window.length_ns == 250 and d.fraction == 1.0 and d.window.source.startswith("default")
    # Clipped to [75, 175): every instant has a kernel; clipped durations sum to 150.
    c = kernel_active(tr.kernels, (T0 + 75, T0 + 175))
    assert (c.active_ns, c.sum_kernel_ns, c.fraction) == (100, 150, 1.0)
    # A window past the kernels: nothing active, fraction 0 (not absent: the window is real).
    z = kernel_active(tr.kernels, (T0 + 1000, T0 + 2000))
    assert (z.active_ns, z.fraction) == (0, 0.0)


def test_kernel_active_device_and_pid_filter(tmp_path):
    sc = explicit([(7, 0, 100), (7, 200, 300)])
    sc.kernels[1].device = 1
    sc.kernels[1].pid = 999
    k = load_trace(write_nsys_sqlite(tmp_path / "d.sqlite", sc)).kernels
    w = (T0, T0 + 400)
    assert kernel_active(k, w, device=0).active_ns == 100
    assert kernel_active(k, w, device=1).active_ns == 100
    assert kernel_active(k, w, pid=999).kernels == 1
    assert kernel_active(k, w).active_ns == 200


def test_kernel_active_vllm_scenario_by_hand(three_fw):
    k = three_fw["nsys"].kernels
    ka = kernel_active(k)
    busy_decode, busy_mixed = 36 * 56_000, 36 * 86_000  # kernel time per forward (gaps idle)
    side_fills = 3_000  # the side-stream kernel covers three 1 us gaps of layer 0
    union = 2 * busy_decode + busy_mixed + side_fills + 3 * 5_000
    window = FWD_DECODE + BETWEEN + FWD_MIXED + BETWEEN + FWD_DECODE + 97_500 + 5_000
    assert ka.window.length_ns == window
    assert ka.active_ns == union
    assert ka.sum_kernel_ns == union - side_fills + 30_000  # the side kernel's 30 us counted in full
    assert ka.overlap_ns == 27_000
    assert ka.fraction == union / window


# ---------------------------------------------------------------------------
# b. families
# ---------------------------------------------------------------------------

def test_families_by_hand(three_fw):
    for key in ("nsys", "kineto"):
        rep = families(three_fw[key].kernels, output_tokens=1_000)
        got = {r.family: (r.count, r.total_ns) for r in rep.families}
        assert got == {
            "attention": (108, 36 * (10_000 + 40_000 + 10_000)),
            "gemm": (216, 3 * 36 * 35_000),  # nvjet and cutlass ..._gemm_...
            "triton": (216, 3 * 36 * 8_000),
            "kv_cache_write": (108, 3 * 36 * 3_000),
            "other": (4, 3 * 5_000 + 30_000),  # samplers and the side-stream fill kernel
        }, key
        assert rep.total.total_ns == 7_173_000 and rep.total.count == 652
        att = next(r for r in rep.families if r.family == "attention")
        assert att.per_token_ns == 2_160_000 / 1_000
        assert att.rules == ("fa2_splitkv", "fa3", "fa3_combine", "flash_fwd")
        assert rep.per_token_reason is None


def test_per_token_absent_with_reason_never_zero(three_fw):
    rep = families(three_fw["nsys"].kernels)
    assert all(r.per_token_ns is None for r in rep.families) and rep.total.per_token_ns is None
    assert "no output-token count" in rep.per_token_reason
    rep0 = families(three_fw["nsys"].kernels, output_tokens=0)
    assert rep0.total.per_token_ns is None and "not positive" in rep0.per_token_reason


def test_families_clip_to_the_window(three_fw):
    k = three_fw["nsys"].kernels
    # The first 25 us of forward 0: GEMM [0,20), Triton [21,25), side kernel [10,25) of [10,40).
    rep = families(k, window=(T0, T0 + 25_000))
    got = {r.family: (r.count, r.total_ns) for r in rep.families}
    assert got["gemm"] == (1, 20_000) and got["triton"] == (1, 4_000) and got["other"] == (1, 15_000)
    assert got["attention"] == (0, 0)


def test_rules_first_match_wins_and_files(tmp_path, three_fw):
    k = three_fw["nsys"].kernels
    # A broad rule placed first takes the KV-cache kernel (its name holds "cache") away from its own rule.
    rules = (FamilyRule("anything_cache", r"cache"),) + DEFAULT_RULES
    rep = families(k, rules)
    got = {r.family: r.count for r in rep.families}
    assert got["anything_cache"] == 108 and got["kv_cache_write"] == 0
    # The three accepted file shapes.
    (tmp_path / "a.yaml").write_text("rules:\n  - {name: attn, pattern: flash_fwd_splitkv, geometry: fa2_splitkv, layer_marker: true}\n  - {name: mm, pattern: gemm|nvjet}\n")
    (tmp_path / "b.yaml").write_text("- [attn, flash_fwd_splitkv]\n- [mm, 'gemm|nvjet']\n")
    (tmp_path / "c.yaml").write_text("attn: flash_fwd_splitkv\nmm: gemm|nvjet\n")
    for f in ("a.yaml", "b.yaml", "c.yaml"):
        rs = load_rules(tmp_path / f)
        assert [r.name for r in rs] == ["attn", "mm"]
        got = {r.family: r.count for r in families(k, rs).families}
        assert got == {"attn": 108, "mm": 216, "other": 328}
    (tmp_path / "bad.yaml").write_text("- [x, '(unclosed']\n")
    with pytest.raises(TraceError, match="bad regex"):
        load_rules(tmp_path / "bad.yaml")
    (tmp_path / "dup.yaml").write_text("- [x, a]\n- [x, b]\n")
    with pytest.raises(TraceError, match="more than once"):
        load_rules(tmp_path / "dup.yaml")


def test_default_rules_on_real_kernel_names():
    class _K:  # minimal stand-in with the categorical interface classify() uses
        def __init__(self, names):
            self._n = tuple(names)

        def categories(self, col):
            return self._n

        def codes(self, col):
            return np.arange(len(self._n))

    names = {
        "void flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128> >(Flash_fwd_params)": "fa2_splitkv",
        "void flash_fwd_splitkv_combine_kernel<Flash_fwd_kernel_traits<128> >(Flash_fwd_params)": "fa2_splitkv",
        "void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<x> > >(P)": "fa3",
        "void cutlass::device_kernel<flash::FlashAttnFwdCombine<cute::tuple<cute::C<8> > > >(P)": "fa3_combine",
        "nvjet_sm90_tst_56x64_64x14_4x2_h_bz_bias_TNN": "gemm",
        "void cublasLt::splitKreduce_kernel<32, 16, int, float>(x)": "gemm",
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64": "gemm",
        "triton_red_fused_fused_add_rms_norm_0": "triton",
        "void vllm::reshape_and_cache_flash_kernel<__nv_bfloat16>(x)": "kv_cache_write",
        "_gumbel_sample_kernel": "other",
    }
    idx, rules = classify(_K(names), DEFAULT_RULES)
    assert [rules[i].name for i in idx] == list(names.values())


# ---------------------------------------------------------------------------
# c. geometry
# ---------------------------------------------------------------------------

def test_geometry_split_by_hand(three_fw):
    g = geometry_split(three_fw["kineto"].kernels, "fa2_splitkv", output_tokens=100)
    rows = [(x.grid, x.replay, x.count, x.total_ns, x.mean_ns, x.per_token_ns) for x in g.groups]
    assert rows == [
        ((1, 7, 16), "graph", 36, 360_000, 10_000.0, 3_600.0),
        ((1, 8, 16), "graph", 36, 360_000, 10_000.0, 3_600.0),
        ((9, 8, 16), "eager", 36, 1_440_000, 40_000.0, 14_400.0),
    ]
    assert g.heads == 16 and g.heads_source.startswith("inferred")
    assert "gridX=1" in g.groups[0].meaning and "decode-only" in g.groups[0].meaning and "7 sequences" in g.groups[0].meaning
    assert "513-576 tokens" in g.groups[2].meaning and "mixed/prefill" in g.groups[2].meaning
    # The family name selects all its rules.
    assert geometry_split(three_fw["kineto"].kernels, "attention").rules == ("fa2_splitkv", "fa3", "fa3_combine", "flash_fwd")
    with pytest.raises(ValueError, match="no rule or family"):
        geometry_split(three_fw["kineto"].kernels, "nope")


def test_geometry_meaning_per_rule():
    fa2, fa3, opaque = DEFAULT_RULES[0], DEFAULT_RULES[1], DEFAULT_RULES[2]
    assert "513-576" in geometry_meaning(fa2, (9, 100, 16), heads=16)
    assert "100 sequences" in geometry_meaning(fa2, (9, 100, 16), heads=16)
    assert "12 sequences" in geometry_meaning(fa2, (1, 4, 12 * 16), heads=16)  # splits > 1: batch*heads in z
    m = geometry_meaning(fa3, (132, 1, 1), num_sms=132)
    assert "no query-length meaning" in m and "SM count" in m
    assert "not interpreted" in geometry_meaning(opaque, (384, 1, 1))


# ---------------------------------------------------------------------------
# d. forwards
# ---------------------------------------------------------------------------

def test_forwards_from_steps(three_fw):
    for key in ("nsys", "kineto"):
        tr = three_fw[key]
        fr = reconstruct_forwards(tr.kernels, 36, steps=tr.steps)
        assert (fr.rule, fr.stream, fr.marker_launches, len(fr.rejected)) == ("fa2_splitkv", 7, 108, 0)
        got = [(f.path, f.replay, f.sequences, f.grid, f.mean_kernel_ns, f.step, f.sequence_check) for f in fr.forwards]
        assert got == [
            ("decode", "graph", 8, (1, 8, 16), 10_000.0, 0, "identical"),
            ("mixed", "eager", 8, (9, 8, 16), 40_000.0, 1, "identical"),
            ("decode", "graph", 7, (1, 7, 16), 10_000.0, 2, "identical"),
        ]
        assert fr.median_gap_ns == 52_000


def test_forwards_cut_at_the_window_edges(tmp_path):
    tr = load(tmp_path, [dec(8), dec(8), dec(8)])
    f0 = T0
    f2 = T0 + 2 * (FWD_DECODE + BETWEEN)
    # From layer 20 of forward 0 to the end of layer 10's attention in forward 2.
    w = (f0 + 20 * DECODE_LAYER, f2 + 10 * DECODE_LAYER + 40_000)
    fr = reconstruct_forwards(tr.kernels, 36, window=w, steps=tr.steps)
    assert len(fr.forwards) == 1 and fr.forwards[0].step == 1
    assert [(r.code, r.launches) for r in fr.rejected] == [("cut_at_window_start", 16), ("cut_at_window_end", 11)]
    assert fr.rejected_launches == 27 and fr.rejected_by_code == {"cut_at_window_end": 1, "cut_at_window_start": 1}
    assert "not a multiple of 36" in fr.rejected[0].reason and "window start" in fr.rejected[0].reason


def test_exact_multiples_split_and_gaps_without_steps(tmp_path):
    # No step annotations, one grid: the 252 us gap between forwards is under 5 x 52 us,
    # so three forwards form one 108-launch segment, split into 3.
    tr = load(tmp_path, [dec(8, False), dec(8, False), dec(8, False)])
    fr = reconstruct_forwards(tr.kernels, 36)
    assert len(fr.forwards) == 3 and fr.split_segments == 1 and fr.segments == 1
    assert all(f.split and f.step is None and f.path == "decode" and f.path_source == "gridX" for f in fr.forwards)
    # With a gap factor of 3 (156 us) the forward gaps cut instead.
    fr3 = reconstruct_forwards(tr.kernels, 36, gap_factor=3)
    assert len(fr3.forwards) == 3 and fr3.split_segments == 0 and fr3.boundaries["gap"] == 2


def test_grid_change_cuts_forwards_without_steps(tmp_path):
    tr = load(tmp_path, [dec(8, False), mixed(8, False), dec(7, False)])
    fr = reconstruct_forwards(tr.kernels, 36)
    assert [f.grid for f in fr.forwards] == [(1, 8, 16), (9, 8, 16), (1, 7, 16)]
    assert fr.boundaries["grid change"] == 2 and fr.split_segments == 0


def test_rejected_segments_and_why(tmp_path):
    missing = ForwardSpec(8, 1, True, (0, 0, 8, 8), drop_layer=5)
    tr = load(tmp_path, [dec(8), missing, dec(8)])
    fr = reconstruct_forwards(tr.kernels, 36, steps=tr.steps)
    assert len(fr.forwards) == 2
    assert [(r.code, r.launches, r.segment) for r in fr.rejected] == [("short", 35, 1)]
    assert "35 launches" in fr.rejected[0].reason
    # Without steps and with the default gap factor, the 35 merge into one 107-launch run.
    tr2 = load(tmp_path, [dec(8, False), ForwardSpec(8, 1, True, None, drop_layer=5), dec(8, False)])
    fr2 = reconstruct_forwards(tr2.kernels, 36)
    assert len(fr2.forwards) == 0 and [(r.code, r.launches) for r in fr2.rejected] == [("not_multiple", 107)]


def test_a_stall_inside_a_forward_is_merged_back(tmp_path):
    stalled = ForwardSpec(8, 1, True, (0, 0, 8, 8), stall_after_layer=0)  # 2 ms after layer 0
    tr = load(tmp_path, [dec(8), stalled, dec(8)])
    fr = reconstruct_forwards(tr.kernels, 36, steps=tr.steps)
    assert len(fr.forwards) == 3 and not fr.rejected
    assert fr.boundaries["gap merged back"] == 1 and fr.boundaries["gap"] == 0


def test_sequence_dimension_must_be_identical(tmp_path):
    odd = ForwardSpec(8, 1, True, (0, 0, 8, 8), nseq_from_layer=(18, 7))
    tr = load(tmp_path, [dec(8), odd])
    fr = reconstruct_forwards(tr.kernels, 36, steps=tr.steps, split_on_grid=False)
    assert len(fr.forwards) == 1
    assert [(r.code, r.launches) for r in fr.rejected] == [("sequence_dim_varies", 36)]
    assert "(7, 16)" in fr.rejected[0].reason and "(8, 16)" in fr.rejected[0].reason
    # Splitting on the grid instead leaves two 18-launch pieces, both rejected.
    fr2 = reconstruct_forwards(tr.kernels, 36, steps=tr.steps)
    assert [(r.code, r.launches) for r in fr2.rejected] == [("short", 18), ("short", 18)]


def test_no_attention_kernels(tmp_path):
    tr = load_trace(write_kineto_json(tmp_path / "x.json", explicit([(7, 0, 100)])))
    fr = reconstruct_forwards(tr.kernels, 36)
    assert fr.forwards == () and "no per-layer attention" in fr.notes[0]


# ---------------------------------------------------------------------------
# e. sustained regime
# ---------------------------------------------------------------------------

def _fw(i, seqs, dur, path="mixed"):
    return Forward(i, i * 10, i * 10 + 5, 36, (9, seqs, 16), "eager", path, "gridX", seqs, "grid", "identical",
                   float(dur), int(dur * 36), None, i, False)


def test_sustained_regime_by_hand():
    seqs = [2, 4, 8, 16, 32, 60, 62, 61, 63, 62, 60, 30, 10]
    fws = [_fw(i, s, s * 1_000) for i, s in enumerate(seqs)]
    # Interleaved decode forwards are not part of the mixed path.
    fws = [f for pair in zip(fws, [_fw(100 + i, 500, 1, "decode") for i in range(len(fws))]) for f in pair]
    r = sustained_regime(fws, path="mixed", rel_tol=0.05, min_forwards=5)
    assert r.present and r.forwards == 6 and r.candidates == 13
    assert (r.first_forward, r.last_forward) == (5, 10)
    assert (r.ramp_forwards_before, r.drain_forwards_after) == (5, 2)
    assert r.mean_sequences == 368 / 6 and (r.min_sequences, r.max_sequences) == (60, 63)
    assert r.mean_kernel_ns == 368_000 / 6
    absent = sustained_regime(fws, path="mixed", rel_tol=0.05, min_forwards=7)
    assert not absent.present and absent.mean_sequences is None and "longest: 6" in absent.reason
    few = sustained_regime(fws[:4], path="mixed")
    assert not few.present and "only 2" in few.reason


# ---------------------------------------------------------------------------
# f. steps
# ---------------------------------------------------------------------------

def test_step_analysis_by_hand(three_fw):
    for key in ("kineto", "nsys"):
        tr = three_fw[key]
        st = step_analysis(tr.kernels, tr.steps, budget=2048)
        assert (st.steps, st.steps_with_prefill, st.decode_only_steps) == (3, 1, 2)
        assert (st.prefill_steps_at_budget, st.prefill_steps_below_budget, st.steps_over_budget) == (1, 0, 0)
        assert st.decode_population_decode_only == {"n": 2, "min": 7, "p50": 7, "mean": 7.5, "max": 8}
        assert (st.kernels_placed, st.kernels_unplaced, st.unplaced_kernel_ns) == (649, 3, 15_000)
        assert [r.kernel_ns for r in st.rows] == [36 * 56_000 + 30_000, 36 * 86_000, 36 * 56_000]
        active0 = 36 * 56_000 + 3_000
        win0 = FWD_DECODE + 1_000 if key == "kineto" else FWD_DECODE  # GPU annotation is 0.5 us wider each side
        assert st.rows[0].active_ns == active0 and st.rows[0].gpu_window_ns == win0
        assert st.rows[0].active_fraction == active0 / win0
        assert st.rows[0].gpu_window_source == ("gpu annotation" if key == "kineto" else "kernel extent")
    nob = step_analysis(three_fw["nsys"].kernels, three_fw["nsys"].steps)
    assert nob.prefill_steps_at_budget is None and "no token budget" in nob.budget_reason


def test_analyze_trace_is_json_ready_and_deterministic(three_fw):
    tr = three_fw["kineto"]
    a = analyze_trace(tr, n_layers=36, budget=2048, output_tokens=50)
    b = analyze_trace(tr, n_layers=36, budget=2048, output_tokens=50)
    assert dumps(a) == dumps(b)
    json.loads(dumps(a))
    assert a["forwards"]["forwards"][1]["path"] == "mixed"
    assert a["sustained"]["mixed"]["present"] is False
    hint = analyze_trace(tr)["forwards"]["absent"]
    assert "--layers" in hint and "36 attention kernels" in hint


def test_analyze_trace_device_filter_scopes_the_default_window(tmp_path):
    sc = explicit([(7, 0, 100), (7, 1_000, 1_100)])
    sc.kernels[1].device = 1
    tr = load_trace(write_nsys_sqlite(tmp_path / "d.sqlite", sc))
    r = analyze_trace(tr, device=1)
    assert r["window"]["start_ns"] == T0 + 1_000 and r["kernel_active"]["fraction"] == 1.0
    assert analyze_trace(tr)["kernel_active"]["fraction"] == 200 / 1_100
    with pytest.raises(ValueError, match="no kernels match"):
        analyze_trace(tr, device=5)


def test_cpu_only_trace_analyses_are_absent(tmp_path):
    r = analyze_trace(load_trace(cpu_only_kineto(tmp_path / "cpu.json")), n_layers=36)
    assert r["trace"]["kernels"] == 0
    assert r["kernel_active"]["absent"].startswith("no GPU kernels")
    assert r["steps"]["steps"] == 3 and r["steps"]["steps_with_prefill"] == 1


def test_window_helpers():
    assert parse_window(None) is None
    assert parse_window("100:200") == (100, 200)
    assert parse_window(":200") == (None, 200)
    assert parse_window("+1ms:+2.5ms", 1_000) == (1_001_000, 2_501_000)
    for bad in ("abc", "1:2:3", "200:100", "1s:2s"):
        with pytest.raises(ValueError):
            parse_window(bad, 0)
    from evidence.traces.model import KernelTable
    k = KernelTable({"start_ns": np.array([5, 1]), "end_ns": np.array([9, 3])}, {}, {})
    assert resolve_window(k, (None, None)) == Window(1, 9, "default: first kernel start to last kernel end")
    assert resolve_window(k, (None, 4)) == Window(1, 4, "explicit")


# ---------------------------------------------------------------------------
# The real H200 traces, checked against their README
# ---------------------------------------------------------------------------

real = skipif_unless_ci(not REAL.is_dir(), f"shared trace data not found at {REAL}")
FACTS = {
    # file: (kernel events, steps, steps with prefill, prefill steps below the budget as (N, T, M, G))
    "trace-c128.pt.trace.json.gz": (68_019, 150, 34, [(1, 512, 16, 16), (3, 1453, 125, 125)]),
    "trace-c256.pt.trace.json.gz": (68_789, 150, 10, [(2, 516, 254, 254), (1, 512, 197, 197)]),
}


@pytest.fixture(scope="module", params=sorted(FACTS))
def real_result(request):
    if not REAL.is_dir():
        skip_unless_ci(f"the shared trace data is not at {REAL}")
    tr = real_trace(request.param)
    return request.param, tr, analyze_trace(tr, n_layers=36, budget=2048)


@real
def test_real_traces_through_every_analysis(real_result):
    name, tr, r = real_result
    kernels, steps, prefill, below = FACTS[name]
    assert r["trace"]["kernels"] == kernels and r["trace"]["num_sms"] == 132

    ka = r["kernel_active"]
    assert 0 < ka["fraction"] < 1 and ka["active_ns"] <= ka["sum_kernel_ns"] and ka["kernels"] == kernels
    fam = {x["family"]: x for x in r["families"]["families"]}
    assert r["families"]["total"]["count"] == kernels
    assert fam["attention"]["count"] == 2 * 150 * 36  # FA3 main + combine, once per layer per step
    assert fam["kv_cache_write"]["count"] == 150 * 36
    assert r["families"]["families"][0]["per_token_ns"] is None  # no --tokens given

    # FA3 is persistent: grid = SM count, reported as carrying no query-length meaning.
    geo = {g["select"]: g for g in r["geometry"]}
    assert "fa2_splitkv" not in geo
    fa3 = geo["fa3"]
    assert {tuple(x["grid"]) for x in fa3["groups"]} == {(132, 1, 1)}
    assert all("no query-length meaning" in x["meaning"] for x in fa3["groups"])
    by_replay = {x["replay"]: x["count"] for x in fa3["groups"]}
    assert by_replay == {"eager": prefill * 36, "graph": (steps - prefill) * 36}  # mixed steps run attention eagerly

    fw = r["forwards"]
    assert fw["rule"] == "fa3" and len(fw["forwards"]) == steps and fw["rejected"] == []
    assert all(f["sequence_check"].startswith("not applicable") for f in fw["forwards"])
    assert all(f["sequences_source"] == "step annotation (N + M)" for f in fw["forwards"])
    assert sum(f["path"] == "mixed" for f in fw["forwards"]) == prefill
    assert r["sustained"]["decode"]["present"]

    st = r["steps"]
    assert (st["steps"], st["steps_with_prefill"], st["decode_only_steps"]) == (steps, prefill, steps - prefill)
    # README: "Steps with prefill fill the budget exactly". They do, except where the
    # waiting queue held fewer prompt tokens than the budget (one whole 512-token
    # prompt left, or the last chunks): no step ever exceeds it.
    assert st["steps_over_budget"] == 0 and st["tokens"]["max"] == 2048
    assert st["prefill_steps_at_budget"] == prefill - len(below)
    assert [(b["N"], b["T"], b["M"], b["G"]) for b in st["below_budget"]] == below
    assert st["kernels_placed"] + st["kernels_unplaced"] == kernels


@real
def test_real_steps_match_the_kernels(real_result):
    """Each step launches exactly 36 FA3 attention kernels (one per layer of Qwen2.5-3B)."""
    name, tr, r = real_result
    from evidence.traces.model import place_kernels_in_steps
    at = place_kernels_in_steps(tr.kernels, tr.steps)
    fa3 = np.array(["FlashAttnFwdSm90" in n for n in tr.kernels.categories("name")])[tr.kernels.codes("name")]
    assert set(np.bincount(at[fa3], minlength=len(tr.steps)).tolist()) == {36}


# ---------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------

def _app():
    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)

    @app.callback()
    def _root() -> None:
        pass

    register(app)
    return app


runner = CliRunner()


def test_cli_help():
    r = runner.invoke(_app(), ["trace", "--help"])
    assert r.exit_code == 0
    for opt in ("--layers", "--window", "--rules", "--tokens", "--budget", "--json", "Nsight Systems", "Kineto"):
        assert opt in r.output


def test_cli_json_is_canonical(tmp_path):
    p = write_kineto_json(tmp_path / "t.json", vllm_scenario([dec(8), mixed(8)]))
    r = runner.invoke(_app(), ["trace", str(p), "--layers", "36", "--json", "--tokens", "10", "--budget", "2048"])
    assert r.exit_code == 0, r.output
    assert r.stdout.endswith("}\n")
    doc = json.loads(r.stdout)
    assert r.stdout == json.dumps(doc, sort_keys=True, indent=2, ensure_ascii=False) + "\n"
    assert len(doc["forwards"]["forwards"]) == 2 and doc["families"]["output_tokens"] == 10


def test_cli_tables(tmp_path):
    p = write_nsys_sqlite(tmp_path / "t.sqlite", vllm_scenario([dec(8), mixed(8), dec(8)]))
    (tmp_path / "r.yaml").write_text("- [attn, flash_fwd_splitkv]\n- [mm, gemm|nvjet]\n")
    r = runner.invoke(_app(), ["trace", str(p), "--layers", "36", "--window", "+0:+20ms", "--rules", str(tmp_path / "r.yaml")])
    assert r.exit_code == 0, r.output
    for s in ("Kernel-active", "Kernel families", "attn", "Engine steps", "no token budget"):
        assert s in r.output, s
    # Custom rules without layer markers: forwards are reported as such, not guessed.
    assert "no per-layer attention launches" in r.output


def test_cli_cpu_only_trace(tmp_path):
    r = runner.invoke(_app(), ["trace", str(cpu_only_kineto(tmp_path / "c.json"))])
    assert r.exit_code == 0 and "no GPU kernels" in r.output


@pytest.mark.parametrize("args,needle", [
    (["missing.json"], "does not exist"),
    (["BAD"], "neither an Nsight Systems"),
    (["GOOD", "--window", "soon:later"], "--window"),
    (["GOOD", "--rules", "RULES"], "bad regex"),
    (["GOOD", "--device", "5"], "no kernels match"),
])
def test_cli_bad_input_exits_2_with_one_paragraph(tmp_path, args, needle):
    bad = tmp_path / "bad.bin"
    bad.write_bytes(b"\x00\x01\x02")
    good = write_kineto_json(tmp_path / "g.json", explicit([(7, 0, 100)]))
    rules = tmp_path / "r.yaml"
    rules.write_text("- [x, '(']\n")
    subst = {"BAD": str(bad), "GOOD": str(good), "RULES": str(rules), "missing.json": str(tmp_path / "missing.json")}
    r = runner.invoke(_app(), ["trace"] + [subst.get(a, a) for a in args])
    assert r.exit_code == 2
    assert needle in r.stderr and "Traceback" not in r.stderr + r.stdout
    assert r.stderr.startswith("error: ") and r.stderr.strip().count("\n") == 0


@real
def test_cli_on_a_real_trace():
    r = runner.invoke(_app(), ["trace", str(REAL / "trace-c256.pt.trace.json.gz"), "--layers", "36", "--budget", "2048", "--json"])
    assert r.exit_code == 0
    doc = json.loads(r.stdout)
    assert doc["steps"]["steps_with_prefill"] == 10 and doc["trace"]["kernels"] == 68_789
