"""Results of `vllm bench serve` in and out: the format these users already have on disk.

Import: files written by `vllm bench serve --save-result` (per-request lists present with
`--save-detailed`) become a run directory that analyze, report, compare and freeze accept.
- points are the files' `max_concurrency`; repeats (and engine sessions) come from a mapping file the
  user gives (CSV: file,repeat[,session]), else from the file or folder names (`r2`, `rep2`,
  `repeat2`; `s1`, `session1`, as separate words of the name), else from the order in time (`date`,
  then file name); adjacent points are declared as comparisons (the higher point vs the lower);
- with per-request lists (start_times, ttfts, itls, output_lens, input_lens, errors) every request
  becomes a RequestRecord: send = start_time, first chunk = send + ttft, later chunks at the
  cumulative ITLs (one per streamed chunk, as vLLM measured them), end = the last chunk; newer vLLM's
  `queue_times` (the wait for a concurrency slot) give the slot wait, and intended = send - wait;
- what vLLM does not record is absent with the reason (the intended send time and the wait for a
  concurrency slot without queue_times; the HTTP status), listed in each trial's meta.json under
  `not_recorded`;
- a file without per-request lists (saved without --save-detailed, the common case) is an
  aggregate-only trial: its summary.json carries the file's own numbers (output throughput, request
  counts, duration, mean/median/percentile latencies, as vLLM defines them) and meta.json says
  `aggregate_only`; the analysis uses them where a trial-level value suffices (throughput verdicts,
  per-point latency from each file's percentiles) and names them in the flags; nothing per request
  is reconstructed from means;
- a file written with --append-result (one JSON result per line) gives one trial per line;
- the original files are kept byte for byte under `imported/`.

Export: every trial of a run as vLLM's result JSON (`output_throughput`, `mean_ttft_ms`,
`p99_ttft_ms`, `completed`, `max_concurrency`, ...) with vLLM's definitions, computed from our
records, plus the per-request lists of `--save-detailed`.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import shutil
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from evidence.canon import dumps, write_atomic, write_json
from evidence.metrics import REPORTED_METRICS, distribution_ms, pct_key, trial_metrics
from evidence.records import RequestRecord, read_records, write_records
from evidence.rundir import META, REQUESTS, RunDir, SUMMARY
from evidence.spec.model import spec_from_json, spec_to_json

MAX_FILE_BYTES = 1 << 30  # a --save-detailed file of 1M requests is ~200 MB; refuse anything absurd
DETAILED = ("start_times", "ttfts", "itls", "output_lens", "input_lens")
NOT_RECORDED = {
    "intended_s": "vllm bench serve does not record when a request was due; taken as its send time",
    "slot_wait_s": "vllm bench serve does not record the wait for a concurrency slot; recorded as 0 and not "
                   "reported as a measurement",
    "status": "vllm bench serve does not record HTTP status codes; only its error text",
    "prompt_tokens": "input_lens are the client's prompt lengths, not the server's usage.prompt_tokens",
}
NOT_RECORDED_WITH_QUEUE = {k: v for k, v in NOT_RECORDED.items() if k not in ("intended_s", "slot_wait_s")}
VLLM_DATE = "%Y%m%d-%H%M%S"
AGGREGATE_ONLY = ("vllm bench serve result without per-request lists (no --save-detailed): throughput, counts and "
                  "latency statistics are the file's own, as vLLM computes them")
# vLLM's name of each of our latency metrics in its result keys (mean_<name>_ms, p99_<name>_ms, ...)
VLLM_METRIC = {"ttft": "ttft", "tpot": "tpot", "itl": "itl", "e2el": "e2el", "slot_wait": "client_queue_time"}
# a repeat or session number as a word of a file or folder name: r2, rep2, repeat-2; s1, session_1
_REPEAT = re.compile(r"(?:^|[-_.\s])r(?:ep(?:eat)?)?[-_]?(\d+)(?=$|[-_.\s])", re.I)
_SESSION = re.compile(r"(?:^|[-_.\s])s(?:ession)?[-_]?(\d+)(?=$|[-_.\s])", re.I)


class InteropError(Exception):
    """Input that cannot be imported or exported; one paragraph for the user."""


@dataclass(frozen=True)
class BenchFile:
    path: Path
    data: dict
    when: datetime | None
    line: int | None = None  # a line of a file written with --append-result (one result per line)
    raw: bytes = b""  # the result's own bytes (its digest tells a file given twice)

    @property
    def key(self) -> str:
        return str(self.path) + (f":{self.line}" if self.line else "")

    @property
    def label(self) -> str:
        return self.path.name + (f":{self.line}" if self.line else "")

    @property
    def point(self) -> int:
        return int(self.data["max_concurrency"])

    @property
    def detailed(self) -> bool:
        return all(isinstance(self.data.get(k), list) for k in DETAILED)

    @property
    def queue_times(self) -> list | None:
        q = self.data.get("queue_times")
        return q if self.detailed and isinstance(q, list) and len(q) == len(self.data["start_times"]) else None


def _read(path: Path) -> list[BenchFile]:
    """The results in one file: one (--save-result), or one per line (--append-result)."""
    if not path.is_file():
        raise InteropError(f"{path} is not a file; give result files written by `vllm bench serve --save-result`.")
    if path.stat().st_size > MAX_FILE_BYTES:
        raise InteropError(f"{path} is {path.stat().st_size:,} bytes, over the {MAX_FILE_BYTES:,}-byte limit of one "
                           "result file.")
    raw = path.read_bytes()
    try:
        return [_result(path, json.loads(raw), None, raw)]
    except json.JSONDecodeError as e:
        lines = [(n, ln) for n, ln in enumerate(raw.splitlines(), start=1) if ln.strip()]
        if len(lines) < 2:
            raise InteropError(f"{path} is not JSON ({e}); give result files of `vllm bench serve --save-result`.") \
                from None
    except UnicodeDecodeError as e:
        raise InteropError(f"{path} is not JSON ({e}); give result files of `vllm bench serve --save-result`.") from None
    out = []
    for n, ln in lines:  # --append-result: one JSON result per line
        try:
            out.append(_result(path, json.loads(ln), n, ln))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise InteropError(f"{path} line {n} is not JSON ({e}); a file of several results (--append-result) "
                               "holds one JSON result per line.") from None
    return out


def _result(path: Path, data: Any, line: int | None, raw: bytes) -> BenchFile:
    where = f"{path}" + (f" line {line}" if line else "")
    if not isinstance(data, dict) or "completed" not in data or "duration" not in data:
        raise InteropError(f"{where} is not a `vllm bench serve` result: it has no 'completed' and 'duration' keys.")
    mc = data.get("max_concurrency")
    if not isinstance(mc, int) or isinstance(mc, bool) or mc <= 0:
        raise InteropError(f"{where} has max_concurrency {mc!r}; this importer maps points to max_concurrency, so each "
                           "file needs one (run vllm bench serve with --max-concurrency).")
    when = None
    if isinstance(data.get("date"), str):
        try:
            when = datetime.strptime(data["date"], VLLM_DATE)
        except ValueError:
            when = None
    if data.get("detailed") is not None or any(k in data for k in DETAILED):
        lens = {k: len(data[k]) for k in DETAILED if isinstance(data.get(k), list)}
        if len(set(lens.values())) > 1:
            raise InteropError(f"{where}: the per-request lists have different lengths {lens}; the file is damaged.")
    return BenchFile(path, data, when, line, raw)


def _records(f: BenchFile) -> list[RequestRecord]:
    d = f.data
    starts = [float(x) for x in d["start_times"]]
    t0 = min(starts) if starts else 0.0
    errors = d.get("errors") or [""] * len(starts)
    queue = f.queue_times
    out = []
    for i, (st, ttft, itl, olen, ilen) in enumerate(zip(starts, d["ttfts"], d["itls"], d["output_lens"],
                                                         d["input_lens"])):
        err = errors[i] if i < len(errors) else ""
        ok = not err and ttft is not None and ttft > 0
        send = st - t0
        wait = float(queue[i]) if queue is not None and isinstance(queue[i], (int, float)) and queue[i] >= 0 else 0.0
        rec = RequestRecord(i=i, phase="measure", prompt_len=int(ilen), max_tokens=int(olen) if olen else 0,
                            intended_s=send - wait, slot_wait_s=wait, send_s=send, ok=bool(ok), error=err or None)
        if ok:
            first = send + float(ttft)
            chunks = [first]
            for g in itl or []:
                chunks.append(chunks[-1] + float(g))
            rec.first_chunk_s, rec.chunk_s, rec.end_s = first, chunks, chunks[-1]
            rec.completion_tokens = int(olen)
            rec.chunk_count = len(chunks)
            rec.finish_reason = "length"
        out.append(rec)
    return out


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def _file_pcts(d: dict) -> set[float]:
    """The percentiles a plain result file gives for TTFT and E2EL alike (p50 also from the median)."""
    have = []
    for m in ("ttft", "e2el"):
        ps = {float(k[1:-len(m) - 4]) for k in d if k.startswith("p") and k.endswith(f"_{m}_ms")
              and re.fullmatch(r"[0-9.]+", k[1:-len(m) - 4]) and _num(d[k]) is not None}
        if _num(d.get(f"median_{m}_ms")) is not None:
            ps.add(50.0)
        have.append(ps)
    return have[0] & have[1]


def _percentiles(files: list[BenchFile]) -> list[float]:
    """Every file's requests give any percentile; plain files only those they carry (the common ones)."""
    plain = [_file_pcts(f.data) for f in files if not f.detailed]
    if not plain:
        return [50.0, 90.0, 99.0]
    common = set.intersection(*plain)
    if not common:
        raise InteropError("the result files share no latency percentile (p50, p99, ...) for TTFT and E2EL; "
                           "rerun vllm bench serve with the same --metric-percentiles for every file.")
    return sorted(common)


