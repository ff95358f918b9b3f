"""Every HTML page the tool writes is safe to open: author-supplied text (a release's notes.md, a spec's title
and description) never turns into markup that runs (no <script>, no event handler, no javascript: link),
and every page carries a restrictive Content-Security-Policy (no script, nothing loaded from elsewhere)."""

from __future__ import annotations

import re
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rundir_fixtures import build_run, demo_spec  # noqa: E402

from evidence.analysis.analyze import compute_analysis  # noqa: E402
from evidence.analysis.load import load_run  # noqa: E402
from evidence.figures import FIGURE_NAMES  # noqa: E402
from evidence.report.context import render_report  # noqa: E402
from evidence.report.index import index_entry, render_index  # noqa: E402
from evidence.report.sanitize import CSP, markdown_html  # noqa: E402

FAKE_FIGURES = {f"{n}.{ext}": f"{n}-{ext}".encode() for n in FIGURE_NAMES for ext in ("png", "svg")}
HOSTILE = (
    '<script>alert("notes")</script>\n\n<img src=x onerror="alert(1)">\n\n[click me](javascript:alert(2))\n\n'
    '<a href="JaVaScRiPt:alert(3)">raw link</a> <iframe src="https://example.org"></iframe>\n\n'
    '<p style="background:url(https://example.org/x)" onclick="alert(4)">styled</p>\n\n<svg onload="alert(5)"></svg>\n'
)
NOTES = (
    "# Erratum\n\nThe knee is **not** shown.\n\n"
    + HOSTILE
    + "\n## More\n\n"
    + HOSTILE
    + "\n| a | b |\n|---|---|\n| 1 | 2 |\n"
)


class _Elements(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.found: list[tuple[str, list[tuple[str, str | None]]]] = []

    def handle_starttag(self, tag, attrs):
        self.found.append((tag, attrs))


def _no_active_markup(html: str) -> None:
    """Parsed as a browser would: no element that runs or loads, no handler, no script URL, no style attribute.
    (Escaped text such as '&lt;img onerror=...&gt;' is text, and stays.)"""
    p = _Elements()
    p.feed(html)
    for tag, attrs in p.found:
        assert tag not in ("script", "iframe", "svg", "object", "embed", "form", "base", "link"), tag
        for k, v in attrs:
            assert not k.startswith("on") and k != "style", (tag, k, v)
            if k in ("href", "src"):
                assert (v or "").strip().lower().split(":")[0] not in ("javascript", "vbscript") or ":" not in (
                    v or ""
                ), (tag, k, v)
                assert not (v or "").lower().startswith("data:") or (
                    tag == "img" and v.startswith("data:image/png;base64,")
                ), (tag, k, v)


def _no_active_content(html: str) -> None:
    _no_active_markup(html)
    metas = re.findall(r'<meta http-equiv="Content-Security-Policy" content="([^"]*)">', html)
    assert metas == [CSP.replace("'", "&#39;")] or metas == [CSP], metas
    head = html[: html.index("</head>")]
    assert head.index("Content-Security-Policy") < head.index("<style>")  # before what it governs
    policy = dict(d.strip().split(" ", 1) for d in CSP.split(";"))
    assert policy["default-src"] == "'none'" and "script-src" not in policy and policy["img-src"] == "'self' data:"


def test_markdown_is_sanitised_and_keeps_the_authors_formatting():
    html = markdown_html(NOTES)
    _no_active_markup(html)
    assert "<strong>not</strong>" in html and "<table>" in html and "<h2>More</h2>" in html
    assert ">click me</a>" in html and ">styled</p>" in html  # the text stays, what runs goes


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    spec = demo_spec().model_copy(
        update={
            "title": 'Title <script>alert("t")</script>',
            "description": '<img src=x onerror="alert(1)"> [x](javascript:alert(2))',
        }
    )
    return build_run(tmp_path_factory.mktemp("sanitize"), spec=spec, run_id="hostile")


def test_index_html_drops_script_from_notes(run, tmp_path):
    data = load_run(run)
    entry = index_entry(run.name, compute_analysis(data), f"report/{run.name}/report.html")
    render_index([entry], None, tmp_path, title="v1 <script>alert(0)</script>", notes=NOTES)
    html = (tmp_path / "index.html").read_text(encoding="utf-8")
    _no_active_content(html)
    assert "<strong>not</strong>" in html and "&lt;script&gt;alert(0)&lt;/script&gt;" in html


def test_report_html_escapes_the_specs_text(run, tmp_path):
    data = load_run(run)
    render_report(run, tmp_path, data=data, analysis=compute_analysis(data), figures=FAKE_FIGURES)
    html = (tmp_path / "report.html").read_text(encoding="utf-8")
    _no_active_content(html)
    assert "&lt;script&gt;" in html and "&lt;img src=x" in html
