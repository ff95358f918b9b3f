"""GPU telemetry through NVML (nvidia-ml-py), read at each /metrics sample on the same trial clock.

On the H200 the slow and fast regimes of a server were visible here and nowhere else (GPU busy
65-78% at 506-545 W vs 80-95% at 587-640 W), so every trial records, per sample:

    gpu_util_pct      NVML utilization.gpu: % of the sample period a kernel ran (mean over the GPUs)
    gpu_power_w       board power draw, W (sum over the GPUs)
    gpu_sm_clock_mhz  current SM clock, MHz (mean over the GPUs)
    gpu_mem_used_mib  device memory in use, MiB (sum over the GPUs)

The GPUs read are those CUDA_VISIBLE_DEVICES names (by index or UUID), else every GPU NVML sees.
Where no GPU can be read, the keys are absent and `reason` says why (never zeros).
Each NVML query takes tens of microseconds, so reading beside the scrape costs the event loop little.
"""

from __future__ import annotations

import os
from typing import Any

KEYS = ("gpu_util_pct", "gpu_power_w", "gpu_sm_clock_mhz", "gpu_mem_used_mib")


class GpuReader:
    def __init__(self, visible: str | None = None):
        self.reason: str | None = None
        self.devices: list[dict[str, Any]] = []
        self._nvml: Any = None
        self._handles: list[Any] = []
        self._visible = os.environ.get("CUDA_VISIBLE_DEVICES") if visible is None else visible
        self.errors = 0
        self._open()

    def _open(self) -> None:
        try:
            import pynvml  # the nvidia-ml-py distribution
        except ImportError:
            self.reason = "nvidia-ml-py (pynvml) is not installed here: no GPU telemetry"
            return
        try:
            pynvml.nvmlInit()
        except Exception as e:  # NVMLError_LibraryNotFound, DriverNotLoaded ...
            self.reason = f"NVML could not start ({type(e).__name__}: {e}): no GPU telemetry"
            return
        self._nvml = pynvml
        try:
            n = pynvml.nvmlDeviceGetCount()
            handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(n)]
            uuids = [_text(pynvml.nvmlDeviceGetUUID(h)) for h in handles]
        except Exception as e:
            self.reason = f"NVML could not list the GPUs ({type(e).__name__}: {e})"
            return
        chosen = list(range(n))
        if self._visible not in (None, ""):
            want = [v.strip() for v in self._visible.split(",") if v.strip()]
            chosen = [i for i in range(n) if str(i) in want or uuids[i] in want]
        if not chosen:
            self.reason = (f"no NVIDIA GPU found by NVML (CUDA_VISIBLE_DEVICES={self._visible!r})" if n else
                           "NVML sees no NVIDIA GPU")
            return
        self._handles = [handles[i] for i in chosen]
        self.devices = [{"index": i, "uuid": uuids[i], "name": _text(pynvml.nvmlDeviceGetName(handles[i]))}
                        for i in chosen]

    def read(self) -> dict[str, float]:
        """One sample (the KEYS), or {} when no GPU can be read; a device whose query fails is left out of it."""
        if self.reason is not None or not self._handles:
            return {}
        nv = self._nvml
        util, power, clock, mem = [], [], [], []
        for h in self._handles:
            try:  # all four or none for a device, so the aggregates cover the same GPUs
                u = float(nv.nvmlDeviceGetUtilizationRates(h).gpu)
                pw = nv.nvmlDeviceGetPowerUsage(h) / 1000.0
                c = float(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM))
                mm = nv.nvmlDeviceGetMemoryInfo(h).used / 2**20
            except Exception:
                self.errors += 1
                continue
            util.append(u)
            power.append(pw)
            clock.append(c)
            mem.append(mm)
        out: dict[str, float] = {}
        if util:
            out["gpu_util_pct"] = sum(util) / len(util)
        if power:
            out["gpu_power_w"] = sum(power)
        if clock:
            out["gpu_sm_clock_mhz"] = sum(clock) / len(clock)
        if mem:
            out["gpu_mem_used_mib"] = sum(mem)
        return out

    def meta(self) -> dict[str, Any]:
        return {"enabled": self.reason is None, "reason": self.reason, "devices": self.devices,
                "errors": self.errors, "keys": list(KEYS) if self.reason is None else [],
                "how": "NVML (nvidia-ml-py) read at each /metrics sample: utilization.gpu, power, SM clock, "
                       "memory used; mean over GPUs for % and MHz, sum for W and MiB"}

    def close(self) -> None:
        if self._nvml is not None:
            try:
                self._nvml.nvmlShutdown()
            except Exception:
                pass
            self._nvml = None


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)
