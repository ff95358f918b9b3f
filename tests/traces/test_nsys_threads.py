"""The nsys reader reads kernel slices on two threads: its result must not depend on which finishes first.

Random sleeps are injected into every slice read so the threads finish in different orders from load to
load; each load, one with a single worker, and one of a copy with the rows shuffled must hash the same
(every column, the string tables and codes, the notes, steps and ranges).
"""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import sqlite3
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from evidence.traces import nsys
from evidence.traces.load import load_trace
from evidence.traces.model import NUMERIC_COLUMNS, STRING_COLUMNS

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from bench_trace_ingest import generate  # noqa: E402  (stdlib + numpy only: cheap to import)

ROWS = 30_000
SLICE = 2_048  # ~15 kernel slices and 4 runtime slices a load, so the two threads interleave


def _digest(tr) -> str:
    kt, h = tr.kernels, hashlib.sha256()
    for c in sorted(NUMERIC_COLUMNS):
        h.update(c.encode())
        h.update(np.ascontiguousarray(kt[c]).tobytes())
    for c in STRING_COLUMNS:
        h.update(c.encode())
        h.update(np.ascontiguousarray(kt.codes(c)).tobytes())
        h.update(repr(kt.categories(c)).encode())
    h.update(repr((tr.notes, tr.steps, tr.ranges)).encode())
    return h.hexdigest()


def _rewrite(src: Path, dst: Path, *sql: str) -> Path:
    shutil.copy(src, dst)
    con = sqlite3.connect(dst)
    for s in sql:
        con.execute(s)
    con.commit()
    con.close()
    return dst


@pytest.fixture(scope="module")
def exports(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("threads")
    generate(d / "gen.sqlite", ROWS)
    # Some launch calls renumbered away, in every slice: the "no matching runtime launch call" note sums
    # counts from both threads.
    base = _rewrite(d / "gen.sqlite", d / "base.sqlite",
                    "UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET correlationId = correlationId + 50000000 WHERE rowid % 41 = 0")
    # The same rows in another order: the reader sorts them by time.
    shuffled = _rewrite(base, d / "shuffled.sqlite",
                        f"CREATE TABLE k2 AS SELECT * FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY (rowid * 7919) % {ROWS + 3}",
                        "DROP TABLE CUPTI_ACTIVITY_KIND_KERNEL", "ALTER TABLE k2 RENAME TO CUPTI_ACTIVITY_KIND_KERNEL")
    # Five start times shared by rows of every slice: the sort keeps ties in file order, so a row order that
    # came from which slice finished first would show here (it is sorted away where starts differ).
    ties = _rewrite(base, d / "ties.sqlite",
                    'UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET "start" = 1000 + rowid % 5, "end" = 2000 + rowid % 5')
    return {"base": base, "shuffled": shuffled, "ties": ties}


@pytest.fixture
def jitter(monkeypatch):
    """Sleep 0-4 ms before each slice read; record which thread finished which read, in order."""
    monkeypatch.setattr(nsys, "_ROWS_PER_READ", SLICE)
    monkeypatch.setattr(nsys, "_WORKERS", 2)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)  # two threads on any host
    done: list[tuple[int, str]] = []
    lock = threading.Lock()
    read = nsys._Reader.read
    rng = random.Random()

    def slow_read(self, sql):
        with lock:
            pause = rng.random() * 0.004
        time.sleep(pause)
        got = read(self, sql)
        with lock:
            done.append((threading.get_ident(), sql))
        return got

    monkeypatch.setattr(nsys._Reader, "read", slow_read)
    return rng, done


def test_threads_finishing_in_any_order_load_the_same_trace(exports, jitter, monkeypatch):
    rng, done = jitter
    kernel_orders = set()
    digests = {}
    for name, path in exports.items():
        got = set()
        for seed in range(4):
            rng.seed(seed)
            done.clear()
            got.add(_digest(load_trace(path)))
            kernel_reads = [(tid, sql) for tid, sql in done if "KERNEL" in sql]
            assert len(kernel_reads) == -(-ROWS // SLICE)
            assert len({tid for tid, _ in kernel_reads}) == 2, "both threads read kernel slices"
            kernel_orders.add(tuple(sql for _, sql in kernel_reads))
        with monkeypatch.context() as m:
            m.setattr(nsys, "_WORKERS", 1)
            got.add(_digest(load_trace(path)))
        assert len(got) == 1, f"{name}: the trace depends on which thread finished first"
        digests[name] = got.pop()
    assert len(kernel_orders) > 1, "the slices finished in the same order every time: the test proved nothing"
    assert digests["shuffled"] == digests["base"]
    assert digests["ties"] != digests["base"]
