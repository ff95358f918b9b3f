"""Synthetic but realistic run directories, built from hand-made RequestRecords.

The layout is exactly what the runner writes (see evidence/rundir.py):
spec.yaml, spec.resolved.json, plan.json (evidence.spec.plan.make_plan), run.json,
provenance.json, engine/resolved.json, and per trial requests.jsonl,
telemetry.jsonl, meta.json, summary.json.

Timing model of one trial (closed loop, max concurrency c, n prompts): the
requests go in waves of c; wave w is sent at t_start + w * L; every request
has first chunk at send + ttft and its K = output_len chunks tpot apart, so
E2E = ttft + (K - 1) * tpot =: e. The last wave ends at (waves - 1) * L + e,
so the trial duration is D = (waves - 1) * L + e and the output throughput
n * K / D. Given a target throughput T, L is solved from D = n * K / T: the
numbers tests expect can be computed by hand from T, ttft and tpot alone.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any, Callable

from evidence.canon import dumps, write_atomic, write_json
from evidence.metrics import trial_metrics
from evidence.spec.plan import make_plan
from evidence.records import RequestRecord, dumps_line, write_records
from evidence.spec.model import Spec, load_spec, spec_from_json, spec_to_json

REPO = Path(__file__).resolve().parents[1]
DEMO_SPEC = REPO / "specs" / "demo-cpu.yaml"

# Output throughput (tok/s) per point, and a per-repeat multiplier: a realistic knee shape.
DEFAULT_BASE = {1: 100.0, 4: 300.0, 16: 280.0}
DEFAULT_REPEAT_FACTOR = {1: 0.99, 2: 1.0, 3: 1.01}


def demo_spec(**analysis: Any) -> Spec:
    """specs/demo-cpu.yaml, with analysis fields (and a few others) overridden.

    Keys: comparisons=[(a, b)], cv, percentiles, latency_metrics, slos_ms, repeats, sessions (default 1),
    points, order, prompts_per_concurrency, name.
    """
    d = json.loads(spec_to_json(load_spec(DEMO_SPEC)))
    # The tests' hand-computed answers assume these sizes; pin them so tuning the shipped
    # demo spec cannot change a fixture.
    d["sweep"]["prompts"] = {"per_concurrency": 4}
    d["workload"]["output_len"] = 32
    if "comparisons" in analysis:
        d["analysis"]["comparisons"] = [{"a": a, "b": b} for a, b in analysis.pop("comparisons")]
    for k in ("cv", "percentiles", "latency_metrics", "slos_ms"):
        if k in analysis:
            d["analysis"][k] = analysis.pop(k)
    if "repeats" in analysis:
        d["sweep"]["repeats"] = analysis.pop("repeats")
    # the fixtures' runs are one server start unless a test asks for more (the demo spec itself
    # takes the default design, one start per repeat)
    d["sweep"]["sessions"] = analysis.pop("sessions", 1)
    if "points" in analysis:
        d["sweep"]["points"] = analysis.pop("points")
    if "order" in analysis:
        d["sweep"]["order"] = analysis.pop("order")
    if "prompts_per_concurrency" in analysis:
        d["sweep"]["prompts"] = {"per_concurrency": analysis.pop("prompts_per_concurrency")}
    if "name" in analysis:
        d["name"] = analysis.pop("name")
    if "engine_args" in analysis:
        d["engine"]["args"].update(analysis.pop("engine_args"))
    assert not analysis, f"unknown overrides {analysis}"
    return spec_from_json(json.dumps(d))


def trial_records(*, point: int, n: int, out_len: int, in_len: int, throughput: float,
                  ttft: float | None = None, tpot: float | None = None, t_start: float = 0.25,
                  failed: int = 0, prompt_tokens: int | None = None) -> list[RequestRecord]:
    """Records of one trial whose completed requests give exactly `throughput` tok/s (see module doc).

    `failed` requests (the last ones of the last wave) fail with an HTTP 500 and count for nothing;
    the throughput then is (n - failed) * K / D with D from the all-completed timing.
    """
    K = out_len
    waves = math.ceil(n / point)
    D = n * K / throughput
    if ttft is None or tpot is None:
        e = 0.9 * D / waves
        ttft, tpot = 0.2 * e, 0.8 * e / (K - 1)
    e = ttft + (K - 1) * tpot
    if waves == 1:
        assert math.isclose(D, e, rel_tol=1e-9), "one wave: throughput is fixed by the latencies"
        L = 0.0
    else:
        L = (D - e) / (waves - 1)
        assert L >= e - 1e-12, f"latencies too long for throughput {throughput} (L={L}, e={e})"
    recs = []
    for i in range(n):
        w = i // point
        send = t_start + w * L
        fail = i >= n - failed
        # slot wait: a request of wave w waited for wave w-1 to finish
        r = RequestRecord(i=i, phase="measure", prompt_len=in_len, max_tokens=K, intended_s=t_start,
                          slot_wait_s=send - t_start, send_s=send)
        if fail:
            r.end_s = send + ttft
            r.status = 500
            r.error = "HTTP 500: Internal Server Error"
            r.ok = False
        else:
            r.first_chunk_s = send + ttft
            r.chunk_s = [send + ttft + j * tpot for j in range(K)]
            r.end_s = r.chunk_s[-1]
            r.prompt_tokens = prompt_tokens if prompt_tokens is not None else in_len
            r.completion_tokens = K
            r.chunk_count = K
            r.finish_reason = "length"
            r.status = 200
            r.ok = True
        recs.append(r)
    return recs


def trial_telemetry(recs: list[RequestRecord], point: int, dt: float | None = None,
                    waiting: int = 0, kv_per_seq: float = 0.01) -> list[dict]:
    """Server samples every dt seconds: `point` running between first send and last end (ramp: 0 outside)."""
    sends = [r.send_s for r in recs]
    ends = [r.end_s for r in recs if r.end_s is not None]
    start, end = min(sends), max(ends)
    dt = dt or (end - start) / 20
    out = []
    gen = 0.0
    t = 0.0
    k = 0
    while t <= end + 2 * dt:
        running = point if start <= t <= end else 0
        wq = waiting if start <= t <= end else 0
        out.append({"t_s": round(t, 6), "num_requests_running": running, "num_requests_waiting": wq,
                    "kv_cache_usage_perc": round(running * kv_per_seq, 6),
                    "generation_tokens_total": gen, "prompt_tokens_total": 1000.0 + k,
                    "num_preemptions_total": 0.0})
        gen += running * 3.0
        k += 1
        t = k * dt
    return out


ThroughputFn = Callable[[int, int], float]


def build_run(root: Path, *, spec: Spec | None = None, run_id: str = "fixture-run",
              throughput: dict[tuple[int, int], float] | ThroughputFn | None = None,
              latency: dict[int, tuple[float, float]] | None = None,
              missing: tuple[str, ...] = (), failed: dict[str, int] | None = None,
              zero_completed: tuple[str, ...] = (), telemetry: bool | tuple[str, ...] = True,
              prompt_tokens: int | None = None, provenance: dict | None = None,
              engine_resolved: dict | None = None, status: str | None = None) -> Path:
    """Write a complete run directory under root/run_id and return its path.

    throughput: (repeat, point) -> tok/s (dict or function); default DEFAULT_BASE x DEFAULT_REPEAT_FACTOR.
    latency: point -> (ttft_s, tpot_s); default derived from the throughput (see trial_records).
    missing: trial ids not written (planned but absent). failed: trial id -> failed request count.
    zero_completed: trial ids whose requests all fail. telemetry: True, False, or the trial ids that get it.
    """
    spec = spec or demo_spec()
    run = root / run_id
    run.mkdir(parents=True)
    spec_json = spec_to_json(spec)
    write_atomic(run / "spec.yaml", spec_json)
    write_atomic(run / "spec.resolved.json", spec_json)
    plan = make_plan(spec)
    write_json(run / "plan.json", plan.as_dict())
    failed = failed or {}
    if throughput is None:
        def throughput(r: int, p: int) -> float:
            return DEFAULT_BASE.get(p, 100.0 + p) * DEFAULT_REPEAT_FACTOR.get(r, 1.0)
    tp: ThroughputFn = (lambda r, p: throughput[(r, p)]) if isinstance(throughput, dict) else throughput
    write_json(run / "run.json", {
        "run_id": run_id, "spec_name": spec.name,
        "spec_sha256": hashlib.sha256(spec_json.encode()).hexdigest(),
        "created_unix": 1780000000.0, "status": status or ("incomplete" if missing else "complete"),
        "tool": {"name": "evidence", "version": "0.1.0"},
    })
    write_json(run / "provenance.json", provenance if provenance is not None else default_provenance(spec))
    write_json(run / "engine" / "resolved.json", engine_resolved if engine_resolved is not None else
               default_engine_resolved(spec))
    for t in plan.trials:
        if t.id in missing:
            continue
        lat = (latency or {}).get(t.point, (None, None))
        n_failed = t.prompts if t.id in zero_completed else failed.get(t.id, 0)
        recs = trial_records(point=t.point, n=t.prompts, out_len=spec.workload.output_len,
                             in_len=spec.workload.input_len, throughput=tp(t.repeat, t.point),
                             ttft=lat[0], tpot=lat[1], failed=n_failed, prompt_tokens=prompt_tokens)
        d = run / "trials" / t.id
        d.mkdir(parents=True)
        write_records(d / "requests.jsonl", recs)
        if telemetry is True or (isinstance(telemetry, tuple) and t.id in telemetry):
            write_atomic(d / "telemetry.jsonl", "".join(dumps_line(x) for x in trial_telemetry(recs, t.point)))
        t0 = 1780000100.0 + 100.0 * t.index
        write_json(d / "meta.json", {"trial": t.as_dict(), "t0_unix": t0, "t0_perf": 5000.0 + 100.0 * t.index,
                                     "t0_monotonic_ns": int(5e12) + t.index * 10 ** 11,
                                     "ended_unix": t0 + max(r.end_s or 0 for r in recs),
                                     "client": {"max_concurrency": t.point, "request_rate": "inf"}})
        summary = trial_metrics(recs, spec.analysis.percentiles)
        summary["trial_id"] = t.id
        write_json(d / "summary.json", summary)
    return run


def default_provenance(spec: Spec, *, engine_version: str | None = None, accelerator: list[str] | None = None,
                       packages: dict[str, str] | None = None, hostname: str = "fixture-host") -> dict:
    """A provenance.json shaped like evidence.run.provenance.collect_provenance's, pins checked by check_pins."""
    from evidence.run.provenance.collect import check_pins

    ev = engine_version or spec.engine.version or "0.32.0"
    devs = [{"index": i, "name": n, "uuid": f"GPU-{i:04d}", "visible": True} for i, n in enumerate(accelerator or [])]
    pk = {"numpy": "2.4.6", "matplotlib": "3.11.2", "pydantic": "2.12.0"}
    epk = {"vllm": ev, "torch": "2.9.0+cpu", "transformers": "4.57.0"}
    epk.update(packages or {})
    prov = {
        "schema": "evidence.provenance/1",
        "collected_at": "2026-05-28T20:26:40Z",
        "host": {"hostname": hostname, "kernel": "6.1.0", "os": "Debian GNU/Linux 12", "cpu_count": 2},
        "container": {"in_container": True},
        "accelerator": ({"found": "nvidia-smi", "how": "nvidia-smi -q -x", "driver": "570.1", "count": len(devs),
                         "visible_count": len(devs), "devices": devs} if devs else
                        {"found": "none", "how": "pynvml is not importable; nvidia-smi is not on PATH", "count": 0,
                         "visible_count": 0, "devices": []}),
        "python": {"harness": {"version": "3.11.7", "packages": pk},
                   "engine": {"version": "3.11.7", "packages": epk}},
        "engine": {"kind": spec.engine.kind, "version": ev, "version_source": "vllm.__version__"},
        "model": {"id": spec.model.id, "load_format": spec.model.load_format},
        "git": {"present": True, "commit": "0" * 40, "dirty": False, "commit_source": "git"},
    }
    prov["pins"] = check_pins(spec, prov)
    return prov


