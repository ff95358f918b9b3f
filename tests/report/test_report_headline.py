"""The headline's caveats (issue 15, "a reader sees the answer on the first screen"): at most HEADLINE_CAVEATS,
by CAVEAT_PRIORITY, none that restates a verdict line shown beside it (decided on analysis.json's caveat_kinds),
and every caveat still on the page, verbatim, under All caveats."""

from __future__ import annotations

import html as htmllib
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rundir_fixtures import build_run, demo_spec  # noqa: E402

from evidence.analysis.analyze import compute_analysis  # noqa: E402
from evidence.analysis.caveats import CAVEAT_KINDS  # noqa: E402
from evidence.analysis.load import load_run  # noqa: E402
from evidence.figures import FIGURE_NAMES  # noqa: E402
from evidence.report.context import render_report  # noqa: E402
from evidence.report.layout import CAVEAT_PRIORITY, HEADLINE_CAVEATS, headline, verdict_lines  # noqa: E402

FAKE = {f"{n}.{ext}": f"{n}-{ext}".encode() for n in FIGURE_NAMES for ext in ("png", "svg")}
RESTATING = {"comparison_verdict", "dominance_verdict", "dominance_repeats", "ordering_repeats"}


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> dict:
    # many caveats: partial run, a missing and a failed trial, a non-finding comparison, dominance and ordering
    # that did not hold in every repeat
    root = tmp_path_factory.mktemp("headline")
    run = build_run(root, spec=demo_spec(comparisons=[(4, 16), (1, 4)]), failed={"r1-c4": 1}, missing=("r2-c16",))
    data = load_run(run)
    res = compute_analysis(data)
    md, html = render_report(run, data=data, analysis=res, figures=FAKE)
    return {"res": res, "md": md.read_text(encoding="utf-8"), "html": html.read_text(encoding="utf-8")}


def _headline_html(html: str) -> str:
    return html[html.index('<section id="headline"'): html.index("</section>", html.index('<section id="headline"'))]


def _caveat_items(html: str) -> list[str]:
    """The headline's caveats as shown: each short item (the summary of its toggle, or the item itself)."""
    head = _headline_html(html)
    ul = head[head.index('<ul class="caveats toggles">'): head.index("</ul>", head.index('<ul class="caveats'))]
    items = [x.split("</li>")[0] for x in ul.split("<li>")[1:]]
    return [htmllib.unescape(x.split("<summary>")[1].split("</summary>")[0] if "<summary>" in x else x) for x in items]


def _all_caveats_html(html: str) -> str:
    a = html.index('<section id="all-caveats">')
    return htmllib.unescape(html[a: html.index("</section>", a)])


def test_every_caveat_has_a_known_kind(page: dict) -> None:
    res = page["res"]
    assert len(res["caveat_kinds"]) == len(res["caveats"]) >= 8
    assert {k["kind"] for k in res["caveat_kinds"]} <= set(CAVEAT_KINDS)
    assert set(CAVEAT_PRIORITY) == set(CAVEAT_KINDS), "every kind has a place in the headline's priority"


def test_headline_holds_few_caveats_in_priority_order(page: dict) -> None:
    res, html = page["res"], page["html"]
    items = _caveat_items(html)
    assert len(items) == HEADLINE_CAVEATS == 4
    by_shown = {(k["short"] or t): k["kind"] for t, k in zip(res["caveats"], res["caveat_kinds"])}
    kinds = [by_shown[i] for i in items]
    # the incomplete run leads; the restated comparison verdict does not take a place
    assert kinds == ["run_status", "missing_trials", "failed_requests", "dummy_weights"], kinds
    more = len(res["caveats"]) - len(items)
    restated = sum(k["kind"] in RESTATING for k in res["caveat_kinds"])
    assert f'<a href="#all-caveats">{more} more caveats</a> ({restated} restate a verdict line above); all ' \
           f'{len(res["caveats"])} in full below.' in html
    assert f"[{more} more caveats](#all-caveats)" in page["md"]


def test_restating_caveats_only_in_the_full_list(page: dict) -> None:
    res, html = page["res"], page["html"]
    restating = [(t, k["short"]) for t, k in zip(res["caveats"], res["caveat_kinds"]) if k["kind"] in RESTATING]
    assert {k["kind"] for k in res["caveat_kinds"]} >= RESTATING, "the fixture has each restating kind"
    head, full = htmllib.unescape(_headline_html(html)), _all_caveats_html(html)
    for t, short in restating:
        assert t not in head and (short is None or short not in head) and t in full, t
    # and each of them is restated indeed: its comparison's or pair's verdict is a headline line
    assert any(v.startswith("C4 vs C16: not significant") for v in verdict_lines(res))


