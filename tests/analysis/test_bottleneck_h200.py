"""Known answers from the real H200 runs (../shared/data/h200-regime-spike, vLLM 0.26, 2026-12-04): a side sampler
read /proc beside `evidence run` (4 Hz; the processes every second sample). Its process samples are turned into the
rows our host telemetry writes (roles from the tree under the process the runner launched, told apart by the vLLM
adapter's own declaration), merged with the trial's own telemetry (GPU busy) and read by the bottleneck rules.

What the notes say (notes/h200.md), and these tests hold the reading to: at the A100 settings the engine core near
one full core with the GPU underfed; at the H200's defaults, C256, the API server busy at about one token per SSE
chunk; with VLLM_V1_OUTPUT_PROC_CHUNK_SIZE=512 (dc1) tokens are merged again and that reading is gone."""

from __future__ import annotations

import json
import lzma
import sys
import tarfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from conftest import SHARED, skip_unless_ci  # noqa: E402

from evidence.analysis.bottleneck import NOT_DECIDED, THRESHOLDS, trial_reading  # noqa: E402
from evidence.analysis.load import load_run  # noqa: E402
from evidence.engines.base import ProcessRoles  # noqa: E402
from evidence.engines.vllm.adapter import VllmEngine  # noqa: E402

DATA = SHARED / "data" / "h200-regime-spike"
ROLES_TITLES = tuple((role, tuple(f"VLLM::{n}" for n in names)) for role, names in VllmEngine.PROCESS_TITLES)


def side_sampler_rows(path: Path) -> list[dict]:
    """The sampler's process samples as host-telemetry rows on the Unix clock (`t`): per role the cumulative
    user + system seconds of the tree under the process `evidence run` launched, and the client's own."""
    clk = 100
    out = []
    with lzma.open(path, "rt") as f:
        for line in f:
            d = json.loads(line)
            if d.get("kind") == "meta":
                clk = d["clk_tck"]
                continue
            procs = {p["pid"]: p for p in d.get("procs") or []}
            cli = [p for p in procs.values() if "evidence.cli run" in p["cmd"] and p["comm"].startswith("python")]
            root = [p for p in procs.values() if cli and p["ppid"] == cli[0]["pid"]]
            if not root:
                continue
            roles = ProcessRoles(root[0]["pid"], "api_server", ROLES_TITLES)
            row = {"t": d["t"], "proc_client_cpu_s": cli[0]["cpu_ticks"] / clk}
            for p in procs.values():
                q, under = p, p["pid"] == roles.root_pid
                while not under and q is not None:
                    under = q["ppid"] == roles.root_pid
                    q = procs.get(q["ppid"])
                if not under:
                    continue
                role = "api_server" if p["pid"] == roles.root_pid else roles.role_of(p["cmd"].strip(), p["comm"])
                row[f"proc_{role}_cpu_s"] = row.get(f"proc_{role}_cpu_s", 0.0) + p["cpu_ticks"] / clk
            out.append(row)
    return out


@pytest.fixture(scope="module")
def readings(tmp_path_factory) -> dict[str, dict[str, dict]]:
    if not DATA.is_dir():
        skip_unless_ci(f"the shared H200 data is not here ({DATA})")
    root = tmp_path_factory.mktemp("h200")
    side = [side_sampler_rows(p) for p in sorted(DATA.glob("host-*.jsonl.xz"))]
    out: dict[str, dict[str, dict]] = {}
    for run in ("u1", "d1", "dc1"):
        with tarfile.open(DATA / f"{run}.tar.xz") as tf:
            tf.extractall(root, filter="data")
        data = load_run(root / run)
        out[run] = {}
        for td in data.trials:
            t0, t1 = td.meta["t0_unix"], td.meta["ended_unix"]
            rows = next(s for s in side if s and s[0]["t"] <= t0 and s[-1]["t"] >= t1)  # the sampler of that VM
            extra = [
                {**{k: v for k, v in r.items() if k != "t"}, "t_s": r["t"] - t0}
                for r in rows
                if t0 - 5 <= r["t"] <= t1 + 5
            ]
            td.telemetry = sorted((td.telemetry or []) + extra, key=lambda r: r["t_s"])
            td.meta["telemetry"]["host"] = {"enabled": True, "processes": {"enabled": True, "reason": None}}
            out[run][td.id] = trial_reading(td)
    return out


def test_a100_settings_engine_core_near_one_core(readings):
    u1 = readings["u1"]
    for tid, r in u1.items():
        assert 0.8 <= r["cores"]["engine_core"] <= 1.0, (tid, r["cores"])
        assert r["cores"]["api_server"] < r["cores"]["engine_core"] + 0.05, (tid, r["cores"])
    # the GPU underfed (< 80% busy) in three trials: host-bound there; 87% busy in r1-c128: not decided
    assert {t: r["reading"] for t, r in u1.items()} == {
        "r1-c128": NOT_DECIDED,
        "r1-c256": "host-bound (engine core)",
        "r2-c256": "host-bound (engine core)",
        "r2-c128": "host-bound (engine core)",
    }
    assert u1["r1-c128"]["gpu_busy"] >= THRESHOLDS["gpu_underfed"]


def test_defaults_c256_front_end_bound_at_one_token_per_chunk(readings):
    d1 = readings["d1"]
    for tid in ("r1-c256", "r2-c256"):
        r = d1[tid]
        assert r["reading"] == "front-end-bound (API server)", (tid, r["cores"], r["tokens_per_chunk"])
        assert r["tokens_per_chunk"] < 1.05 and r["gpu_busy"] < 0.5
        assert r["cores"]["api_server"] > r["cores"]["engine_core"]
    # C128 merges about two tokens per chunk
    assert all(d1[t]["tokens_per_chunk"] > 1.8 and d1[t]["reading"] == NOT_DECIDED for t in ("r1-c128", "r2-c128"))


def test_larger_output_chunk_removes_the_front_end_reading(readings):
    dc1 = readings["dc1"]
    for tid in ("r1-c256", "r2-c256"):
        assert dc1[tid]["tokens_per_chunk"] > 2.0 and dc1[tid]["reading"] != "front-end-bound (API server)"
