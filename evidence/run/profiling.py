"""The diagnostic profiling run: separate from the clean sweep, never mixed with it.

After the sweep, a server is started for profiling (with the profiler enabled),
and each profiled point runs its own, shorter workload inside a capture window
opened with POST /start_profile and closed with POST /stop_profile (torch), or
under `nsys profile` with the CUDA profiler API range (nsys). Everything lands in
runs/<id>/profile/:

  profile/profile.json        tool, settings, points, files (sha256), tool versions
  profile/c<point>/           trace files, requests.jsonl (phase "profile"), meta.json

The clock bridge: meta.json records, on the client's perf_counter clock (the same
one every request timestamp uses), when /start_profile and /stop_profile were sent
and answered, next to the matching wall-clock and monotonic-ns readings. Kineto's
`baseTimeNanoseconds` and nsys session start times are wall-clock based, so a
trace event can be placed among the requests in flight.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import urllib.request
from pathlib import Path
from typing import Any

from evidence.canon import sha256_file, write_json
from evidence.records import write_records
from evidence.resources import VLLM_LAUNCHER
from evidence.run.session import RunError, make_prompts, served_name, start_engine, trial_config
from evidence.rundir import META, PROFILE_JSON, REQUESTS, RunDir
from evidence.spec.model import Launch, Spec

TRACE_SUFFIXES = (".json", ".json.gz", ".sqlite", ".nsys-rep", ".qdrep")


def _post(url: str, timeout: float = 600.0) -> int:
    req = urllib.request.Request(url, data=b"", method="POST")
    with urllib.request.urlopen(req, timeout=timeout) as r:  # noqa: S310 - loopback engine URL
        return r.status


def _clock() -> dict[str, float | int]:
    return {"perf": time.perf_counter(), "unix": time.time(), "monotonic_ns": time.monotonic_ns()}


def _wait_for_files(folder: Path, before: set[Path], timeout_s: float) -> list[Path]:
    """Trace files are written after stop_profile returns: wait until new files stop growing."""
    deadline = time.monotonic() + timeout_s
    last: dict[Path, int] = {}
    stable_since = None
    while time.monotonic() < deadline:
        now = {p: p.stat().st_size for p in folder.rglob("*") if p.is_file() and p not in before
               and p.name.endswith(TRACE_SUFFIXES) and not p.name.endswith(".tmp")}
        if now and now == last:
            stable_since = stable_since or time.monotonic()
            if time.monotonic() - stable_since >= 3.0:
                return sorted(now)
        else:
            stable_since = None
        last = now
        time.sleep(0.5)
    return sorted(last)


def _export_sqlite(files: list[Path]) -> list[Path]:
    """`nsys export --type sqlite` for each report (the kernel table reads the SQLite export)."""
    import subprocess

    nsys = shutil.which("nsys")
    out = []
    for f in files:
        if nsys and f.suffix in (".nsys-rep", ".qdrep"):
            dest = f.with_suffix(".sqlite")
            subprocess.run([nsys, "export", "--type", "sqlite", "--force-overwrite", "true", "-o", str(dest), str(f)],
                           check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=1800)
            if dest.exists():
                out.append(dest)
    return out


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
        raise FileNotFoundError("profile.tool is 'nsys' but no `nsys` executable is on PATH (Nsight Systems is not "
                                "pip-installable); install it, or use profile.tool: torch")
    launch = spec.engine.launch
    python = launch.python or "python3"
    base = launch.argv() or [python, str(VLLM_LAUNCHER)]
    wrapped = [nsys, "profile", "-o", str(trace_dir.resolve() / "capture"), "--trace=cuda,nvtx,osrt",
               "--capture-range=cudaProfilerApi", "--capture-range-end=repeat",
               *(p.nsys_args or ["--trace-fork-before-exec=true", "--cuda-graph-trace=node"]), *base]
    new_engine = spec.engine.model_copy(update={"launch": Launch(command=wrapped, cwd=launch.cwd),
                                                 "env": {**spec.engine.env, "VLLM_WORKER_MULTIPROC_METHOD": "spawn"}})
    return spec.model_copy(update={"engine": new_engine}), ["--profiler-config", json.dumps({"profiler": "cuda"})]


def run_profile(spec: Spec, rd: RunDir, *, repo_root: Path, say=lambda *a, **k: None, intr=None) -> dict:
    """The profile run; `intr` (run.signals.Interrupts): a signal stops it between requests, never inside I/O."""
    from contextlib import nullcontext

    def shield():
        return intr.shielded() if intr is not None else nullcontext(None)

    def check() -> None:
        if intr is not None:
            intr.check()

    from evidence import engines as engine_mod
    from evidence.loadgen import trial as loadgen

    pdir = rd.profile_dir
    if pdir.exists():
        # a profile run that did not finish: keep it, start afresh
        dest = rd.numbered(rd.aborted_dir / pdir.name)
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.replace(pdir, dest)
        rd.event("partial_profile_set_aside", moved_to=str(dest.relative_to(rd.path)))
    staging = rd.profile_staging
    if staging.exists():
        shutil.rmtree(staging)
    trace_dir = staging / "traces"
    trace_dir.mkdir(parents=True)
    try:
        pspec, extra = profile_spec(spec, trace_dir)
    except FileNotFoundError as e:
        raise RunError(str(e)) from None
    engine = engine_mod.make_engine(pspec, repo_root, cache_dir=repo_root / ".cache" / "engine", extra_args=extra)
    rd.event("profile_start", tool=spec.profile.tool, points=list(spec.profile.points), extra_args=extra)
    points_meta = []
    try:
        start_engine(engine, rd, pspec, say)
        engine_version = engine.version()
        for point in spec.profile.points:
            n = spec.profile_prompts_at(point)
            say(f"profiling C{point}: {n} prompts (diagnostic only, never mixed with measurements)")
            prompts = make_prompts(spec, repo_root, engine.base_url, served_name(spec), n, spec.workload.seed + point)
            # warm the fresh server with the same shape so compilation is outside the window
            with shield() as stop:
                loadgen.run_trial(trial_config(spec, engine.base_url, prompts[: min(len(prompts), point)],
                                               max_concurrency=point, phase="warmup", request_rate="inf",
                                               burstiness=1.0, seed=0, telemetry=False, stop=stop))
            check()
            before = {p for p in trace_dir.rglob("*") if p.is_file()}
            c_start_sent = _clock()
            # torch: opens the torch profiler; nsys: vLLM's "cuda" profiler calls cudaProfilerStart,
            # which opens nsys's capture range (--capture-range=cudaProfilerApi).
            _post(engine.base_url + "/start_profile")
            c_start_ack = _clock()
            with shield() as stop:
                res = loadgen.run_trial(trial_config(spec, engine.base_url, prompts, max_concurrency=point,
                                                     phase="profile", seed=point, stop=stop))
            c_stop_sent = _clock()
            _post(engine.base_url + "/stop_profile")
            c_stop_ack = _clock()
            files = _wait_for_files(trace_dir, before, timeout_s=300)
            if spec.profile.tool == "nsys":
                files = files + _export_sqlite(files)
            out = staging / f"c{point}"
            out.mkdir()
            moved = []
            for f in files:
                dest = out / f.name
                os.replace(f, dest)
                moved.append(dest)
            write_records(out / REQUESTS, res.records)
            t0 = res.meta.t0_perf
            meta = {
                "point": point,
                "prompts": n,
                "client": res.meta.as_dict(),
                # the capture window on the trial clock (seconds since t0), with wall-clock twins
                "window": {
                    "start_profile_sent_s": c_start_sent["perf"] - t0,
                    "start_profile_acked_s": c_start_ack["perf"] - t0,
                    "stop_profile_sent_s": c_stop_sent["perf"] - t0,
                    "stop_profile_acked_s": c_stop_ack["perf"] - t0,
                    "start_profile_sent_unix": c_start_sent["unix"],
                    "stop_profile_acked_unix": c_stop_ack["unix"],
                },
                "trace_files": [{"name": p.name, "sha256": sha256_file(p),
                                 "bytes": p.stat().st_size} for p in moved],
            }
            write_json(out / META, meta)
            points_meta.append({"point": point, "files": [p.name for p in moved]})
            rd.event("profile_point_done", point=point, files=[p.name for p in moved])
            if not moved:
                say(f"warning: no trace file appeared for C{point}")
            check()  # a signal during the point: its trace is kept, the rest of the profile is not run
    finally:
        engine.stop()
    shutil.rmtree(trace_dir, ignore_errors=True)
    summary = {
        "tool": spec.profile.tool,
        "settings": extra,
        "window": spec.profile.window.model_dump(),
        "points": points_meta,
        "engine_version": engine_version,
        "note": "diagnostic workload on a separately started server; profilers perturb execution, so nothing here is a measurement",
    }
    write_json(staging / PROFILE_JSON, summary)
    os.replace(staging, pdir)  # the profile appears whole or not at all
    rd.event("profile_done")
    return summary