def _aggregate_summary(d: dict, pcts: Sequence[float]) -> dict:
    """A plain file's own aggregates in the shape of metrics.trial_metrics (what analysis reads per trial).
    What the file does not carry is None with the reason; nothing is derived from means."""
    completed = int(d["completed"])
    failed = int(d["failed"]) if isinstance(d.get("failed"), int) else 0
    dur = _num(d.get("duration"))
    out_tok = d.get("total_output_tokens")
    absent = {k: "not in a result file without per-request lists" for k in
              ("output_len_mismatches", "chunk_usage_mismatches", "prompt_tokens_server")}
    tput = _num(d.get("output_throughput"))
    if tput is None and dur and isinstance(out_tok, int):
        tput = out_tok / dur
    if tput is None:
        absent["output_throughput"] = "the file has no output_throughput (and no total_output_tokens and duration)"
    rtput = _num(d.get("request_throughput"))
    if rtput is None and dur:
        rtput = completed / dur
    out: dict[str, Any] = {
        "requests": completed + failed, "completed": completed, "failed": failed,
        "errors": {"failed (vllm bench serve keeps no error text without per-request lists)": failed} if failed
        else {},
        "percentile_method": "vllm bench serve's own (numpy linear, over its requests)",
        "duration_s": dur, "total_output_tokens": out_tok if isinstance(out_tok, int) else None,
        "total_input_tokens_nominal": d.get("total_input_tokens"), "prompt_tokens_server": None,
        "output_len_mismatches": None, "chunk_usage_mismatches": None,
        "output_throughput": tput, "request_throughput": rtput,
    }
    for ours, theirs in VLLM_METRIC.items():
        dist: dict[str, Any] = {"mean": _num(d.get(f"mean_{theirs}_ms")),
                                "median": _num(d.get(f"median_{theirs}_ms", d.get(f"p50_{theirs}_ms"))),
                                "std": _num(d.get(f"std_{theirs}_ms"))}
        for p in pcts:
            v = _num(d.get(f"{pct_key(p)}_{theirs}_ms"))
            dist[pct_key(p)] = v if v is not None else (dist["median"] if p == 50 else None)
        if dist["mean"] is None or any(dist[pct_key(p)] is None for p in pcts):
            out[ours + "_ms"] = None
            absent[ours + "_ms"] = f"the file has no mean_{theirs}_ms or percentiles"
        else:
            out[ours + "_ms"] = dist
    out["absent"] = dict(sorted(absent.items()))
    return out


