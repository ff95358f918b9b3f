"""The CI contract: .ci/run runs the README's `make test`, which lints and type-checks before the suite, and
the formatter's list of grandfathered files names only files that exist (a renamed file must leave it)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _target(name: str) -> tuple[list[str], list[str]]:
    """(prerequisites, recipe lines) of a Makefile target."""
    text = (ROOT / "Makefile").read_text()
    m = re.search(rf"^{re.escape(name)}:([^\n]*)\n((?:\t[^\n]*\n)*)", text, re.M)
    assert m, f"no target {name} in the Makefile"
    return m.group(1).split(), [ln.strip() for ln in m.group(2).splitlines()]


def test_ci_runs_exactly_the_readme_test_command() -> None:
    run = [ln for ln in (ROOT / ".ci" / "run").read_text().splitlines() if ln and not ln.startswith("#")]
    assert run[-1] == "exec make test"
    assert "make test " in (ROOT / "README.md").read_text()


def test_make_test_lints_and_type_checks_before_the_suite() -> None:
    pre, recipe = _target("test")
    assert pre.index("lint") < pre.index("types") and recipe == ["$(VENV)/bin/python -m pytest -q -p no:cacheprovider"]
    _, lint = _target("lint")
    assert any("ruff check" in ln for ln in lint) and any("ruff format --check" in ln for ln in lint)
    _, types = _target("types")
    assert any("mypy" in ln for ln in types)
    pre, fast = _target("test-fast")
    assert {"lint", "types"} <= set(pre) and '-m "not engine and not slow"' in fast[0]


def test_format_exclusions_name_existing_files() -> None:
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())
    gone = [p for p in conf["tool"]["ruff"]["format"]["exclude"] if not (ROOT / p).is_file()]
    assert not gone, f"[tool.ruff.format] exclude names files that no longer exist: {gone}"
