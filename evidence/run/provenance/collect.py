"""Provenance: what the experiment ran on, collected once per engine start.

`collect_provenance(spec, ...)` returns a JSON-able dict: host, container hints,
accelerator (NVML, else `nvidia-smi -q -x`, else an explicit "none" and how it
looked), the harness's and the engine's python and every installed package,
the engine build and version, sha256 of the model's files, git state, the
spec's sha256, an allow-listed environment, and the pin checks (requested vs
effective for everything the spec pins).

A release is meant to be published, so secrets never get in: the environment is
allow-listed by prefix, and within it any name containing TOKEN, KEY, SECRET,
PASSWORD or CREDENTIAL has its value replaced; every string in the result is
also scrubbed of credential-looking values (user:pass@ in URLs, hf_... tokens,
bearer tokens, common API key shapes). `redact(obj)` does that to any JSON-able
structure; `find_secrets(path_or_tree)` reports what looks like a secret in
files (freeze uses it to refuse).
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterable, Mapping

from evidence.canon import sha256_file
from evidence.spec.model import Spec

# One scanner for the whole package (evidence.secrets); its names stay importable from here.
from evidence.secrets import (  # noqa: E402,F401
    REDACTED, find_secrets_in as find_secrets, redact, scrub_text, secret_env_name, secret_key_name,
    strip_url_credentials,
)

# ------------------------------------------------------------- environment --

ENV_PREFIXES = (
    "VLLM_", "CUDA_", "NCCL_", "TORCH_", "TORCHINDUCTOR_", "OMP_", "GOMP_", "KMP_", "MKL_", "OPENBLAS_",
    "HF_", "TRANSFORMERS_", "TOKENIZERS_", "PYTORCH_", "CUBLAS_", "CUBLASLT_", "CUDNN_", "TRITON_",
    "NVIDIA_", "ONEDNN_", "DNNL_", "EVIDENCE_",
)
ENV_NAMES = ("PYTHONHASHSEED", "LD_PRELOAD", "SOURCE_DATE_EPOCH", "TZ", "CI")


def allowed_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The allow-listed part of an environment, secrets redacted (sorted by name)."""
    env = os.environ if environ is None else environ
    out = {}
    for k in sorted(env):
        if not (k.startswith(ENV_PREFIXES) or k in ENV_NAMES):
            continue
        v = env[k]
        out[k] = REDACTED if (secret_env_name(k) and v) else scrub_text(v)
    return out


# ----------------------------------------------------------------- helpers --


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def _run(argv: list[str], timeout: float = 30, env: Mapping[str, str] | None = None) -> tuple[int, str, str]:
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                           env=dict(env) if env is not None else None)
        return p.returncode, p.stdout, p.stderr
    except (OSError, subprocess.TimeoutExpired) as e:
        return -1, "", str(e)


def _now() -> str:
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
    osr = _read("/etc/os-release")
    if osr:
        kv = dict(re.findall(r'^(\w+)="?([^"\n]*)"?$', osr, re.M))
        info["distribution"] = kv.get("PRETTY_NAME") or kv.get("NAME")
    cpu: dict[str, Any] = {"logical_cores": os.cpu_count()}
    try:
        cpu["usable_cores"] = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        pass
    cpuinfo = _read("/proc/cpuinfo")
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
    meminfo = _read("/proc/meminfo")
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
    cg = _read("/proc/1/cgroup")
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
    rc, out, err = _run([exe, "-q", "-x"], timeout=60)
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
    info = _nvml()
    if info is None:
        tried.append("pynvml is not importable")
    elif info.get("found") == "none":
        tried.append(info["how"])
        info = None
    if info is None:
        info = _nvidia_smi()
        if info is None:
            tried.append("nvidia-smi is not on PATH")
        elif info.get("found") == "none":
            tried.append(info["how"])
            info = None
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


# ---------------------------------------------------------------- packages --


def harness_python() -> dict[str, Any]:
    import importlib.metadata as md

    pkgs = {}
    for d in md.distributions():
        name = d.metadata.get("Name")
        if name:
            pkgs.setdefault(name, d.version)
    return {
        "version": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "executable": sys.executable,
        "packages": dict(sorted(pkgs.items(), key=lambda kv: kv[0].lower())),
    }


_ENGINE_PROBE = r"""
import importlib.metadata as md, json, platform, sys
pkgs = {}
for d in md.distributions():
    n = d.metadata.get("Name")
    if n:
        pkgs.setdefault(n, d.version)
print(json.dumps({"version": sys.version.split()[0], "implementation": platform.python_implementation(),
                  "executable": sys.executable, "packages": dict(sorted(pkgs.items(), key=lambda kv: kv[0].lower()))}))
"""


