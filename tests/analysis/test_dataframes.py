"""The analysis tables as DataFrames (evidence.analysis.dataframes) and the CSVs written from them.

Checked: the same bytes from two processes with different hash seeds; typed columns where a value
that could not be measured is NaN/<NA> with the reason in the row's flags/absent column; each CSV
read back equals its frame to the decimals of its column kind; the frames of analysis.json read back
equal those of the computed analysis.
"""

from __future__ import annotations

import io
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evidence.analysis import analyze_run, csv_text, frames
from evidence.analysis.analyze import compute_analysis
from evidence.analysis.dataframes import csv_tables
from evidence.analysis.tables import csv_names
from evidence.analysis.load import load_run
from evidence.analysis.tables import CSV_DECIMALS
from evidence.canon import dumps
from rundir_fixtures import build_run, demo_spec  # noqa: E402

# Every table kind shows up: SLOs (goodput), a missing trial, failed requests, a point with no completed
# request in one repeat, and telemetry in one trial only.
VARIANT = dict(missing=("r2-c16",), failed={"r1-c4": 2}, zero_completed=("r3-c16",), telemetry=("r1-c1",))


def _run(root: Path) -> Path:
    return build_run(root, spec=demo_spec(slos_ms={"ttft": 150}, comparisons=[(4, 1)]), **VARIANT)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    return _run(tmp_path_factory.mktemp("df") / "run")


@pytest.fixture(scope="module")
def res(run_dir) -> dict:
    return compute_analysis(load_run(run_dir))


@pytest.fixture(scope="module")
def fr(res) -> dict[str, pd.DataFrame]:
    return frames(res)


CHILD = r"""
import sys
from pathlib import Path
from evidence.analysis import analyze_run, csv_text, frames
from evidence.analysis.analyze import compute_analysis
from evidence.analysis.dataframes import csv_tables
from evidence.analysis.tables import csv_names
from evidence.analysis.load import load_run
from evidence.canon import dumps
run, out = Path(sys.argv[1]), Path(sys.argv[2])
analyze_run(run, out / "analyze")
res = compute_analysis(load_run(run))
(out / "frames").mkdir()
(out / "frames" / "analysis.json").write_text(dumps(res))
for name, df in frames(res).items():
    (out / "frames" / f"{name}.csv").write_text(csv_text(df))
    # the frames themselves at full precision, not only the CSVs' rounded cells
    (out / "frames" / f"{name}.json").write_text(df.to_json(orient="split", double_precision=15) + "\n")
    (out / "frames" / f"{name}.dtypes").write_text("\n".join(f"{c} {t}" for c, t in df.dtypes.astype(str).items()))
"""


