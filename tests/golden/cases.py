"""The golden cases: fixture runs whose every derived file (analysis, figures, report) is hashed.

Each case builds a run directory from tests/rundir_fixtures.py (and trace_fixtures.py for the
profile case) and derives it in place; `hashes()` maps "case/part/file" to its sha256. The
committed hashes.json is what a change that is meant to keep bytes must reproduce; a change
meant to alter them refreshes it with `make golden` and says so in its commit.
"""

from __future__ import annotations

import hashlib
import sys
import tempfile
from pathlib import Path
from typing import Callable

TESTS = Path(__file__).resolve().parents[1]
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

from rundir_fixtures import build_run, demo_spec  # noqa: E402

HASHES = Path(__file__).with_name("hashes.json")
PARTS = ("analysis", "figures", "report")


def _default(root: Path) -> Path:
    return build_run(root, run_id="default")


def _comparisons(root: Path) -> Path:
    # two comparisons (Holm), latency SLOs, and one trial with failed requests
    spec = demo_spec(comparisons=[(1, 4), (4, 16)], slos_ms={"ttft": 500, "tpot": 50})
    return build_run(root, spec=spec, run_id="comparisons", failed={"r2-c16": 1})


def _sessions(root: Path) -> Path:
    # 6 repeats in 3 engine sessions that differ: the session is the unit (tests/analysis/test_analysis.py)
    spec = demo_spec(repeats=6)
    spec = spec.model_copy(update={"sweep": spec.sweep.model_copy(update={"sessions": 3})})
    ratio = [1.10, 1.11, 1.20, 1.21, 1.02, 1.03]
    return build_run(
        root, spec=spec, run_id="sessions", throughput=lambda r, p: {1: 50.0, 4: 100.0 * ratio[r - 1], 16: 100.0}[p]
    )


def _incomplete(root: Path) -> Path:
    # a run cut short: planned trials missing, one with no completed request, telemetry on some only
    return build_run(
        root, run_id="incomplete", missing=("r3-c16",), zero_completed=("r2-c1",), telemetry=("r1-c1", "r1-c4")
    )


def _profile(root: Path) -> Path:
    # a run with a profile/ folder: a synthetic Kineto trace joined to the client's records
    from evidence.canon import write_json
    from evidence.records import RequestRecord, write_records
    from trace_fixtures import T0_REL_NS, ForwardSpec, abs_ns, vllm_scenario, write_kineto_json

    run = build_run(root, run_id="profile")
    folder = run / "profile" / "c4"
    folder.mkdir(parents=True)
    fw = [ForwardSpec(nseq=4, grid_x=1, graph=True, step=(0, 0, 4, 4)) for _ in range(6)]
    write_kineto_json(folder / "rank0.1.pt.trace.json.gz", vllm_scenario(fw, n_layers=4), gz=True)
    chunks = [[1.0005, 1.0006, 1.0007, 50.0], [0.5, 1.0006, 1.0008]]
    recs = [
        RequestRecord(
            i=i,
            phase="profile",
            prompt_len=8,
            max_tokens=len(c),
            intended_s=0.0,
            slot_wait_s=0.0,
            send_s=0.0,
            first_chunk_s=c[0],
            chunk_s=c,
            end_s=c[-1],
            prompt_tokens=8,
            completion_tokens=len(c),
            chunk_count=len(c),
            finish_reason="length",
            status=200,
            ok=True,
        )
        for i, c in enumerate(chunks)
    ]
    write_records(folder / "requests.jsonl", recs)
    write_json(
        folder / "meta.json",
        {
            "point": 4,
            "prompts": len(recs),
            "client": {"t0_unix": abs_ns(T0_REL_NS) / 1e9 - 1.0},
            "window": {},
            "trace_files": [],
        },
    )
    write_json(
        run / "profile" / "profile.json",
        {
            "tool": "torch",
            "settings": [],
            "window": {},
            "points": [{"point": 4, "files": ["rank0.1.pt.trace.json.gz"]}],
            "note": "diagnostic",
        },
    )
    return run


CASES: dict[str, Callable[[Path], Path]] = {
    "default": _default,
    "comparisons": _comparisons,
    "sessions": _sessions,
    "incomplete": _incomplete,
    "profile": _profile,
}


def case_hashes(name: str, root: Path) -> dict[str, str]:
    """'name/part/relative path' -> sha256 of every derived file of one case, derived under root."""
    from evidence.derive import derive_run

    run = CASES[name](root)
    derive_run(run)
    out = {}
    for part in PARTS:
        for p in sorted((run / part).rglob("*")):
            if p.is_file():
                out[f"{name}/{p.relative_to(run).as_posix()}"] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def hashes() -> dict[str, str]:
    out: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in CASES:
            out.update(case_hashes(name, Path(tmp)))
    return dict(sorted(out.items()))
