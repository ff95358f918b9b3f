"""The release-level pass (index, compare, RO-Crate) with the regenerating environment's entry point.
argv: data_dir work sde tag entry. Standard library only: see drivers/__init__.py."""

import importlib
import json
import sys
from pathlib import Path

data, work, sde, tag, entry = sys.argv[1:6]
mod, name = entry.split(":")
outs = getattr(importlib.import_module(mod), name)(Path(data), Path(work), sde=int(sde) if sde else None, tag=tag)
print(
    json.dumps({"done": {r: None if isinstance(v, Path) else f"{type(v).__name__}: {v}" for r, v in outs.items()}}),
    flush=True,
)
