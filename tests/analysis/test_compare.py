"""compare_runs: two runs (or releases) of one experiment side by side."""

from __future__ import annotations

import json
import math
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rundir_fixtures import (DEFAULT_BASE, DEFAULT_REPEAT_FACTOR, build_run, default_engine_resolved,  # noqa: E402
                             default_provenance, demo_spec)

from evidence.analysis.load import NotARunDir  # noqa: E402
from evidence.analysis.compare import compare_runs, resolve_run_dir  # noqa: E402


def _pair(tmp_path: Path) -> tuple[Path, Path]:
    a = build_run(tmp_path, run_id="canonical")
    spec_b = demo_spec(name="demo-cpu-cleanroom")
    # clean-room: 4% slower everywhere, same shape; another engine build, max_num_seqs resolved differently
    b = build_run(tmp_path, run_id="cleanroom", spec=spec_b,
                  throughput=lambda r, p: DEFAULT_BASE[p] * DEFAULT_REPEAT_FACTOR[r] * 0.96,
                  provenance=default_provenance(spec_b, packages={"torch": "2.9.1+cpu"}, hostname="fresh-host"),
                  engine_resolved=default_engine_resolved(spec_b, max_num_seqs=128))
    return a, b


def test_compare_two_runs(tmp_path: Path) -> None:
    a, b = _pair(tmp_path)
    c = compare_runs(a, b)
    assert c["a"]["run_id"] == "canonical" and c["b"]["run_id"] == "cleanroom"
    # per point: both means and the shift (b - a) / a = -4% (means are 100/300/280 in run a)
    pts = {p["point"]: p for p in c["points"]}
    assert pts[4]["a_mean"] == pytest.approx(300.0) and pts[4]["b_mean"] == pytest.approx(288.0)
    for p in pts.values():
        assert p["shift"] == pytest.approx(-0.04, abs=1e-8)
    # the runs are not paired, so the shift is tested unpaired (Welch on logs). By hand: both runs' logs have the
    # same spread (repeat factors 0.99, 1, 1.01), so df = 4 and se = sqrt(2 s^2 / 3); the interval of the
    # difference of mean logs, ln 0.96 -+ t(0.975, 4) se, back-transformed.
    lx = [math.log(f) for f in (0.99, 1.0, 1.01)]
    m = sum(lx) / 3
    s2 = sum((x - m) ** 2 for x in lx) / 2
    half = 2.7764451051977987 * math.sqrt(2 * s2 / 3)
    lo, hi = math.exp(math.log(0.96) - half) - 1, math.exp(math.log(0.96) + half) - 1
    assert pts[4]["shift_ci95"] == [pytest.approx(lo, abs=1e-9), pytest.approx(hi, abs=1e-9)] and hi < 0
    assert pts[4]["shift_verdict"] == "finding" and pts[4]["shift_p"] < 0.05
    # ordering the same in both, and the same rank
    o = c["ordering"]
    assert o["a"] == o["b"] == "C1 < C4 > C16" and o["same"] and o["same_rank"] and o["rank_a"] == [4, 16, 1]
    # each run's paired advantage: C4 vs C16 = 300/280 - 1 in every repeat of both
    comp = c["comparisons"][0]
    assert comp["name"] == "C4 vs C16"
    for side in ("run_a", "run_b"):
        assert comp[side]["mean_diff"] == pytest.approx(300 / 280 - 1, abs=1e-8)
        assert comp[side]["verdict"] == "finding" and comp[side]["better"] == 4  # the same ratio in every repeat
        assert comp[side]["ci95"] == [pytest.approx(300 / 280 - 1, abs=1e-8)] * 2
    assert comp["both_findings_agree"] is True
    # differences: the spec only by name (excluded), engine setting, packages, host
    assert c["same_spec_except_name"] is True and c["spec_diff"] == []
    assert [d["name"] for d in c["engine_resolved_diff"]] == ["max_num_seqs"]
    assert c["engine_resolved_diff"][0]["a"] == 256 and c["engine_resolved_diff"][0]["b"] == 128
    assert {"path": "engine.packages.torch", "a": "2.9.0+cpu", "b": "2.9.1+cpu", "only_in": None} in \
        c["provenance_diff"]["python"]
    assert c["provenance_diff"]["host"][0]["path"] == "hostname"
    assert "accelerator" not in c["provenance_diff"]
    assert str(tmp_path) not in json.dumps(c)


def test_spec_differences_and_accelerator(tmp_path: Path) -> None:
    a = build_run(tmp_path, run_id="a")
    spec_b = demo_spec(engine_args={"max_num_seqs": 8})
    b = build_run(tmp_path, run_id="b", spec=spec_b,
                  provenance=default_provenance(spec_b, accelerator=["NVIDIA H200"]))
    c = compare_runs(a, b)
    assert c["same_spec_except_name"] is False
    assert c["spec_diff"] == [{"path": "engine.args.max_num_seqs", "a": None, "b": 8, "only_in": None}]
    assert any(d["path"] == "devices[index=0].name" and d["b"] == "NVIDIA H200" for d in c["provenance_diff"]["accelerator"])
    assert any("specs differ" in cv for cv in c["caveats"])


def test_release_folders_and_errors(tmp_path: Path) -> None:
    a, b = _pair(tmp_path / "runs")
    rel_a = tmp_path / "releases" / "v1"
    shutil.copytree(a, rel_a / "data" / "raw" / a.name)
    assert resolve_run_dir(rel_a) == (rel_a / "data" / "raw" / "canonical", "release")
    c = compare_runs(rel_a, b)
    assert c["a"]["kind"] == "release" and c["b"]["kind"] == "run"
    assert c["ordering"]["same"]
    shutil.copytree(b, rel_a / "data" / "raw" / b.name)
    with pytest.raises(NotARunDir, match="holds 2 runs"):
        compare_runs(rel_a, b)
    with pytest.raises(NotARunDir, match="neither a run directory"):
        compare_runs(tmp_path, b)


def test_cli_compare(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from evidence.cli.main import app

    a, b = _pair(tmp_path)
    r = CliRunner().invoke(app, ["compare", str(a), str(b), "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["ordering"]["same"] is True
    r = CliRunner().invoke(app, ["compare", str(a), str(b)])
    assert r.exit_code == 0 and "C4 vs C16" in r.stdout and "max_num_seqs" in r.stdout
    r = CliRunner().invoke(app, ["compare", str(a), str(tmp_path / "nope")])
    assert r.exit_code == 2 and "does not exist" in r.output
