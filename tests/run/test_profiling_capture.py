"""A real PyTorch-profiler trace captured from the CPU build of vLLM goes through the pipeline.

The CPU build records CPU operators and vLLM's per-step annotations but no GPU kernels: the
analyses that need kernels must say so, and the step composition must still come through.
"""

from __future__ import annotations

import urllib.request

import pytest

from evidence.loadgen import trial as loadgen

from evidence.traces import analyses as profile_analysis
from evidence.run.profiling import _wait_for_files
from evidence.loadgen.prompts import make_token_prompts, vocab_size_from_model_dir
from evidence.traces.load import load_trace


def _post(url: str) -> int:
    with urllib.request.urlopen(urllib.request.Request(url, data=b"", method="POST"), timeout=120) as r:
        return r.status


@pytest.mark.engine
def test_cpu_vllm_torch_profiler_trace_through_the_pipeline(vllm_server):
    before = set(vllm_server.profile_dir.rglob("*"))
    prompts = make_token_prompts(6, 24, 8, 3, vocab_size_from_model_dir(vllm_server.model_dir))
    assert _post(vllm_server.base_url + "/start_profile") == 200
    res = loadgen.run_trial(loadgen.TrialConfig(base_url=vllm_server.base_url, model=vllm_server.served_model,
                                                prompts=prompts, max_concurrency=3, telemetry=False))
    assert _post(vllm_server.base_url + "/stop_profile") == 200
    files = _wait_for_files(vllm_server.profile_dir, before, timeout_s=120)
    assert files, "vLLM wrote no trace file after /stop_profile"
    tr = load_trace(files[0])
    assert tr.format == "kineto-json"
    assert len(tr.kernels) == 0 and any(n.startswith("no GPU kernels") for n in tr.notes)
    # vLLM names each engine step execute_context_N(T)_generation_M(G): 6 prompts of 24 tokens
    # are prefilled somewhere in the window, and decode steps follow.
    assert tr.steps
    assert sum(s.prefill_tokens for s in tr.steps) == 6 * 24
    assert any(s.n_decode > 0 and s.n_prefill == 0 for s in tr.steps)  # decode-only steps follow
    a = profile_analysis.analyze_trace(tr, n_layers=4, budget=2048)
    assert a["kernel_active"]["absent"].startswith("no GPU kernels")
    assert a["steps"]["steps"] == len(tr.steps) and a["steps"]["steps_with_prefill"] >= 1
    # clock bridge: every step ran while the client had requests in flight (wall clock, 0.5 s slack)
    t0 = res.meta.t0_unix
    first = min(r.send_s for r in res.records) + t0
    last = max(r.end_s for r in res.records) + t0
    for s in tr.steps:
        assert first - 0.5 <= s.start_ns / 1e9 <= last + 0.5
