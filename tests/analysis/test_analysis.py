"""Known-answer tests for evidence.analysis: every expected number is worked out by hand here.

Fixture timing (tests/rundir_fixtures.py): a trial's output throughput is exactly the
target T given (n requests x K tokens / duration), so per-trial throughputs are the
numbers written below; latencies are what `latency=` says (or derived, when unchecked).
"""

from __future__ import annotations

import csv
import io
import json
import math
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from conftest import skipif_unless_ci  # noqa: E402
from rundir_fixtures import build_run, demo_spec, trial_records  # noqa: E402

from evidence.analysis.analyze import analyze_run, compute_analysis  # noqa: E402
from evidence.analysis.findings import dominates, paired_comparison  # noqa: E402
from evidence.analysis.load import NotARunDir, load_run  # noqa: E402
from evidence.records import write_records  # noqa: E402

APPROX = dict(rel=1e-9, abs=1e-9)


def _tp(table: dict[int, list[float]]):
    """{point: [T_r1, T_r2, T_r3]} -> (repeat, point) -> T."""
    return lambda r, p: table[p][r - 1]


def _point(res: dict, p: int) -> dict:
    return next(x for x in res["points"] if x["point"] == p)


def _trial(res: dict, tid: str) -> dict:
    return next(x for x in res["trials"] if x["id"] == tid)


def _csv_rows(path: Path) -> list[dict]:
    return list(csv.DictReader(io.StringIO(path.read_text(encoding="utf-8"))))


# ------------------------------------------------------------------ CV ----


@pytest.mark.parametrize("kind", ["population", "sample"])
def test_cv_population_vs_sample(tmp_path: Path, kind: str) -> None:
    # C4 over three repeats: 100, 110, 120 tok/s. mean = 110; squared deviations 100 + 0 + 100 = 200.
    # population std = sqrt(200 / 3) = 8.164965809; CV = 0.074226962
    # sample std     = sqrt(200 / 2) = 10;          CV = 0.090909091
    spec = demo_spec(cv=kind)
    run = build_run(tmp_path, spec=spec, throughput=_tp({1: [50, 50, 50], 4: [100, 110, 120], 16: [90, 90, 90]}))
    res = analyze_run(run)
    tp = _point(res, 4)["output_throughput"]
    assert tp["mean"] == pytest.approx(110.0, **APPROX)
    assert tp["std_kind"] == kind
    if kind == "population":
        assert tp["std"] == pytest.approx(math.sqrt(200 / 3), rel=1e-8)
        assert tp["cv"] == pytest.approx(0.074226962, abs=1e-9)
    else:
        assert tp["std"] == pytest.approx(10.0, rel=1e-8)
        assert tp["cv"] == pytest.approx(10 / 110, abs=1e-9)
    assert (tp["min"], tp["max"]) == (pytest.approx(100.0), pytest.approx(120.0))
    assert tp["rel_range"] == pytest.approx(20 / 110, abs=1e-9)  # (max - min) / mean
    # the CSV says which std it used, with fixed decimals
    row = next(r for r in _csv_rows(run / "analysis" / "points.csv") if r["point"] == "4")
    assert row["std_kind"] == kind
    assert row["output_throughput_mean_tok_s"] == "110.00"
    assert row["cv_pct"] == ("7.423" if kind == "population" else "9.091")
    assert row["rel_range_pct"] == "18.182"


# ------------------------------------------------------------- paired ----


T975 = {1: 12.706204736174698, 2: 4.302652729749464}  # t(0.975, df): the 95% two-sided quantiles
# t(0.8, df) in closed form: df 1 is Cauchy, tan(0.3 pi); df 2 solves t / sqrt(2 + t^2) = 0.6, t = sqrt(1.125)
T80 = {1: math.tan(0.3 * math.pi), 2: math.sqrt(1.125)}


def _by_hand(a: list[float], b: list[float]) -> tuple[float, tuple[float, float], float]:
    """(effect, 95% interval, MDE at 80% power) of the paired log-ratio procedure, worked out without the code
    under test."""
    d = [math.log(x / y) for x, y in zip(a, b)]
    n = len(d)
    m = sum(d) / n
    sd = math.sqrt(sum((x - m) ** 2 for x in d) / (n - 1))
    half = T975[n - 1] * sd / math.sqrt(n)
    effect = sum((x - y) / y for x, y in zip(a, b)) / n
    mde = math.exp((T975[n - 1] + T80[n - 1]) * sd / math.sqrt(n)) - 1
    return effect, (math.exp(m - half) - 1, math.exp(m + half) - 1), mde


