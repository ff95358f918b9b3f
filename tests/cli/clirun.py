"""The CLI as a user runs it: a subprocess in a folder of the test's choosing, this checkout's code."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def ev(*args: str, cwd: Path, timeout: float = 300, env: dict | None = None) -> subprocess.CompletedProcess:
    """`evidence ARGS` from cwd (a folder with no .venv, no models/ and no git unless the test makes them)."""
    e = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "evidence.cli", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=e
    )
