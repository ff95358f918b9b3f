"""The HTML report as a reader sees it: rendered by a real headless Chromium (Debian's `chromium`, installed by
`make system`) at 1366x900 (issue 25: the bottom line in the title, at most about 5 screens before the
appendices, no table wider than the page).

Measured in the browser: a copy of the page gets a small script that writes the layout boxes into the DOM, and
`chromium --dump-dom` returns them. The page's Content-Security-Policy runs no script, so the copy's policy also
allows that one script by its hash (and nothing else); a copy with an unhashed script shows the policy holds. Without Chromium the tests skip, except under CI (env CI set) where they
fail: a CI that cannot render the page has not tested it.
"""

from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from conftest import skip_unless_ci  # noqa: E402
from rundir_fixtures import build_run, demo_spec  # noqa: E402

from evidence.analysis.analyze import compute_analysis  # noqa: E402
from evidence.analysis.load import load_run  # noqa: E402
from evidence.figures import figure_bytes  # noqa: E402
from evidence.report.context import render_report  # noqa: E402
from evidence.report.layout import HEADLINE_CAVEATS, bottom_line  # noqa: E402

WIDTH, HEIGHT = 1366, 900
SCREENS = 5  # "at most about 5 screens before the appendices"

MEASURE = """<script>
window.addEventListener('load', function () {
  function box(el) { if (!el) return null; var r = el.getBoundingClientRect();
    return {top: r.top + window.scrollY, bottom: r.bottom + window.scrollY, left: r.left, right: r.right,
            height: r.height, width: r.width}; }
  var img = document.querySelector('#headline img');
  var out = {
    viewport: [window.innerWidth, window.innerHeight],
    headline_img: box(img), img_natural: img ? [img.naturalWidth, img.naturalHeight] : null,
    verdicts: box(document.querySelector('#verdicts')), caveats: box(document.querySelector('#caveats')),
    caveat_items: document.querySelectorAll('#headline ul.caveats li').length,
    more_caveats: box(document.querySelector('#headline p.more a')),
    all_caveats: box(document.querySelector('#all-caveats')),
    all_caveat_items: document.querySelectorAll('#all-caveats li').length,
    first_table: box(document.querySelector('table')),
    tables_outside_details: Array.from(document.querySelectorAll('table')).filter(function (t) {
      return !t.closest('details'); }).map(function (t) { return box(t).top; }),
    details: Array.from(document.querySelectorAll('details')).map(function (d) {
      var tabs = Array.from(d.querySelectorAll('table'));
      return {id: d.id, open: d.open, height: d.getBoundingClientRect().height,
              summary: d.querySelector('summary').getBoundingClientRect().height, tables: tabs.length,
              tables_visible: tabs.filter(function (t) { return t.checkVisibility(); }).length}; }),
    page_height: document.documentElement.scrollHeight,
    h1: box(document.querySelector('h1')), h1_id: document.querySelector('h1').id,
    h1_text: document.querySelector('h1').textContent,
    h1_line: parseFloat(getComputedStyle(document.querySelector('h1')).lineHeight),
    first_appendix: box(document.querySelector('details.appendix')),
    caveat_toggles: Array.from(document.querySelectorAll('#headline ul.caveats details')).map(function (d) {
      return {summary: d.querySelector('summary').checkVisibility(), full: d.querySelector('p').checkVisibility(),
              summary_height: d.querySelector('summary').getBoundingClientRect().height}; })
  };
  // every toggle and appendix opened: no table may reach past the page's right edge, nor scroll in its box
  document.querySelectorAll('details').forEach(function (d) { d.open = true; });
  out.tables_open = Array.from(document.querySelectorAll('table')).map(function (t) {
    var w = t.closest('.tablewrap');
    return {caption: t.querySelector('caption').textContent.slice(0, 60), right: t.getBoundingClientRect().right,
            scrolls: w ? w.scrollWidth > w.clientWidth + 1 : false, visible: t.checkVisibility()}; });
  out.doc_width = document.documentElement.scrollWidth;
  var pre = document.createElement('pre'); pre.id = 'measured'; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""


def _chromium() -> str:
    exe = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)
    why = "no chromium on PATH (make system installs Debian's chromium)" if exe is None else ""
    if exe:
        try:
            r = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60)
            why = "" if r.returncode == 0 else f"chromium --version failed: {r.stderr.strip()[:300]}"
        except (OSError, subprocess.TimeoutExpired) as e:
            why = f"chromium did not start: {e}"
    if why:
        skip_unless_ci(why)
    return exe


def _run(exe: str, args: list[str], profile: Path) -> subprocess.CompletedProcess:
    cmd = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
           f"--user-data-dir={profile}", f"--window-size={WIDTH},{HEIGHT}", "--virtual-time-budget=5000", *args]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    if r.returncode != 0:
        skip_unless_ci(f"chromium failed ({r.returncode}): {r.stderr[-800:]}")
    return r


CSP_META = re.compile(r'<meta http-equiv="Content-Security-Policy" content="([^"]*)">')


def _allow_script(html: str, script: str) -> str:
    """The page with its policy plus script-src for this one script (by its sha256, as CSP hashes it)."""
    import base64
    import hashlib

    m = CSP_META.search(html)
    assert m, "the page has no Content-Security-Policy"
    body = script[len("<script>"):-len("</script>")]
    digest = base64.b64encode(hashlib.sha256(body.encode("utf-8")).digest()).decode("ascii")
    return html.replace(m.group(0), f'<meta http-equiv="Content-Security-Policy" content="{m.group(1)}; '
                                    f'script-src &#39;sha256-{digest}&#39;">', 1)


@pytest.fixture(scope="module")
def browser_page(tmp_path_factory) -> dict:
    exe = _chromium()
    root = tmp_path_factory.mktemp("browser")
    run = build_run(root, spec=demo_spec(comparisons=[(4, 16), (1, 4)]), failed={"r1-c4": 1})
    data = load_run(run)
    res = compute_analysis(data)
    _, html_path = render_report(run, data=data, analysis=res, figures=figure_bytes(data, res))
    html = html_path.read_text(encoding="utf-8")
    measured = root / "measured.html"
    measured.write_text(_allow_script(html, MEASURE).replace("</body>", MEASURE + "\n</body>"), encoding="utf-8")
    m = _measure(exe, measured, root / "profile-dom")
    shot = root / "first-screen.png"
    _run(exe, [f"--screenshot={shot}", html_path.as_uri()], root / "profile-shot")
    # the page as written: an injected script (not hashed) does not run
    injected = root / "injected.html"
    injected.write_text(html.replace("</body>", INJECTED + "\n</body>"), encoding="utf-8")
    blocked = _run(exe, ["--dump-dom", injected.as_uri()], root / "profile-injected").stdout
    return {"m": m, "shot": shot, "html": html, "injected_dom": blocked, "bottom_line": bottom_line(res)}


def _measure(exe: str, page: Path, profile: Path) -> dict:
    r = _run(exe, ["--dump-dom", page.as_uri()], profile)
    m = re.search(r'<pre id="measured">(.*?)</pre>', r.stdout, re.S)
    assert m, f"the measuring script left nothing in the DOM: {r.stdout[-500:]} {r.stderr[-500:]}"
    return json.loads(m.group(1).replace("&quot;", '"').replace("&amp;", "&"))


H200_RUN = Path(__file__).resolve().parents[2] / "releases/article1-h200-v1.1/data/raw/h200-default-s2"


def test_a_real_h200_run_reads_the_same_way(tmp_path: Path) -> None:
    """The committed v1.1 H200 run (read in place; its report is written under tmp): the title states the
    result in one line, the appendices start within about 5 screens, and no table is wider than the page."""
    if not H200_RUN.is_dir():
        pytest.skip(f"{H200_RUN} is not in this checkout")
    exe = _chromium()
    data = load_run(H200_RUN)
    res = compute_analysis(data)
    _, html_path = render_report(H200_RUN, tmp_path / "report", data=data, analysis=res,
                                 figures=figure_bytes(data, res))
    html = html_path.read_text(encoding="utf-8")
    measured = tmp_path / "measured.html"
    measured.write_text(_allow_script(html, MEASURE).replace("</body>", MEASURE + "\n</body>"), encoding="utf-8")
    m = _measure(exe, measured, tmp_path / "profile")
    assert m["h1_text"] == bottom_line(res) and "these 2 server starts" in m["h1_text"]
    assert m["h1"]["height"] < 1.5 * m["h1_line"]
    assert m["first_appendix"]["top"] <= SCREENS * HEIGHT, m["first_appendix"]
    assert not [t for t in m["tables_open"] if t["right"] > WIDTH or t["scrolls"]]


INJECTED = "<script>document.body.appendChild(document.createElement('pre')).id = 'injected-ran';</script>"


def test_the_pages_policy_runs_no_script(browser_page: dict) -> None:
    dom = browser_page["injected_dom"]
    assert "</main>" in dom, "chromium returned the page"
    assert 'id="injected-ran"' not in dom


def test_laid_out_at_the_screen_width(browser_page: dict) -> None:
    # positions are document coordinates: "the first screen" is the top HEIGHT px at this width
    assert browser_page["m"]["viewport"][0] == WIDTH


def test_headline_figure_and_verdicts_on_the_first_screen(browser_page: dict) -> None:
    m = browser_page["m"]
    img = m["headline_img"]
    assert m["img_natural"][0] > 0, "the embedded PNG decoded"
    assert 0 <= img["top"] and img["bottom"] <= HEIGHT, img
    assert img["width"] >= 500, "large enough to read"
    assert m["verdicts"]["top"] < HEIGHT / 2 and m["caveats"]["top"] < HEIGHT, (m["verdicts"], m["caveats"])
    # the verdicts sit beside the figure, not under it
    assert m["verdicts"]["left"] > img["right"]


def test_headline_caveats_fit_the_first_screen(browser_page: dict) -> None:
    """A few caveats and the link to all of them end within the first screen; the full list is further down."""
    m = browser_page["m"]
    assert 1 <= m["caveat_items"] <= HEADLINE_CAVEATS < m["all_caveat_items"], m
    assert m["more_caveats"] and m["more_caveats"]["bottom"] <= HEIGHT, m["more_caveats"]
    assert m["all_caveats"]["top"] > HEIGHT


def test_no_table_before_the_figure(browser_page: dict) -> None:
    m = browser_page["m"]
    assert min(m["tables_outside_details"]) > m["headline_img"]["bottom"]


def test_appendices_collapsed(browser_page: dict) -> None:
    d = {x["id"]: x for x in browser_page["m"]["details"] if x["id"]}  # a caveat's toggle has no id
    assert set(d) == {"paired-full", "timeseries", "tradeoff", "distributions", "goodput", "trials", "completeness",
                      "setup", "methods"}
    for x in d.values():
        assert not x["open"] and x["tables_visible"] == 0, x
        assert x["height"] < x["summary"] + 20, x  # only the summary line takes room


def test_screenshot_is_the_report(browser_page: dict) -> None:
    png = browser_page["shot"].read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    w, h = struct.unpack(">II", png[16:24])
    assert (w, h) == (WIDTH, HEIGHT)
    from PIL import Image

    with Image.open(browser_page["shot"]) as im:
        colours = im.convert("RGB").getcolors(maxcolors=1_000_000)
    assert colours is None or len(colours) > 50, "a blank screenshot"


def test_bottom_line_in_the_title_area(browser_page: dict) -> None:
    """The page's title states the result in one line, above everything else."""
    m = browser_page["m"]
    assert m["h1_id"] == "bottom-line" and m["h1_text"] == browser_page["bottom_line"]
    assert m["h1_text"].startswith("Not decided: C4 vs C16 throughput ") and "CI" in m["h1_text"], m["h1_text"]
    assert "this server start" in m["h1_text"], "the verdict's scope"
    assert m["h1"]["bottom"] < m["headline_img"]["top"] and m["h1"]["top"] < 150, m["h1"]
    assert m["h1"]["height"] < 1.5 * m["h1_line"], "one line at 1366 px"
    assert f"<title>{browser_page['bottom_line']} |" in browser_page["html"]


def test_at_most_five_screens_before_the_appendices(browser_page: dict) -> None:
    m = browser_page["m"]
    assert m["first_appendix"]["top"] <= SCREENS * HEIGHT, m["first_appendix"]
    assert m["page_height"] < m["first_appendix"]["top"] + 20 * HEIGHT  # the appendices are collapsed, not gone


def test_no_table_wider_than_the_page(browser_page: dict) -> None:
    """With every appendix open, each table (the trials table's 16 columns included) fits the 1366 px page: no
    table reaches past its right edge and none needs its box's scroll bar."""
    m = browser_page["m"]
    tables = m["tables_open"]
    assert len(tables) >= 15 and all(t["visible"] for t in tables)
    wide = [t for t in tables if t["right"] > WIDTH or t["scrolls"]]
    assert not wide, wide
    assert m["doc_width"] <= WIDTH


def test_caveats_are_short_items_with_details_behind_a_toggle(browser_page: dict) -> None:
    toggles = browser_page["m"]["caveat_toggles"]
    assert toggles, "the fixture's headline has caveats with a longer text"
    for t in toggles:
        assert t["summary"] and not t["full"], "closed: the short item shows, its details do not"
        assert t["summary_height"] < 60, "a short item: at most about two lines"