def test_paired_comparison_with_interval_p_and_mde(tmp_path: Path) -> None:
    # C4 = 110, 120, 130; C16 = 100, 100, 100. d_r = 0.10, 0.20, 0.30 (mean 0.20); C4 wins all three.
    # ln ratios 0.09531, 0.18232, 0.26236: mean 0.18000, sd 0.08354, se 0.04823, t = 3.732 on 2 df,
    # p = 0.0649 -> not significant although C4 won every repeat (3 of 3 happens by chance 1 time in 4).
    run = build_run(tmp_path, throughput=_tp({1: [50, 50, 50], 4: [110, 120, 130], 16: [100, 100, 100]}))
    res = analyze_run(run)
    c = res["comparisons"][0]
    assert (c["a"], c["b"], c["metric"]) == (4, 16, "output_throughput")
    assert [r["diff"] for r in c["repeats"]] == [pytest.approx(0.1), pytest.approx(0.2), pytest.approx(0.3)]
    assert c["mean_diff"] == pytest.approx(0.2, abs=1e-9) and c["effect"] == pytest.approx(0.2, abs=1e-9)
    assert (c["wins_a"], c["wins_b"], c["ties"], c["pairs"], c["n_pairs"]) == (3, 0, 0, 3, 3)
    effect, (lo, hi), mde = _by_hand([110, 120, 130], [100, 100, 100])
    assert c["ci95"] == [pytest.approx(lo, abs=1e-8), pytest.approx(hi, abs=1e-8)]
    assert lo < 0 < hi
    assert c["p_value"] == pytest.approx(0.06488, abs=1e-4) and c["p_adjusted"] == c["p_value"]  # one comparison
    assert c["mde"] == pytest.approx(mde, abs=1e-8)
    assert c["sign_p"] == pytest.approx(0.25) and "n < 6" in c["sign_note"]
    assert c["verdict"] == "not significant" and c["statement"].startswith("not significant: C4 vs C16 +20.0% (95% CI")
    assert "spread" not in c  # the range rule is gone
    rows = _csv_rows(run / "analysis" / "comparisons.csv")
    assert rows[0]["effect_pct"] == "20.000" and rows[0]["verdict"] == "not significant"
    assert rows[0]["ci_low_pct"] == f"{lo * 100:.3f}" and rows[0]["p_value"] == f"{c['p_value']:.6f}"
    assert rows[0]["wins_a"] == "3" and rows[0]["mde_pct"] == f"{mde * 100:.3f}"
    assert [r["family"] for r in rows] == ["declared", "adjacent", "adjacent"]
    paired = _csv_rows(run / "analysis" / "paired.csv")
    assert [r["diff_pct"] for r in paired] == ["10.000", "20.000", "30.000"]
    assert any(cv.startswith("Not significant: C4 vs C16") for cv in res["caveats"])


def test_demo_like_2_5x_is_a_finding(tmp_path: Path) -> None:
    # The demo run's shape: C4 about 2.5x C16, every repeat. Ratios 2.5, 2.5437, 2.4490.
    a, b = [250.0, 262.0, 240.0], [100.0, 103.0, 98.0]
    run = build_run(tmp_path, throughput=_tp({1: [50, 50, 50], 4: a, 16: b}))
    c = analyze_run(run)["comparisons"][0]
    effect, (lo, hi), _ = _by_hand(a, b)
    assert c["verdict"] == "finding" and c["better"] == 4
    assert c["effect"] == pytest.approx(effect, abs=1e-8) and effect == pytest.approx(1.4976, abs=1e-4)
    assert c["ci95"] == [pytest.approx(lo, abs=1e-8), pytest.approx(hi, abs=1e-8)] and lo > 0
    assert c["p_value"] < 0.001
    assert c["statement"].startswith("finding: C4 > C16, C4 vs C16 +149.8% (95% CI")


def test_inside_the_noise_is_not_significant(tmp_path: Path) -> None:
    # C4 = 101, 99, 103; C16 = 100 x3. d = 0.01, -0.01, 0.03; mean 0.01; wins 2-1.
    run = build_run(tmp_path, throughput=_tp({1: [50, 50, 50], 4: [101, 99, 103], 16: [100, 100, 100]}))
    res = analyze_run(run)
    c = res["comparisons"][0]
    assert c["mean_diff"] == pytest.approx(0.01, abs=1e-9)
    assert (c["wins_a"], c["wins_b"]) == (2, 1)
    _, (lo, hi), mde = _by_hand([101, 99, 103], [100, 100, 100])
    assert c["ci95"] == [pytest.approx(lo, abs=1e-8), pytest.approx(hi, abs=1e-8)] and lo < 0 < hi
    assert c["verdict"] == "not significant" and f"(MDE) {mde * 100:.1f}%" in c["statement"]


def test_holm_over_declared_comparisons(tmp_path: Path) -> None:
    # Two declared comparisons: each keeps its own 95% interval and p; the verdict follows Holm.
    # C4 vs C16 alone: p ~ 0.0041 (ratios 1.2, 1.2121, 1.1881); C1 vs C16: p ~ 0.034 (ratios 0.5, 0.55, 0.46).
    # Holm: sorted p's 0.0041 x 2 = 0.0082 < 0.05 (finding), then max(0.0082, 0.034 x 1) = 0.034 < 0.05 (finding).
    spec = demo_spec(comparisons=[(4, 16), (1, 16)])
    run = build_run(tmp_path, spec=spec, throughput=_tp({1: [50, 55, 46], 4: [120, 120, 120], 16: [100, 99, 101]}))
    cs = analyze_run(run)["comparisons"]
    alone = [paired_comparison(compute_analysis(load_run(run)), a, b) for a, b in ((4, 16), (1, 16))]
    for c, one in zip(cs, alone):
        assert c["p_value"] == pytest.approx(one["p_value"]) and c["ci95"] == pytest.approx(one["ci95"])
        assert c["family"] == 2
    p1, p2 = sorted(c["p_value"] for c in cs)
    assert sorted(c["p_adjusted"] for c in cs) == [pytest.approx(min(1, 2 * p1)), pytest.approx(max(2 * p1, p2))]
    assert all(c["verdict"] == "finding" for c in cs)
    assert all("Holm over 2 comparisons" in c["statement"] for c in cs)


