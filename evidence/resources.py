"""Every location the package finds relative to its own files, in one place.

Modules ask here instead of walking `__file__`, so moving a module never breaks a path.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
REPO_CANDIDATE = PACKAGE.parent  # the source checkout, when running from one (not in an installed wheel)

# The launcher the engine's own python runs (a script, not imported by the harness).
VLLM_LAUNCHER = PACKAGE / "engines" / "vllm" / "launch.py"
# Pinned requirement lists of the CPU build of vLLM (package data).
VLLM_DATA = PACKAGE / "engines" / "vllm" / "data"
# The jinja2 templates of the report (package data).
TEMPLATES = PACKAGE / "report" / "templates"
# The tiny-model builder, run as a script under the engine's python when this one lacks tokenizers.
TINYMODEL_SCRIPT = PACKAGE / "tools" / "tinymodel.py"


def vllm_data_file(name: str) -> Path:
    return VLLM_DATA / name
