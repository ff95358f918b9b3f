"""Report layout (issue 15): the answer first, the appendices collapsible, no false caveat, readable rows.

Checked on the HTML's element order (html.parser), independent of a browser; tests/report/test_report_browser.py
checks what a real Chromium shows on the first screen.
"""

from __future__ import annotations

import json
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rundir_fixtures import build_run, default_engine_resolved, demo_spec  # noqa: E402
from conftest import skip_unless_ci  # noqa: E402

from evidence.analysis.analyze import compute_analysis  # noqa: E402
from evidence.analysis.load import load_run  # noqa: E402
from evidence.canon import write_json  # noqa: E402
from evidence.figures import FIGURE_NAMES  # noqa: E402
from evidence.report.context import FIGURE_TITLES, render_report  # noqa: E402
from evidence.report.layout import (comparison_line, geometry_rows, latency_concurrency_table,  # noqa: E402
                                    verdict_lines)

FAKE = {f"{n}.{ext}": f"{n}-{ext}".encode() for n in FIGURE_NAMES for ext in ("png", "svg")}


class Outline(HTMLParser):
    """The sequence of (tag, id, inside <details>?, inside #headline?) for the elements a layout is made of."""

    KEEP = {"figure", "table", "details", "summary", "section", "ul", "nav", "h2", "img"}

    def __init__(self) -> None:
        super().__init__()
        self.events: list[tuple[str, str, bool, bool]] = []
        self.stack: list[tuple[str, str]] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag in self.KEEP:
            self.events.append((tag, a.get("id") or a.get("class") or a.get("alt") or "",
                                any(t == "details" for t, _ in self.stack),
                                any(i == "headline" for _, i in self.stack)))
        if tag not in ("img", "meta", "br"):
            self.stack.append((tag, a.get("id") or ""))

    def handle_endtag(self, tag):
        while self.stack:
            t, _ = self.stack.pop()
            if t == tag:
                break


def outline(html: str) -> list[tuple[str, str, bool, bool]]:
    p = Outline()
    p.feed(html)
    return p.events


def _resolved_twice(run: Path, **second) -> None:
    """A second engine session whose resolved.json quotes longer log lines (and, if asked, other values)."""
    spec = load_run(run).spec
    d = default_engine_resolved(spec)
    for k in d:
        d[k] = dict(d[k], source=d[k]["source"] + " ... and a longer quoted line after the restart")
    for k, v in second.items():
        d[k] = dict(d[k], value=v)
    write_json(run / "engine" / "resolved-2.json", d)


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("layout")
    run = build_run(root, spec=demo_spec(comparisons=[(4, 16), (1, 4)]))
    _resolved_twice(run)
    data = load_run(run)
    res = compute_analysis(data)
    figs = dict(FAKE)
    figs["timeseries_r1-c4.png"] = b"extra-figure"  # a figure the layout does not know by name
    md, html = render_report(run, data=data, analysis=res, figures=figs)
    return {"run": run, "res": res, "md": md.read_text(encoding="utf-8"), "html": html.read_text(encoding="utf-8")}


def test_figure_before_any_table(page: dict) -> None:
    ev = outline(page["html"])
    kinds = [e[0] for e in ev]
    assert "figure" in kinds and "table" in kinds
    assert kinds.index("figure") < kinds.index("table")
    first_fig = ev[kinds.index("figure")]
    assert first_fig[3], "the first figure is the headline's"
    # the headline holds the answer figure, the verdicts and the caveats, and nothing tabular
    head = [e for e in ev if e[3]]
    assert [e[1] for e in head if e[0] == "ul"] == ["verdicts", "caveats toggles"]
    assert not [e for e in head if e[0] == "table"]
    assert "throughput vs concurrency" in [e for e in head if e[0] == "img"][0][1].lower()


def test_markdown_order_too(page: dict) -> None:
    md = page["md"]
    assert md.index("](../figures/throughput_vs_concurrency.png)") < md.index("## Verdicts") < md.index("## Caveats") \
        < md.index("\n| ")
    assert md.index("## Latency against concurrency") < md.index("## Within each trial") \
        < md.index("## Throughput against latency") < md.index("## Latency distributions") \
        < md.index("## Appendix: setup")