def test_sessions_are_the_unit_when_they_differ(tmp_path: Path) -> None:
    # 6 repeats in 3 engine sessions (plan: repeats 1-2, 3-4, 5-6). C4 / C16 per repeat: 1.10, 1.11 | 1.20, 1.21 |
    # 1.02, 1.03: the sessions differ far more than the repeats inside them, so the session is the unit (n = 3).
    # Pooled over 6 repeats the test would call it a finding; over the 3 session means of ln(ratio) it is not.
    spec = demo_spec(repeats=6)
    spec = spec.model_copy(update={"sweep": spec.sweep.model_copy(update={"sessions": 3})})
    ratio = [1.10, 1.11, 1.20, 1.21, 1.02, 1.03]
    run = build_run(tmp_path, spec=spec, throughput=lambda r, p: {1: 50.0, 4: 100.0 * ratio[r - 1], 16: 100.0}[p])
    res = analyze_run(run)
    assert [t["session"] for t in res["trials"] if t["point"] == 4] == [1, 1, 2, 2, 3, 3]
    c = res["comparisons"][0]
    assert (c["unit"], c["n_units"], c["pairs"]) == ("session", 3, 6)
    means = [(math.log(ratio[i]) + math.log(ratio[i + 1])) / 2 for i in (0, 2, 4)]
    m = sum(means) / 3
    sd = math.sqrt(sum((x - m) ** 2 for x in means) / 2)
    half = T975[2] * sd / math.sqrt(3)
    assert c["ci95"] == [pytest.approx(math.exp(m - half) - 1, abs=1e-8), pytest.approx(math.exp(m + half) - 1, abs=1e-8)]
    assert c["verdict"] == "not significant"
    assert "scope: these 3 server starts (unit: server starts, n 3, 2 df)" in c["statement"]
    assert (c["df"], c["scope"], c["scope_note"]) == (2, "these 3 server starts", None)
    assert c["sessions"]["sessions"] == 3 and c["sessions"]["sd_between_log"] > c["sessions"]["sd_within_log"]
    from evidence.analysis.stats import paired as stats_paired
    assert stats_paired(ratio, [1.0] * 6, a=4, b=16, metric="m").verdict == "finding"  # what pooling would claim
    row = _csv_rows(run / "analysis" / "comparisons.csv")[0]
    assert row["unit"] == "session" and row["n_units"] == "3" and row["sessions"] == "3"
    assert any("engine session" in cv for cv in res["caveats"])


def test_every_verdict_carries_its_scope(tmp_path: Path) -> None:
    # one server start: every comparison, link, dominance pair and latency interval says it is about that start
    run = build_run(tmp_path, throughput=_tp({1: [50, 52, 51], 4: [110, 120, 130], 16: [100, 101, 99]}))
    res = analyze_run(run)
    assert res["scope"]["server_starts"] == 1 and res["scope"]["scope"] == "this server start"
    assert "at least 3 server starts" in res["scope"]["claim_note"]
    for c in res["comparisons"] + res["adjacent"]:
        assert (c["unit"], c["n_units"], c["df"], c["scope"]) == ("repeat", 3, 2, "this server start")
        assert "scope: this server start (unit: repeats, n 3, 2 df)" in c["statement"]
    for link in res["ordering"]["links"]:
        assert link["scope"] == "this server start" and link["df"] == 2
    for p in res["points"]:
        for by_stat in (m.get("intervals") or {} for m in p["latency"].values()):
            assert all(iv["scope"] == "this server start" and iv["unit"] == "repeat" for iv in by_stat.values())
    vc = res["variance_components"]["points"]
    assert [v["point"] for v in vc] == [1, 4, 16] and all(v["sd_between"] is None for v in vc)
    assert vc[1]["sd_within"] == pytest.approx(float(np.std(np.log([110, 120, 130]), ddof=1)), rel=1e-6)


def test_single_repeat(tmp_path: Path) -> None:
    spec = demo_spec(repeats=1)
    run = build_run(tmp_path, spec=spec, throughput=_tp({1: [50], 4: [120], 16: [100]}))
    res = analyze_run(run)
    c = res["comparisons"][0]
    assert c["pairs"] == 1 and c["mean_diff"] == pytest.approx(0.2)
    assert c["verdict"] == "no claim" and c["ci95"] is None and c["p_value"] is None
    assert c["statement"].startswith("no claim: C4 vs C16 has 1 paired repeat")
    tp = _point(res, 4)["output_throughput"]
    assert tp["mean"] == pytest.approx(120.0) and tp["cv"] is None and tp["std"] is None and tp["rel_range"] is None
    assert "single measured repeat" in _point(res, 4)["absent"]["output_throughput_spread"]
    row = next(r for r in _csv_rows(run / "analysis" / "points.csv") if r["point"] == "4")
    assert row["cv_pct"] == "" and "single measured repeat" in row["flags"]  # empty with a reason, never 0
    assert res["ordering"]["statement"] == "C1 < C4 > C16"
    assert res["ordering"]["supported_statement"] == "C1 ~ C4 ~ C16"
    assert any("Single repeat" in cv for cv in res["caveats"])


# ------------------------------------------------- missing / failed trials ----