def _words(f: BenchFile) -> list[str]:
    """Where a repeat or session number is looked for: the file's name, then its folder's."""
    return [f.path.stem, f.path.parent.name]


def _from_names(files: list[BenchFile]) -> dict[str, tuple[int, int]] | None:
    """Repeat and session of every file from its name (or its folder's); None when no name carries a repeat."""
    got: dict[str, tuple[int | None, int]] = {}
    for f in files:
        rep = ses = None
        for w in _words(f):
            m = _REPEAT.search(w)
            if m and rep is None:
                rep = int(m.group(1))
            m = _SESSION.search(w)
            if m and ses is None:
                ses = int(m.group(1))
        got[f.key] = (rep, ses or 1)
    have = [p for p, (r, _) in got.items() if r is not None]
    if not have:
        return None
    if len(have) != len(files):
        lack = sorted(str(p) for p, (r, _) in got.items() if r is None)
        raise InteropError(f"some file names carry a repeat number (r1, rep2, ...) and some do not ({', '.join(lack[:5])}"
                           f"{' ...' if len(lack) > 5 else ''}); name them all, or give --map FILE (CSV: "
                           "file,repeat,session).")
    return {p: (int(r), s) for p, (r, s) in got.items() if r is not None}


def read_mapping(path: Path, files: list[BenchFile]) -> dict[str, tuple[int, int]]:
    """A small CSV the user writes: file,repeat[,session]; `file` is a file's name or its path as given
    (NAME:LINE for one line of an --append-result file)."""
    import csv

    try:
        rows = list(csv.DictReader(Path(path).read_text(encoding="utf-8").splitlines()))
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise InteropError(f"--map {path}: cannot read it as CSV ({e}); give lines of file,repeat[,session] "
                           "under that header.") from None
    if not rows or "file" not in rows[0] or "repeat" not in rows[0]:
        raise InteropError(f"--map {path}: needs a header line 'file,repeat' (optionally ',session') and one line "
                           "per result file.")
    by: dict[str, tuple[int, int]] = {}
    for n, r in enumerate(rows, start=2):
        try:
            rep, ses = int(r["repeat"]), int(r.get("session") or 1)
        except (TypeError, ValueError):
            raise InteropError(f"--map {path} line {n}: repeat and session must be whole numbers, not "
                               f"{r.get('repeat')!r}, {r.get('session')!r}.") from None
        if rep < 1 or ses < 1:
            raise InteropError(f"--map {path} line {n}: repeat and session start at 1.")
        by[(r["file"] or "").strip()] = (rep, ses)
    out = {}
    for f in files:
        hit = [by[k] for k in (f.key, f.label) if k in by]
        if not hit:
            raise InteropError(f"--map {path} has no line for {f.label}; give every file a line (file,repeat,session).")
        out[f.key] = hit[0]
    return out


