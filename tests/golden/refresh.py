"""Rewrite tests/golden/hashes.json from the current code (`make golden`), printing what moved.

Only for a change meant to alter derived bytes; its commit message says which and why."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cases import HASHES, hashes  # noqa: E402


def diff(old: dict[str, str], new: dict[str, str]) -> list[str]:
    """One line per file that moved: changed, new, or gone."""
    lines = [f"changed {k}" for k in sorted(old.keys() & new.keys()) if old[k] != new[k]]
    lines += [f"new     {k}" for k in sorted(new.keys() - old.keys())]
    lines += [f"gone    {k}" for k in sorted(old.keys() - new.keys())]
    return lines


def main() -> int:
    old = json.loads(HASHES.read_text()) if HASHES.exists() else {}
    new = hashes()
    HASHES.write_text(json.dumps(new, indent=1, sort_keys=True) + "\n")
    moved = diff(old, new)
    print("\n".join(moved) if moved else "no derived file moved")
    print(f"{len(new)} files in {HASHES}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