def test_missing_trial_is_flagged_everywhere(tmp_path: Path) -> None:
    # r2-c16 missing. C4 = 110, 120, 130; C16 = 100, -, 100.
    # pairs: r1 0.10, r3 0.30 -> mean 0.20 over 2 pairs: t on 1 df, the interval is wide -> not significant.
    run = build_run(tmp_path, throughput=_tp({1: [50, 50, 50], 4: [110, 120, 130], 16: [100, 100, 100]}),
                    missing=("r2-c16",))
    res = analyze_run(run)
    assert res["completeness"]["missing"] == ["r2-c16"]
    p16 = _point(res, 16)
    assert (p16["repeats_planned"], p16["repeats_present"], p16["repeats_measured"]) == (3, 2, 2)
    assert p16["missing"] == ["r2-c16"] and "r2-c16: missing" in p16["flags"]
    c = res["comparisons"][0]
    assert c["pairs"] == 2 and c["mean_diff"] == pytest.approx(0.2)
    assert c["repeats"][1]["diff"] is None and c["repeats"][1]["flags"] == ["r2-c16 missing"]
    assert c["n_pairs"] == 2 and c["verdict"] == "not significant"
    _, (lo, hi), _ = _by_hand([110, 130], [100, 100])
    assert c["ci95"] == [pytest.approx(lo, abs=1e-8), pytest.approx(hi, abs=1e-8)]
    assert "r2-c16 missing" in c["flags"]
    assert all("r2-c16: missing" in r["flags"] for r in c["latency_side_by_side"])
    t = _trial(res, "r2-c16")
    assert t["status"] == "missing" and t["output_throughput"] is None and t["position"] == 2
    assert res["ordering"]["repeats"][1]["statement"] is None and res["ordering"]["held_in_every_repeat"] is False
    tele = next(x for x in res["telemetry"] if x["trial"] == "r2-c16")
    assert tele["status"] == "missing"
    dom16 = next(e for e in res["dominance"]["points"] if e["point"] == 16)
    assert "r2-c16: missing" in dom16["flags"]
    # every CSV that has a row for the trial or the point names it
    a = run / "analysis"
    assert "missing" in next(r for r in _csv_rows(a / "trials.csv") if r["trial"] == "r2-c16")["status"]
    assert next(r for r in _csv_rows(a / "points.csv") if r["point"] == "16")["missing_trials"] == "r2-c16"
    for name in ("comparisons.csv", "paired.csv", "latency_side_by_side.csv", "dominance.csv", "point_latency.csv",
                 "telemetry.csv"):
        assert "r2-c16" in (a / name).read_text(encoding="utf-8"), name
    assert any("missing" in cv for cv in res["caveats"])
    assert res["run"]["status"] == "incomplete"


def test_failed_requests_trial(tmp_path: Path) -> None:
    # r1-c4 target 110 tok/s with 2 of 16 requests failing: duration unchanged, tokens 14 x 32
    # -> throughput = 110 x 14 / 16 = 96.25 tok/s (failed requests count for nothing, but are counted).
    run = build_run(tmp_path, throughput=_tp({1: [50, 50, 50], 4: [110, 120, 130], 16: [100, 100, 100]}),
                    failed={"r1-c4": 2})
    res = analyze_run(run)
    t = _trial(res, "r1-c4")
    assert (t["requests"], t["completed"], t["failed"]) == (16, 14, 2)
    assert t["output_throughput"] == pytest.approx(96.25, abs=1e-9)
    assert t["errors"] == {"HTTP 500: Internal Server Error": 2}
    assert "2 of 16 requests failed" in t["flags"]
    p4 = _point(res, 4)
    assert p4["failed"] == 2 and any("r1-c4" in f for f in p4["flags"])
    assert p4["output_throughput"]["mean"] == pytest.approx((96.25 + 120 + 130) / 3, abs=1e-9)
    c = res["comparisons"][0]
    assert "r1-c4 had 2 failed request(s)" in c["flags"]
    assert res["completeness"]["with_failures"] == ["r1-c4"]
    for name in ("trials.csv", "points.csv", "comparisons.csv", "paired.csv", "latency_side_by_side.csv"):
        assert "failed" in (run / "analysis" / name).read_text(encoding="utf-8"), name


def test_point_with_zero_completed_requests(tmp_path: Path) -> None:
    # r2-c1 has no completed request: throughput and latencies are null with a reason (never 0);
    # C1's mean uses the two measured repeats: (50 + 60) / 2 = 55.
    run = build_run(tmp_path, throughput=_tp({1: [50, 70, 60], 4: [110, 120, 130], 16: [100, 100, 100]}),
                    zero_completed=("r2-c1",))
    res = analyze_run(run)
    t = _trial(res, "r2-c1")
    assert t["completed"] == 0 and t["failed"] == 4
    assert t["output_throughput"] is None and t["request_throughput"] is None
    assert t["absent"]["output_throughput"] == "no completed request in the trial"
    assert t["latency"]["ttft"] is None and "ttft_ms" in t["absent"]
    assert "no completed request" in t["flags"]
    p1 = _point(res, 1)
    assert p1["repeats_measured"] == 2 and p1["output_throughput"]["mean"] == pytest.approx(55.0)
    assert res["completeness"]["zero_completed"] == ["r2-c1"]
    row = next(r for r in _csv_rows(run / "analysis" / "trials.csv") if r["trial"] == "r2-c1")
    assert row["output_throughput_tok_s"] == "" and row["ttft_mean_ms"] == ""
    assert "no completed request" in row["flags"]
    # a point where every repeat completes nothing: null mean with a reason, not comparable for dominance
    run2 = build_run(tmp_path / "b", zero_completed=("r1-c16", "r2-c16", "r3-c16"))
    res2 = analyze_run(run2)
    p16 = _point(res2, 16)
    assert p16["output_throughput"]["mean"] is None and "no repeat" in p16["absent"]["output_throughput"]
    assert res2["comparisons"][0]["verdict"] == "no claim" and res2["comparisons"][0]["n_pairs"] == 0
    d16 = next(e for e in res2["dominance"]["points"] if e["point"] == 16)
    assert d16["dominated"] is None and "not compared" in d16["note"]
    assert res2["ordering"]["statement"] is None


# ----------------------------------------------------------- latency ----


