"""Regenerate one run with the regenerating environment's entry point (a regenerate(raw, work, sde=, step=)).
argv: raw_dir work sde entry. Standard library only: see drivers/__init__.py."""

import importlib
import json
import sys
from pathlib import Path

raw, work, sde, entry = sys.argv[1:5]
mod, name = entry.split(":")
fn = getattr(importlib.import_module(mod), name)


def say(s):
    print(json.dumps({"step": s}), flush=True)


outs = fn(Path(raw), Path(work), sde=int(sde) if sde else None, step=say)
print(
    json.dumps({"done": {r: None if isinstance(v, Path) else f"{type(v).__name__}: {v}" for r, v in outs.items()}}),
    flush=True,
)