def default_engine_resolved(spec: Spec, **override: Any) -> dict:
    """engine/resolved.json as evidence.engines.base.combine_resolved writes it: {name: {value, source, requested?}}."""
    d = {
        "engine_version": {"value": spec.engine.version, "source": "server log: 'vLLM API server version'"},
        "enable_chunked_prefill": {"value": True, "source": "server log: 'Chunked prefill is enabled'"},
        "max_num_batched_tokens": {"value": 2048, "source": "server log: scheduler config"},
        "max_num_seqs": {"value": 256, "source": "not reported by the engine"},
        "max_model_len": {"value": spec.engine.args.max_model_len, "source": "server log: model config",
                          "requested": spec.engine.args.max_model_len},
        "dtype": {"value": spec.engine.args.dtype, "source": "server log: model config",
                  "requested": spec.engine.args.dtype},
    }
    for k, v in override.items():
        d[k] = dict(d.get(k, {"source": "test"}), value=v)
    return d


def read_text_tree(folder: Path) -> dict[str, bytes]:
    """Relative path -> bytes of every file under folder (to compare whole outputs)."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


__all__ = ["demo_spec", "trial_records", "trial_telemetry", "build_run", "default_provenance", "read_text_tree",
           "default_engine_resolved",
           "DEFAULT_BASE", "DEFAULT_REPEAT_FACTOR", "dumps"]
