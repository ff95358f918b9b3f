"""The index page of a release that holds several runs: index.md and a self-contained index.html.

`render_index(release_runs, compare, out)` is a pure function of its arguments (no clock, no file read):
the same runs and comparison give the same bytes. Each entry of `release_runs` is `index_entry(...)`'s
dict (built from a run's analysis.json), optionally merged with the run's entry in release.json; `compare`
is `evidence.analysis.compare.compare_runs(a, b)`'s dict for two of the runs, or None.

The page leads with one figure, every run's output throughput against concurrency overlaid (mean line,
every repeat a marker), beside what the runs say together: the ordering in each run and whether it
survives, the shift between the runs per point, and each declared comparison in each run. Then a table of
the runs with links to their reports, the comparison tables, and what differs between the runs
(collapsed).
"""

from __future__ import annotations

import base64
import io
import os
from pathlib import Path
from typing import Any

from evidence.analysis.model import Analysis, as_analysis
from evidence.analysis.numbers import label
from evidence.canon import write_atomic
from evidence.figures import COLORS, DPI, RC, REPEAT_MARKERS
from evidence.report.format import join_flags, num, pct, section, table, text
from evidence.report.layout import comparison_line, headline
from evidence.report.sanitize import CSP, markdown_html
from evidence.resources import TEMPLATES

INDEX_FIGURE = "index_throughput.png"


def index_entry(run_id: str, analysis: Analysis | dict, report_href: str, **extra: Any) -> dict:
    """What the index shows of one run, from its analysis (typed, or analysis.json's dict); `report_href` links
    its report.html relative to the index page (e.g. "report/h200-default/report.html" for an index in data/)."""
    a = as_analysis(analysis)
    c = a.completeness
    # the verdict lines and the caveats of the run report's headline, worked out once (layout reads the dict)
    head = headline(analysis if isinstance(analysis, dict) else a.to_dict())
    by_point: dict[int, list[float]] = {}
    for t in a.trials:
        if t.present and isinstance(t.output_throughput, (int, float)):
            by_point.setdefault(t.point, []).append(t.output_throughput)
    return {
        "id": run_id, "title": a.spec.title or a.spec.name,
        "spec_name": a.spec.name, "status": c.run_status or "unknown",
        "trials_present": c.trials_present, "trials_planned": c.trials_planned,
        "points": [{"point": p.point, "label": p.label, "mean": p.output_throughput.mean,
                    "cv": p.output_throughput.cv, "values": by_point.get(p.point, [])}
                   for p in a.points],
        "verdicts": head["verdicts"], "caveats": list(a.caveats),
        # the run report's headline caveats: the few that matter most, none restating a verdict
        "headline_caveats": head["caveats"] if a.caveats else [],
        "report": report_href, **extra,
    }


def _overlay_png(runs: list[dict]) -> bytes | None:
    """Every run's throughput against concurrency on one axis (PNG bytes, deterministic: no metadata)."""
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    pts = sorted({p["point"] for r in runs for p in r["points"] if p.get("mean") is not None})
    if not pts:
        return None
    with matplotlib.rc_context(RC):
        fig = Figure(figsize=(7.0, 4.4), layout="constrained")
        ax = fig.add_subplot()
        n = len(runs)
        for i, r in enumerate(runs):
            color, marker = COLORS[i % len(COLORS)], REPEAT_MARKERS[i % len(REPEAT_MARKERS)]
            ps = [p for p in r["points"] if p.get("mean") is not None]
            ax.plot([p["point"] for p in ps], [p["mean"] for p in ps], color=color, lw=1.6,
                    label=f"{r['id']}: mean over repeats")
            # runs side by side around each point (log2 axis: a multiplicative offset), every repeat shown
            off = 2 ** (0.04 * (i - (n - 1) / 2)) if len(pts) > 1 else 1.0
            xs = [p["point"] * off for p in ps for _ in p.get("values") or []]
            ys = [v for p in ps for v in p.get("values") or []]
            ax.scatter(xs, ys, marker=marker, s=26, color=color, alpha=0.75, label=f"{r['id']}: each repeat")
        if len(pts) > 1 and min(pts) > 0:
            ax.set_xscale("log", base=2)
        ax.set_xticks(pts)
        ax.set_xticklabels([str(p) for p in pts])
        ax.minorticks_off()
        ax.set_xlabel("max concurrency")
        ax.set_ylabel("output throughput (tok/s)")
        ax.legend(loc="best")
        fig.suptitle("Output throughput vs concurrency, every run of the release overlaid")
        FigureCanvasAgg(fig)
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None})
    return buf.getvalue()


