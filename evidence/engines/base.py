"""What every engine adapter offers, and the registry that picks one by `engine.kind`.

An adapter starts (or finds), watches, reads and stops the server under test:
`start`, `wait_ready`, `alive`, `version`, `resolved`, `describe`, `command`,
`build`, `stop`, and use as a context manager that stops on exit.

What an engine resolved is a dict `name -> Setting.as_dict()` (that form is
written to `engine/resolved.json`): the value and the source that says where it
was read: `log: <excerpt of the line>`, `/metrics cache_config_info`,
`/v1/models`, `/version`, `requested (not confirmed by the engine)`,
`inferred: <why>` or `not reported by the engine`. Entries for settings the spec
asked for also carry `"requested"`.
"""

from __future__ import annotations

import json
import os
import socket
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Protocol, runtime_checkable

from evidence.spec.model import Spec

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


class EngineError(Exception):
    """The engine could not be started, died, or never got ready (message: one paragraph + log tail)."""


_UNSET: Any = object()


@dataclass(frozen=True)
class Setting:
    """One resolved setting: its value, where it was read, and what the spec asked for (when it did)."""

    value: Any
    source: str
    requested: Any = _UNSET
    also: str | None = None

    def as_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"value": self.value, "source": self.source}
        if self.requested is not _UNSET:
            d["requested"] = self.requested
        if self.also is not None:
            d["also"] = self.also
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Setting":
        return cls(d.get("value"), str(d.get("source", "")), d.get("requested", _UNSET), d.get("also"))


@runtime_checkable
class Engine(Protocol):
    """The interface the runner uses; `kind` is the spec's `engine.kind`.

    The class attributes and classmethods below are what the other stages ask the adapter instead of
    comparing `engine.kind` (see `adapter_class`)."""

    kind: str
    #: this tool starts, restarts (a new session) and stops the server; False: someone else's server
    local_process: bool
    #: a profiler capture (`profile:` in the spec) can be taken on a server started for it
    can_profile: bool
    #: the server runs in a Python of its own whose packages belong in the provenance
    engine_python: bool
    #: the `/metrics` series sampled during a trial -> the engine-neutral telemetry column the analysis reads
    telemetry_series: Mapping[str, str]
    base_url: str
    log_path: Any
    ready_after_s: float | None

    def command(self) -> list[str]: ...
    def build(self) -> dict[str, str] | None: ...
    def describe(self) -> dict[str, Any]: ...
    def start(self, log_path: str | os.PathLike) -> None: ...
    def wait_ready(self, timeout: float | None = None, poll_s: float = 1.0) -> float: ...
    def alive(self) -> bool: ...
    def version(self) -> str | None: ...
    def resolved(self) -> dict[str, dict[str, Any]]: ...
    def stop(self, grace_s: float = 10.0) -> None: ...

    @classmethod
    def provenance_probe(cls, spec: Spec, repo_root: Any) -> Any: ...
    @classmethod
    def version_pin_hint(cls, spec: Spec, prov: Mapping[str, Any], pin: Mapping[str, Any]) -> tuple[str, str]: ...
    @classmethod
    def profile_spec(cls, spec: Spec, trace_dir: Any) -> tuple[Spec, list[str]]: ...


@dataclass(frozen=True)
class ProcessRoles:
    """Where an engine's processes are, for the host telemetry (evidence.loadgen.host): the process the adapter
    launched (`root_pid`, whose role is `root_role`) and how its descendants' roles are told.

    `titles` is (role, title prefixes) in order: a descendant whose process title (its cmdline, which
    setproctitle rewrites; or its comm, which the kernel truncates to 15 bytes) starts with one of a role's
    prefixes has that role; any other descendant is 'other'. Roles come from the tree the adapter started,
    never from a machine-wide name search, so another server on the same host is never counted."""

    root_pid: int
    root_role: str
    titles: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def role_of(self, cmdline: str, comm: str) -> str:
        for role, prefixes in self.titles:
            for p in prefixes:
                if cmdline.startswith(p) or comm.startswith(p[:15]):
                    return role
        return "other"

    def as_dict(self) -> dict[str, Any]:
        return {"root_pid": self.root_pid, "root_role": self.root_role,
                "titles": {role: list(prefixes) for role, prefixes in self.titles}}


