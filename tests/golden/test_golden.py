"""The golden set: every derived file of the fixture runs keeps its bytes (tests/golden/cases.py).

A change meant to alter bytes runs `make golden` and says which files moved in its commit."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cases import HASHES, hashes  # noqa: E402
from refresh import diff  # noqa: E402


def test_derived_bytes_match_the_golden_set() -> None:
    expected = json.loads(HASHES.read_text())
    moved = diff(expected, hashes())
    assert not moved, "derived bytes moved (if meant, run `make golden` and say so in the commit):\n" + "\n".join(moved)


def test_the_golden_set_covers_every_part_of_every_case() -> None:
    from cases import CASES, PARTS

    expected = json.loads(HASHES.read_text())
    for case in CASES:
        for part in PARTS:
            assert any(k.startswith(f"{case}/{part}/") for k in expected), f"no {part} file for case {case}"
    assert any(k.startswith("profile/analysis/profile") for k in expected)


def test_diff_names_every_moved_file() -> None:
    assert diff({"a": "1", "b": "2", "c": "3"}, {"a": "1", "b": "9", "d": "4"}) == [
        "changed b",
        "new     d",
        "gone    c",
    ]