def test_appendices_collapsible(page: dict) -> None:
    ev = outline(page["html"])
    details = [e[1] for e in ev if e[0] == "details" and e[1]]  # the appendices (a caveat's toggle has no id)
    assert details == ["paired-full", "timeseries", "tradeoff", "distributions", "goodput", "trials", "completeness",
                       "setup", "methods"]
    assert '<details class="appendix" id="setup">' in page["html"] and "<details open" not in page["html"]
    # provenance, resolved settings and pins are inside the collapsed appendix, and nothing comes after them
    html = page["html"]
    setup = html.index('<details class="appendix" id="setup">')
    for caption in ("Environment found", "What the engine resolved", "Pins: requested by the spec"):
        assert html.index(caption) > setup
    last_section = max(i for i, e in enumerate(ev) if e[0] == "section")
    first_details = min(i for i, e in enumerate(ev) if e[0] == "details" and e[1])
    assert last_section < first_details, "appendices come after every open section"


def test_false_restart_caveat_gone(page: dict) -> None:
    res, html = page["res"], page["html"]
    assert [c["name"] for c in res["setup"]["engine_resolved_changes"]], "the fixture has source-only changes"
    assert not any("restarted" in c for c in res["caveats"]), res["caveats"]
    assert "resolved some settings differently" not in html and "resolved to different values" not in html
    assert "resolved to the same values; only the log line quoted as their source differs" in html


def test_true_restart_caveat_names_values(tmp_path: Path) -> None:
    run = build_run(tmp_path)
    _resolved_twice(run, max_num_seqs=128)
    res = compute_analysis(load_run(run))
    cav = [c for c in res["caveats"] if "restarted" in c]
    assert cav == ["The engine was restarted and resolved some settings to different values: "
                   "max_num_seqs: 256 -> 128 (engine/resolved-2.json)."]


def test_new_figures_shown_in_the_time_series_section(page: dict) -> None:
    html = page["html"]
    sec = html.index('<details class="appendix" id="timeseries">')
    nxt = html.index("</details>", sec + 10)
    assert 'alt="timeseries r1-c4"' in html[sec:nxt]
    assert "](../figures/timeseries_r1-c4.png)" in page["md"]


def test_columns_explained(page: dict) -> None:
    md = page["md"]
    assert "chunk != usage count: completed requests whose number of streamed chunks differs" in md
    assert "len. mism.: completed requests whose usage.completion_tokens differs from max_tokens" in md
    assert "in parentheses its 95% t interval (n - 1 df) across repeats" in md


def test_reading_order_after_the_headline(page: dict) -> None:
    """Headline; then per-user against total throughput, latency against concurrency (its figure before its table),
    the comparisons, throughput per point, every caveat; then the appendices: the comparisons in full, the time
    series, the throughput-latency curve, the distributions...; no table before the latency figure."""
    ev = outline(page["html"])
    sections = [e[1] for e in ev if e[0] == "section" and e[1] != "headline"]
    assert sections == ["user-throughput", "latency", "paired", "throughput", "all-caveats"]
    imgs = [e[1] for e in ev if e[0] == "img"]
    order = [imgs.index(FIGURE_TITLES[n] + "") for n in ("throughput_vs_concurrency", "user_vs_total_throughput",
                                                         "latency_vs_concurrency", "latency_vs_throughput",
                                                         "latency_ecdf")]
    assert order == sorted(order) and order[:3] == [0, 1, 2]
    lat_fig = next(i for i, e in enumerate(ev) if e[0] == "img" and e[1] == FIGURE_TITLES["latency_vs_concurrency"])
    first_table = next(i for i, e in enumerate(ev) if e[0] == "table")
    assert lat_fig < first_table
    sec = [i for i, e in enumerate(ev) if e[0] == "section" and e[1] == "latency"][0]
    assert [e[0] for e in ev[sec + 1: sec + 4]] == ["h2", "figure", "img"], ev[sec: sec + 5]
    # every open section with a figure shows it before its tables
    bounds = [i for i, e in enumerate(ev) if e[0] in ("section", "details")] + [len(ev)]
    for a, b in zip(bounds, bounds[1:]):
        kinds = [e[0] for e in ev[a:b]]
        if "figure" in kinds and "table" in kinds and ev[a][0] == "section":
            assert kinds.index("figure") < kinds.index("table"), ev[a]
    md = page["md"]
    assert md.index("](../figures/latency_vs_concurrency.png)") < md.index("**Latency against concurrency: each trial")


def test_latency_table_carries_the_intervals(page: dict) -> None:
    t = latency_concurrency_table(page["res"])
    assert t["headers"][:5] == ["point", "repeats", "interval over", "TTFT p50 (ms)", "TTFT p99 (ms)"]
    iv = next(p for p in page["res"]["points"] if p["point"] == 4)["latency"]["ttft"]["intervals"]["p99"]
    row = next(r for r in t["rows"] if r[0] == "C4")
    assert row[4] == f"{iv['value']:,.1f} ({iv['ci_low']:,.1f} to {iv['ci_high']:,.1f})"
    assert row[2] == "3 repeats"


