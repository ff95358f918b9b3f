"""Sessions in the plan: balanced blocks of repeats, and plans without sessions keep their bytes."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evidence.spec.model import load_spec
from evidence.spec.plan import make_plan, session_of

ROOT = Path(__file__).resolve().parents[2]


def _spec(tmp_path, repeats, sessions, order="balanced"):
    text = (ROOT / "specs" / "article1.yaml").read_text()
    assert "repeats: 3" in text and "order: balanced" in text
    text = text.replace("repeats: 3", f"repeats: {repeats}\n  sessions: {sessions}")
    if order != "balanced":
        text = text.replace("order: balanced", f"order: {order}" + ("\n  order_seed: 7" if order == "shuffled" else ""))
    (tmp_path / "s.yaml").write_text(text)
    return load_spec(tmp_path / "s.yaml")


def test_session_blocks_by_hand():
    assert session_of(3, 1) == [1, 1, 1]
    assert session_of(6, 3) == [1, 1, 2, 2, 3, 3]
    assert session_of(7, 3) == [1, 1, 1, 2, 2, 3, 3]
    assert session_of(4, 4) == [1, 2, 3, 4]
    with pytest.raises(ValueError):
        session_of(2, 3)


@settings(max_examples=100, deadline=None)
@given(repeats=st.integers(1, 12), data=st.data())
def test_sessions_are_balanced_blocks(repeats, data):
    sessions = data.draw(st.integers(1, repeats))
    s = session_of(repeats, sessions)
    sizes = Counter(s)
    assert sorted(sizes) == list(range(1, sessions + 1)) and max(sizes.values()) - min(sizes.values()) <= 1
    assert s == sorted(s)  # consecutive blocks


def test_plan_assigns_sessions_and_keeps_the_square(tmp_path):
    spec = _spec(tmp_path, 6, 3)
    plan = make_plan(spec)
    plain = make_plan(_spec(tmp_path, 6, 1))
    # the same trials in the same order; only the session is added
    assert [t.id for t in plan.trials] == [t.id for t in plain.trials]
    assert plan.session_repeats() == {1: [1, 2], 2: [3, 4], 3: [5, 6]}
    assert plan.sessions == 3 and "3 engine sessions" in plan.note
    for sess in (1, 2, 3):  # within a block, a point's positions differ by at most one
        tr = [t for t in plan.trials if t.session == sess]
        for p in spec.sweep.points:
            pos = Counter(t.position for t in tr if t.point == p)
            counts = [pos.get(i, 0) for i in range(1, len(spec.sweep.points) + 1)]
            assert max(counts) - min(counts) <= 1
    d = plan.as_dict()
    assert d["sessions"] == 3 and all("session" in t for t in d["trials"])


def test_one_session_leaves_the_plan_bytes_unchanged(tmp_path):
    d = make_plan(_spec(tmp_path, 3, 1)).as_dict()
    assert "sessions" not in d and all("session" not in t for t in d["trials"])
    # the committed release's plan is exactly what the plan code writes
    rel = ROOT / "releases/article1-h200-v1.0/data/raw/h200-a100sched/plan.json"
    committed = json.loads(rel.read_text())
    assert all("session" not in t for t in committed["trials"])
    assert set(committed["trials"][0]) == set(d["trials"][0])


def test_sessions_with_other_orders(tmp_path):
    for order in ("fixed", "shuffled"):
        plan = make_plan(_spec(tmp_path, 4, 2, order))
        assert [t.session for t in plan.trials if t.point == 64] == [1, 1, 2, 2]
