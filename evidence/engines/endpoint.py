"""An endpoint someone else started (spec engine.kind 'endpoint'): nothing to start or stop.

It reads what it can (`/version`, `/metrics`, `/v1/models`) and says plainly what it cannot.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Mapping

from evidence.engines.base import EXTERNAL, EngineError, HttpEngine, combine_resolved, register, requested_from_spec
from evidence.engines.vllm.metrics import TELEMETRY_SERIES, parse_metrics
from evidence.spec.model import Spec


@register("endpoint")
class EndpointEngine(HttpEngine):
    """A server someone else started (spec engine.kind 'endpoint'): nothing to start or stop."""

    kind = "endpoint"
    local_process = False  # someone else's server: nothing starts, restarts or stops
    can_profile = False  # the profiler is switched on where the server starts
    engine_python = False  # its Python is not ours to inspect
    # read as vLLM's /metrics, as its resolved settings are; a server without them has telemetry absent, with why
    telemetry_series = TELEMETRY_SERIES
    NOTIFY_EVERY_S = 30.0

    def __init__(self, spec: Spec, base_url: str | None = None):
        url = base_url or spec.engine.base_url
        if not url:
            raise EngineError("an endpoint engine needs engine.base_url in the spec")
        self.spec = spec
        self.base_url = url.rstrip("/")
        self.log_path: Path | None = None
        self.ready_after_s: float | None = None

    @classmethod
    def create(cls, spec: Spec, repo_root: str | os.PathLike = ".", **options: Any) -> "EndpointEngine":
        """Options for a started server (port, cache_dir, extra_args, extra_env) do not apply here."""
        return cls(spec)

    @classmethod
    def provenance_probe(cls, spec: Spec, repo_root: str | os.PathLike) -> None:
        """Nothing to probe before the run: the server is not ours."""
        return None

    @classmethod
    def profile_spec(cls, spec: Spec, trace_dir: Path) -> tuple[Spec, list[str]]:
        """Never reached: the runner profiles only where can_profile (a server it starts)."""
        raise EngineError("an endpoint engine cannot be profiled: its server is started by someone else")

    @classmethod
    def version_pin_hint(cls, spec: Spec, prov: Mapping[str, Any], pin: Mapping[str, Any]) -> tuple[str, str]:
        """(how the version was probed, what to do) for a refused engine-version pin."""
        return (f"probed GET {spec.engine.base_url}/version",
                "point engine.base_url at a server running that version, or drop engine.version from the spec")

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
        why, told, told_at = "", "", 0.0
        while True:
            for path in ("/health", "/v1/models"):
                status, _, why_now = self._probe(path, 2.0)
                last = status or last
                if status == 200:
                    self.ready_after_s = round(time.monotonic() - t0, 3)
                    return self.ready_after_s
                why = why_now or f"{self.base_url}{path} answered HTTP {status}"
            now = time.monotonic()
            # said at once, then again every NOTIFY_EVERY_S while it lasts (a wait must not be silent)
            if self.notify is not None and (why != told or now - told_at >= self.NOTIFY_EVERY_S):
                self.notify(f"waiting for the endpoint ({now - t0:.0f} s of {timeout:g} s): {why}")
                told, told_at = why, now
            if time.monotonic() - t0 > timeout:
                said = f"it last answered HTTP {last}" if last else f"nothing answered: {why}"
                raise EngineError(f"the endpoint {self.base_url} was not ready after {timeout:g} s "
                                  f"(polled /health and /v1/models; {said})")
            time.sleep(poll_s)

    def resolved(self) -> dict[str, dict[str, Any]]:
        metrics_found = parse_metrics(self.metrics_text())
        return combine_resolved({}, metrics_found, requested_from_spec(self.spec), version=self.version(),
                                models=self.models(), unknown_source=EXTERNAL)

    def processes(self) -> str:
        return "an endpoint someone else started: no local engine process to read"

    def stop(self, grace_s: float = 0.0) -> None:
        return None
