"""Report: every value present (StrictUndefined), self-contained HTML, deterministic bytes."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rundir_fixtures import build_run, demo_spec  # noqa: E402

from evidence.analysis.analyze import compute_analysis  # noqa: E402
from evidence.analysis.load import load_run  # noqa: E402
from evidence.figures import FIGURE_NAMES  # noqa: E402
from evidence.report.context import _env, find_templates, render_report  # noqa: E402

# The report only embeds figure bytes; real rendering is tested in test_figures and test_cli_report.
FAKE_FIGURES = {f"{n}.{ext}": f"{n}-{ext}".encode() for n in FIGURE_NAMES for ext in ("png", "svg")}


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("report")
    run = build_run(root, missing=("r2-c16",), failed={"r1-c4": 2})
    data = load_run(run)
    res = compute_analysis(data)
    figs = FAKE_FIGURES
    files = render_report(run, data=data, analysis=res, figures=figs)
    again = render_report(run, root / "again", data=data, analysis=res, figures=figs)
    return {"run": run, "root": root, "files": files, "again": again,
            "md": files[0].read_text(encoding="utf-8"), "html": files[1].read_text(encoding="utf-8")}


def test_written_where_expected(rendered: dict) -> None:
    run = rendered["run"]
    assert rendered["files"] == [run / "report" / "report.md", run / "report" / "report.html"]


def test_deterministic_bytes(rendered: dict) -> None:
    for a, b in zip(rendered["files"], rendered["again"]):
        assert a.read_bytes() == b.read_bytes()
    assert str(rendered["root"]) not in rendered["md"] and str(rendered["root"]) not in rendered["html"]


def test_strict_undefined_is_on() -> None:
    import jinja2

    env = _env(find_templates())
    with pytest.raises(jinja2.UndefinedError):
        env.from_string("{{ nothing_here }}").render()


def test_no_missing_values(rendered: dict) -> None:
    for text in (rendered["md"], rendered["html"]):
        assert "None" not in re.sub(r"none (found|\()", "", text).replace("none", "")
        assert "{{" not in text and "{%" not in text
        assert "nan" not in re.findall(r"\bnan\b", text.lower())


def test_html_self_contained(rendered: dict) -> None:
    html = rendered["html"]
    assert "<script" not in html.lower() and "<link" not in html.lower() and "@import" not in html
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", html, re.I)
    assert "url(" not in html
    imgs = re.findall(r"<img [^>]*src=\"([^\"]+)\"", html)
    assert len(imgs) == len(FIGURE_NAMES) and all(s.startswith("data:image/png;base64,") for s in imgs)
    assert "<style>" in html


def test_content(rendered: dict) -> None:
    md = rendered["md"]
    # setup: engine's resolved scheduler settings with sources, pins requested vs effective
    assert "max_num_batched_tokens | 2048 |" in md and "server log: scheduler config" in md
    assert "| engine version | 0.32.0 | 0.32.0 | yes |" in md
    # tables and verdicts, missing and failed trials named
    assert "Paired comparison C4 vs C16" in md and "C4 vs C16: the stated procedure" in md
    assert "| 95% interval |" in md and "run-to-run spread" not in md
    assert "smallest effect found with 80% power at this level (MDE)" in md
    assert "| scope | this server start (about this server start only" in md
    assert "paired repeat(s) (this server start, " in md  # the headline line of each comparison says its scope
    assert "Server starts and repeats: sd of ln(output throughput)" in md
    assert "r2-c16" in md and "r1-c4" in md and "Caution" in md
    assert "Latency side by side: C4 vs C16" in md and "Dominance over all points" in md
    # caveats the data supports
    assert "Dummy weights" in md
    # figures linked in markdown, embedded in HTML
    assert "](../figures/throughput_vs_concurrency.png)" in md
    # no profile/ in this run: no profiling section (tests/test_profile_run.py covers one with a trace)
    assert "## Profiling (diagnostic)" not in md
    assert "render environment" in md and "matplotlib 3." in md


def test_cli_report_end_to_end(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from evidence.cli.main import app

    spec = demo_spec(points=[1, 4], repeats=2, comparisons=[(1, 4)])
    run = build_run(tmp_path, spec=spec, missing=("r2-c4",))
    r = CliRunner().invoke(app, ["report", str(run)])
    assert r.exit_code == 0, r.output
    assert (run / "analysis" / "analysis.json").is_file() and (run / "figures" / "telemetry.svg").is_file()
    html = (run / "report" / "report.html").read_text(encoding="utf-8")
    assert html.count("data:image/png;base64,iVBORw0KGgo") == len(FIGURE_NAMES)  # real PNGs embedded, one per figure
    assert "report.html" in r.stdout
    r = CliRunner().invoke(app, ["report", str(tmp_path)])
    assert r.exit_code == 2 and "not a run directory" in r.output
