"""The nsys reader's Arrow path: slices, threads, NULLs, rowid gaps, and what it refuses."""

from __future__ import annotations

import shutil
import sqlite3

import numpy as np
import pytest

from evidence.traces import nsys
from evidence.traces.load import load_trace
from evidence.traces.model import COLUMNS, TraceError
from trace_fixtures import ForwardSpec, vllm_scenario, write_nsys_sqlite


def _scenario():
    return vllm_scenario([ForwardSpec(8, 1, True, (0, 0, 8, 8)), ForwardSpec(8, 9, False, (2, 2042, 6, 6)),
                          ForwardSpec(7, 1, True, (0, 0, 7, 7))])


def _same(a, b) -> None:
    for col in COLUMNS:
        assert np.array_equal(a.kernels[col], b.kernels[col]), col
    for col in ("name", "short_name", "launch_api"):
        assert a.kernels.categories(col) == b.kernels.categories(col), col
    assert a.notes == b.notes and a.steps == b.steps


def test_many_small_slices_on_threads_read_the_same_table(tmp_path, monkeypatch):
    p = write_nsys_sqlite(tmp_path / "t.sqlite", _scenario())
    whole = load_trace(p)
    monkeypatch.setattr(nsys, "_ROWS_PER_READ", 7)  # about a hundred slices, read two at a time
    monkeypatch.setattr(nsys, "_WORKERS", 2)
    sliced = load_trace(p)
    assert len(nsys._slices(sqlite3.connect(p), "CUPTI_ACTIVITY_KIND_KERNEL", len(whole.kernels))) > 50
    _same(whole, sliced)


def test_rowid_gaps_and_nulls(tmp_path, monkeypatch):
    p = write_nsys_sqlite(tmp_path / "t.sqlite", _scenario())
    gaps = tmp_path / "gaps.sqlite"
    shutil.copy(p, gaps)
    con = sqlite3.connect(gaps)
    con.execute("DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE rowid % 5 = 0")
    con.execute('UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET "gridY" = NULL, "dynamicSharedMemory" = NULL WHERE rowid % 3 = 0')
    con.commit()
    n = con.execute("SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    nulls = con.execute('SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE "gridY" IS NULL').fetchone()[0]
    con.close()
    monkeypatch.setattr(nsys, "_ROWS_PER_READ", 7)
    tr = load_trace(gaps)
    assert len(tr.kernels) == n and nulls > 0
    assert int((tr.kernels["grid_y"] == -1).sum()) == nulls  # NULL is -1, never 0
    # the same rows, renumbered densely, read in slices: the same table
    dense = tmp_path / "dense.sqlite"
    shutil.copy(gaps, dense)
    con = sqlite3.connect(dense)
    con.execute("CREATE TABLE k2 AS SELECT * FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY rowid")
    con.execute("DROP TABLE CUPTI_ACTIVITY_KIND_KERNEL")
    con.execute("ALTER TABLE k2 RENAME TO CUPTI_ACTIVITY_KIND_KERNEL")
    con.commit()
    con.close()
    _same(tr, load_trace(dense))


@pytest.mark.parametrize("sql,needle", [
    ('UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET "streamId" = 5000000000 WHERE rowid = 3', "32-bit"),
    ('UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET "blockX" = 70000 WHERE rowid = 3', "16-bit"),
    ('UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET "gridX" = 1.5', "gridX"),
])
def test_values_the_table_cannot_hold_are_refused(tmp_path, sql, needle):
    p = write_nsys_sqlite(tmp_path / "t.sqlite", _scenario())
    con = sqlite3.connect(p)
    con.execute(sql)
    con.commit()
    con.close()
    with pytest.raises(TraceError, match=needle) as e:
        load_trace(p)
    assert "\n" not in str(e.value)


def test_a_path_with_uri_characters_is_read_and_nothing_else_is_created(tmp_path):
    folder = tmp_path / "a b#c%20d?e"
    folder.mkdir()
    p = write_nsys_sqlite(folder / "x y.sqlite", _scenario())
    before = sorted(tmp_path.rglob("*"))
    assert len(load_trace(p).kernels) > 0
    assert sorted(tmp_path.rglob("*")) == before


VM = 1 << 56


def _gpid(pid: int) -> int:
    return VM | (pid << 24)


def _join_export(path, runtime, kernels):
    """A minimal nsys export: runtime rows (corr, globalTid, api, start) and kernel rows (corr, globalPid),
    kernels 1 us apart in rowid order."""
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT)")
    con.executemany("INSERT INTO StringIds VALUES (?, ?)",
                    [(1, "k"), (2, "cudaLaunchKernel_v7000"), (3, "cudaGraphLaunch_v10000")])
    con.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER, end INTEGER, globalTid INTEGER, "
                "correlationId INTEGER, nameId INTEGER)")
    con.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, ?, ?, ?)",
                    [(s, s + 5, g, c, a) for c, g, a, s in runtime])
    con.execute('CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER, "end" INTEGER, deviceId INTEGER, '
                "streamId INTEGER, correlationId INTEGER, globalPid INTEGER, demangledName INTEGER)")
    con.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, 0, 7, ?, ?, 1)",
                    [(1000 * (i + 1), 1000 * (i + 1) + 500, c, g) for i, (c, g) in enumerate(kernels)])
    con.commit()
    con.close()
    return path