def _across(runs: list[dict], compare: dict | None) -> list[str]:
    """The headline lines: what the runs say together."""
    if compare is None:
        return [f"{r['id']}: " + " ".join(r["verdicts"][:2]) for r in runs] or ["No run in this release."]
    a, b = compare["a"]["run_id"], compare["b"]["run_id"]
    o = compare["ordering"]
    out = [f"Ordering of means: {a} {o.get('a') or 'n/a'}; {b} {o.get('b') or 'n/a'}: "
           + ("the same ordering." if o.get("same") else "the ordering is NOT preserved.")
           + (f" With '~' where a paired verdict is not a finding: {o.get('a_supported')} vs {o.get('b_supported')}"
              f" ({'same' if o.get('same_supported') else 'different'})." if o.get("a_supported") else "")]
    shifts = []
    for p in compare["points"]:
        ci = p.get("shift_ci95")
        shifts.append(f"{p['label']} {pct(p.get('shift'), signed=True, d=1)}"
                      + (f" [{pct(ci[0], signed=True, d=1)}, {pct(ci[1], signed=True, d=1)}]" if ci else "")
                      + (f" {p['shift_verdict']}" if p.get("shift_verdict") else ""))
    if shifts:
        out.append(f"Shift of {b} against {a} in mean throughput" + (" (95% CI, verdict)" if any(
            p.get("shift_ci95") for p in compare["points"]) else "") + ": " + "; ".join(shifts) + ".")
    for c in compare["comparisons"]:
        sides = []
        for side, rid in (("run_a", a), ("run_b", b)):
            x = c.get(side)
            sides.append(f"[{rid}] " + ("not computed" if not x else comparison_line(
                dict(x, a=c["a"], b=c["b"]), named=False).rstrip(".")))
        out.append(f"{c['name']}: " + " ".join(s + "." for s in sides))
    return out


def _runs_table(runs: list[dict]) -> dict:
    pts = sorted({p["point"] for r in runs for p in r["points"]})
    rows = []
    for r in runs:
        by = {p["point"]: p for p in r["points"]}
        rows.append([r["id"], r["title"], r["status"], f"{r['trials_present']}/{r['trials_planned']}"]
                    + [(f"{num(by[P]['mean'], 0)} (CV {pct(by[P]['cv'], d=1)})" if P in by and by[P]["mean"] is not None
                        else "n/a") for P in pts] + [r["report"]])
    return table("The runs of this release (mean output throughput, tok/s, over repeats)",
                 ["run", "experiment", "status", "trials"] + [label(P) for P in pts] + ["report"], rows,
                 "llll" + "r" * len(pts) + "l",
                 "trials: recorded / planned. CV: standard deviation over repeats / mean. Each run's report "
                 "holds its verdicts with their intervals, the latency, the time series and its appendices.")


def _compare_tables(compare: dict) -> list[dict]:
    a, b = compare["a"]["run_id"], compare["b"]["run_id"]
    rows = []
    for p in compare["points"]:
        ci = p.get("shift_ci95")
        rows.append([p["label"], num(p.get("a_mean")), num(p.get("b_mean")), pct(p.get("shift"), signed=True, d=2),
                     f"{pct(ci[0], signed=True, d=2)} to {pct(ci[1], signed=True, d=2)}" if ci else "n/a",
                     text(p.get("shift_verdict") or "n/a"), p.get("a_repeats", ""), p.get("b_repeats", ""),
                     join_flags(p.get("flags") or [])])
    out = [table(f"Per point: {b} against {a} (output throughput, tok/s)",
                 ["point", a, b, "shift", "95% interval", "verdict", f"repeats {a}", f"repeats {b}", "flags"], rows,
                 "lrrrrllll", f"shift = (mean {b} - mean {a}) / mean {a}. "
                 + str((compare.get("methods") or {}).get("shift", "")))]
    rows = []
    for c in compare["comparisons"]:
        cells = [c["name"]]
        for side in ("run_a", "run_b"):
            x = c.get(side)
            cells.append("not computed" if not x else comparison_line(dict(x, a=c["a"], b=c["b"]), named=False))
        cells.append("yes" if c.get("both_findings_agree") else "no")
        rows.append(cells)
    if rows:
        out.append(table("Paired comparisons in each run", ["comparison", a, b, "both runs find the same"], rows, "llll",
                         str((compare.get("methods") or {}).get("paired", ""))))
    return out


def _differs_tables(compare: dict) -> list[dict]:
    rows = [("spec (beyond the name)", "; ".join(f"{d['path']}: {text(d.get('a'))} -> {text(d.get('b'))}"
                                                 for d in compare.get("spec_diff") or []) or "identical"),
            ("engine resolved settings", "; ".join(f"{d.get('name', d.get('path'))}: {text(d.get('a'))} -> "
                                                   f"{text(d.get('b'))}" for d in compare.get("engine_resolved_diff")
                                                   or []) or "identical")]
    for k, ds in sorted((compare.get("provenance_diff") or {}).items()):
        rows.append((f"provenance: {k}", f"{len(ds)} difference(s): " + "; ".join(
            f"{d['path']}: {text(d.get('a'))} -> {text(d.get('b'))}" for d in ds[:8]) + (" ..." if len(ds) > 8 else "")))
    for p in compare.get("pins") or []:
        rows.append((f"pin: {p['pin']}", f"{text(p.get('a_effective'))} ({'holds' if p.get('a_ok') else 'does not hold'}) "
                                         f"-> {text(p.get('b_effective'))} ({'holds' if p.get('b_ok') else 'does not hold'})"))
    return [table(f"What differs between {compare['a']['run_id']} and {compare['b']['run_id']}", ["item", "a -> b"],
                  rows, "ll")]