def test_no_caveat_dropped_or_changed(page: dict) -> None:
    res, html, md = page["res"], page["html"], page["md"]
    full = _all_caveats_html(html)
    for t, k in zip(res["caveats"], res["caveat_kinds"]):
        # a short item, its full text behind a toggle; or the caveat itself where it is already one short line
        assert f"<p>{t}</p></details></li>" in full or f"<li>{t}</li>" in full, t
        if k["short"]:
            assert f"<li><details><summary>{k['short']}</summary><p>{t}</p></details></li>" in full, t
        assert f"- {t}\n" in md.split("## All caveats", 1)[1], t
    # the one-line forms keep their numbers: each number in a short form is in its full sentence
    import re
    for t, k in zip(res["caveats"], res["caveat_kinds"]):
        if k["short"]:
            assert len(k["short"]) < len(t) and len(k["short"]) <= 130, k
            assert set(re.findall(r"\d+(?:\.\d+)?", k["short"])) <= set(re.findall(r"\d+(?:\.\d+)?", t)), k


def test_markdown_same_order(page: dict) -> None:
    md = page["md"]
    assert md.index("## Verdicts") < md.index("## Caveats") < md.index("more caveats](#all-caveats)") \
        < md.index("Contents: ") < md.index("## Latency against concurrency") < md.index("## All caveats") \
        < md.index("## Appendix: completeness")
    head = md[md.index("## Caveats"): md.index("Contents: ")]
    assert head.count("\n- ") == HEADLINE_CAVEATS


def _synthetic(n_comp: int) -> dict:
    comp = {"a": 128, "b": 256, "pairs": 3, "wins_a": 3, "wins_b": 0, "verdict": "not significant",
            "mean_diff": 0.126, "stats": {"effect": 0.126, "ci95": [-0.059, 0.342], "p_value": 0.105, "mde": 0.28,
                                          "n_pairs": 3, "verdict": "not significant"}}
    comps = [dict(comp, name=f"c{i}") for i in range(n_comp)]
    caveats = [f"Not significant: c{i} in full." for i in range(n_comp)] + ["Dummy weights: long text."]
    kinds = [{"kind": "comparison_verdict", "about": f"c{i}", "short": f"c{i}: not significant."}
             for i in range(n_comp)] + [{"kind": "dummy_weights", "about": None, "short": "Dummy weights."}]
    return {"completeness": {"run_status": "complete", "trials_present": 6, "trials_planned": 6, "missing": [],
                             "with_failures": []},
            "points": [{"label": "C1", "output_throughput": {"mean": 100.0, "cv": 0.01}, "repeats_measured": 3}],
            "ordering": {"statement": None}, "dominance": {"pairs": []}, "comparisons": comps,
            "caveats": caveats, "caveat_kinds": kinds}


def test_a_comparison_not_shown_keeps_its_caveat() -> None:
    """Only a caveat whose verdict line is on the screen is left out: with 9 comparisons the headline shows 3
    and says '6 more comparison(s)', so the caveats of those 6 are candidates, ranked above dummy weights."""
    h = headline(_synthetic(9))
    assert h["verdicts"][-1] == "6 more comparison(s): see Paired comparisons."
    assert h["caveats"] == ["c3: not significant.", "c4: not significant.", "c5: not significant.",
                            "c6: not significant."]
    assert h["restated"] == [f"Not significant: c{i} in full." for i in range(3)]
    assert h["caveats_more"] == {"link": "6 more caveats", "note": " (3 restate a verdict line above); all 10 in full below."}
    h2 = headline(_synthetic(2))
    assert h2["caveats"] == ["Dummy weights."] and len(h2["restated"]) == 2


def test_analysis_without_caveat_kinds_drops_nothing() -> None:
    """An analysis.json written before caveat_kinds: the first caveats in its order, none taken as restated."""
    res = _synthetic(2)
    del res["caveat_kinds"]
    h = headline(res)
    assert h["caveats"] == res["caveats"] and h["restated"] == []
    assert h["caveats_more"] == {"link": "All 3 caveats in full", "note": " below."}
    empty = dict(res, caveats=[])
    assert headline(empty)["caveats"] == ["None found in the data."] and headline(empty)["caveats_more"]["link"] == ""
