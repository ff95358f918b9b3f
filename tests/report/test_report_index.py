"""The index page of a release with several runs (evidence.report.index): content, order, deterministic bytes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rundir_fixtures import build_run, demo_spec  # noqa: E402

from evidence.analysis.analyze import compute_analysis  # noqa: E402
from evidence.analysis.compare import compare_runs  # noqa: E402
from evidence.analysis.load import load_run  # noqa: E402
from evidence.report.index import INDEX_FIGURE, index_entry, render_index  # noqa: E402

SCRIPT = """
import json, sys
from pathlib import Path
from evidence.report.index import render_index
args = json.loads(Path(sys.argv[1]).read_text())
render_index(args["runs"], args["compare"], Path(sys.argv[2]), title=args["title"])
"""


@pytest.fixture(scope="module")
def release(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("index")
    spec = demo_spec(comparisons=[(4, 16)])
    # run b: the knee moves (C16 ahead of C4), so the ordering is not preserved
    a = build_run(root, spec=spec, run_id="canonical")
    b = build_run(root, spec=spec, run_id="cleanroom",
                  throughput=lambda r, p: {1: 95.0, 4: 250.0, 16: 320.0}[p] * (1 + 0.01 * r))
    runs = [index_entry(r.name, compute_analysis(load_run(r)), f"report/{r.name}/report.html") for r in (a, b)]
    cmp = json.loads(json.dumps(compare_runs(a, b)))  # as freeze would hold it: plain JSON
    out = root / "out"
    files = render_index(runs, cmp, out, title="demo-v1: two runs")
    return {"root": root, "runs": runs, "compare": cmp, "out": out, "files": files,
            "html": (out / "index.html").read_text(encoding="utf-8"), "md": (out / "index.md").read_text(encoding="utf-8")}


def test_files_and_content(release: dict) -> None:
    out = release["out"]
    assert release["files"] == [out / "index.md", out / "index.html", out / INDEX_FIGURE]
    md, html = release["md"], release["html"]
    assert md.startswith("# demo-v1: two runs\n")
    assert "[canonical](report/canonical/report.html)" in md and '<a href="report/cleanroom/report.html">' in html
    assert "the ordering is NOT preserved" in md  # C1 < C4 > C16 against C1 < C4 < C16
    assert "Shift of cleanroom against canonical" in md and "C16 vs C4" not in md
    assert "C4 vs C16: [canonical]" in md and "[cleanroom]" in md
    assert f"![Output throughput vs concurrency, every run overlaid]({INDEX_FIGURE})" in md
    assert html.count("data:image/png;base64,iVBORw0KGgo") == 1 and "<script" not in html.lower()
    assert '<details class="appendix" id="differs">' in html


def test_figure_first_then_tables(release: dict) -> None:
    html = release["html"]
    assert html.index("<figure>") < html.index("<table>") < html.index('<details class="appendix"')
    assert html.index('id="together"') < html.index("<table>")


def test_deterministic_across_processes(release: dict, tmp_path: Path) -> None:
    args = tmp_path / "args.json"
    args.write_text(json.dumps({"runs": release["runs"], "compare": release["compare"], "title": "demo-v1: two runs"}))
    env = dict(os.environ, PYTHONHASHSEED="4242")
    subprocess.run([sys.executable, "-c", SCRIPT, str(args), str(tmp_path / "again")], check=True, env=env)
    for f in release["files"]:
        assert (tmp_path / "again" / f.name).read_bytes() == f.read_bytes(), f.name


def test_without_compare_three_runs(release: dict, tmp_path: Path) -> None:
    runs = release["runs"] + [dict(release["runs"][0], id="third", report="report/third/report.html")]
    files = render_index(runs, None, tmp_path)
    md = files[0].read_text(encoding="utf-8")
    assert md.startswith("# Release index\n") and "3 run(s)" in md and "## Run against run" not in md
    assert "- third: Mean output throughput" in md


def test_no_run_has_a_point(tmp_path: Path) -> None:
    run = {"id": "empty", "title": "t", "spec_name": "s", "status": "failed", "trials_present": 0, "trials_planned": 3,
           "points": [{"point": 1, "label": "C1", "mean": None, "cv": None, "values": []}], "verdicts": ["none"],
           "caveats": [], "report": "report/empty/report.html"}
    files = render_index([run], None, tmp_path)
    assert [f.name for f in files] == ["index.md", "index.html"]  # no figure when nothing was measured
    assert "| C1 |" in files[0].read_text() or "n/a" in files[0].read_text()


def test_release_folder_index(release: dict, tmp_path: Path) -> None:
    """render_release_index reads what freeze lays out and gives the same bytes as the in-memory call."""
    import shutil

    from evidence.analysis.analyze import analyze_run
    from evidence.report.index import render_release_index

    rel = tmp_path / "demo-v1"
    for rid in ("canonical", "cleanroom"):
        shutil.copytree(release["root"] / rid, rel / "data" / "raw" / rid,
                        ignore=shutil.ignore_patterns("analysis", "figures", "report"))
        analyze_run(rel / "data" / "raw" / rid, rel / "data" / "analysis" / rid)
    (rel / "release.json").write_text(json.dumps({"tag": "demo-v1: two runs",
                                                  "runs": [{"id": "canonical"}, {"id": "cleanroom"}]}))
    files = render_release_index(rel)
    assert [f.relative_to(rel).as_posix() for f in files] == ["data/index.md", "data/index.html",
                                                               f"data/{INDEX_FIGURE}"]
    for f in files:
        assert f.read_bytes() == (release["out"] / f.name).read_bytes(), f.name


def test_run_sections_carry_the_headline_caveats(release: dict, tmp_path: Path) -> None:
    """Each run's section shows its report's headline caveats (none restating a verdict), and how many more exist."""
    for r in release["runs"]:  # four caveats, none restated: all of them, as before
        assert r["headline_caveats"] and len(r["headline_caveats"]) == len(r["caveats"])
        assert f"Caveats: {' '.join(r['headline_caveats'])}" in release["md"]
    run = build_run(tmp_path, spec=demo_spec(comparisons=[(4, 16), (1, 4)]), failed={"r1-c4": 1}, missing=("r2-c16",))
    res = compute_analysis(load_run(run))
    e = index_entry(run.name, res, "report/x/report.html")
    render_index([e], None, tmp_path / "out")
    md = (tmp_path / "out" / "index.md").read_text(encoding="utf-8")
    n, top = len(res["caveats"]), e["headline_caveats"]
    assert len(top) == 4 < n and f"Caveats (4 of {n}; every one in the run's report): {' '.join(top)}" in md
    restated = [c for c in res["caveats"] if c.startswith("Not significant: C4 vs C16")]
    assert restated and restated[0] not in md