def _assign(files: list[BenchFile], mapping: dict[str, tuple[int, int]] | None) -> tuple[list[tuple[int, int]], str]:
    """(repeat, session) per file, in the files' order, and how they were assigned."""
    how = "a mapping file"
    if mapping is None:
        mapping, how = _from_names(files), "the file names"
    if mapping is None:
        seen: dict[int, int] = {}
        out = []
        for f in files:
            seen[f.point] = seen.get(f.point, 0) + 1
            out.append((seen[f.point], 1))
        return out, "their order in time (repeat k of a point is its k-th result in time)"
    out = [mapping[f.key] for f in files]
    dup = sorted({(f.point, r) for f, (r, _) in zip(files, out)
                  if sum(1 for g, (q, _) in zip(files, out) if g.point == f.point and q == r) > 1})
    if dup:
        raise InteropError(f"two files are repeat {dup[0][1]} of point C{dup[0][0]} (from {how}); each (point, repeat) "
                           "is one trial.")
    ses_of: dict[int, int] = {}
    for r, se in out:
        if ses_of.setdefault(r, se) != se:
            raise InteropError(f"repeat {r} is in sessions {ses_of[r]} and {se} (from {how}); a repeat runs in one "
                               "engine session.")
    return out, how


def _spec_dict(files: list[BenchFile], name: str, reps: list[tuple[int, int]]) -> dict:
    first = files[0].data
    points = sorted({f.point for f in files})
    prompts = {}
    for f in files:
        prompts.setdefault(f.point, int(f.data.get("num_prompts") or f.data["completed"] + f.data.get("failed", 0)))
    repeats = max(r for r, _ in reps)
    sessions = max(se for _, se in reps)

    def mean_len(key: str, total: str) -> int:
        vals = [x for f in files if f.detailed for x in f.data[key] if x]
        if vals:
            return max(1, round(float(np.mean(vals))))
        n = sum(f.data["completed"] for f in files)
        return max(1, round(sum(f.data.get(total) or 0 for f in files) / n)) if n else 1

    rate = first.get("request_rate", "inf")
    rate = "inf" if rate in ("inf", None) or (isinstance(rate, float) and math.isinf(rate)) else float(rate)
    d: dict[str, Any] = {
        "name": name,
        "title": f"Imported from vllm bench serve ({len(files)} result file(s))",
        "description": "Imported by `evidence import vllm-bench`; the original files are under imported/. "
                       "The server and client settings are what the files record, no more.",
        "engine": {"kind": "endpoint", "base_url": "http://imported.invalid/",
                   "version": first.get("vllm_version") if isinstance(first.get("vllm_version"), str) else None},
        "model": {"id": str(first.get("model_id") or "unknown"),
                  "tokenizer": first.get("tokenizer_id") if isinstance(first.get("tokenizer_id"), str) else None},
        "code": {"allow_dirty": True},
        "workload": {"input_len": mean_len("input_lens", "total_input_tokens"),
                     "output_len": mean_len("output_lens", "total_output_tokens"), "seed": 0,
                     "request_rate": rate, "burstiness": float(first.get("burstiness") or 1.0)
                     if rate != "inf" else 1.0, "temperature": None},
        "sweep": {"points": points, "prompts": {str(p): n for p, n in prompts.items()}, "repeats": repeats,
                  "order": "fixed"},
        "analysis": {"comparisons": [], "latency_metrics": list(REPORTED_METRICS),
                     "percentiles": [50, 90, 99]},
    }
    d["sweep"]["sessions"] = min(sessions, repeats)
    # each point against the one below it: the question a sweep of concurrency asks first
    d["analysis"]["comparisons"] = [{"a": b, "b": a} for a, b in zip(points, points[1:])]
    d["analysis"]["percentiles"] = _percentiles(files)
    return d


