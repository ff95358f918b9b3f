"""An endpoint someone else started (spec engine.kind 'endpoint'): nothing to start or stop.

It reads what it can (`/version`, `/metrics`, `/v1/models`) and says plainly what it cannot.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from evidence.engines.base import EXTERNAL, EngineError, HttpEngine, combine_resolved, register, requested_from_spec
from evidence.engines.vllm.metrics import parse_metrics
from evidence.spec.model import Spec


@register("endpoint")
class EndpointEngine(HttpEngine):
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

    @classmethod
    def create(cls, spec: Spec, repo_root: str | os.PathLike = ".", **options: Any) -> "EndpointEngine":
        """Options for a started server (port, cache_dir, extra_args, extra_env) do not apply here."""
        return cls(spec)

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
        return combine_resolved({}, metrics_found, requested_from_spec(self.spec), version=self.version(),
                                models=self.models(), unknown_source=EXTERNAL)

    def processes(self) -> str:
        return "an endpoint someone else started: no local engine process to read"

    def stop(self, grace_s: float = 0.0) -> None:
        return None