def test_latency_mean_over_repeats_vs_pooled(tmp_path: Path) -> None:
    # One point (C1), two repeats, two requests each, hand-made records:
    # TTFT r1 = 10, 20 ms; r2 = 30, 40 ms.
    # mean over repeats: mean (15 + 35) / 2 = 25; p99 per trial 10 + 0.99 x 10 = 19.9 and 39.9 -> 29.9.
    # pooled [10, 20, 30, 40]: mean 25, median 25, p99 at rank 0.99 x 3 = 2.97 -> 30 + 0.97 x 10 = 39.7.
    spec = demo_spec(points=[1], comparisons=[], repeats=2, prompts_per_concurrency=2, percentiles=[50, 99])
    run = build_run(tmp_path, spec=spec)
    for tid, ttfts in (("r1-c1", (0.010, 0.020)), ("r2-c1", (0.030, 0.040))):
        recs = trial_records(point=1, n=2, out_len=32, in_len=128, throughput=100.0)
        for r, tt in zip(recs, ttfts):
            r.first_chunk_s = r.send_s + tt
        write_records(run / "trials" / tid / "requests.jsonl", recs)
    res = analyze_run(run)
    lat = _point(res, 1)["latency"]["ttft"]
    assert lat["mean_over_repeats"]["mean"] == pytest.approx(25.0, abs=1e-6)
    assert lat["mean_over_repeats"]["p99"] == pytest.approx(29.9, abs=1e-6)
    assert lat["mean_over_repeats"]["n_trials"] == 2
    assert lat["pooled"]["mean"] == pytest.approx(25.0, abs=1e-6)
    assert lat["pooled"]["median"] == pytest.approx(25.0, abs=1e-6)
    assert lat["pooled"]["p99"] == pytest.approx(39.7, abs=1e-6)
    assert lat["pooled"]["n"] == 4


def test_latency_side_by_side_relative_change(tmp_path: Path) -> None:
    # C4: TTFT 100 ms, TPOT 10 ms; C16: TTFT 150 ms, TPOT 12 ms (every request); throughput 300 vs 270.
    # change = (b - a) / a: throughput -10%, TTFT +50%, TPOT +20%, for the mean and every percentile.
    spec = demo_spec(latency_metrics=["ttft", "tpot"], percentiles=[50, 99])
    run = build_run(tmp_path, spec=spec, throughput=_tp({1: [100] * 3, 4: [300] * 3, 16: [270] * 3}),
                    latency={1: (0.05, 0.005), 4: (0.1, 0.01), 16: (0.15, 0.012)})
    res = analyze_run(run)
    rows = {(r["metric"], r["stat"]): r for r in res["comparisons"][0]["latency_side_by_side"]}
    assert list(rows) == [("output_throughput", "mean"), ("ttft", "mean"), ("ttft", "p50"), ("ttft", "p99"),
                          ("tpot", "mean"), ("tpot", "p50"), ("tpot", "p99")]
    assert rows[("output_throughput", "mean")]["change"] == pytest.approx(-0.1, abs=1e-9)
    assert rows[("ttft", "mean")]["a"] == pytest.approx(100.0, abs=1e-6)
    assert rows[("ttft", "p99")]["change"] == pytest.approx(0.5, abs=1e-6)
    assert rows[("tpot", "mean")]["change"] == pytest.approx(0.2, abs=1e-6)
    assert rows[("tpot", "mean")]["better"] == "a"
    # C16 has less throughput and worse latency: dominated by C4, in every repeat
    d = res["dominance"]
    assert next(e for e in d["points"] if e["point"] == 16)["dominated_by"] == [4]
    (pair,) = d["pairs"]
    assert {k: pair[k] for k in ("dominant", "dominated", "statement", "held_in_repeats", "repeats_compared",
                                 "repeats_planned")} == {"dominant": 4, "dominated": 16,
                                                         "statement": "C16 is dominated by C4", "held_in_repeats": 3,
                                                         "repeats_compared": 3, "repeats_planned": 3}
    # identical ratios in every repeat: each criterion's paired test is a finding, so the dominance is one
    assert pair["verdict"] == "finding" and all(c["q_better"] for c in pair["criteria"])
    assert d["frontier"] == [1, 4]


# --------------------------------------------------------- dominance ----


def test_dominates_rule() -> None:
    # vectors: [throughput (higher better), latencies... (lower better)]
    assert dominates([300, 10, 20], [280, 12, 20]) == "dominates"
    assert dominates([300, 10, 20], [300, 10, 21]) == "dominates"  # equal throughput, strictly better on one
    assert dominates([300, 10, 20], [300, 10, 20]) == "tie"
    assert dominates([300, 10, 20], [310, 12, 25]) == "no"  # less throughput
    assert dominates([300, 13, 20], [280, 12, 25]) == "no"  # worse on one latency: a trade-off


def test_dominance_ties_and_tradeoffs(tmp_path: Path) -> None:
    # C4 and C16 identical (300 tok/s, TTFT 100 ms, TPOT 10 ms): a tie, neither dominated.
    # C1 has less throughput but lower latency: a trade-off, not dominated.
    spec = demo_spec(latency_metrics=["ttft", "tpot"], percentiles=[50, 99])
    run = build_run(tmp_path, spec=spec, throughput=_tp({1: [100] * 3, 4: [300] * 3, 16: [300] * 3}),
                    latency={1: (0.05, 0.005), 4: (0.1, 0.01), 16: (0.1, 0.01)})
    res = analyze_run(run)
    pts = {e["point"]: e for e in res["dominance"]["points"]}
    assert pts[4]["tied_with"] == [16] and pts[16]["tied_with"] == [4]
    assert pts[4]["dominated"] is False and pts[16]["dominated"] is False and pts[1]["dominated"] is False
    assert res["dominance"]["pairs"] == [] and res["dominance"]["frontier"] == [1, 4, 16]
    assert res["ordering"]["statement"] == "C1 < C4 = C16"
    # the same, with C16's TPOT 11 ms: now dominated by C4 (equal throughput, strictly worse on one)
    run2 = build_run(tmp_path / "b", spec=spec, throughput=_tp({1: [100] * 3, 4: [300] * 3, 16: [300] * 3}),
                     latency={1: (0.05, 0.005), 4: (0.1, 0.01), 16: (0.1, 0.011)})
    pts2 = {e["point"]: e for e in analyze_run(run2)["dominance"]["points"]}
    assert pts2[16]["dominated_by"] == [4] and pts2[4]["dominates"] == [16] and pts2[4]["tied_with"] == []