def test_verdict_lines_short_and_carry_the_interval() -> None:
    base = {"completeness": {"run_status": "complete", "trials_present": 6, "trials_planned": 6, "missing": [],
                             "with_failures": []},
            "points": [{"label": "C1", "output_throughput": {"mean": 100.0, "cv": 0.01}, "repeats_measured": 3}],
            "ordering": {"statement": None}, "dominance": {"pairs": []}}
    stat = {"a": 128, "b": 256, "name": "C128 vs C256", "pairs": 3, "wins_a": 3, "wins_b": 0, "verdict": "old rule",
            "mean_diff": 0.126, "stats": {"effect": 0.126, "ci95": [-0.059, 0.342], "p_value": 0.105, "mde": 0.28,
                                          "n_pairs": 3, "verdict": "not significant"}}
    line = comparison_line(stat)
    assert line == ("C128 vs C256: not significant; C128 +12.6% against C256 (95% CI -5.9% to +34.2%; p = 0.105; "
                    "smallest detectable 28.0%); C128 won 3 of 3 paired repeat(s).")
    assert comparison_line(stat, named=False).startswith("not significant; C128 +12.6%")
    many = dict(base, comparisons=[dict(stat, name=f"c{i}") for i in range(9)])
    lines = verdict_lines(many)
    assert len(lines) == 5 and lines[-1] == "6 more comparison(s): see Paired comparisons."
    old = {"a": 4, "b": 16, "name": "C4 vs C16", "pairs": 2, "wins_a": 2, "wins_b": 0, "mean_diff": 0.07,
           "verdict": "C4 > C16 in every repeat", "spread": {"value": 0.02}}
    assert comparison_line(old) == ("C4 vs C16: C4 > C16 in every repeat; mean paired advantage of C4 +7.0%; C4 won "
                                    "2 of 2 paired repeat(s); run-to-run spread 2.0%.")


def test_uninterpreted_geometry_collapsed() -> None:
    opaque = "no declared meaning for this kernel's grid: listed, not interpreted"
    rows = [{"point": 128, "rule": "fa3", "grid": "132x1x1", "replay": "graph", "count": 10, "total_ms": 1.0,
             "per_token_us": 0.5, "meaning": "grid carries no query-length meaning (persistent kernel)"}]
    rows += [{"point": 128, "rule": "fa3_combine", "grid": f"{g}x1x1", "replay": "graph" if g % 2 else "eager",
              "count": 2, "total_ms": 0.25, "per_token_us": 0.125, "meaning": opaque} for g in range(40)]
    rows += [{"point": 256, "rule": "fa3_combine", "grid": "7x1x1", "replay": "eager", "count": 1, "total_ms": 0.5,
              "per_token_us": None, "meaning": opaque}]
    shown, n = geometry_rows(rows)
    assert n == 41 and len(shown) == 3
    assert shown[0][2] == "132x1x1"
    assert shown[1][:7] == [128, "fa3_combine", "40 grids", "eager, graph", 80, "10.000", "5.000"]
    assert shown[2][:7] == [256, "fa3_combine", "1 grid", "eager", 1, "0.500", "n/a"]


def test_published_release_caveat_would_be_gone() -> None:
    """The committed release's A100-settings run: its restart changed only the quoted log lines."""
    raw = Path(__file__).resolve().parents[2] / "releases" / "article1-h200-v1.0" / "data" / "raw" / "h200-a100sched"
    if not raw.is_dir():
        skip_unless_ci("the committed release is not in this checkout")
    data = load_run(raw)
    res = compute_analysis(data)
    assert res["setup"]["engine_resolved_changes"], "the published run has a second resolved.json"
    assert not any("restarted" in c for c in res["caveats"])
    published = json.loads((raw.parents[1] / "analysis" / "h200-a100sched" / "analysis.json").read_text())
    assert any("resolved some settings differently" in c for c in published["caveats"]), "what this fixes"


def test_latency_table_says_when_there_is_no_interval() -> None:
    iv = {"value": 12.0, "ci_low": None, "ci_high": None, "n": 1, "unit": "repeat", "absent": "one measured repeat"}
    res = {"spec": {"percentiles": [50.0, 99.0], "latency_metrics": ["ttft"]},
           "points": [{"label": "C8", "repeats_measured": 1,
                       "latency": {"ttft": {"intervals": {"p50": iv, "p99": dict(iv, value=20.0)}}}}]}
    t = latency_concurrency_table(res)
    assert t["rows"] == [["C8", "1", "1 repeat", "12.0 (no interval: n = 1)", "20.0 (no interval: n = 1)"]]