def import_vllm_bench(paths: Sequence[Path], out: Path, *, name: str | None = None,
                      mapping: Path | None = None) -> Path:
    """Write a run directory at `out` from vllm bench serve result files; returns `out`.
    mapping: a CSV of file,repeat[,session] (else the names, else the order in time decide)."""
    if not paths:
        raise InteropError("give at least one result file of `vllm bench serve --save-result`.")
    out = Path(out)
    if out.exists():
        raise InteropError(f"{out} already exists; importing never overwrites a run. Choose a new --out folder.")
    files = sorted((f for p in paths for f in _read(Path(p))), key=lambda f: (f.when or datetime.min, f.label))
    digests = [hashlib.sha256(f.raw).hexdigest() for f in files]
    if len(set(digests)) != len(digests):
        raise InteropError("the same result was given twice (identical bytes); each result is one trial.")
    # imported/ keeps each file once, numbered in time order (names repeat: vLLM's folders of result.json)
    copies: dict[Path, str] = {}
    for f in files:
        copies.setdefault(f.path, f"{len(copies):03d}-{f.path.name}")
    name = name or re.sub(r"[^a-z0-9._-]+", "-", out.name.lower()).strip("-") or "vllm-bench-import"
    reps, how = _assign(files, read_mapping(mapping, files) if mapping is not None else None)
    try:
        spec = spec_from_json(json.dumps(_spec_dict(files, name, reps)))
    except InteropError:
        raise
    except Exception as e:
        raise InteropError(f"the files do not describe a valid experiment: {str(e).splitlines()[0]}") from None

    tmp = out.with_name(f".{out.name}.importing")
    shutil.rmtree(tmp, ignore_errors=True)
    rd = RunDir(tmp)
    tmp.mkdir(parents=True)
    spec_json = spec_to_json(spec)
    write_atomic(rd.spec_yaml, spec_json)
    write_atomic(rd.spec_resolved, spec_json)
    trials, aggregate = [], []
    for idx, (f, (rep, ses)) in enumerate(zip(files, reps)):
        pos = 1 + sum(1 for t in trials if t["repeat"] == rep)
        t = {"index": idx, "repeat": rep, "point": f.point, "position": pos, "seed": 0,
             "prompts": int(f.data.get("num_prompts") or len(f.data.get("start_times") or [])
                            or f.data["completed"] + int(f.data.get("failed") or 0)),
             "id": f"r{rep}-c{f.point}", "source": f.label}
        if spec.sweep.sessions > 1:
            t["session"] = ses
        trials.append(t)
        (tmp / "imported").mkdir(exist_ok=True)
        if not (tmp / "imported" / copies[f.path]).exists():
            shutil.copyfile(f.path, tmp / "imported" / copies[f.path])  # byte for byte
        d = rd.trials_dir / t["id"]
        d.mkdir(parents=True)
        meta: dict[str, Any] = {"trial": {k: t[k] for k in ("index", "repeat", "point", "position", "prompts", "seed",
                                                             "id")},
                                "client": {"name": "vllm bench serve", "max_concurrency": f.point,
                                           "request_rate": f.data.get("request_rate")},
                                "imported_from": f.label,
                                "vllm_aggregates": {k: v for k, v in f.data.items() if not isinstance(v, list)}}
        if not f.detailed:
            aggregate.append(t["id"])
            write_json(d / META, {**meta, "aggregate_only": AGGREGATE_ONLY})
            summary = _aggregate_summary(f.data, spec.analysis.percentiles)
        else:
            recs = _records(f)
            write_records(d / REQUESTS, recs)
            write_json(d / META, {**meta, "not_recorded": NOT_RECORDED if f.queue_times is None
                                  else NOT_RECORDED_WITH_QUEUE})
            summary = trial_metrics(recs, spec.analysis.percentiles)
        summary["trial_id"] = t["id"]
        write_json(d / SUMMARY, summary)
    write_json(rd.plan_json, {"order": "imported", "note": f"repeats and sessions from {how}", "trials": trials})
    write_json(rd.run_json, {"run_id": out.name, "spec_name": spec.name,
                             "spec_sha256": hashlib.sha256(spec_json.encode()).hexdigest(),
                             "status": "complete",
                             "imported": {"tool": "vllm bench serve",
                                          "files": [{"name": f.label, "sha256": h}
                                                    for f, h in zip(files, digests)],
                                          "repeats_from": how,
                                          "aggregate_only": aggregate}})
    tmp.rename(out)
    return out


