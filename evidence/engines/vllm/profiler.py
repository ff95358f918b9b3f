"""The vLLM profiler hooks: the server started for a profile run, with the torch profiler or under nsys.

The run stage asks the adapter (`VllmEngine.profile_spec`); evidence.run.profiling drives the capture."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from evidence.resources import VLLM_LAUNCHER
from evidence.spec.model import Launch, Spec


def profile_spec(spec: Spec, trace_dir: Path) -> tuple[Spec, list[str]]:
    """The spec for the profiling server, and the extra server arguments."""
    p = spec.profile
    if p.tool == "torch":
        cfg: dict[str, Any] = {
            "profiler": "torch",
            "torch_profiler_dir": str(trace_dir.resolve()),
            "torch_profiler_with_stack": False,
            "ignore_frontend": True,
        }
        if p.window.delay_steps:
            cfg["delay_iterations"] = p.window.delay_steps
        if p.window.max_steps:
            cfg["max_iterations"] = p.window.max_steps
        return spec, ["--profiler-config", json.dumps(cfg, sort_keys=True)]
    # nsys wraps the whole server; the CUDA profiler API opens and closes the range.
    nsys = shutil.which("nsys")
    if nsys is None:
        raise FileNotFoundError(
            "profile.tool is 'nsys' but no `nsys` executable is on PATH (Nsight Systems is not "
            "pip-installable); install it, or use profile.tool: torch"
        )
    launch = spec.engine.launch
    python = launch.python or "python3"
    base = list(launch.command) if launch.command else [python, str(VLLM_LAUNCHER)]
    wrapped = [
        nsys,
        "profile",
        "-o",
        str(trace_dir.resolve() / "capture"),
        "--trace=cuda,nvtx,osrt",
        "--capture-range=cudaProfilerApi",
        "--capture-range-end=repeat",
        *(p.nsys_args or ["--trace-fork-before-exec=true", "--cuda-graph-trace=node"]),
        *base,
    ]
    new_engine = spec.engine.model_copy(
        update={
            "launch": Launch(command=wrapped, cwd=launch.cwd),
            "env": {**spec.engine.env, "VLLM_WORKER_MULTIPROC_METHOD": "spawn"},
        }
    )
    return spec.model_copy(update={"engine": new_engine}), ["--profiler-config", json.dumps({"profiler": "cuda"})]
