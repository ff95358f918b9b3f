"""Plain `vllm bench serve --save-result` files (no per-request lists): aggregate-only trials that still give
throughput verdicts with intervals; repeats and sessions from names or a mapping file; queue_times."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import ROOT, skip_unless_ci

from evidence.analysis.analyze import analyze_run
from evidence.interop.vllm_bench import InteropError, import_vllm_bench
from evidence.records import read_records

# Real results of `vllm bench serve` 0.26 on an H200, saved without --save-detailed, kept in the v1.0 release.
H200_RELEASE = ROOT / "releases" / "article1-h200-v1.0"


def _h200_files() -> list[Path]:
    files = sorted(H200_RELEASE.glob("data/raw/*/interleaved/*/runs/*/interleaved/*/result.json"))
    if not files:
        skip_unless_ci(f"no vllm bench serve result files under {H200_RELEASE}")
    return files


def test_real_h200_plain_files_give_throughput_verdicts_with_intervals(tmp_path: Path) -> None:
    files = _h200_files()
    datas = {f.parent.name: json.loads(f.read_text()) for f in files}
    assert not any("ttfts" in d for d in datas.values()), "these files were meant to be plain (no per-request lists)"
    run = import_vllm_bench(files, tmp_path / "h200")
    res = analyze_run(run, tmp_path / "analysis")
    points = sorted({d["max_concurrency"] for d in datas.values()})
    assert [(c["a"], c["b"]) for c in res["comparisons"]] == list(zip(points[1:], points))
    for c in res["comparisons"]:
        assert c["verdict"] in ("finding", "not significant") and c["n_units"] >= 2
        lo, hi = c["ci95"]
        assert lo < c["effect"] < hi
    for t in res["trials"]:
        d = datas[t["id"]]  # the folder names r1-c128 ... gave the repeats
        assert t["point"] == d["max_concurrency"] and t["aggregate_only"]
        assert t["output_throughput"] == pytest.approx(d["output_throughput"], rel=1e-9)
        assert t["completed"] == d["completed"] and t["duration_s"] == pytest.approx(d["duration"])
        assert any(f.startswith("aggregate-only") for f in t["flags"])
    for p in res["points"]:
        mine = [d for d in datas.values() if d["max_concurrency"] == p["point"]]
        mor = p["latency"]["ttft"]["mean_over_repeats"]
        assert mor["p99"] == pytest.approx(sum(d["p99_ttft_ms"] for d in mine) / len(mine))
        assert p["latency"]["ttft"]["pooled"] is None and "aggregate-only" in p["absent"]["latency_pooled"]
        assert p["latency"]["ttft"]["intervals"]["p99"]["ci_low"] is not None


def _plain(path: Path, c: int, date: str, tput: float, **extra) -> Path:
    n = 8
    d = {
        "date": date,
        "backend": "vllm",
        "model_id": "m",
        "tokenizer_id": "m",
        "num_prompts": n,
        "request_rate": "inf",
        "burstiness": 1.0,
        "max_concurrency": c,
        "duration": 2.0,
        "completed": n,
        "failed": 0,
        "total_input_tokens": 16 * n,
        "total_output_tokens": int(tput * 2.0),
        "request_throughput": n / 2.0,
        "output_throughput": tput,
    }
    for m, base in (("ttft", 50.0), ("tpot", 5.0), ("itl", 5.0), ("e2el", 400.0)):
        d.update({f"mean_{m}_ms": base * 1.1, f"median_{m}_ms": base, f"std_{m}_ms": 1.0, f"p99_{m}_ms": base * 2})
    d.update(extra)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(d))
    return path


def test_repeats_and_sessions_from_names_and_from_a_mapping(tmp_path: Path) -> None:
    files = []
    for s in (1, 2):
        for r in (1, 2):
            for c, tp in ((4, 100.0), (8, 150.0)):
                rep = 2 * (s - 1) + r
                files.append(
                    _plain(
                        tmp_path / "in" / f"s{s}" / f"bench-r{rep}-c{c}.json",
                        c,
                        f"2026120{rep}-10000{c % 10}",
                        tp + rep + s,
                    )
                )
    run = import_vllm_bench(files, tmp_path / "named")
    plan = json.loads((run / "plan.json").read_text())
    spec = json.loads((run / "spec.resolved.json").read_text())
    assert spec["sweep"]["repeats"] == 4 and spec["sweep"]["sessions"] == 2
    assert sorted((t["repeat"], t["session"]) for t in plan["trials"] if t["point"] == 4) == [
        (1, 1),
        (2, 1),
        (3, 2),
        (4, 2),
    ]
    assert "file names" in plan["note"]
    (c,) = analyze_run(run, tmp_path / "a1")["comparisons"]
    assert c["unit"] in ("repeat", "session") and c["ci95"] is not None

    mapping = tmp_path / "map.csv"
    mapping.write_text(
        "file,repeat,session\n" + "".join(f"{f.name},{5 - int(f.stem.split('-')[1][1:])},1\n" for f in files)
    )
    run = import_vllm_bench(files, tmp_path / "mapped", mapping=mapping)
    plan = json.loads((run / "plan.json").read_text())
    assert {t["source"]: t["repeat"] for t in plan["trials"]} == {
        f.name: 5 - int(f.stem.split("-")[1][1:]) for f in files
    }
    assert "mapping" in plan["note"] and "session" not in plan["trials"][0]


def test_names_and_mappings_that_do_not_decide_are_clear_errors(tmp_path: Path) -> None:
    a = _plain(tmp_path / "r1-c4.json", 4, "20261201-100000", 100.0)
    b = _plain(tmp_path / "other-c4.json", 4, "20261201-110000", 100.0)
    with pytest.raises(InteropError, match="some file names carry a repeat"):
        import_vllm_bench([a, b], tmp_path / "x")
    c = _plain(tmp_path / "x" / "r1-c4.json", 4, "20261201-120000", 101.0)
    with pytest.raises(InteropError, match="two files are repeat 1 of point C4"):
        import_vllm_bench([a, c], tmp_path / "y")
    m = tmp_path / "m.csv"
    m.write_text("file,repeat\nr1-c4.json,1\n")
    with pytest.raises(InteropError, match="no line for"):
        import_vllm_bench([a, b], tmp_path / "z", mapping=m)
    m.write_text("name,rep\n")
    with pytest.raises(InteropError, match="header"):
        import_vllm_bench([a, b], tmp_path / "z", mapping=m)
    bare = _plain(tmp_path / "bare.json", 4, "20261201-130000", 100.0)
    d = json.loads(bare.read_text())
    for k in [k for k in d if k.startswith("p99_")]:
        del d[k]
    d["p90_ttft_ms"] = d["p90_e2el_ms"] = 1.0
    bare.write_text(json.dumps(d))
    # p50 (from the median) is common to both files, p99 and p90 are not
    run = import_vllm_bench([b, bare], tmp_path / "common")
    assert json.loads((run / "spec.resolved.json").read_text())["analysis"]["percentiles"] == [50.0]


def test_queue_times_give_the_slot_wait_and_the_intended_send(tmp_path: Path) -> None:
    n = 4
    waits = [0.0, 0.25, 0.5, 0.75]
    f = tmp_path / "q.json"
    f.write_text(
        json.dumps(
            {
                "date": "20261201-100000",
                "model_id": "m",
                "num_prompts": n,
                "request_rate": "inf",
                "max_concurrency": 1,
                "duration": 1.0,
                "completed": n,
                "failed": 0,
                "input_lens": [4] * n,
                "output_lens": [3] * n,
                "ttfts": [0.05] * n,
                "itls": [[0.01, 0.02]] * n,
                "start_times": [100.0 + 0.25 * i for i in range(n)],
                "queue_times": waits,
                "errors": [""] * n,
            }
        )
    )
    run = import_vllm_bench([f], tmp_path / "q")
    recs = read_records(run / "trials" / "r1-c1" / "requests.jsonl")
    assert [r.slot_wait_s for r in recs] == waits
    assert [r.send_s - r.intended_s for r in recs] == pytest.approx(waits)
    meta = json.loads((run / "trials" / "r1-c1" / "meta.json").read_text())
    assert "slot_wait_s" not in meta["not_recorded"] and "status" in meta["not_recorded"]


def test_append_result_files_hold_one_trial_per_line(tmp_path: Path) -> None:
    """`vllm bench serve --append-result` writes one JSON result per line of one file."""
    parts = [
        _plain(tmp_path / f"p{i}.json", c, f"2026120{1 + i}-100000", 100.0 + 10 * i) for i, c in enumerate((4, 8, 4, 8))
    ]
    appended = tmp_path / "all.jsonl"
    appended.write_text("\n".join(p.read_text() for p in parts))
    run = import_vllm_bench([appended], tmp_path / "appended")
    plan = json.loads((run / "plan.json").read_text())
    assert [(t["point"], t["repeat"], t["source"]) for t in plan["trials"]] == [
        (4, 1, "all.jsonl:1"),
        (8, 1, "all.jsonl:2"),
        (4, 2, "all.jsonl:3"),
        (8, 2, "all.jsonl:4"),
    ]
    assert [p.name for p in (run / "imported").iterdir()] == ["000-all.jsonl"]
    assert (run / "imported" / "000-all.jsonl").read_bytes() == appended.read_bytes()
    (c,) = analyze_run(run, tmp_path / "a")["comparisons"]
    assert c["ci95"] is not None
    appended.write_text(parts[0].read_text() + "\n{not json\n")
    with pytest.raises(InteropError, match="line 2 is not JSON"):
        import_vllm_bench([appended], tmp_path / "bad")
