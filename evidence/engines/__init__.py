"""Engine adapters, one per `engine.kind`, behind one interface (`base.Engine`)."""

from __future__ import annotations

import os
from typing import Any

from evidence.engines.base import ADAPTERS, REGISTRY, Engine, EngineError, Setting, adapter_class
from evidence.engines.endpoint import EndpointEngine
from evidence.engines.vllm.adapter import VllmEngine
from evidence.spec.model import Spec


def make_engine(spec: Spec, repo_root: str | os.PathLike = ".", **options: Any) -> Engine:
    """The adapter for the spec's engine kind (options: port, cache_dir, extra_args, extra_env)."""
    return adapter_class(spec.engine.kind).create(spec, repo_root, **options)


__all__ = ["ADAPTERS", "REGISTRY", "adapter_class", "Engine", "EngineError", "EndpointEngine", "Setting", "VllmEngine", "make_engine"]
