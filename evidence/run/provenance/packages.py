"""Provenance of the software: the harness's and the engine's Python and packages, the model's files."""

from __future__ import annotations

import json
import platform
import re
import sys
from pathlib import Path
from typing import Any, Mapping

from evidence.canon import sha256_file
from evidence.run.provenance.host import run_command
from evidence.spec.model import Spec


# ---------------------------------------------------------------- packages --


def harness_python() -> dict[str, Any]:
    import importlib.metadata as md

    pkgs = {}
    for d in md.distributions():
        name = d.metadata.get("Name")  # type: ignore[attr-defined]  # an email Message at run time, with .get
        if name:
            pkgs.setdefault(name, d.version)
    return {
        "version": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "executable": sys.executable,
        "packages": dict(sorted(pkgs.items(), key=lambda kv: kv[0].lower())),
    }


# harness_python again, as text: it runs under the engine's interpreter, which
# may not have evidence installed (stdlib only).
_ENGINE_PROBE = r"""
import importlib.metadata as md, json, platform, sys
pkgs = {}
for d in md.distributions():
    n = d.metadata.get("Name")
    if n:
        pkgs.setdefault(n, d.version)
print(json.dumps({"version": sys.version.split()[0], "implementation": platform.python_implementation(),
                  "executable": sys.executable, "packages": dict(sorted(pkgs.items(), key=lambda kv: kv[0].lower()))}))
"""


def engine_python_info(python: str, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The engine python's version and every installed package (run in that python, in the engine's env)."""
    rc, out, err = run_command([python, "-c", _ENGINE_PROBE], timeout=120, env=env)
    if rc != 0:
        return {"executable": python, "error": f"could not inspect the engine python (exit {rc}): {err.strip()[-300:]}"}
    try:
        return json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"executable": python, "error": "the engine python's package list was unreadable"}


# ------------------------------------------------------------------- model --

MODEL_FILES = (
    "config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
    "chat_template.jinja", "chat_template.json", "tokenizer.model", "vocab.json", "merges.txt", "added_tokens.json",
    "preprocessor_config.json", "evidence-tiny.json",
)
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")


def model_info(spec: Spec, repo_root: Path, *, hash_weights: bool = True) -> dict[str, Any]:
    m = spec.model
    info: dict[str, Any] = {"id": m.id, "revision": m.revision, "load_format": m.load_format,
                            "served_name": m.served_name or m.id}
    if not m.path:
        info["files"] = None
        info["note"] = "served by id: the engine fetches the files; their hashes are not recorded here"
        return info
    p = Path(m.path)
    folder = p if p.is_absolute() else repo_root / p
    info["path"] = m.path
    if not folder.is_dir():
        info["files"] = None
        info["note"] = f"the model folder {folder} does not exist"
        return info
    files = {}
    for f in sorted(folder.iterdir()):
        if not f.is_file():
            continue
        is_weight = f.name.endswith(WEIGHT_SUFFIXES) or f.name.endswith(".index.json")
        if f.name in MODEL_FILES or is_weight:
            entry: dict[str, Any] = {"bytes": f.stat().st_size}
            if not is_weight or hash_weights or f.name.endswith(".index.json"):
                entry["sha256"] = sha256_file(f)
            files[f.name] = entry
    info["files"] = files
    info["weights"] = "present" if any(n.endswith(WEIGHT_SUFFIXES) for n in files) else "none (dummy load format)" if m.load_format == "dummy" else "none found"
    snap = re.search(r"/snapshots/([0-9a-f]{40})(?:/|$)", str(folder.resolve()))
    if snap:
        info["revision_from_path"] = snap.group(1)
    return info