def _tree(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_same_bytes_in_two_processes_with_different_hash_seeds(run_dir, tmp_path):
    trees = []
    for seed in ("0", "12345"):
        out = tmp_path / f"seed{seed}"
        out.mkdir()
        env = {**os.environ, "PYTHONHASHSEED": seed}
        p = subprocess.run([sys.executable, "-c", CHILD, str(run_dir), str(out)], env=env, capture_output=True,
                           text=True, timeout=300)
        assert p.returncode == 0, p.stderr
        trees.append(_tree(out))
    a, b = trees
    assert sorted(a) == sorted(b)
    assert [k for k in a if a[k] != b[k]] == []
    names = {k.split("/", 1)[1] for k in a if k.startswith("analyze/") and k.endswith(".csv")}
    assert names >= {"trials.csv", "points.csv", "timeseries.csv", "goodput.csv", "telemetry.csv", "paired.csv",
                     "point_latency_intervals.csv"}
    # analyze_run writes the CSVs with the same writer as the frames
    for n in names | {"analysis.json"}:
        assert a[f"analyze/{n}"] == a[f"frames/{n}"], n
    # and this process (its own hash seed) agrees
    for name, df in frames(compute_analysis(load_run(run_dir))).items():
        assert csv_text(df).encode() == a[f"frames/{name}.csv"], name


def test_frames_are_typed_and_absent_values_are_missing_with_the_reason(fr, res):
    t = fr["trials"].set_index("trial")
    assert t["output_throughput_tok_s"].dtype == np.float64
    assert t["requests"].dtype == "Int64" and t["index"].dtype == "Int64"
    assert t["steady"].dtype == "boolean"
    assert isinstance(t["status"].dtype, pd.StringDtype)
    # the missing trial: nothing measured, not zero; the flags say why
    miss = t.loc["r2-c16"]
    assert miss["status"] == "missing"
    assert math.isnan(miss["output_throughput_tok_s"]) and math.isnan(miss["ttft_mean_ms"])
    assert miss["requests"] is pd.NA and miss["steady"] is pd.NA
    assert "missing (planned, not recorded)" in miss["flags"]
    # no completed request: throughput absent (NaN), requests counted, the flag names the reason
    zero = t.loc["r3-c16"]
    assert zero["requests"] == 64 and math.isnan(zero["output_throughput_tok_s"])
    assert "no completed request" in zero["flags"]
    assert t.loc["r1-c4", "failed"] == 2 and t.loc["r1-c4", "flags"] == "2 of 16 requests failed"
    # a measured trial keeps its numbers at analysis.json precision
    row = next(r for r in res["trials"] if r["id"] == "r1-c1")
    assert t.loc["r1-c1", "output_throughput_tok_s"] == row["output_throughput"]
    assert t.loc["r1-c1", "ttft_mean_ms"] == row["latency"]["ttft"]["mean"]

    # relative values are in percent, as their _pct names say
    p = fr["points"].set_index("point")
    p4 = next(x for x in res["points"] if x["point"] == 4)
    assert p.loc[4, "cv_pct"] == pytest.approx(100 * p4["output_throughput"]["cv"], rel=1e-12)
    # one measured repeat at C16: no spread, NaN (never 0), and the absent note says why
    assert p.loc[16, "repeats_measured"] == 1
    assert math.isnan(p.loc[16, "cv_pct"]) and math.isnan(p.loc[16, "output_throughput_std_tok_s"])
    assert "single measured repeat" in p.loc[16, "flags"]

    tel = fr["telemetry"].set_index("trial")
    assert tel.loc["r1-c1", "running_sustained"] == 1.0 and tel["generation_tokens_delta"].dtype == "Int64"
    assert math.isnan(tel.loc["r1-c4", "running_sustained"]) and tel.loc["r1-c4", "generation_tokens_delta"] is pd.NA
    assert "no telemetry.jsonl" in tel.loc["r1-c4", "absent"] and tel.loc["r2-c16", "absent"] == "trial missing"

    o = fr["ordering"].set_index("scope")
    assert o["matches_mean"].dtype == "boolean" and o.loc["mean", "matches_mean"] is pd.NA
    assert o.loc["repeat 2", "statement"] is pd.NA and not o.loc["repeat 2", "complete"]

    g = fr["goodput"].set_index("trial")
    assert g.loc["r1-c1", "attainment_pct"] == 100.0 and math.isnan(g.loc["r2-c16", "goodput_req_s"])
    # every frame names every column's kind, which fixes its CSV decimals
    for name, df in fr.items():
        assert list(df.attrs["kinds"]) == list(df.columns), name


def _read_back(text: str, kinds: dict[str, str]) -> pd.DataFrame:
    raw = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False)
    out = {}
    for c, k in kinds.items():
        col = raw[c]
        if k == "text":
            out[c] = col
        elif k == "bool":
            out[c] = col.map({"yes": True, "no": False, "": None}).astype("boolean")
        elif k == "count":
            out[c] = pd.to_numeric(col.replace("", None)).astype("Int64")
        else:
            out[c] = pd.to_numeric(col.replace("", None)).astype("float64")
    return pd.DataFrame(out)


@pytest.mark.parametrize("table", ["trials", "points", "timeseries", "point_latency", "point_latency_intervals",
                                   "comparisons", "paired", "latency_side_by_side", "dominance", "ordering",
                                   "telemetry", "goodput"])
def test_csv_read_back_equals_the_frame_to_the_stated_decimals(fr, table):
    df = fr[table]
    kinds = df.attrs["kinds"]
    text = csv_text(df)
    assert text.endswith("\n") and "\r" not in text
    back = _read_back(text, kinds)
    assert list(back.columns) == list(df.columns) and len(back) == len(df)
    for c, k in kinds.items():
        if k == "text":
            assert back[c].tolist() == df[c].fillna("").tolist(), c
        elif k in ("bool", "count"):
            pd.testing.assert_series_equal(back[c], df[c], check_names=False)
        else:
            if k == "by_unit":  # decimals of the row's unit
                d = np.array([CSV_DECIMALS["tok_s" if u == "tok/s" else "ms"] for u in df["unit"]])
            else:
                d = np.full(len(df), CSV_DECIMALS[k])
            x, y = df[c].to_numpy(), back[c].to_numpy()
            assert (np.isnan(x) == np.isnan(y)).all(), c
            ok = ~np.isnan(x)
            # equal to the stated decimals: off by at most half a unit in the last written place
            assert (np.abs(x[ok] - y[ok]) <= 0.5 * 10.0 ** -d[ok] * (1 + 1e-9)).all(), (c, x[ok], y[ok])
            # and each cell has exactly the stated number of decimals
            cells = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False)[c][ok]
            assert [len(s.split(".")[1]) for s in cells] == d[ok].tolist(), c