# ------------------------------------------------------------------ export ----


def _dist(name: str, samples_s: Sequence[float], pcts: Sequence[float]) -> dict[str, float]:
    # our one definition (evidence.metrics) under vLLM's key names; vLLM writes 0 for an empty
    # distribution, we leave its keys out instead (absent, never zero)
    d = distribution_ms(samples_s, pcts)
    if d is None:
        return {}
    out = {f"{k}_{name}_ms": d[k] for k in ("mean", "median", "std")}
    out.update({f"{pct_key(p)}_{name}_ms": d[pct_key(p)] for p in pcts})
    return out


def trial_as_vllm_result(recs: Sequence[RequestRecord], meta: dict, spec: Any,
                         percentiles: Sequence[float] = (50, 90, 99)) -> dict:
    """One trial in vLLM's result-JSON shape, with vLLM's definitions (see the module docstring)."""
    rs = [r for r in recs if r.phase == "measure"]
    ok = [r for r in rs if r.ok and r.chunk_s]
    m = trial_metrics(rs, percentiles)
    dur = m.get("duration_s")
    out_tok = sum(r.completion_tokens or 0 for r in ok)
    in_tok = sum((r.prompt_tokens if r.prompt_tokens is not None else r.prompt_len) for r in ok)
    ttft = [r.first_chunk_s - r.send_s for r in ok if r.first_chunk_s is not None]
    e2el = [r.chunk_s[-1] - r.send_s for r in ok]
    tpot = [(r.chunk_s[-1] - r.first_chunk_s) / (r.completion_tokens - 1) for r in ok
            if r.completion_tokens and r.completion_tokens > 1 and r.first_chunk_s is not None]
    itl = [b - a for r in ok for a, b in zip(r.chunk_s, r.chunk_s[1:])]
    trial = meta.get("trial", {})
    res: dict[str, Any] = {
        "backend": "evidence", "endpoint_type": "evidence", "label": trial.get("id"),
        "model_id": spec.model.id, "tokenizer_id": spec.model.tokenizer or spec.model.id,
        "num_prompts": len(rs), "request_rate": spec.workload.request_rate,
        "burstiness": spec.workload.burstiness, "max_concurrency": trial.get("point"),
        "duration": dur, "completed": len(ok), "failed": len(rs) - len(ok),
        "total_input_tokens": in_tok, "total_output_tokens": out_tok,
    }
    if dur:
        res.update(request_throughput=len(ok) / dur, output_throughput=out_tok / dur,
                   total_token_throughput=(in_tok + out_tok) / dur)
    for name, xs in (("ttft", ttft), ("tpot", tpot), ("itl", itl), ("e2el", e2el)):
        res.update(_dist(name, xs, percentiles))
    res.update(input_lens=[r.prompt_len for r in rs], output_lens=[r.completion_tokens or 0 for r in rs],
               ttfts=[(r.first_chunk_s - r.send_s) if r.ok and r.first_chunk_s is not None else 0.0 for r in rs],
               itls=[[b - a for a, b in zip(r.chunk_s, r.chunk_s[1:])] if r.ok else [] for r in rs],
               start_times=[r.send_s for r in rs], errors=[r.error or "" for r in rs])
    res["evidence"] = {"duration": "first send to the end of the last completed request (vLLM measures from "
                                   "before the first send to after the last response)",
                       "absent": "a distribution with no sample is left out (vLLM writes 0)"}
    return res


def export_vllm_bench(run_dir: Path, out_dir: Path) -> list[Path]:
    """Write one vLLM result JSON per present trial of a run; returns the files, in plan order."""
    rd = RunDir(Path(run_dir))
    if not rd.spec_resolved.is_file() or not rd.plan_json.is_file():
        raise InteropError(f"{run_dir} is not a run directory (no spec.resolved.json or plan.json).")
    spec = spec_from_json(rd.spec_resolved.read_text(encoding="utf-8"))
    plan = json.loads(rd.plan_json.read_text(encoding="utf-8"))
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for t in plan["trials"]:
        d = rd.trials_dir / str(t["id"])
        if not (d / SUMMARY).is_file():
            continue
        meta = json.loads((d / META).read_text(encoding="utf-8")) if (d / META).is_file() else {}
        meta.setdefault("trial", t)
        res = trial_as_vllm_result(read_records(d / REQUESTS), meta, spec, spec.analysis.percentiles)
        p = out_dir / f"{rd.id}-{t['id']}.json"
        write_atomic(p, dumps(res))
        written.append(p)
    if not written:
        raise InteropError(f"{run_dir} has no complete trial to export.")
    return written