def _env():
    import jinja2

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), undefined=jinja2.StrictUndefined,
                             autoescape=jinja2.select_autoescape(enabled_extensions=("html.j2",), default=False),
                             keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True)
    env.globals["csp"] = CSP
    return env


def _notes_parts(notes: str | None) -> tuple[str, str]:
    """The release notes (Markdown, the author's own words, e.g. an erratum) split at their first '## ':
    the lead opens the page, above the figure; the rest follows the headline."""
    if not notes or not notes.strip():
        return "", ""
    text = notes.strip() + "\n"
    i = text.find("\n## ")
    return (text, "") if i < 0 else (text[:i + 1], text[i + 1:])


def _md_html(text: str) -> str:
    # the author's Markdown may hold raw HTML: only nh3's sanitised output is ever marked |safe
    return markdown_html(text)


def _caveats_line(r: dict) -> list[str]:
    """A run's caveats for its index section: those of its report's headline, and how many more its report has."""
    cav, top = r["caveats"], r.get("headline_caveats") or r["caveats"]
    if not cav:
        return []
    lead = "Caveats" if len(top) == len(cav) else f"Caveats ({len(top)} of {len(cav)}; every one in the run's report)"
    return [f"{lead}: {' '.join(top)}"]


def render_index(release_runs: list[dict], compare: dict | None, out: Path, *, title: str | None = None,
                 notes: str | None = None) -> list[Path]:
    """Write index.md, index.html (figure embedded) and the figure's PNG to `out`; return their paths.
    `notes`: the release's notes in Markdown (data/release/notes.md), shown first.

    Pure: the bytes depend only on the arguments (and the render stack that fixes PNG bytes)."""
    out = Path(out)
    lead, rest = _notes_parts(notes)
    runs = list(release_runs)
    png = _overlay_png(runs)
    sections = [section("runs", "Runs", tables=[_runs_table(runs)])]
    if compare is not None:
        sections.append(section("compare", "Run against run", tables=_compare_tables(compare),
                                bullets=list(compare.get("caveats") or [])))
    for r in runs:
        sections.append(section(f"run-{r['id']}", f"Run {r['id']}", bullets=r["verdicts"],
                                paragraphs=[r["title"]] + _caveats_line(r)))
    if compare is not None:
        sections.append(section("differs", "Appendix: what differs between the runs", tables=_differs_tables(compare),
                                appendix=True))
    ctx = {"title": title or "Release index", "n_runs": len(runs), "runs": runs, "sections": sections,
           "across": _across(runs, compare), "figure": INDEX_FIGURE if png else None,
           "png_b64": base64.b64encode(png).decode("ascii") if png else "",
           "notes_lead": lead, "notes_rest": rest, "notes_lead_html": _md_html(lead), "notes_rest_html": _md_html(rest)}
    env = _env()
    env.filters["mdcell"] = lambda s: str(s).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")
    written = []
    if png:
        write_atomic(out / INDEX_FIGURE, png)
    for tname, fname in (("index.md.j2", "index.md"), ("index.html.j2", "index.html")):
        write_atomic(out / fname, env.get_template(tname).render(**ctx))
        written.append(out / fname)
    return written + ([out / INDEX_FIGURE] if png else [])


def render_release_index(release_dir: Path, out: Path | None = None, *, title: str | None = None) -> list[Path]:
    """The index of a release folder (or a staging folder with the same layout): reads release.json's runs,
    data/analysis/<id>/analysis.json, and compares the runs from data/raw/ when there are exactly two; writes
    next to data/report/ (default out: <release>/data) so that the report links are report/<id>/report.html."""
    import json

    from evidence.analysis.compare import compare_runs

    release_dir = Path(release_dir)
    out = Path(out) if out is not None else release_dir / "data"
    meta = json.loads((release_dir / "release.json").read_text(encoding="utf-8"))
    ids = [r["id"] for r in meta["runs"]]
    runs = []
    for rid in ids:
        analysis = json.loads((release_dir / "data" / "analysis" / rid / "analysis.json").read_text(encoding="utf-8"))
        href = Path(os.path.relpath(release_dir / "data" / "report" / rid / "report.html", out)).as_posix()
        runs.append(index_entry(rid, analysis, href))
    cmp = (json.loads(json.dumps(compare_runs(release_dir / "data" / "raw" / ids[0], release_dir / "data" / "raw" / ids[1])))
           if len(ids) == 2 else None)
    return render_index(runs, cmp, out, title=title or meta.get("tag"))
