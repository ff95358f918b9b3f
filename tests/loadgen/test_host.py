"""Host telemetry (evidence.loadgen.host): the engine's processes by role from the tree the adapter started,
the client, the host figures, the speed probe; absent with the reason where they cannot be read."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from evidence.engines.base import ProcessRoles
from evidence.loadgen.host import HostReader, probe_ms, read_psi

psutil = pytest.importorskip("psutil")


def test_role_from_title_or_truncated_comm():
    roles = ProcessRoles(1, "api_server", (("engine_core", ("VLLM::EngineCore",)), ("worker", ("VLLM::Worker",))))
    assert roles.role_of("VLLM::EngineCore", "VLLM::EngineCor") == "engine_core"
    assert roles.role_of("", "VLLM::EngineCor") == "engine_core"  # comm is cut at 15 bytes
    assert roles.role_of("VLLM::Worker_TP0", "VLLM::Worker_TP") == "worker"
    assert roles.role_of("python3 -m something VLLM::EngineCore", "python3") == "other"  # a prefix, not a pattern


def _tree():
    """A real parent (the 'API server') whose child (the 'engine core') spins."""
    code = "import subprocess, sys; p = subprocess.Popen([sys.executable, '-c', 'while True: pass']); p.wait()"
    return subprocess.Popen([sys.executable, "-c", code])


def test_reader_reads_each_role_of_a_real_tree():
    parent = _tree()
    try:
        roles = ProcessRoles(
            parent.pid,
            "api_server",
            (
                (
                    "engine_core",
                    (f"{sys.executable} -c while"),
                ),
            ),
        )
        h = HostReader(roles, refresh_s=0.05)
        deadline = time.monotonic() + 10
        first = h.read()
        while "proc_engine_core_cpu_s" not in first and time.monotonic() < deadline:  # the child is starting
            time.sleep(0.05)
            first = h.read()
        last = h.read()
        while last["proc_engine_core_cpu_s"] <= first["proc_engine_core_cpu_s"] and time.monotonic() < deadline + 20:
            time.sleep(0.1)  # a busy shared machine: wait for the spinning child's CPU to show, not a set time
            last = h.read()
    finally:
        kids = psutil.Process(parent.pid).children(recursive=True)  # before the parent goes: then they are init's
        for c in kids:
            c.kill()
        parent.kill()
        parent.wait()
    assert last["proc_api_server_n"] == 1 and last["proc_engine_core_n"] == 1
    assert last["proc_engine_core_cpu_s"] > first["proc_engine_core_cpu_s"]  # a spinning process
    assert last["proc_engine_core_state"] in ("running", "sleeping")
    assert "proc_client_cpu_s" in last and last["host_cpu_idle_s"] >= first["host_cpu_idle_s"]
    assert last["host_ctx_switches"] >= first["host_ctx_switches"]
    m = h.meta()
    assert m["processes"]["enabled"] and {v["role"] for v in m["processes"]["seen"].values()} == {
        "api_server",
        "engine_core",
    }


def test_no_local_process_is_absent_with_the_reason(tmp_path):
    h = HostReader("an endpoint someone else started: no local engine process to read", psi_dir=str(tmp_path))
    s = h.read()
    assert not any(k.startswith("proc_") and not k.startswith("proc_client") for k in s)
    m = h.meta()
    assert not m["processes"]["enabled"] and "endpoint" in m["processes"]["reason"]
    # no /proc/pressure here: every PSI key absent, each with why (never a zero)
    assert not any(k.startswith("host_psi_") for k in s)
    assert set(m["absent"]) >= {"host_psi_cpu", "host_psi_memory", "host_psi_io"}


def test_psi_totals_parsed(tmp_path):
    (tmp_path / "cpu").write_text(
        "some avg10=0.12 avg60=0.52 avg300=0.18 total=1130211\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
    )
    (tmp_path / "memory").write_text(
        "some avg10=0.00 avg60=0.00 avg300=0.00 total=7\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=3\n"
    )
    vals, absent = read_psi(str(tmp_path))
    assert vals == {"host_psi_cpu_some_us": 1130211.0, "host_psi_memory_some_us": 7.0, "host_psi_memory_full_us": 3.0}
    assert list(absent) == ["io"]


def test_probe_times_the_loop():
    assert probe_ms(1000) > 0


def test_endpoint_declares_no_local_process():
    from evidence.engines.endpoint import EndpointEngine
    from evidence.spec.model import Spec

    spec = Spec.model_validate(
        {
            "name": "t",
            "title": "t",
            "hardware": {"count": 0},
            "engine": {"kind": "endpoint", "base_url": "http://127.0.0.1:9"},
            "model": {"id": "m"},
            "workload": {"input_len": 4, "output_len": 4, "seed": 1},
            "sweep": {"points": [1], "prompts": {1: 1}},
        }
    )
    assert "no local engine process" in EndpointEngine(spec).processes()


@pytest.mark.engine
def test_trial_on_real_vllm_records_cpu_by_role(vllm_server):
    from evidence.loadgen.prompts import make_token_prompts, vocab_size_from_model_dir
    from evidence.loadgen.trial import TrialConfig, run_trial

    roles = vllm_server.engine.processes()
    assert isinstance(roles, ProcessRoles) and roles.root_pid == vllm_server.engine.proc.pid
    cfg = TrialConfig(
        base_url=vllm_server.base_url,
        model=vllm_server.served_model,
        prompts=make_token_prompts(16, 16, 32, seed=7, vocab_size=vocab_size_from_model_dir(vllm_server.model_dir)),
        max_concurrency=4,
        processes=roles,
        telemetry_interval_s=0.1,
        telemetry_series=vllm_server.engine.telemetry_series,  # host figures ride on the adapter's /metrics samples
    )
    res = run_trial(cfg)
    assert res.meta.counts["ok"] == 16
    rows = [r for r in res.telemetry if "proc_engine_core_cpu_s" in r and "proc_api_server_cpu_s" in r]
    assert len(rows) >= 2, res.meta.telemetry["host"]
    for role in ("api_server", "engine_core"):
        used = rows[-1][f"proc_{role}_cpu_s"] - rows[0][f"proc_{role}_cpu_s"]
        span = rows[-1]["t_s"] - rows[0]["t_s"]
        assert 0 < used / span < 64, (role, used, span)  # busy, and no more cores than a machine has
    host = res.meta.telemetry["host"]
    seen = {v["role"] for v in host["processes"]["seen"].values()}
    assert {"api_server", "engine_core"} <= seen
    assert len(host["probe"]["ms"]["before"]) == 5 and all(v > 0 for v in host["probe"]["ms"]["after"])
