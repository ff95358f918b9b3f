"""Provenance of the machine: host, container hints, accelerators (NVML, else nvidia-smi)."""

from __future__ import annotations

import datetime as _dt
import os
import platform
import re
import shutil
import socket
import subprocess
from pathlib import Path
from typing import Any, Mapping



def read_text(path: str) -> str | None:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def run_command(argv: list[str], timeout: float = 30, env: Mapping[str, str] | None = None) -> tuple[int, str, str]:
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                           env=dict(env) if env is not None else None)
        return p.returncode, p.stdout, p.stderr
    except (OSError, subprocess.TimeoutExpired) as e:
        return -1, "", str(e)


def utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


# -------------------------------------------------------------------- host --


def host_info() -> dict[str, Any]:
    info: dict[str, Any] = {
        "hostname": socket.gethostname(),
        "os": platform.system(),
        "kernel": platform.release(),
        "kernel_version": platform.version(),
        "machine": platform.machine(),
    }
    osr = read_text("/etc/os-release")
    if osr:
        kv = dict(re.findall(r'^(\w+)="?([^"\n]*)"?$', osr, re.M))
        info["distribution"] = kv.get("PRETTY_NAME") or kv.get("NAME")
    cpu: dict[str, Any] = {"logical_cores": os.cpu_count()}
    try:
        cpu["usable_cores"] = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        pass
    cpuinfo = read_text("/proc/cpuinfo")
    if cpuinfo:
        m = re.search(r"^model name\s*:\s*(.+)$", cpuinfo, re.M)
        if m:
            cpu["model"] = m.group(1).strip()
        phys = {(a, b) for a, b in re.findall(r"^physical id\s*:\s*(\d+)\s*$[\s\S]*?^core id\s*:\s*(\d+)\s*$", cpuinfo, re.M)}
        if phys:
            cpu["physical_cores"] = len(phys)
        flags = re.search(r"^flags\s*:\s*(.+)$", cpuinfo, re.M)
        if flags:
            have = set(flags.group(1).split())
            cpu["isa"] = sorted(f for f in ("avx", "avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_tile", "fma", "sse4_2") if f in have)
    else:
        cpu["model"] = platform.processor() or None
    info["cpu"] = cpu
    meminfo = read_text("/proc/meminfo")
    if meminfo:
        m = re.search(r"^MemTotal:\s*(\d+) kB", meminfo, re.M)
        if m:
            info["memory_gib"] = round(int(m.group(1)) / 2**20, 2)
    return info


def container_info() -> dict[str, Any]:
    info: dict[str, Any] = {
        "dockerenv": os.path.exists("/.dockerenv"),
        "containerenv": os.path.exists("/run/.containerenv"),
    }
    if os.environ.get("container"):
        info["container_env"] = os.environ["container"]
    cg = read_text("/proc/1/cgroup")
    if cg is not None:
        info["cgroup"] = [ln for ln in cg.splitlines() if ln.strip()][:8]
    for k in ("EVIDENCE_IMAGE", "EVIDENCE_IMAGE_DIGEST"):
        if os.environ.get(k):
            info[k.lower()] = os.environ[k]
    info["likely_container"] = bool(info["dockerenv"] or info["containerenv"] or info.get("container_env")
                                    or any(x in (cg or "") for x in ("docker", "kubepods", "containerd", "lxc")))
    return info


# ------------------------------------------------------------- accelerator --