# ----------------------------------------------------------- ordering ----


def test_ordering_statement_and_repeats(tmp_path: Path) -> None:
    # means 100 < 300 > 280, every repeat the same shape
    run = build_run(tmp_path, throughput=_tp({1: [99, 100, 101], 4: [297, 300, 303], 16: [277.2, 280, 282.8]}))
    o = analyze_run(run)["ordering"]
    assert o["statement"] == "C1 < C4 > C16"
    assert o["held_in_repeats"] == 3 and o["held_in_every_repeat"] is True
    # every repeat has exactly the same ratios (C4 = 3 x C1, C4 = 1.0714 x C16): zero spread, p = 0 -> findings
    assert [lk["verdict"] for lk in o["links"]] == ["finding", "finding"]
    assert o["supported_statement"] == "C1 < C4 > C16"
    # repeat 2 flips C4 and C16: means still 100 < 300 > 290 (C16 = 280, 310, 280), held in 2 of 3 repeats
    run2 = build_run(tmp_path / "b", throughput=_tp({1: [100] * 3, 4: [300] * 3, 16: [280, 310, 280]}))
    o2 = analyze_run(run2)["ordering"]
    assert o2["statement"] == "C1 < C4 > C16"
    assert [r["statement"] for r in o2["repeats"]] == ["C1 < C4 > C16", "C1 < C4 < C16", "C1 < C4 > C16"]
    assert o2["held_in_repeats"] == 2 and o2["held_in_every_repeat"] is False
    # C4 vs C16: d = 300/280 - 1 = 0.0714, 300/310 - 1 = -0.0323, 0.0714; the interval holds 0 -> not a finding
    assert o2["supported_statement"] == "C1 < C4 ~ C16"


# ---------------------------------------------------------- telemetry ----


def test_telemetry_plateau_and_absent(tmp_path: Path) -> None:
    # the fixture's server reports `point` running requests between first send and last end;
    # the plateau median is exactly the point; KV use 0.01 per running sequence.
    run = build_run(tmp_path, telemetry=("r1-c1", "r1-c4", "r1-c16", "r2-c4", "r2-c16", "r3-c1", "r3-c4", "r3-c16"))
    res = analyze_run(run)
    t = next(x for x in res["telemetry"] if x["trial"] == "r1-c16")
    assert t["status"] == "present"
    assert t["sustained"]["running"] == 16 and t["sustained"]["waiting"] == 0
    assert t["sustained"]["kv_cache_usage"] == pytest.approx(0.16)
    assert t["max"]["running"] == 16 and t["delta"]["preemptions"] == 0
    start, end = t["interval_s"]
    assert t["plateau_s"] == [pytest.approx(start + 0.2 * (end - start)), pytest.approx(end - 0.2 * (end - start))]
    miss = next(x for x in res["telemetry"] if x["trial"] == "r2-c1")
    assert miss["status"] == "absent" and "no telemetry.jsonl" in miss["absent"]
    assert _point(res, 16)["telemetry_sustained_mean"]["running"] == 16
    row = next(r for r in _csv_rows(run / "analysis" / "telemetry.csv") if r["trial"] == "r2-c1")
    assert row["running_sustained"] == "" and "no telemetry" in row["absent"]


# ------------------------------------------------------------ goodput ----


def test_slo_goodput(tmp_path: Path) -> None:
    # TTFT SLO 75 ms: C1 (TTFT 50 ms) meets it on every request, C4 and C16 (100 ms) never.
    # C1 goodput = 4 requests / duration; duration = 4 x 32 / 100 tok/s = 1.28 s -> 3.125 req/s.
    spec = demo_spec(slos_ms={"ttft": 75.0})
    run = build_run(tmp_path, spec=spec, throughput=_tp({1: [100] * 3, 4: [300] * 3, 16: [300] * 3}),
                    latency={1: (0.05, 0.005), 4: (0.1, 0.01), 16: (0.1, 0.01)})
    res = analyze_run(run)
    g = res["goodput"]
    assert g["absent"] is None and g["slos_ms"] == {"ttft": 75.0}
    p = {x["point"]: x for x in g["points"]}
    assert p[1]["attainment_mean"] == pytest.approx(1.0) and p[1]["goodput_rps_mean"] == pytest.approx(3.125)
    assert p[4]["attainment_mean"] == 0.0 and p[4]["goodput_rps_mean"] == 0.0
    assert (run / "analysis" / "goodput.csv").exists()
    # no SLOs in the spec: absent with a reason, no CSV
    run2 = build_run(tmp_path / "b")
    res2 = analyze_run(run2)
    assert "slos_ms is not set" in res2["goodput"]["absent"]
    assert not (run2 / "analysis" / "goodput.csv").exists()


# ------------------------------------------------------- purity, errors ----


def test_pure_deterministic_and_never_reads_outputs(tmp_path: Path) -> None:
    run = build_run(tmp_path, failed={"r3-c16": 1}, missing=("r1-c1",))
    first = analyze_run(run, tmp_path / "out1")
    # garbage in analysis/ must not change anything: analysis never reads its own outputs
    (run / "analysis").mkdir()
    (run / "analysis" / "analysis.json").write_text("{broken", encoding="utf-8")
    second = analyze_run(run, tmp_path / "out2")
    assert first == second
    files1 = sorted(p.name for p in (tmp_path / "out1").iterdir())
    assert files1 == sorted(first["files"])
    for name in files1:
        b1 = (tmp_path / "out1" / name).read_bytes()
        assert b1 == (tmp_path / "out2" / name).read_bytes(), name
        assert str(tmp_path).encode() not in b1, f"absolute path in {name}"
    # a copy of the run elsewhere gives the same bytes
    shutil.copytree(run, tmp_path / "elsewhere" / run.name, ignore=shutil.ignore_patterns("analysis"))
    analyze_run(tmp_path / "elsewhere" / run.name, tmp_path / "out3")
    for name in files1:
        assert (tmp_path / "out1" / name).read_bytes() == (tmp_path / "out3" / name).read_bytes(), name