def test_frames_of_analysis_json_read_back_equal_the_computed_ones(fr, res, run_dir, tmp_path):
    back = frames(json.loads(dumps(res)))
    assert list(back) == list(fr)
    for name in fr:
        pd.testing.assert_frame_equal(back[name], fr[name], check_exact=True)
    # and the files analyze_run writes are those frames' CSVs
    analyze_run(run_dir, tmp_path / "a")
    on_disk = json.loads((tmp_path / "a" / "analysis.json").read_text())
    assert sorted(on_disk["files"]) == sorted(["analysis.json"] + [f"{n}.csv" for n in fr])
    for name, df in fr.items():
        assert (tmp_path / "a" / f"{name}.csv").read_text() == csv_text(df), name


def test_the_writer_fixes_decimals_signs_quoting_and_refuses_unknown_columns():
    df = pd.DataFrame({"name": pd.Series(["a, b", None, 'say "x"'], dtype="string"),
                       "n": pd.Series([3, None, 0], dtype="Int64"),
                       "rel_pct": [-0.0001, float("nan"), 12.3456],
                       "ok": pd.Series([True, None, False], dtype="boolean")})
    kinds = {"name": "text", "n": "count", "rel_pct": "pct", "ok": "bool"}
    assert csv_text(df, kinds) == ('name,n,rel_pct,ok\n"a, b",3,0.000,yes\n,,,\n"say ""x""",0,12.346,no\n')
    with pytest.raises(ValueError, match="no column kind"):
        csv_text(df, {"name": "text"})
    assert csv_text(df.iloc[:0], kinds) == "name,n,rel_pct,ok\n"


def test_point_latency_intervals_long_form(fr, res):
    df = fr["point_latency_intervals"]
    assert list(df.columns) == ["point", "metric", "stat", "value_ms", "geometric_mean_ms", "ci_low_ms", "ci_high_ms",
                                "n", "unit", "level", "absent"]
    assert [str(t) for t in df.dtypes] == ["Int64", "string", "string", "float64", "float64", "float64", "float64",
                                           "Int64", "string", "float64", "string"]
    # one row per point, metric and statistic that analysis.json holds an interval for, with its numbers
    want = [(p["point"], m, st, iv) for p in res["points"] for m in ("ttft", "tpot", "itl", "e2el", "slot_wait")
            for st, iv in p["latency"][m]["intervals"].items()]
    assert [(r.point, r.metric, r.stat) for r in df.itertuples()] == [w[:3] for w in want]
    for r, (_, _, _, iv) in zip(df.itertuples(), want):
        assert (r.value_ms, r.n, r.unit, r.level) == (iv["value"], iv["n"], iv["unit"], 0.95)
        if iv["ci_low"] is None:
            assert math.isnan(r.ci_low_ms) and math.isnan(r.ci_high_ms) and r.absent == iv["absent"]
            assert math.isnan(r.geometric_mean_ms)
        else:
            assert (r.ci_low_ms, r.ci_high_ms) == (iv["ci_low"], iv["ci_high"]) and r.absent is pd.NA
            # the interval's centre, which the arithmetic mean (value_ms) need not be
            assert r.geometric_mean_ms == iv["geometric_mean"]
            assert 0 < r.ci_low_ms < r.geometric_mean_ms <= r.value_ms < r.ci_high_ms
    # C16 keeps one measured repeat (r2 missing, r3 completed nothing): no interval, and the reason
    c16 = df[(df["point"] == 16) & (df["metric"] == "ttft") & (df["stat"] == "p99")].iloc[0]
    assert c16["n"] == 1 and math.isnan(c16["ci_low_ms"]) and "one measured repeat" in c16["absent"]
    # C4: three repeats, an interval on each row
    c4 = df[df["point"] == 4]
    assert (c4["n"] == 3).all() and c4["ci_low_ms"].notna().all()


def test_point_latency_intervals_of_an_older_analysis_say_why_absent(res):
    old = json.loads(dumps(res))
    for p in old["points"]:
        for lat in p["latency"].values():
            lat.pop("intervals", None)
    df = frames(old)["point_latency_intervals"]
    assert df["ci_low_ms"].isna().all() and df["geometric_mean_ms"].isna().all() and df["n"].isna().all()
    assert set(df["absent"]) == {"no interval in this analysis.json (written before the intervals)"}
    # the mean over repeats is still in the older file: value_ms shows it rather than an empty cell
    for r in df.itertuples():
        mean = next(p for p in old["points"] if p["point"] == r.point)["latency"][r.metric]["mean_over_repeats"]
        assert r.value_ms == mean[r.stat] and not math.isnan(r.value_ms)


def test_file_names_without_formatting(res):
    # the names analysis.json lists are the CSVs csv_tables formats, with and without the goodput table
    assert csv_names(res) == sorted(csv_tables(res)) and "goodput.csv" in csv_names(res)
    assert res["files"] == ["analysis.json"] + sorted(csv_tables(res))
    no_slos = dict(res, goodput={**res["goodput"], "absent": "spec.analysis.slos_ms is not set"})
    assert csv_names(no_slos) == sorted(csv_tables(no_slos)) and "goodput.csv" not in csv_names(no_slos)
