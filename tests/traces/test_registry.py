"""The registry of trace analyses: output order, needs, absences with reasons."""

from __future__ import annotations

import pytest

from evidence.traces.analyses import registry
from evidence.traces.analyses.registry import ANALYSES, NEEDS, TraceAnalysis, analyze_trace
from evidence.traces.load import load_trace
from trace_fixtures import ForwardSpec, cpu_only_kineto, vllm_scenario, write_kineto_json


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    sc = vllm_scenario([ForwardSpec(8, 1, True, (0, 0, 8, 8)), ForwardSpec(8, 9, False, (2, 2042, 6, 6))])
    return load_trace(write_kineto_json(tmp_path_factory.mktemp("reg") / "t.json", sc))


def test_output_keys_follow_the_registry(trace):
    out = analyze_trace(trace, n_layers=36)
    # The published layout of a trace analysis (profile.json): its order is the registry's.
    layout = ["trace", "window", "kernel_active", "families", "geometry", "forwards", "sustained", "steps"]
    assert list(out) == layout == ["trace"] + [a.key for a in ANALYSES]
    assert all("absent" not in out[a.key] for a in ANALYSES if a.key != "geometry")


def test_every_need_is_known_and_explained():
    assert {n for a in ANALYSES for n in a.needs} <= set(NEEDS)
    assert len({a.key for a in ANALYSES}) == len(ANALYSES)


def test_unmet_need_is_absent_with_its_reason_and_never_runs(trace, monkeypatch):
    def boom(ctx):
        raise AssertionError("an analysis whose need is unmet must not run")

    monkeypatch.setattr(registry, "ANALYSES", ANALYSES + (TraceAnalysis("probe", ("layers",), boom, "test"),))
    out = analyze_trace(trace)  # no layer count
    assert out["probe"]["absent"].startswith("no layer count given (--layers)")
    assert out["forwards"] == out["sustained"] == out["probe"]


def test_no_kernels_makes_kernel_analyses_absent_and_steps_still_run(tmp_path):
    out = analyze_trace(load_trace(cpu_only_kineto(tmp_path / "cpu.json")), n_layers=36)
    kernel_keys = [a.key for a in ANALYSES if "kernels" in a.needs]
    assert kernel_keys and all(out[k]["absent"].startswith("no GPU kernels") for k in kernel_keys)
    assert out["steps"]["steps"] == 3


def test_the_text_is_each_analysis_s_renderer_in_registry_order(trace, monkeypatch):
    import io

    from rich.console import Console

    from evidence.cli import trace as cli_trace
    from evidence.traces.analyses.text import Line, Rows

    out = analyze_trace(trace, n_layers=36)
    assert all(a.render is not None for a in ANALYSES)
    blocks = {a.key: a.render(out) for a in ANALYSES if a.render}
    assert all(isinstance(b, (Line, Rows)) for bs in blocks.values() for b in bs)

    def text(r):
        buf = io.StringIO()
        cli_trace.render(r, Console(file=buf, width=200, highlight=False))
        return buf.getvalue()

    heads = ["Kernel-active", "Kernel families", "Launch geometry", "Forwards", "Sustained regime", "Engine steps"]
    shown = text(out)
    assert [shown.index(h) for h in heads] == sorted(shown.index(h) for h in heads)
    # the CLI prints what the registry carries: an analysis added with a renderer shows, in its place
    probe = TraceAnalysis("probe", (), lambda ctx: None, "test", lambda r: [Line("PROBE LINE", markup=False)])
    monkeypatch.setattr(cli_trace, "ANALYSES", ANALYSES + (probe,))
    assert text(out).endswith("PROBE LINE\n") and not shown.endswith("PROBE LINE\n")