def _nvml() -> dict[str, Any] | None:
    try:
        import pynvml  # nvidia-ml-py
    except Exception:
        return None
    try:
        pynvml.nvmlInit()
    except Exception as e:
        return {"found": "none", "how": f"pynvml imported but NVML did not initialize ({e.__class__.__name__}: {e})"}

    def s(x: Any) -> Any:
        return x.decode() if isinstance(x, bytes) else x

    def opt(fn, *a):
        try:
            return s(fn(*a))
        except Exception:
            return None

    try:
        devices = []
        n = pynvml.nvmlDeviceGetCount()
        for i in range(n):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            mem = opt(pynvml.nvmlDeviceGetMemoryInfo, h)
            ecc = opt(pynvml.nvmlDeviceGetEccMode, h)
            mig = opt(pynvml.nvmlDeviceGetMigMode, h)
            power = opt(pynvml.nvmlDeviceGetPowerManagementLimit, h)
            devices.append({
                "index": i,
                "name": opt(pynvml.nvmlDeviceGetName, h),
                "uuid": opt(pynvml.nvmlDeviceGetUUID, h),
                "memory_total_mib": round(mem.total / 2**20) if mem is not None else None,
                "vbios": opt(pynvml.nvmlDeviceGetVbiosVersion, h),
                "ecc_mode_current": ecc[0] if isinstance(ecc, (list, tuple)) else None,
                "mig_mode_current": mig[0] if isinstance(mig, (list, tuple)) else None,
                "power_limit_w": power / 1000 if isinstance(power, (int, float)) else None,
                "max_sm_clock_mhz": opt(pynvml.nvmlDeviceGetMaxClockInfo, h, pynvml.NVML_CLOCK_SM),
                "max_mem_clock_mhz": opt(pynvml.nvmlDeviceGetMaxClockInfo, h, pynvml.NVML_CLOCK_MEM),
                "pci_bus_id": s(getattr(opt(pynvml.nvmlDeviceGetPciInfo, h), "busId", None)),
            })
        cuda = opt(pynvml.nvmlSystemGetCudaDriverVersion)
        return {
            "found": "nvml" if devices else "none",
            "how": "NVML via pynvml",
            "driver": opt(pynvml.nvmlSystemGetDriverVersion),
            "cuda_driver_version": f"{cuda // 1000}.{(cuda % 1000) // 10}" if isinstance(cuda, int) else None,
            "count": len(devices),
            "devices": devices,
        }
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


def _nvidia_smi() -> dict[str, Any] | None:
    exe = shutil.which("nvidia-smi")
    if not exe:
        return None
    rc, out, err = run_command([exe, "-q", "-x"], timeout=60)
    if rc != 0:
        return {"found": "none", "how": f"nvidia-smi -q -x failed (exit {rc}): {err.strip()[:200]}"}
    import xml.etree.ElementTree as ET

    try:
        root = ET.fromstring(out)
    except ET.ParseError as e:
        return {"found": "none", "how": f"nvidia-smi -q -x gave unreadable XML ({e})"}

    def t(node, path):
        x = node.find(path)
        return x.text.strip() if x is not None and x.text else None

    devices = []
    for i, g in enumerate(root.findall("gpu")):
        mem = t(g, "fb_memory_usage/total")
        devices.append({
            "index": i,
            "name": t(g, "product_name"),
            "uuid": t(g, "uuid"),
            "memory_total_mib": int(mem.split()[0]) if mem and mem.split()[0].isdigit() else mem,
            "vbios": t(g, "vbios_version"),
            "ecc_mode_current": t(g, "ecc_mode/current_ecc"),
            "mig_mode_current": t(g, "mig_mode/current_mig"),
            "power_limit_w": t(g, "gpu_power_readings/current_power_limit") or t(g, "power_readings/power_limit"),
            "max_sm_clock_mhz": t(g, "max_clocks/sm_clock"),
            "max_mem_clock_mhz": t(g, "max_clocks/mem_clock"),
            "pci_bus_id": g.get("id"),
        })
    return {
        "found": "nvidia-smi" if devices else "none",
        "how": "nvidia-smi -q -x",
        "driver": t(root, "driver_version"),
        "cuda_driver_version": t(root, "cuda_version"),
        "count": len(devices),
        "devices": devices,
    }


def accelerator_info(visible: str | None = None) -> dict[str, Any]:
    """NVML, else nvidia-smi, else {"found": "none", "how": ...}; `visible` is CUDA_VISIBLE_DEVICES."""
    tried = []
    info = None
    for probe, unavailable in ((_nvml, "pynvml is not importable"), (_nvidia_smi, "nvidia-smi is not on PATH")):
        got = probe()
        if got is None:
            tried.append(unavailable)
        elif got.get("found") == "none":
            tried.append(got["how"])
        else:
            info = got
            break
    if info is None:
        return {"found": "none", "how": "; ".join(tried), "count": 0, "visible_count": 0, "devices": []}
    devs = info["devices"]
    if visible is not None and visible.strip() != "":
        keys = [v.strip() for v in visible.split(",") if v.strip()]
        chosen = []
        for k in keys:
            for d in devs:
                if (k.isdigit() and d["index"] == int(k)) or (d.get("uuid") and d["uuid"].startswith(k)):
                    chosen.append(d)
                    break
        info["cuda_visible_devices"] = visible
        info["visible_count"] = len(chosen)
        for d in devs:
            d["visible"] = d in chosen
    else:
        info["visible_count"] = len(devs)
    return info