def test_summary_mismatch_is_flagged_and_records_win(tmp_path: Path) -> None:
    run = build_run(tmp_path)
    sp = run / "trials" / "r1-c4" / "summary.json"
    s = json.loads(sp.read_text())
    s["output_throughput"] = 1.0
    sp.write_text(json.dumps(s))
    t = _trial(analyze_run(run), "r1-c4")
    assert t["output_throughput"] == pytest.approx(297.0)  # DEFAULT_BASE 300 x 0.99, from the records
    assert any("summary.json disagrees" in f and "output_throughput" in f for f in t["flags"])


def test_not_a_run_dir(tmp_path: Path) -> None:
    with pytest.raises(NotARunDir, match="not a run directory"):
        load_run(tmp_path)
    with pytest.raises(NotARunDir, match="not a folder"):
        load_run(tmp_path / "nope")


def test_paired_comparison_any_pair(tmp_path: Path) -> None:
    run = build_run(tmp_path, throughput=_tp({1: [100] * 3, 4: [300, 310, 320], 16: [280] * 3}))
    res = compute_analysis(load_run(run))
    c = paired_comparison(res, 1, 4)  # not named by the spec
    assert c["mean_diff"] == pytest.approx((100 / 300 + 100 / 310 + 100 / 320) / 3 - 1, abs=1e-8)
    assert c["verdict"] == "finding" and c["better"] == 4 and c["family"] == 1


H200_A100SCHED = Path(__file__).resolve().parents[2] / "releases" / "article1-h200-v1.0" / "data" / "raw" / "h200-a100sched"


@skipif_unless_ci(not H200_A100SCHED.is_dir(), "the committed H200 release is not in this checkout")
def test_h200_a100_settings_c128_vs_c256_is_not_significant(tmp_path: Path) -> None:
    # The published release said "C128 > C256 in every repeat (+12.6%, outside a 9.5% spread)". Its three
    # repeats, paired on ln ratios: p = 0.105, 95% interval [-5.9%, +34.2%] -> not significant.
    run = tmp_path / "h200-a100sched"
    shutil.copytree(H200_A100SCHED, run, ignore=shutil.ignore_patterns("analysis", "figures", "report"))
    res = analyze_run(run, tmp_path / "out")
    c = next(x for x in res["comparisons"] if (x["a"], x["b"]) == (128, 256))
    assert c["verdict"] == "not significant" and (c["wins_a"], c["n_pairs"]) == (3, 3)
    assert c["effect"] == pytest.approx(0.1259, abs=5e-4)
    assert c["ci95"] == [pytest.approx(-0.0586, abs=5e-4), pytest.approx(0.3421, abs=5e-4)]
    assert c["p_value"] == pytest.approx(0.105, abs=1e-3)
    assert "95% CI -5.9% to +34.2%" in c["statement"]
    assert res["ordering"]["supported_statement"] == "C64 ~ C128 ~ C256"


