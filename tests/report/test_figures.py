"""Figures: byte-identical PNG and SVG across processes and hash seeds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rundir_fixtures import build_run, demo_spec, read_text_tree  # noqa: E402

from evidence.figures import FIGURE_NAMES, render_environment  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
RENDER = "import sys; from pathlib import Path; from evidence.figures import render_figures; " \
         "render_figures(Path(sys.argv[1]), Path(sys.argv[2]))"


def _render_in_subprocesses(run: Path, jobs: list[tuple[Path, str]]) -> None:
    """Render in one fresh interpreter per (out dir, PYTHONHASHSEED), concurrently."""
    procs = []
    for out, hashseed in jobs:
        env = dict(os.environ, PYTHONHASHSEED=hashseed)
        env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
        procs.append(subprocess.Popen([sys.executable, "-c", RENDER, str(run), str(out)], env=env, cwd=str(REPO)))
    for p in procs:
        assert p.wait(timeout=120) == 0


def test_figures_byte_identical_across_processes_and_hash_seeds(tmp_path: Path) -> None:
    # small (2 points x 2 repeats) to keep the test quick; a missing and a failed trial exercise the notes
    spec = demo_spec(points=[4, 16], repeats=2, comparisons=[(4, 16)])
    run = build_run(tmp_path, spec=spec, missing=("r2-c16",), failed={"r1-c4": 2})
    _render_in_subprocesses(run, [(tmp_path / "f1", "1"), (tmp_path / "f2", "4242")])
    a, b = read_text_tree(tmp_path / "f1"), read_text_tree(tmp_path / "f2")
    expected = sorted([f"{n}.png" for n in FIGURE_NAMES] + [f"{n}.svg" for n in FIGURE_NAMES] + ["render.json"])
    assert sorted(a) == expected
    assert a.keys() == b.keys()
    for name in sorted(a):
        assert a[name] == b[name], f"{name} differs between processes"
    for n in FIGURE_NAMES:
        png, svg = a[f"{n}.png"], a[f"{n}.svg"]
        assert png.startswith(b"\x89PNG") and b"Software" not in png
        assert b"<dc:date>" not in svg and b"Matplotlib v" not in svg
        assert str(tmp_path).encode() not in svg
    manifest = json.loads(a["render.json"])
    assert manifest["environment"] == render_environment()
    assert set(manifest["files"]) == {k for k in a if k != "render.json"}


def test_render_environment_keys() -> None:
    env = render_environment()
    assert set(env) == {"matplotlib", "numpy", "freetype", "pillow", "backend"}
    assert env["backend"] == "agg" and all(env.values())
