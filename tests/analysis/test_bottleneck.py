"""The bottleneck reading (evidence.analysis.bottleneck): rates from cumulative samples, the rules at their
thresholds, absent with the reason, and what a comparison says when its sides read differently."""

from __future__ import annotations

import pytest

from evidence.analysis.bottleneck import NOT_DECIDED, THRESHOLDS, counter_rate, trial_reading
from evidence.analysis.load import TrialData
from evidence.records import RequestRecord


def _records(n=10, dur=10.0, tokens=100, chunks=100):
    return [
        RequestRecord(
            i=i,
            phase="measure",
            prompt_len=8,
            max_tokens=tokens,
            intended_s=0.0,
            slot_wait_s=0.0,
            send_s=0.0,
            first_chunk_s=0.1,
            chunk_s=[dur],
            end_s=dur,
            completion_tokens=tokens,
            chunk_count=chunks,
            ok=True,
        )
        for i in range(n)
    ]


def _rows(engine_core=0.0, api=0.0, client=0.1, gpu=None, dur=10.0, dt=0.25):
    rows = []
    k = 0
    while k * dt <= dur + 1e-9:
        t = k * dt
        r = {
            "t_s": t,
            "proc_api_server_cpu_s": 5.0 + api * t,
            "proc_api_server_n": 1,
            "proc_api_server_state": "sleeping",
            "proc_engine_core_cpu_s": 2.0 + engine_core * t,
            "proc_engine_core_n": 1,
            "proc_engine_core_state": "running",
            "proc_client_cpu_s": 1.0 + client * t,
            "host_cpu_user_s": 100 + 1.5 * t,
            "host_cpu_system_s": 50 + 0.5 * t,
            "host_cpu_idle_s": 200 + 2 * t,
            "host_cpu_steal_s": 1.0,
            "host_ctx_switches": 1000 + 500 * t,
            "host_load1": 2.0,
        }
        if gpu is not None:
            r["gpu_util_pct"] = gpu * 100
        rows.append(r)
        k += 1
    return rows


def _meta(gpu=True):
    return {
        "client_cpu_util": 0.5,
        "telemetry": {
            "enabled": True,
            "reason": None,
            "gpu": {"enabled": gpu, "reason": None if gpu else "NVML sees no NVIDIA GPU"},
            "host": {
                "enabled": True,
                "processes": {"enabled": True, "reason": None},
                "absent": {"host_psi_cpu": "/proc/pressure/cpu cannot be read"},
                "probe": {"ms": {"after": [12.0, 12.5], "before": [11.0, 11.5]}},
            },
        },
    }


def _trial(rows, meta, records=None, point=1):
    return TrialData(
        id=f"r1-c{point}",
        index=0,
        repeat=1,
        point=point,
        position=1,
        prompts=10,
        present=True,
        records=records or _records(),
        telemetry=rows,
        meta=meta,
    )


def test_rate_of_a_cumulative_key_ignores_a_drop():
    rows = [{"t_s": 0.0, "k": 1.0}, {"t_s": 1.0, "k": 2.0}, {"t_s": 2.0, "k": 0.5}, {"t_s": 3.0, "k": 1.5}]
    assert counter_rate(rows, "k", 0.0, 3.0) == ((1.0 + 1.0) / 3.0, None)
    assert counter_rate(rows, "missing", 0, 3)[0] is None


def test_engine_core_busy_with_an_underfed_gpu_is_host_bound():
    r = trial_reading(_trial(_rows(engine_core=0.95, api=0.6, gpu=0.7), _meta()))
    assert r["reading"] == "host-bound (engine core)"
    assert abs(r["cores"]["engine_core"] - 0.95) < 1e-9 and abs(r["cores"]["api_server"] - 0.6) < 1e-9
    assert abs(r["gpu_busy"] - 0.7) < 1e-9 and abs(r["gpu_idle"] - 0.3) < 1e-9
    assert r["states"]["engine_core"] == {"running": 25}  # samples in the plateau window [2, 8] s
    assert r["probe_ms_median"] == 11.75
    # the host's split: user 1.5 + system 0.5 + idle 2 CPUs (steal flat) of 4
    assert abs(r["host"]["cpu_user_frac"] - 1.5 / 4) < 1e-9 and r["host"]["cpu_steal_cpus"] == 0.0
    # PSI missing on this platform: absent with the recorded reason, never 0
    assert r["host"]["psi_cpu_some"] is None and "pressure" in r["absent"]["host.psi_cpu_some"]


def test_just_below_the_threshold_is_not_decided():
    below = THRESHOLDS["core_busy"] - 0.02
    r = trial_reading(_trial(_rows(engine_core=below, api=0.5, gpu=0.7), _meta()))
    assert r["reading"] == NOT_DECIDED and r["rules_held"] == []


def test_api_server_busy_at_one_token_per_chunk_is_front_end_bound():
    r = trial_reading(_trial(_rows(engine_core=0.5, api=0.95, gpu=0.6), _meta(), records=_records(chunks=100)))
    assert r["tokens_per_chunk"] == 1.0 and r["reading"] == "front-end-bound (API server)"
    # the same CPU with tokens merged into chunks (4 per chunk) is not
    r = trial_reading(_trial(_rows(engine_core=0.5, api=0.95, gpu=0.6), _meta(), records=_records(chunks=25)))
    assert r["tokens_per_chunk"] == 4.0 and r["reading"] == NOT_DECIDED