def test_cli_analyze_shows_the_interval_and_json_keys(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from evidence.cli.main import app

    run = build_run(tmp_path, throughput=_tp({1: [50, 50, 50], 4: [110, 120, 130], 16: [100, 100, 100]}))
    r = CliRunner().invoke(app, ["analyze", str(run), "--json"])
    assert r.exit_code == 0, r.output
    c = json.loads(r.stdout)["comparisons"][0]
    assert {"a", "b", "metric", "n_pairs", "effect", "ci95", "p_value", "test", "mde", "verdict"} <= set(c)
    assert (c["a"], c["b"], c["metric"], c["n_pairs"], c["verdict"]) == (4, 16, "output_throughput", 3, "not significant")
    assert len(c["ci95"]) == 2 and c["ci95"][0] < 0 < c["ci95"][1]
    r = CliRunner().invoke(app, ["analyze", str(run)])
    assert r.exit_code == 0, r.output
    assert "not significant: C4 vs C16 +20.0% (95% CI" in r.stdout and "3-0" in r.stdout and "MDE" in r.stdout


def test_cli_analyze(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from evidence.cli.main import app

    run = build_run(tmp_path)
    r = CliRunner().invoke(app, ["analyze", str(run), "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["schema"] == "evidence.analysis/1"
    r = CliRunner().invoke(app, ["analyze", str(tmp_path)])
    assert r.exit_code == 2
    assert "not a run directory" in r.output


# ------------------------------------------------------------ within a trial ----


def _closed_loop(concurrency: int, seconds: float, duration_at) -> list:
    """Records of a closed loop: each slot sends its next request when the last one ends; a request sent at t
    takes duration_at(t) seconds and streams 32 tokens evenly."""
    from evidence.records import RequestRecord

    recs, i = [], 0
    for slot in range(concurrency):
        t = 0.01 * slot
        while t < seconds:
            d = duration_at(t)
            chunks = [t + d * (j + 1) / 32 for j in range(32)]
            recs.append(RequestRecord(i=i, phase="measure", prompt_len=8, max_tokens=32, intended_s=t, slot_wait_s=0.0,
                                      send_s=t, first_chunk_s=chunks[0], chunk_s=chunks, end_s=chunks[-1],
                                      prompt_tokens=8, completion_tokens=32, chunk_count=32, finish_reason="length",
                                      status=200, ok=True))
            i, t = i + 1, chunks[-1]
    return sorted(recs, key=lambda r: (r.send_s, r.i))


def test_within_trial_steady_state_drift_and_regimes(tmp_path: Path) -> None:
    # 6 repeats; C4 falls into two regimes (99-101 vs 149-151 tok/s); r1-c16 is replaced by a 60 s closed loop
    # whose requests get faster over time (throughput rises through the whole trial: no steady state);
    # r2-c16 by a flat one (a steady state whose window throughput is the loop's rate, 8 x 32 / 1 s = 256 tok/s).
    spec = demo_spec(repeats=6)
    tp = {1: [50] * 6, 4: [100, 101, 99, 150, 151, 149], 16: [90, 91, 89, 92, 90, 91]}
    run = build_run(tmp_path, spec=spec, throughput=lambda r, p: tp[p][r - 1], telemetry=False)
    write_records(run / "trials" / "r1-c16" / "requests.jsonl", _closed_loop(8, 60.0, lambda t: 2.0 / (1 + t / 15)))
    write_records(run / "trials" / "r2-c16" / "requests.jsonl", _closed_loop(8, 60.0, lambda t: 1.0))
    res = analyze_run(run)
    w = {x["trial"]: x for x in res["within"]["trials"]}
    rising = w["r1-c16"]["steady"]
    assert rising["steady"] is False and rising["trend_rho"] > 0.65 and rising["needed_s"] is not None
    flat = w["r2-c16"]["steady"]
    assert flat["steady"] is True and flat["throughput"] == pytest.approx(256.0, rel=0.02)
    assert w["r2-c16"]["series"]["running"] is None and "running" in w["r2-c16"]["series_absent"]
    caveats = " ".join(res["caveats"])
    assert "No steady state in 1 of" in caveats and "r1-c16" in caveats and "would need at least" in caveats
    assert "C4: two regimes among 6 trials: 3 at 99-101 and 3 at 149-151" in caveats
    p4 = next(x for x in res["within"]["points"] if x["point"] == 4)
    assert p4["regimes"]["low"]["n"] == 3 and p4["regimes"]["ratio"] == pytest.approx(1.5, rel=1e-3)
    # steady-state throughput beside whole-trial throughput in the tables
    row = next(r for r in _csv_rows(run / "analysis" / "trials.csv") if r["trial"] == "r2-c16")
    assert float(row["steady_throughput_tok_s"]) == pytest.approx(256.0, rel=0.02) and row["steady"] == "yes"
    assert row["output_throughput_tok_s"] != ""
    prow = next(r for r in _csv_rows(run / "analysis" / "points.csv") if r["point"] == "4")
    assert "two regimes" in prow["regimes"]
    series = [r for r in _csv_rows(run / "analysis" / "timeseries.csv") if r["trial"] == "r2-c16"]
    assert len(series) == w["r2-c16"]["bins"] and {r["in_steady_window"] for r in series} == {"yes", "no"}


@skipif_unless_ci(not H200_A100SCHED.is_dir(), "the committed H200 release is not in this checkout")
def test_h200_waves_are_named_with_their_numbers(tmp_path: Path) -> None:
    run = tmp_path / "h200-a100sched"
    shutil.copytree(H200_A100SCHED, run, ignore=shutil.ignore_patterns("analysis", "figures", "report"))
    res = analyze_run(run, tmp_path / "out")
    w = {x["trial"]: x for x in res["within"]["trials"]}
    # the lockstep waves of the issue: C128 moves in ~1.5-1.75 s periods between ~1k and ~23k tok/s
    assert all(w[t]["waves"] and 1.25 <= w[t]["waves"]["period_s"] <= 2.0 for t in ("r1-c128", "r2-c128", "r3-c128"))
    assert any(c.startswith("Throughput moves in waves within") and "periodic component" in c for c in res["caveats"])


def test_no_verdict_is_stronger_than_its_interval(tmp_path: Path) -> None:
    # Seeded random runs, from clear effects to none: wherever a finding is stated, its 95% interval excludes 0
    # and points the same way; an ordering symbol stands only on a finding; a dominance finding has every
    # criterion's interval on the dominant side.
    import random

    rng = random.Random(20261203)
    seen = set()
    for k in range(6):
        base = {1: 100.0, 4: 100.0 * rng.choice([1.0, 1.02, 1.3, 2.5]), 16: 100.0 * rng.choice([1.0, 0.97, 1.5])}
        noise = rng.choice([0.005, 0.05, 0.2])
        tp = {(r, p): base[p] * math.exp(rng.gauss(0, noise)) for r in (1, 2, 3) for p in (1, 4, 16)}
        res = analyze_run(build_run(tmp_path / str(k), throughput=lambda r, p: tp[(r, p)]), tmp_path / f"o{k}")
        for c in res["comparisons"] + res["adjacent"]:
            seen.add(c["verdict"])
            if c["verdict"] == "finding":
                lo, hi = c["ci95"]
                assert (lo > 0 and c["better"] == c["a"]) or (hi < 0 and c["better"] == c["b"]), c["statement"]
                assert c["p_adjusted"] < 0.05 and c["statement"].startswith("finding")
            else:
                assert not c["statement"].startswith("finding")
                assert c["ci95"] is None or c["ci95"][0] <= 0 <= c["ci95"][1] or c["p_adjusted"] >= 0.05
        o = res["ordering"]
        for lk, sym in zip(o["links"], o["supported_statement"].split()[1::2]):
            assert sym == "~" or lk["verdict"] == "finding"
        for d in res["dominance"]["pairs"]:
            if d["verdict"] == "finding":
                assert all(cr["q_better"] for cr in d["criteria"])
    assert {"finding", "not significant"} <= seen  # the runs exercise both sides