def engine_python_info(python: str, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The engine python's version and every installed package (run in that python, in the engine's env)."""
    rc, out, err = _run([python, "-c", _ENGINE_PROBE], timeout=120, env=env)
    if rc != 0:
        return {"executable": python, "error": f"could not inspect the engine python (exit {rc}): {err.strip()[-300:]}"}
    try:
        return json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"executable": python, "error": "the engine python's package list was unreadable"}


# ------------------------------------------------------------------- model --

MODEL_FILES = (
    "config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
    "chat_template.jinja", "chat_template.json", "tokenizer.model", "vocab.json", "merges.txt", "added_tokens.json",
    "preprocessor_config.json", "evidence-tiny.json",
)
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")


def model_info(spec: Spec, repo_root: Path, *, hash_weights: bool = True) -> dict[str, Any]:
    m = spec.model
    info: dict[str, Any] = {"id": m.id, "revision": m.revision, "load_format": m.load_format,
                            "served_name": m.served_name or m.id}
    if not m.path:
        info["files"] = None
        info["note"] = "served by id: the engine fetches the files; their hashes are not recorded here"
        return info
    p = Path(m.path)
    folder = p if p.is_absolute() else repo_root / p
    info["path"] = m.path
    if not folder.is_dir():
        info["files"] = None
        info["note"] = f"the model folder {folder} does not exist"
        return info
    files = {}
    for f in sorted(folder.iterdir()):
        if not f.is_file():
            continue
        is_weight = f.name.endswith(WEIGHT_SUFFIXES) or f.name.endswith(".index.json")
        if f.name in MODEL_FILES or is_weight:
            entry: dict[str, Any] = {"bytes": f.stat().st_size}
            if not is_weight or hash_weights or f.name.endswith(".index.json"):
                entry["sha256"] = sha256_file(f)
            files[f.name] = entry
    info["files"] = files
    info["weights"] = "present" if any(n.endswith(WEIGHT_SUFFIXES) for n in files) else "none (dummy load format)" if m.load_format == "dummy" else "none found"
    snap = re.search(r"/snapshots/([0-9a-f]{40})(?:/|$)", str(folder.resolve()))
    if snap:
        info["revision_from_path"] = snap.group(1)
    return info


# --------------------------------------------------------------------- git --


def git_info(repo_root: Path, code_commit: str | None = None, code_dirty: bool | None = None) -> dict[str, Any]:
    passed = code_commit or os.environ.get("EVIDENCE_CODE_COMMIT") or None
    passed_from = "code_commit argument" if code_commit else ("EVIDENCE_CODE_COMMIT" if passed else None)
    if code_dirty is None and os.environ.get("EVIDENCE_CODE_DIRTY") in ("0", "1"):
        code_dirty = os.environ["EVIDENCE_CODE_DIRTY"] == "1"
    try:
        import git  # GitPython
    except Exception as e:  # ImportError, or git binary missing
        return {"present": None, "error": f"GitPython unusable: {e}", "commit": passed, "commit_source": passed_from,
                "dirty": code_dirty, "dirty_source": "passed in" if code_dirty is not None else None}
    try:
        repo = git.Repo(repo_root, search_parent_directories=True)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        return {"present": False, "note": f"no .git at or above {repo_root}: the commit is what was passed in",
                "commit": passed, "commit_source": passed_from, "dirty": code_dirty,
                "dirty_source": "passed in" if code_dirty is not None else None}
    info: dict[str, Any] = {"present": True, "root": repo.working_tree_dir}
    try:
        info["commit"] = repo.head.commit.hexsha
        info["commit_source"] = "git HEAD"
    except Exception as e:  # empty repository, dubious ownership...
        info["commit"] = passed
        info["commit_source"] = passed_from
        info["error"] = f"could not read HEAD: {str(e).strip().splitlines()[0] if str(e).strip() else e.__class__.__name__}"
    try:
        info["branch"] = repo.active_branch.name
    except Exception:
        info["branch"] = None  # detached HEAD or no commits
    try:
        dirty_paths = sorted({d.a_path for d in repo.index.diff(None)} | {d.a_path for d in repo.index.diff("HEAD")}) \
            if "commit" in info and info.get("commit_source") == "git HEAD" else []
        untracked = sorted(repo.untracked_files)
        info["dirty"] = bool(dirty_paths or untracked)
        info["dirty_source"] = "git status (tracked changes and untracked files)"
        info["modified"] = dirty_paths[:100]
        info["untracked"] = untracked[:100]
        info["modified_count"] = len(dirty_paths)
        info["untracked_count"] = len(untracked)
    except Exception as e:
        info["dirty"] = None
        info["dirty_error"] = str(e).strip().splitlines()[0] if str(e).strip() else e.__class__.__name__
    try:
        info["remotes"] = {r.name: [strip_url_credentials(u) for u in r.urls] for r in repo.remotes}
    except Exception:
        info["remotes"] = {}
    if passed and info.get("commit") and passed != info["commit"]:
        info["passed_commit"] = passed
    return info


# -------------------------------------------------------------- collection --


def _engine_section(spec: Spec, engine: Any, engine_python: str | None,
                    root: Path) -> tuple[dict[str, Any], str | None, dict[str, str] | None]:
    sec: dict[str, Any] = {"kind": spec.engine.kind, "requested_version": spec.engine.version}
    py = engine_python
    probe = engine if engine is not None and hasattr(engine, "probe_env") else None
    if engine is not None and py is None:
        py = getattr(engine, "python", None)
    if engine is None and spec.engine.kind == "vllm":
        from evidence.engines.vllm.adapter import VllmEngine

        try:
            probe = VllmEngine(spec, root, port=1)
            py = py or probe.python
        except Exception:
            probe = None
    env = probe.probe_env() if probe is not None else None
    build = None
    if engine is not None and hasattr(engine, "build") and (engine_python is None or engine_python == py):
        build = engine.build()
    elif py:
        from evidence.engines.vllm.adapter import engine_build

        build = engine_build(py, env)
    sec["build"] = build
    reported = None
    if engine is not None and hasattr(engine, "alive") and engine.alive():
        reported = engine.version()
    sec["reported_version"] = reported
    sec["version"] = reported or (build or {}).get("version")
    sec["version_source"] = "/version" if reported else ("installed distribution" if build else None)
    if engine is not None and hasattr(engine, "environment") and not getattr(engine, "env_applied", None):
        try:
            engine.environment()  # fills env_applied: what the engine will be given, and why
        except Exception:
            pass
    if engine is not None and hasattr(engine, "describe"):
        try:
            sec["launch"] = engine.describe()
        except Exception as e:
            sec["launch_error"] = str(e)
    sec["python"] = py
    return sec, py, env


def collect_provenance(
    spec: Spec | None,
    *,
    repo_root: str | os.PathLike,
    engine: Any = None,
    engine_python: str | None = None,
    code_commit: str | None = None,
    code_dirty: bool | None = None,
    spec_sha256: str | None = None,
    hash_weights: bool = True,
) -> dict[str, Any]:
    """Everything provenance.json records (redacted), with the pin checks under "pins".

    `spec` None: only what does not depend on a spec (no model, no pins; the
    engine python is `.venv-vllm/bin/python` under repo_root when there is one).
    `code_commit`/`code_dirty` (or EVIDENCE_CODE_COMMIT / EVIDENCE_CODE_DIRTY=0|1)
    stand in for git when the tree has no .git (e.g. a copied checkout).
    """
    root = Path(repo_root).resolve()
    from evidence import __version__

    if spec is None:
        default_py = root / ".venv-vllm" / "bin" / "python"
        py = engine_python or (str(default_py) if default_py.exists() else None)
        from evidence.engines.vllm.adapter import engine_build

        build = engine_build(py) if py else None
        engine_sec = {"kind": None, "build": build, "version": (build or {}).get("version"),
                      "version_source": "installed distribution" if build else None, "python": py}
        probe_env = None
    else:
        engine_sec, py, probe_env = _engine_section(spec, engine, engine_python, root)
    env_engine = dict(getattr(engine, "env_applied", {}) or {})
    visible = (env_engine.get("CUDA_VISIBLE_DEVICES") or {}).get("value") if env_engine else None
    if visible is None:
        spec_env = spec.engine.env if spec is not None else {}
        visible = spec_env.get("CUDA_VISIBLE_DEVICES", os.environ.get("CUDA_VISIBLE_DEVICES"))
    prov: dict[str, Any] = {
        "schema": "evidence.provenance/1",
        "collected_at": _now(),
        "evidence_version": __version__,
        "spec": {"name": spec.name if spec else None, "sha256": spec_sha256},
        "host": host_info(),
        "container": container_info(),
        "accelerator": accelerator_info(visible),
        "python": {"harness": harness_python()},
        "engine": engine_sec,
        "model": model_info(spec, root, hash_weights=hash_weights) if spec else None,
        "git": git_info(root, code_commit, code_dirty),
        "env": {
            "allow_list": {"prefixes": list(ENV_PREFIXES), "names": list(ENV_NAMES)},
            "harness": allowed_env(),
            "engine_applied": {k: (REDACTED if secret_env_name(k) else scrub_text(v.get("value", "")))
                               for k, v in sorted(env_engine.items())},
        },
    }
    if py and (spec is None or spec.engine.kind == "vllm"):
        prov["python"]["engine"] = engine_python_info(py, probe_env)
    if engine is not None and hasattr(engine, "resolved") and getattr(engine, "alive", lambda: False)():
        try:
            res = engine.resolved()
            rev = res.get("revision")
            if rev and rev.get("value") and prov.get("model"):
                prov["model"]["revision_reported"] = rev["value"]
        except Exception:
            pass
    prov["pins"] = check_pins(spec, prov) if spec is not None else []
    return redact(prov)


# -------------------------------------------------------------------- pins --


def _public(v: str | None) -> str | None:
    return v.split("+", 1)[0] if isinstance(v, str) else v


def check_pins(spec: Spec, prov: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Requested vs effective for every pin: [{"pin", "requested", "effective", "ok", "note"?}]."""
    pins: list[dict[str, Any]] = []
    acc = prov.get("accelerator") or {}
    devs = [d for d in acc.get("devices") or [] if d.get("visible", True)]
    names = sorted({d.get("name") or "?" for d in devs})
    want = spec.hardware.accelerator
    if want:
        ok = bool(devs) and all((d.get("name") or "").strip().lower() == want.strip().lower() for d in devs)
        pins.append({"pin": "accelerator model", "requested": want, "effective": ", ".join(names) if names else "none",
                     "ok": ok, **({} if devs else {"note": acc.get("how")})})
    else:
        pins.append({"pin": "accelerator model", "requested": None, "effective": ", ".join(names) if names else "none",
                     "ok": True, "note": "not pinned (the spec expects no accelerator)"})
    count = acc.get("visible_count", len(devs))
    pins.append({"pin": "accelerator count", "requested": spec.hardware.count, "effective": count,
                 "ok": count == spec.hardware.count})

    eng = prov.get("engine") or {}
    eff_v = eng.get("version")
    if spec.engine.version:
        ok = eff_v is not None and (eff_v == spec.engine.version or _public(eff_v) == _public(spec.engine.version))
        build = eng.get("build") or {}
        pins.append({"pin": "engine version", "requested": spec.engine.version,
                     "effective": (f"{eff_v} ({build.get('distribution')})" if build.get("distribution") and eff_v else eff_v),
                     "ok": ok, **({"note": f"read from {eng.get('version_source')}"} if eng.get("version_source") else
                                  {"note": "the engine version could not be read"})})
    else:
        pins.append({"pin": "engine version", "requested": None, "effective": eff_v, "ok": True, "note": "not pinned"})

    model = prov.get("model") or {}
    if spec.model.revision:
        eff = model.get("revision_reported") or model.get("revision_from_path")
        if spec.model.path and not eff:
            pins.append({"pin": "model revision", "requested": spec.model.revision, "effective": None, "ok": False,
                         "note": "served from a local folder that does not show its revision (not a hub snapshot path); "
                                 "the file hashes are recorded instead"})
        else:
            eff = eff or (spec.model.revision if not spec.model.path else None)
            pins.append({"pin": "model revision", "requested": spec.model.revision, "effective": eff,
                         "ok": eff == spec.model.revision,
                         **({"note": "passed to the engine as --revision; confirmed by the engine's log"}
                            if model.get("revision_reported") else
                            {"note": "passed to the engine as --revision (not confirmed yet)"} if not spec.model.path else {})})
    else:
        pins.append({"pin": "model revision", "requested": None, "effective": model.get("revision_reported"),
                     "ok": True, "note": "not pinned"})

    git = prov.get("git") or {}
    commit = git.get("commit")
    if spec.code.commit:
        pins.append({"pin": "code commit", "requested": spec.code.commit, "effective": commit,
                     "ok": commit == spec.code.commit,
                     **({"note": f"from {git.get('commit_source')}"} if git.get("commit_source") else
                        {"note": "no commit could be read or was passed in"})})
    else:
        pins.append({"pin": "code commit", "requested": None, "effective": commit, "ok": True, "note": "not pinned"})

    dirty = git.get("dirty")
    eff_tree = "unknown" if dirty is None else ("dirty" if dirty else "clean")
    if dirty and git.get("present"):
        eff_tree += f" ({git.get('modified_count', 0)} modified, {git.get('untracked_count', 0)} untracked)"
    if spec.code.allow_dirty:
        pins.append({"pin": "clean tree", "requested": "dirty allowed", "effective": eff_tree, "ok": True})
    else:
        pins.append({"pin": "clean tree", "requested": "clean", "effective": eff_tree, "ok": dirty is False,
                     **({"note": "no .git and no dirty flag passed in: cleanliness cannot be confirmed"}
                        if dirty is None else {})})
    return pins


def failed_pins(pins: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [p for p in pins if not p.get("ok")]
