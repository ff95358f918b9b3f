"""Engine adapters, one per `engine.kind`, behind one interface (`base.Engine`)."""

from __future__ import annotations

import os
from typing import Any

from evidence.engines.base import REGISTRY, Engine, EngineError, Setting
from evidence.engines.endpoint import EndpointEngine
from evidence.engines.vllm.adapter import VllmEngine
from evidence.spec.model import Spec


def make_engine(spec: Spec, repo_root: str | os.PathLike = ".", **options: Any) -> Engine:
    """The adapter for the spec's engine kind (options: port, cache_dir, extra_args, extra_env)."""
    try:
        factory = REGISTRY[spec.engine.kind]
    except KeyError:
        raise EngineError(f"no engine adapter for engine.kind {spec.engine.kind!r}; known: "
                          f"{', '.join(sorted(REGISTRY))}") from None
    return factory(spec, repo_root, **options)


__all__ = ["Engine", "EngineError", "EndpointEngine", "Setting", "VllmEngine", "make_engine"]