def _reference_join(runtime, kernels):
    """Each kernel's (pid, tid, launch_ns, launch_api), joined row by row as the docstrings say."""
    corr_only = not any(g is not None and g >= 0 for _, g in kernels)
    out = []
    for kc, kg in kernels:
        kg = -1 if kg is None else kg
        hit = None
        if kc is not None and kc >= 0:
            for c, g, a, s in runtime:  # the first runtime row wins
                rg = -1 if g is None or g < 0 else g & ~0xFFFFFF
                if c is not None and (c & 0xFFFFFFFF) == (kc & 0xFFFFFFFF) and (corr_only or rg == kg):
                    hit = (g, a, s)
                    break
        g = -1 if hit is None or hit[0] is None else hit[0]
        pid = (kg >> 24) & 0xFFFFFF if kg >= 0 else ((g >> 24) & 0xFFFFFF if g >= 0 else -1)
        api = {2: "cudaLaunchKernel", 3: "cudaGraphLaunch"}.get(hit[1], "") if hit else ""
        out.append((pid, g & 0xFFFFFF if g >= 0 else -1, hit[2] if hit else -1, api))
    return out


_G1, _G2 = _gpid(633), _gpid(700)
_JOINS = {
    # one process (the lookup table): runtime rows out of correlation order, a correlation id twice (the first
    # row wins), a kernel with no launch call, one with no correlation id, one of a process with no launches
    "one process, unsorted": (
        [(5, _G1 | 633, 2, 50), (3, _G1 | 634, 3, 30), (4, _G1 | 633, 2, 40), (3, _G1 | 635, 2, 31)],
        [(3, _G1), (5, _G1), (2, _G1), (None, _G1), (4, _G2), (3, _G1)]),
    # a launch with no thread and a kernel with no process: it matches that launch (both unknown), and
    # takes its launching thread's process where there is one
    "unknown threads": (
        [(5, _G1 | 633, 2, 50), (1, None, 2, 10), (3, _G1 | 634, 3, 30), (3, None, 2, 31)],
        [(1, None), (3, None), (3, _G1), (5, None), (5, _G1)]),
    # correlation ids too sparse for the lookup table: the binary search
    "one process, sparse ids": (
        [(7, _G1 | 633, 2, 70), (3_000_000_000, _G1 | 634, 3, 30)],
        [(3_000_000_000, _G1), (7, _G1), (8, _G1)]),
    # two processes reusing correlation ids
    "two processes": (
        [(5, _G1 | 633, 2, 50), (5, _G2 | 701, 3, 51), (6, _G2 | 702, 2, 60)],
        [(5, _G2), (5, _G1), (6, _G1), (6, _G2)]),
    # no kernel knows its process: correlation ids alone
    "no globalPid": (
        [(2, _G1 | 633, 2, 20), (1, _G2 | 701, 3, 10)],
        [(1, None), (2, None), (3, None)]),
}


@pytest.mark.parametrize("case", sorted(_JOINS))
@pytest.mark.parametrize("rows_per_read,workers", [(2, 2), (1 << 15, 1)])
def test_runtime_join_matches_a_row_by_row_reference(tmp_path, monkeypatch, case, rows_per_read, workers):
    runtime, kernels = _JOINS[case]
    monkeypatch.setattr(nsys, "_ROWS_PER_READ", rows_per_read)
    monkeypatch.setattr(nsys, "_WORKERS", workers)
    tr = load_trace(_join_export(tmp_path / "j.sqlite", runtime, kernels))
    k = tr.kernels
    got = list(zip(k["pid"].tolist(), k["tid"].tolist(), k["launch_ns"].tolist(), list(k["launch_api"])))
    assert got == _reference_join(runtime, kernels)
    unmatched = sum(1 for r in got if r[3] == "")
    assert any(f"{unmatched} kernel(s) have no matching" in n for n in tr.notes) == (unmatched > 0)


def test_rows_out_of_time_order_load_to_the_same_table(tmp_path, monkeypatch):
    """nsys writes kernels per buffer flush, not always by start time: the reader puts them in order."""
    p = write_nsys_sqlite(tmp_path / "t.sqlite", _scenario())
    shuffled = tmp_path / "shuffled.sqlite"
    shutil.copy(p, shuffled)
    con = sqlite3.connect(shuffled)
    n = con.execute("SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    con.execute(f"CREATE TABLE k2 AS SELECT * FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY (rowid * 7919) % {n}")
    con.execute("DROP TABLE CUPTI_ACTIVITY_KIND_KERNEL")
    con.execute("ALTER TABLE k2 RENAME TO CUPTI_ACTIVITY_KIND_KERNEL")
    con.commit()
    first = [r[0] for r in con.execute("SELECT start FROM CUPTI_ACTIVITY_KIND_KERNEL LIMIT 50")]
    con.close()
    assert first != sorted(first)
    monkeypatch.setattr(nsys, "_ROWS_PER_READ", 7)
    _same(load_trace(p), load_trace(shuffled))