#: engine.kind -> factory(spec, repo_root, **options) -> Engine; filled by `register`.
REGISTRY: dict[str, Callable[..., Engine]] = {}
#: engine.kind -> the adapter class, for what is asked before (or without) a server: `adapter_class`.
ADAPTERS: dict[str, type] = {}


def register(kind: str) -> Callable[[type], type]:
    """Class decorator: the class's `create(spec, repo_root, **options)` serves `engine.kind == kind`."""

    def deco(cls: type) -> type:
        REGISTRY[kind] = cls.create  # type: ignore[attr-defined]
        ADAPTERS[kind] = cls
        return cls

    return deco


def adapter_class(kind: str) -> Any:
    """The adapter class registered for an `engine.kind` (its capabilities, probes and hints)."""
    try:
        return ADAPTERS[kind]
    except KeyError:
        raise EngineError(f"no engine adapter for engine.kind {kind!r}; known: {', '.join(sorted(ADAPTERS))}") from None


# ------------------------------------------------------------------ helpers --


def die_with_parent(sig: int = 15):
    """A Popen `preexec_fn`: the child gets `sig` (SIGTERM) when the process that started it dies.

    So a runner killed with -9 leaves no engine behind (Linux PR_SET_PDEATHSIG, which survives
    exec). Where prctl is missing it does nothing (resume still finds and stops a leftover engine).
    """
    parent = os.getpid()

    def preexec() -> None:
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, sig, 0, 0, 0)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            return
        if os.getppid() != parent:  # the parent died before prctl took effect
            os.kill(os.getpid(), sig)

    return preexec


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def http_get(url: str, timeout: float = 3.0, headers: Mapping[str, str] | None = None) -> tuple[int, str]:
    """(status, body) of a GET; status 0 when nothing answered."""
    status, body, _ = http_probe(url, timeout, headers)
    return status, body


def http_probe(url: str, timeout: float = 3.0, headers: Mapping[str, str] | None = None) -> tuple[int, str, str]:
    """(status, body, why) of a GET; status 0 and why (e.g. "connection refused at URL") when nothing answered."""
    try:
        with _OPENER.open(urllib.request.Request(url, headers=dict(headers or {})), timeout=timeout) as r:
            return r.status, r.read().decode("utf-8", "replace"), ""
    except urllib.error.HTTPError as e:
        try:
            body = e.read().decode("utf-8", "replace")
        except Exception:
            body = ""
        return e.code, body, ""
    except (urllib.error.URLError, OSError, ValueError) as e:
        reason = getattr(e, "reason", e)
        if isinstance(reason, ConnectionRefusedError):
            return 0, "", f"connection refused at {url} (nothing listens there)"
        if isinstance(reason, (TimeoutError, socket.timeout)):
            return 0, "", f"no answer from {url} within {timeout:g} s"
        return 0, "", f"{url} could not be reached: {reason}"



def requested_from_spec(spec: Spec, extra_args: Iterable[str] = ()) -> dict[str, Any]:
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


class HttpEngine:
    """Shared by adapters: the context manager and the read-only HTTP endpoints of an OpenAI-style server."""

    kind = "base"
    base_url = ""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self, grace_s: float = 10.0) -> None:  # pragma: no cover - overridden
        return None

    def processes(self) -> ProcessRoles | str:
        """The engine's local processes by role (ProcessRoles), or why there are none to read."""
        return f"the {self.kind} adapter declares no process roles"

    def settings(self) -> dict[str, Setting]:
        """`resolved()` as typed entries."""
        return {k: Setting.from_dict(v) for k, v in self.resolved().items()}  # type: ignore[attr-defined]

    @property
    def api_key(self) -> str | None:
        """The API key from the environment variable the spec names (read now, never stored or recorded)."""
        spec = getattr(self, "spec", None)
        if spec is None:
            return None
        return os.environ.get(spec.engine.api_key_env_name()) or None

    #: Called with a line for the user while a wait goes on (what the server answered); set by the runner.
    notify: Callable[[str], None] | None = None

    def _probe(self, path: str, timeout: float = 3.0) -> tuple[int, str, str]:
        key = self.api_key
        return http_probe(self.base_url.rstrip("/") + path, timeout,
                          {"Authorization": f"Bearer {key}"} if key else None)

    def _get(self, path: str, timeout: float = 3.0) -> tuple[int, str]:
        key = self.api_key
        return http_get(self.base_url.rstrip("/") + path, timeout,
                        {"Authorization": f"Bearer {key}"} if key else None)

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

