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
