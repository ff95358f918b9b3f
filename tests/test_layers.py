"""The package's shape, enforced: imports run one way between stages, no cycles, no private reach-ins.

Stages, from the top (a module may import its own stage and any stage below it on its line):
cli -> release -> derive -> report -> figures -> analysis -> traces -> spec -> metrics -> records, canon
run -> engines, loadgen, metrics, spec
The small shared modules at the top of the package (canon, records, rundir, secrets, errors,
resources) import no stage.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "evidence"
BASE = {"canon", "records", "rundir", "secrets", "errors", "resources", "__init__", "__main__"}

# stage -> the stages it may import (besides itself and the shared BASE modules)
ALLOWED: dict[str, set[str]] = {
    "spec": {"metrics"},  # the latency metrics a spec may name are the registry's
    "metrics": set(),
    "tools": set(),
    "loadgen": {"spec"},
    "engines": {"spec"},
    "traces": {"spec", "metrics"},
    "analysis": {"traces", "metrics", "spec"},
    "figures": {"analysis", "traces", "metrics", "spec"},
    "report": {"figures", "analysis", "traces", "metrics", "spec"},
    "derive": {"report", "figures", "analysis", "traces", "metrics", "spec"},
    "interop": {"spec", "metrics"},
    "execute": {"spec"},
    "run": {"engines", "loadgen", "metrics", "spec", "traces"},
    "release": {"derive", "report", "figures", "analysis", "traces", "metrics", "spec"},
    "cli": {
        "release",
        "derive",
        "report",
        "figures",
        "analysis",
        "traces",
        "metrics",
        "spec",
        "run",
        "engines",
        "loadgen",
        "tools",
        "interop",
        "execute",
    },
}


DRIVERS = PKG / "release" / "drivers"


def _modules() -> dict[str, Path]:
    out = {}
    for p in sorted(PKG.rglob("*.py")):
        if p.parent == DRIVERS and p.name != "__init__.py":
            continue  # programs verify runs against a release's own code (python -P FILE), not modules of this one
        rel = p.relative_to(PKG.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


MODULES = _modules()


def _stage(mod: str) -> str:
    parts = mod.split(".")
    if len(parts) < 2:
        return "__root__"
    return parts[1]


def _imports(mod: str, path: Path) -> list[tuple[str, list[str], int]]:
    """(imported module, names imported from it, line) for every import in the file, top level or not."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    pkg = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                found.append((a.name, [], node.lineno))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            names = [a.name for a in node.names]
            # `from evidence.x import y` where y is a submodule counts as importing evidence.x.y
            subs = [f"{target}.{n}" for n in names if f"{target}.{n}" in MODULES]
            found.append((target, [n for n in names if f"{target}.{n}" not in MODULES], node.lineno))
            found += [(s, [], node.lineno) for s in subs]
    return [f for f in found if f[0] == "evidence" or f[0].startswith("evidence.")]


def _graph() -> dict[str, set[str]]:
    return {m: {t for t, _, _ in _imports(m, p) if t in MODULES and t != m} for m, p in MODULES.items()}


def test_imports_run_one_way_between_stages() -> None:
    bad = []
    for mod, path in MODULES.items():
        src = _stage(mod)
        for target, _, line in _imports(mod, path):
            dst = _stage(target)
            if dst in ("__root__",) or dst == src or dst in BASE:
                continue
            if src in BASE or src == "__root__":
                bad.append(f"{path.relative_to(PKG.parent)}:{line}: shared module imports stage {dst!r}")
            elif dst not in ALLOWED.get(src, set()):
                bad.append(f"{path.relative_to(PKG.parent)}:{line}: {src!r} may not import {dst!r} ({target})")
    assert not bad, "imports against the stage order:\n" + "\n".join(bad)


def test_no_private_names_across_modules() -> None:
    bad = []
    for mod, path in MODULES.items():
        for target, names, line in _imports(mod, path):
            for n in names:
                if n.startswith("_") and not n.startswith("__"):
                    bad.append(f"{path.relative_to(PKG.parent)}:{line}: imports {target}.{n}")
    assert not bad, "private names imported from another module:\n" + "\n".join(bad)


def test_no_import_cycles() -> None:
    g = _graph()
    # a package's __init__ re-exporting from its own submodules is not a cycle worth naming
    for m in g:
        g[m] = {
            t
            for t in g[m]
            if not (MODULES[m].name == "__init__.py" and t.startswith(m + "."))
            and not (MODULES[t].name == "__init__.py" and m.startswith(t + "."))
        }
    state: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for t in sorted(g[m]):
            if state.get(t) == 1:
                cycles.append(" -> ".join(stack[stack.index(t) :] + [t]))
            elif t not in state:
                visit(t)
        stack.pop()
        state[m] = 2

    for m in sorted(g):
        if m not in state:
            visit(m)
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


@pytest.mark.parametrize("mod", sorted(MODULES))
def test_no_module_over_600_lines(mod: str) -> None:
    n = MODULES[mod].read_text(encoding="utf-8").count("\n")
    assert n <= 600, f"{MODULES[mod].relative_to(PKG.parent)} has {n} lines (at most 600)"


def test_every_import_is_visible_to_these_tests() -> None:
    """An import by name at run time (importlib, __import__) is an edge the graph above cannot see: the CLI
    once loaded its command modules that way and hid a cycle (cli.main -> cli.run -> cli.main)."""
    bad = []
    for mod, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call):
                f = node.func
                name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
                if name in ("import_module", "__import__"):
                    bad.append(f"{path.relative_to(PKG.parent)}:{node.lineno}: {name}")
    assert not bad, "imports hidden from the import graph:\n" + "\n".join(bad)
    # the command modules are edges of the graph, so a cycle through them is caught
    assert {"evidence.cli.run", "evidence.cli.release"} <= _graph()["evidence.cli.main"]
