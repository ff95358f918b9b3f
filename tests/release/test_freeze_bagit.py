"""bagit-python is a test-only oracle: the package never imports it, and it is declared as a test extra.
(The oracle itself runs in test_release.py::test_stock_bagit_validates and test_freeze_tag.py,
where `bagit.Bag(path).validate()` must accept a release frozen by the tool.)"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_package_never_imports_bagit():
    users = []
    for p in sorted((ROOT / "evidence").rglob("*.py")):
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            users += [f"{p.relative_to(ROOT)}:{node.lineno}" for n in names if n.split(".")[0] == "bagit"]
    assert users == [], users


def test_bagit_is_a_test_dependency_only():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    name = lambda req: req.split(">")[0].split("=")[0].split("<")[0].strip().lower()  # noqa: E731
    assert "bagit" not in {name(r) for r in project["dependencies"]}
    assert "bagit" in {name(r) for r in project["optional-dependencies"]["test"]}