def test_gpu_busy_absent_with_the_reason_and_gpu_bound():
    r = trial_reading(_trial(_rows(engine_core=0.95), _meta(gpu=False)))
    assert r["gpu_busy"] is None and r["absent"]["gpu_busy"] == "NVML sees no NVIDIA GPU"
    assert r["reading"] == "host-bound (engine core)"  # the engine core busy, the GPU not measured
    r = trial_reading(_trial(_rows(engine_core=0.95, gpu=0.97), _meta()))
    assert r["reading"] == "GPU-bound"


def test_no_host_telemetry_says_why():
    meta = {"client_cpu_util": 0.2, "telemetry": {"enabled": False, "reason": "GET /metrics answered HTTP 404"}}
    r = trial_reading(_trial([], meta))
    assert r["cores"] == {} and r["absent"]["processes"] == "GET /metrics answered HTTP 404"
    assert r["client_cores"] == 0.2 and r["reading"] == NOT_DECIDED


# ------------------------------------------------------------- a whole run ----

import json  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rundir_fixtures import build_run, demo_spec  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def _add_host_telemetry(run: Path, engine_core: dict[int, float]) -> None:
    """Give every trial of a fixture run the host keys a real trial records (engine core cores per point)."""
    for d in sorted((run / "trials").iterdir()):
        point = int(d.name.split("-c")[1])
        rows = [json.loads(x) for x in (d / "telemetry.jsonl").read_text().splitlines()]
        for r in rows:
            t = r["t_s"]
            r.update(
                {
                    "proc_api_server_cpu_s": 3.0 + 0.4 * t,
                    "proc_api_server_n": 1,
                    "proc_api_server_state": "sleeping",
                    "proc_engine_core_cpu_s": 1.0 + engine_core[point] * t,
                    "proc_engine_core_n": 1,
                    "proc_engine_core_state": "running",
                    "proc_client_cpu_s": 0.5 + 0.1 * t,
                    "host_cpu_user_s": 10 + t,
                    "host_cpu_idle_s": 20 + t,
                    "host_cpu_steal_s": 0.0,
                    "gpu_util_pct": 60.0,
                }
            )
        (d / "telemetry.jsonl").write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
        meta = json.loads((d / "meta.json").read_text())
        meta["telemetry"] = {
            "enabled": True,
            "reason": None,
            "gpu": {"enabled": True, "reason": None},
            "host": {
                "enabled": True,
                "reason": None,
                "processes": {"enabled": True, "reason": None},
                "absent": {},
                "probe": {"ms": {"before": [10.0 + point], "after": [11.0]}},
            },
        }
        (d / "meta.json").write_text(json.dumps(meta, sort_keys=True))


@pytest.fixture(scope="module")
def host_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("host-run")
    run = build_run(root, spec=demo_spec(points=[4, 16], repeats=2, comparisons=[(4, 16)]), missing=("r2-c4",))
    _add_host_telemetry(run, {4: 0.3, 16: 0.95})
    return run


def test_a_run_without_host_telemetry_is_unchanged(tmp_path):
    from evidence.analysis.analyze import compute_analysis
    from evidence.analysis.load import load_run
    from evidence.figures import FIGURE_NAMES, figure_names

    res = compute_analysis(load_run(build_run(tmp_path, spec=demo_spec(points=[4, 16], repeats=2))))
    assert "bottleneck" not in res and figure_names(res) == FIGURE_NAMES


def test_readings_per_trial_point_and_comparison(host_run):
    from evidence.analysis.analyze import compute_analysis
    from evidence.analysis.load import load_run
    from evidence.report.bottleneck import bottleneck_sections

    res = compute_analysis(load_run(host_run))
    neck = res["bottleneck"]
    assert {t["trial"]: t["reading"] for t in neck["trials"]} == {
        "r1-c4": NOT_DECIDED,
        "r2-c4": NOT_DECIDED,
        "r1-c16": "host-bound (engine core)",
        "r2-c16": "host-bound (engine core)",
    }
    assert next(t for t in neck["trials"] if t["trial"] == "r2-c4")["status"] == "missing"
    assert [p["reading"] for p in neck["points"]] == [NOT_DECIDED, "host-bound (engine core)"]
    assert neck["thresholds"] == THRESHOLDS
    c = next(c for c in neck["comparisons"] if c["kind"] == "comparison")
    assert any("different bottleneck readings" in n for n in c["notes"])
    # probe medians 14-27 ms (before 10 + point, after 11): moved by more than the stated amount
    assert any("speed probe moved" in n for n in c["notes"])
    assert sum("Comparison 4 vs 16:" in x for x in res["caveats"]) == 2  # both notes carried as caveats
    sec = bottleneck_sections(res, ["host_over_time"])[0]
    assert sec["figures"] == ["host_over_time"] and sec["tables"][0]["rows"][0][2] in (
        NOT_DECIDED,
        "host-bound (engine core)",
    )


RENDER = (
    "import sys; from pathlib import Path; from evidence.analysis.load import load_run; "
    "from evidence.analysis.analyze import compute_analysis; from evidence.figures import figure_bytes; "
    "d = load_run(Path(sys.argv[1])); b = figure_bytes(d, compute_analysis(d)); "
    "sys.stdout.buffer.write(b['host_over_time.png'] + b'\\0' + b['host_over_time.svg'])"
)


def test_host_figure_bytes_identical_across_processes(host_run):
    outs = []
    for seed in ("0", "4242"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
        p = subprocess.run(
            [sys.executable, "-c", RENDER, str(host_run)], env=env, cwd=str(REPO), capture_output=True, timeout=300
        )
        assert p.returncode == 0, p.stderr.decode()[-2000:]
        outs.append(p.stdout)
    assert outs[0] == outs[1] and outs[0].startswith(b"\x89PNG")
