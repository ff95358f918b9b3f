"""GPU telemetry through NVML. No GPU is on this machine, so the NVML library is replaced by a small
scripted module with pynvml's names (the real one is read on the H200; bench/h200 says what it saw)."""

from __future__ import annotations

import sys
import types

import pytest

from evidence.loadgen.gpu import KEYS, GpuReader


def _fake_nvml(devs: list[dict], fail_power: bool = False) -> types.ModuleType:
    m = types.ModuleType("pynvml")
    m.NVML_CLOCK_SM = 1
    m.nvmlInit = lambda: None
    m.nvmlShutdown = lambda: None
    m.nvmlDeviceGetCount = lambda: len(devs)
    m.nvmlDeviceGetHandleByIndex = lambda i: i
    m.nvmlDeviceGetUUID = lambda h: devs[h]["uuid"].encode()
    m.nvmlDeviceGetName = lambda h: b"NVIDIA H200"
    m.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(gpu=devs[h]["util"], memory=0)

    def power(h):
        if fail_power:
            raise RuntimeError("not supported")
        return devs[h]["mw"]

    m.nvmlDeviceGetPowerUsage = power
    m.nvmlDeviceGetClockInfo = lambda h, kind: devs[h]["mhz"]
    m.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(used=devs[h]["mib"] * 2**20)
    return m


DEVS = [{"uuid": "GPU-a", "util": 90, "mw": 600_000, "mhz": 1980, "mib": 1000},
        {"uuid": "GPU-b", "util": 70, "mw": 500_000, "mhz": 1700, "mib": 3000}]


def test_reads_the_visible_gpus_and_aggregates(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", _fake_nvml(DEVS))
    all_ = GpuReader(visible="")
    assert all_.read() == {"gpu_util_pct": 80.0, "gpu_power_w": 1100.0, "gpu_sm_clock_mhz": 1840.0,
                           "gpu_mem_used_mib": 4000.0}
    one = GpuReader(visible="GPU-b")
    assert [d["index"] for d in one.devices] == [1]
    assert one.read() == {"gpu_util_pct": 70.0, "gpu_power_w": 500.0, "gpu_sm_clock_mhz": 1700.0,
                          "gpu_mem_used_mib": 3000.0}
    assert one.meta()["enabled"] and one.meta()["keys"] == list(KEYS)


def test_absent_with_the_reason_never_zero(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    g = GpuReader()
    assert g.read() == {} and "not installed" in g.reason
    monkeypatch.setitem(sys.modules, "pynvml", _fake_nvml(DEVS))
    none = GpuReader(visible="7")
    assert none.read() == {} and "no NVIDIA GPU" in none.reason
    # a query that fails drops that device's values for the sample and counts the error
    monkeypatch.setitem(sys.modules, "pynvml", _fake_nvml(DEVS, fail_power=True))
    bad = GpuReader(visible="0")
    assert bad.read() == {} and bad.errors == 1


@pytest.mark.parametrize("visible", ["0", "GPU-a"])
def test_visible_by_index_or_uuid(monkeypatch, visible: str) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", _fake_nvml(DEVS))
    assert [d["uuid"] for d in GpuReader(visible=visible).devices] == ["GPU-a"]
