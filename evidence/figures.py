"""Figures from the analysis and the raw records, as byte-identical PNG and SVG.

Determinism (see notes/release.md): no pyplot state; each figure is a
`matplotlib.figure.Figure` drawn by the Agg canvas inside an rc context reset
to matplotlib's defaults plus the fixed settings in `RC` (DejaVu Sans, dpi,
sizes, `svg.hashsalt`); PNG metadata drops "Software", SVG drops "Date" and
"Creator"; every iteration is over sorted or plan-ordered data. Bytes depend on
the render stack only, so `render_environment()` is recorded beside the files
(figures/render.json) and in the report.

Figures:
  throughput_vs_concurrency  mean output throughput per point (line), every repeat a marker (one colour
                             per server start and one shape per arm when several), CV noted
  user_vs_total_throughput   output tok/s per user (per request) against total output tok/s, one marker
                             per point (evidence.analysis.user_throughput, from the raw records)
  latency_vs_concurrency     per latency metric: p50 and p99 (mean over repeats) against concurrency, each
                             with its 95% interval (evidence.analysis.latency), every trial a dot beside it
  latency_vs_throughput      per latency metric: (mean throughput, mean latency)
                             and the highest percentile, the means joined in
                             increasing concurrency (arrows); dominated points marked
  latency_ecdf               TTFT and TPOT distributions per point (ECDF, pooled
                             over repeats); log axes ticked at 1-2-5 with units
  telemetry                  running and waiting requests over time, per trial,
                             with the plateau window shaded
  throughput_over_time       per trial: output tokens/s and requests in flight
                             (client) and running (server) over time, the
                             steady-state window (MSER-5) shaded (evidence.analysis.over_time_figure)
  host_over_time             per trial (runs with host telemetry only): CPU in
                             cores of each engine process role and the client,
                             GPU busy and output tokens/s, the bottleneck reading
"""

from __future__ import annotations

import hashlib
import io
import textwrap
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np
from matplotlib import ticker
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from evidence.analysis.analyze import compute_analysis
from evidence.analysis.bottleneck_figure import host_over_time
from evidence.analysis.user_throughput import user_vs_total_figure
from evidence.analysis.latency import absent_short, shown_keys
from evidence.analysis.load import RunData, load_run
from evidence.analysis.model import Analysis, as_analysis
from evidence.analysis.over_time_figure import throughput_over_time
from evidence.analysis.panels import absent_panel
from evidence.analysis.numbers import label
from evidence.canon import dumps, write_atomic
from evidence.metrics import HEADLINE_METRICS, LATENCY_METRICS, METRICS, pct_key
from evidence.rundir import FIGURES

RC: dict[str, Any] = {
    "font.family": "DejaVu Sans",
    "font.size": 9.0,
    "axes.titlesize": 10.0,
    "axes.labelsize": 9.0,
    "legend.fontsize": 8.0,
    "xtick.labelsize": 8.0,
    "ytick.labelsize": 8.0,
    "figure.dpi": 100.0,
    "savefig.dpi": 120.0,
    "axes.grid": True,
    "grid.alpha": 0.35,
    "grid.linewidth": 0.6,
    "lines.linewidth": 1.5,
    "svg.hashsalt": "evidence-figures",
    "svg.fonttype": "path",
    "path.simplify": True,
    "axes.spines.top": False,
    "axes.spines.right": False,
}
DPI = 120
COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")
REPEAT_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "h")
ECDF_MAX_POINTS = 800
FIGURE_NAMES = ("throughput_vs_concurrency", "user_vs_total_throughput", "latency_vs_concurrency",
                "latency_vs_throughput", "latency_ecdf", "telemetry", "throughput_over_time")
LOG_SPAN = 20.0  # a latency axis turns logarithmic when its values span more than this factor
PCT_STYLE = (("#1f77b4", "o", "-"), ("#d62728", "s", "--"))  # the lower and the higher percentile shown


def render_environment() -> dict[str, str]:
    """The render stack that fixes the figure bytes."""
    from matplotlib import ft2font

    try:
        import PIL

        pil = PIL.__version__
    except ImportError:  # pragma: no cover - matplotlib depends on Pillow
        pil = "absent"
    return {"matplotlib": matplotlib.__version__, "numpy": np.__version__,
            "freetype": str(ft2font.__freetype_version__), "pillow": pil, "backend": "agg"}


def _color(i: int) -> str:
    return COLORS[i % len(COLORS)]


def _save(fig: Figure) -> tuple[bytes, bytes]:
    FigureCanvasAgg(fig)
    png, svg = io.BytesIO(), io.BytesIO()
    fig.savefig(png, format="png", dpi=DPI, metadata={"Software": None})
    fig.savefig(svg, format="svg", metadata={"Date": None, "Creator": None})
    return png.getvalue(), svg.getvalue()


def _title(fig: Figure, title: str, res: Analysis | dict, size: float = 10.0) -> None:
    """Figure title; missing/failed trials are named on a second line (inside the layout, never clipped)."""
    flags = _flag_lines(res)
    if flags:
        title += "\nCAUTION - " + "; ".join(flags)
    fig.suptitle(title, fontsize=size)


def _log2_axis(ax, points: list[int]) -> None:
    if len(points) > 1 and min(points) > 0:
        ax.set_xscale("log", base=2)
    ax.set_xticks(points)
    ax.set_xticklabels([str(p) for p in points])
    ax.minorticks_off()


def _readable_log(axis, lo_ms: float, hi_ms: float) -> None:
    """A log axis of milliseconds ticked at 1-2-5 steps (1, 2, 5 per decade; decades only beyond 3) with plain
    numbers and their unit ("20 ms", "1 s"), never 10^x."""
    axis.set_major_locator(ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0) if hi_ms / lo_ms <= 1e3 else (1.0,)))
    axis.set_minor_locator(ticker.LogLocator(base=10, subs=tuple(range(1, 10))))
    axis.set_minor_formatter(ticker.NullFormatter())
    eng = ticker.EngFormatter(unit="s", sep=" ")  # values in ms shown as 500 µs, 20 ms, 1 s
    axis.set_major_formatter(ticker.FuncFormatter(lambda v, _pos: eng(v / 1000.0)))


# ------------------------------------------------------------------ figures ----


def _fig_throughput(A: Analysis, data: RunData | None = None) -> Figure:
    pts = A.spec.points
    R = A.spec.repeats
    fig = Figure(figsize=(7.0, 4.4), layout="constrained")
    ax = fig.add_subplot()
    means = [p.output_throughput.mean for p in A.points]
    xs = [p for p, m in zip(pts, means) if m is not None]
    ys = [m for m in means if m is not None]
    ax.plot(xs, ys, color="black", lw=1.4, marker="_", ms=18, mew=2, label="mean over repeats", zorder=3)
    step = 0.05 if len(pts) > 1 else 0.0
    # several server starts (or arms): one colour per start, one marker shape per arm, so a start's shift shows
    arm_of = {(t.repeat, t.point): t.arm for t in data.trials} if data is not None else {}
    arms = [a.name for a in getattr(data.spec, "arms", [])] if data is not None else []
    starts = sorted({t.session or 1 for t in A.trials})
    groups: dict[tuple, tuple[list, list, list, list]] = {}
    for r in range(1, R + 1):
        for P in pts:
            t = A.trial_at(r, P)
            if not t or t.output_throughput is None:
                continue
            key = (t.session or 1, arm_of.get((r, P))) if len(starts) > 1 or arms else (r, None)
            rx, ry, fx, fy = groups.setdefault(key, ([], [], [], []))
            x = P * 2 ** (step * (r - (R + 1) / 2))
            (fx if t.failed else rx).append(x)
            (fy if t.failed else ry).append(t.output_throughput)
    for (g, arm), (rx, ry, fx, fy) in sorted(groups.items(), key=lambda kv: (kv[0][0], str(kv[0][1]))):
        m = REPEAT_MARKERS[(arms.index(arm) if arm in arms else 0 if arms or len(starts) > 1 else g - 1)
                           % len(REPEAT_MARKERS)]
        name = (f"server start {g}" + (f", arm {arm}" if arm else "")) if len(starts) > 1 or arms else f"repeat {g}"
        ax.scatter(rx, ry, marker=m, s=30, color=_color(g - 1), label=name, zorder=4)
        if fx:
            ax.scatter(fx, fy, marker=m, s=30, facecolors="none", edgecolors="#d62728", linewidths=1.4,
                       label=f"{name} (had failed requests)", zorder=4)
    for p in A.points:
        cv = p.output_throughput.cv
        m = p.output_throughput.mean
        if m is None:
            continue
        txt = f"CV {cv * 100:.2f}%" if cv is not None else "CV n/a"
        txt += f"\nn={p.repeats_measured}/{p.repeats_planned}"
        ax.annotate(txt, (p.point, p.output_throughput.max), textcoords="offset points", xytext=(0, 8),
                    ha="center", fontsize=7, color="#333333")
    _log2_axis(ax, pts)
    ax.set_xlabel("max concurrency")
    ax.set_ylabel(f"output throughput ({METRICS['output_throughput'].unit})")
    if ys:
        tv = [t.output_throughput for t in A.trials if t.output_throughput is not None]
        lo, hi = min(min(ys), min(tv)), max(max(ys), max(tv))
        pad = (hi - lo) * 0.25 or hi * 0.05 or 1.0
        ax.set_ylim(max(0.0, lo - pad), hi + pad)
    o = A.ordering
    title = f"{A.spec.name}: output throughput vs concurrency ({R} repeat{'s' if R != 1 else ''}, {A.spec.order} order)"
    if len(starts) > 1 or arms:
        title += (f"\n{len(starts)} server start{'s' if len(starts) != 1 else ''} (one colour each)"
                  + (f", arms {' and '.join(arms)} (one marker each)" if arms else ""))
    _title(fig, title, A)
    if o.statement:
        ax.text(0.01, 0.98, f"means: {o.statement}; held in {o.held_in_repeats} of {o.repeats_planned} repeats"
                f"\nsupported by paired verdicts: {o.supported_statement}"
                f"\nCV = {A.spec.cv} std / mean over repeats", transform=ax.transAxes,
                va="top", ha="left", fontsize=7.5)
    ax.legend(loc="lower right", frameon=False)
    return fig


def _fig_latency_conc(a: Analysis) -> Figure:
    """Per latency metric: the lower and higher shown percentile (p50, p99) against concurrency, each point the mean
    over repeats with its 95% interval (analysis points[].latency[m].intervals: a t interval on ln, back-transformed,
    so it is asymmetric and drawn about the geometric mean, which the mean over repeats need not sit at the middle
    of); every repeat's value as a dot."""
    metrics = a.spec.latency_metrics
    keys = shown_keys(a.spec.percentiles)
    pts = sorted(a.spec.points)
    n = max(1, len(metrics))
    cols = 2 if n > 1 else 1
    rows = (n + cols - 1) // cols
    fig = Figure(figsize=(5.0 * cols, 3.3 * rows + 0.5), layout="constrained")
    by_point = {p.point: p for p in a.points}
    units = set()
    for k, m in enumerate(metrics):
        ax = fig.add_subplot(rows, cols, k + 1)
        span: list[float] = []
        with_bar: dict = {}
        step = 0.04 if len(pts) > 1 else 0.0
        for j, key in enumerate(keys):
            color, marker, ls = PCT_STYLE[j % len(PCT_STYLE)]
            off = 2 ** (step * (j - (len(keys) - 1) / 2))  # the two percentiles side by side, bars apart
            xs, ys, bars, open_pts = [], [], [], []
            for P in pts:
                pl = by_point[P].latency.get(m) if P in by_point else None
                iv = ((pl.intervals if pl else None) or {}).get(key)
                if not iv or iv.value is None:
                    continue
                units.add((iv.unit, iv.n))
                xs.append(P * off)
                ys.append(iv.value)
                span.append(iv.value)
                if iv.ci_low is None or iv.ci_high is None:  # no bar at all: a zero-width one would claim certainty
                    open_pts.append((P * off, iv.value, absent_short(iv)))
                else:
                    # yerr is [distance below, distance above] a centre: the geometric mean lies inside the
                    # interval, the arithmetic mean (the marker) need not
                    g = iv.geometric_mean or iv.value  # an older analysis: a linear interval about value
                    bars.append((P * off, iv.value, g, g - iv.ci_low, iv.ci_high - g))
                    span += [iv.ci_low, iv.ci_high]
            if not xs:
                continue
            ax.plot(xs, ys, color=color, ls=ls, lw=1.2, zorder=3)
            if bars:
                eb = ax.errorbar([b[0] for b in bars], [b[2] for b in bars], yerr=[[b[3] for b in bars],
                                 [b[4] for b in bars]], color=color, fmt="none", capsize=3, elinewidth=1.0, zorder=3)
                mk, = ax.plot([b[0] for b in bars], [b[1] for b in bars], color=color, marker=marker, ms=5, ls="none",
                              zorder=3, label=f"{key}: mean, 95% interval")
                with_bar[mk] = eb  # one legend entry: the marker over its bar
            if open_pts:
                why = sorted({o[2] for o in open_pts})  # one reason named; several differ per point: the table's
                ax.scatter([o[0] for o in open_pts], [o[1] for o in open_pts], marker=marker, s=40, facecolors="white",
                           edgecolors=color, zorder=4, gid=f"no-interval-{m}-{key}",
                           label=f"{key}: no interval ({why[0] if len(why) == 1 else 'see table'})")
            # every trial's own value, beside its bar (outside the pair of bars), so the bar does not hide it
            side = off * 2 ** ((-1 if len(keys) > 1 and j == 0 else 1) * 1.5 * step)
            # a trial's latency: metric -> statistic -> ms
            tv = [(t.point * side, (t.latency.get(m) or {})[key]) for t in a.trials
                  if ((t.latency or {}).get(m) or {}).get(key) is not None]
            ty = [v for _, v in tv]
            ax.scatter([x for x, _ in tv], ty, s=9, color=color, alpha=0.5, lw=0, zorder=2,
                       label=f"{key}: each trial" if tv else None)
            span += ty
        _log2_axis(ax, pts)
        ax.set_xlabel("max concurrency")
        unit = METRICS[m].unit if m in METRICS else "ms"
        if not span:
            ax.text(0.5, 0.5, f"no {m.upper()} measured", transform=ax.transAxes, ha="center", va="center")
        elif min(span) > 0 and max(span) / min(span) > LOG_SPAN:
            ax.set_yscale("log")
            _readable_log(ax.yaxis, min(span), max(span))
            unit = "log scale"
        else:
            lo_y, hi_y = min(0.0, min(span)), max(span)
            ax.set_ylim(lo_y - 0.03 * (hi_y - lo_y) * (lo_y < 0), hi_y + 0.05 * (hi_y - lo_y or 1.0))
            if lo_y < 0:  # a t interval reaching below 0 is drawn as computed; the line marks where latency ends
                ax.axhline(0.0, color="#333333", lw=0.7, zorder=1)
        ax.set_ylabel(f"{m.upper()} ({unit})")
        ax.set_title(f"{m.upper()}: " + " and ".join(keys) + " per point (small dots: each trial)", fontsize=8.5)
        if span:
            hs, ls_ = ax.get_legend_handles_labels()
            ax.legend([(h, with_bar[h]) if h in with_bar else h for h in hs], ls_, loc="upper left", frameon=False,
                      fontsize=7)
    kinds = sorted({u for u, _ in units})
    unit_txt = "engine sessions where they differ, else repeats" if "session" in kinds else "repeats"
    if len(units) == 1:
        u, k = next(iter(units))
        unit_txt = f"{k} {'engine sessions' if u == 'session' else 'repeats'} (n - 1 df)"
    bars_txt = (f"bars: 95% t interval of the mean ln(latency) over {unit_txt}, back-transformed (about the "
                "geometric mean; markers: the mean over repeats)")
    # wrapped to the figure's width (about 60 characters per 5-inch column at this size), never clipped
    _title(fig, f"{a.spec.name}: latency vs concurrency\n" + textwrap.fill(bars_txt, 60 * cols), a)
    return fig


def _flag_lines(res: Analysis | dict) -> list[str]:
    c = as_analysis(res).completeness
    out = []
    if c.missing:
        out.append("missing trials: " + ", ".join(c.missing))
    if c.with_failures:
        out.append("trials with failed requests: " + ", ".join(c.with_failures))
    if c.zero_completed:
        out.append("trials with no completed request: " + ", ".join(c.zero_completed))
    return out


def _fig_latency_tput(a: Analysis) -> Figure:
    metrics = a.spec.latency_metrics
    pcts = a.spec.percentiles
    top = pct_key(max(pcts)) if pcts else None
    n = len(metrics)
    cols = 2 if n > 1 else 1
    rows = (n + cols - 1) // cols
    fig = Figure(figsize=(5.0 * cols, 3.6 * rows + 0.3), layout="constrained")
    dom = {e.point: e for e in a.dominance.points}
    verdicts = {(x.dominant, x.dominated): x.verdict or "means" for x in a.dominance.pairs}
    for k, m in enumerate(metrics):
        ax = fig.add_subplot(rows, cols, k + 1)
        for i, p in enumerate(a.points):
            x = p.output_throughput.mean
            mor = p.latency[m].mean_over_repeats  # statistic -> ms
            if x is None or mor is None:
                continue
            c = _color(i)
            both = [(t.output_throughput, (t.latency.get(m) or {})["mean"]) for t in a.trials if t.point == p.point
                    and t.output_throughput is not None and (t.latency.get(m) or {}).get("mean") is not None]
            ax.scatter([b[0] for b in both], [b[1] for b in both], s=10, color=c, alpha=0.45, zorder=2)
            ax.scatter([x], [mor["mean"]], s=46, color=c, zorder=4, label=f"{p.label} mean")
            if top and mor.get(top) is not None:
                ax.plot([x, x], [mor["mean"], mor[top]], color=c, lw=0.8, zorder=3)
                ax.scatter([x], [mor[top]], s=46, facecolors="none", edgecolors=c, zorder=4, label=f"{p.label} {top}")
            d = dom.get(p.point)
            if d and d.dominated:
                # on the means; the paired verdict says whether the intervals carry it
                ax.scatter([x], [mor["mean"]], s=160, marker="x", color="#d62728", linewidths=1.6, zorder=5)
                ax.annotate(f"{p.label} dominated by " + ", ".join(
                    f"{label(q)} ({verdicts.get((q, p.point), 'means')})" for q in d.dominated_by),
                            (x, mor["mean"]), textcoords="offset points", xytext=(6, -12), fontsize=7, color="#a0201a")
            else:
                ax.annotate(p.label, (x, mor["mean"]), textcoords="offset points", xytext=(6, 4), fontsize=7.5)
        path = concurrency_path(a, m)
        if len(path) > 1:
            # the operating curve in increasing concurrency: where latency climbs while throughput stops is the knee
            ax.plot([q[1] for q in path], [q[2] for q in path], color="#555555", lw=0.9, zorder=1,
                    gid=f"concurrency-path-{m}", label="concurrency increasing (arrows)")
            for (_, x0, y0), (_, x1, y1) in zip(path, path[1:]):
                ax.annotate("", xy=(x1, y1), xytext=(x0, y0), zorder=1,
                            arrowprops={"arrowstyle": "-|>", "color": "#555555", "lw": 0.9, "shrinkA": 7, "shrinkB": 7,
                                        "mutation_scale": 11})
        ax.set_xlabel(f"mean output throughput ({METRICS['output_throughput'].unit})")
        ax.set_ylabel(f"{m.upper()} ({METRICS[m].unit})")
        ax.set_title(f"{m.upper()}: mean (filled), {top or 'no percentile'} (hollow), repeats (small)", fontsize=8.5)
    _title(fig, f"{a.spec.name}: latency vs throughput, point means joined in increasing concurrency (arrows)"
                "\nx = dominated on the means over repeats; in brackets the paired verdict", a)
    return fig


def concurrency_path(res: Analysis | dict, metric: str) -> list[tuple[int, float, float]]:
    """(point, mean output throughput, mean latency) of every point with both measured, in increasing concurrency."""
    out = []
    for p in sorted(as_analysis(res).points, key=lambda p: p.point):
        pl = p.latency.get(metric)
        mor = (pl.mean_over_repeats if pl else None) or {}
        x = p.output_throughput.mean
        if x is not None and mor.get("mean") is not None:
            out.append((p.point, x, mor["mean"]))
    return out


def _ecdf_xy(samples_ms: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    s = np.sort(samples_ms)
    n = s.size
    y = np.arange(1, n + 1, dtype=np.float64) / n
    if n > ECDF_MAX_POINTS:
        idx = np.unique(np.linspace(0, n - 1, ECDF_MAX_POINTS).round().astype(np.int64))
        s, y = s[idx], y[idx]
    return s, y


def _fig_ecdf(a: Analysis, data: RunData) -> Figure:
    metrics = HEADLINE_METRICS
    fig = Figure(figsize=(10.0, 3.9), layout="constrained")
    by_point: dict[int, list] = {}
    for t in data.trials:
        if t.present:
            by_point.setdefault(t.point, []).extend(t.records)
    for k, m in enumerate(metrics):
        ax = fig.add_subplot(1, len(metrics), k + 1)
        lo, hi = None, None
        for i, P in enumerate(a.spec.points):
            recs = [r for r in by_point.get(P, []) if r.phase == "measure"]
            s = np.asarray(LATENCY_METRICS[m].samples(recs), dtype=np.float64) * 1000.0
            if s.size == 0:
                continue
            x, y = _ecdf_xy(s)
            ax.step(x, y, where="post", color=_color(i), label=f"{label(P)} (n={s.size})")
            lo = float(s.min()) if lo is None else min(lo, float(s.min()))
            hi = float(s.max()) if hi is None else max(hi, float(s.max()))
        unit = METRICS[m].unit
        if lo is not None and lo > 0 and hi / lo > LOG_SPAN:
            ax.set_xscale("log")
            _readable_log(ax.xaxis, lo, hi)
            unit = "log scale"
        if lo is None:
            ax.text(0.5, 0.5, f"no {m.upper()} samples", transform=ax.transAxes, ha="center")
        ax.set_xlabel(f"{m.upper()} ({unit})")
        ax.set_ylabel("fraction of requests ≤ x")
        ax.set_ylim(0, 1.02)
        ax.set_title(f"{m.upper()} distribution per point (ECDF, repeats pooled)", fontsize=9)
        if lo is not None:
            ax.legend(loc="lower right", frameon=False)
    _title(fig, f"{a.spec.name}: latency distributions", a)
    return fig


def _fig_telemetry(a: Analysis, data: RunData) -> Figure:
    pts = a.spec.points
    R = a.spec.repeats
    fig = Figure(figsize=(min(3.4 * len(pts), 14.0), 2.3 * R + 0.6), layout="constrained")
    tele = {(t.repeat, t.point): t for t in a.telemetry}
    tds = {(t.repeat, t.point): t for t in data.trials}
    axes = fig.subplots(R, len(pts), squeeze=False)
    for r in range(1, R + 1):
        for j, P in enumerate(pts):
            ax = axes[r - 1][j]
            td, tr = tds.get((r, P)), tele.get((r, P))
            ttl = f"{td.id} (position {td.position})" if td else f"r{r}-c{P} (not planned)"
            ax.set_title(ttl, fontsize=8)
            if not td or not tr or tr.status != "present":
                why = (tr.absent or "") if tr else "not planned"
                absent_panel(ax, why)
                continue
            rows = td.telemetry or []
            t = [x["t_s"] for x in rows]
            for key, name, style in (("num_requests_running", "running", "-"), ("num_requests_waiting", "waiting", "--")):
                vals = [(a, x[key]) for a, x in zip(t, rows) if isinstance(x.get(key), (int, float))]
                if vals:
                    ax.step([v[0] for v in vals], [v[1] for v in vals], where="post", ls=style, lw=1.1,
                            color="#1f77b4" if name == "running" else "#ff7f0e", label=name)
            w0, w1 = tr.plateau_s or (None, None)
            ax.axvspan(w0, w1, color="#999999", alpha=0.15, lw=0, label="plateau")
            ax.set_ylim(bottom=0)
            if r == R:
                ax.set_xlabel("seconds since trial t0", fontsize=7.5)
            if j == 0:
                ax.set_ylabel("requests", fontsize=7.5)
    handles = [Line2D([], [], color="#1f77b4", lw=1.1, label="running"),
               Line2D([], [], color="#ff7f0e", lw=1.1, ls="--", label="waiting"),
               Patch(color="#999999", alpha=0.15, label="plateau window (sustained values)")]
    fig.legend(handles=handles, loc="outside lower center", ncols=3, frameon=False, fontsize=7.5)
    _title(fig, f"{a.spec.name}: server-reported running / waiting requests per trial", a, size=9.5)
    return fig


# --------------------------------------------------------------- top level ----


def _builders(data: RunData, res: Analysis | dict) -> dict[str, Any]:
    a = as_analysis(res)
    return {
        "throughput_vs_concurrency": lambda: _fig_throughput(a, data),
        "user_vs_total_throughput": lambda: user_vs_total_figure(a, data, title=_title),
        "latency_vs_concurrency": lambda: _fig_latency_conc(a),
        "latency_vs_throughput": lambda: _fig_latency_tput(a),
        "latency_ecdf": lambda: _fig_ecdf(a, data),
        "telemetry": lambda: _fig_telemetry(a, data),
        "throughput_over_time": lambda: throughput_over_time(a, title=_title),
        "host_over_time": lambda: host_over_time(a, data, title=_title),
    }


def figure_names(res: Analysis | dict) -> tuple[str, ...]:
    """The figures of this run: FIGURE_NAMES, and host_over_time where the run has host telemetry (so a run
    recorded before it existed renders the same files)."""
    return FIGURE_NAMES + (("host_over_time",) if as_analysis(res).bottleneck is not None else ())


def build_figure(name: str, data: RunData, res: Analysis | dict) -> Figure:
    """One figure (one of FIGURE_NAMES) as a matplotlib Figure, drawn under the fixed rc settings; nothing saved."""
    with matplotlib.rc_context():
        matplotlib.rcdefaults()
        matplotlib.rcParams.update(RC)
        return _builders(data, res)[name]()


def figure_bytes(data: RunData, res: Analysis | dict) -> dict[str, bytes]:
    """File name -> bytes (PNG and SVG of every figure), in a fixed order; nothing written."""
    out: dict[str, bytes] = {}
    a = as_analysis(res)
    with matplotlib.rc_context():
        matplotlib.rcdefaults()
        matplotlib.rcParams.update(RC)
        builders = _builders(data, a)
        for name in figure_names(a):
            png, svg = _save(builders[name]())
            out[f"{name}.png"] = png
            out[f"{name}.svg"] = svg
    return out


def render_figures(run_dir: Path, out_dir: Path | None = None, *, data: RunData | None = None,
                   analysis: Analysis | dict | None = None, rendered: dict[str, bytes] | None = None) -> list[Path]:
    """Render every figure of a run to out_dir (default run_dir/figures); return the files written.

    The analysis is computed in memory from the raw files (never read from analysis/); `data` and
    `analysis` (and `rendered`, the output of figure_bytes) may be passed to avoid doing it twice.
    """
    run_dir = Path(run_dir)
    data = data if data is not None else load_run(run_dir)
    res = analysis if analysis is not None else compute_analysis(data)
    out = Path(out_dir) if out_dir is not None else run_dir / FIGURES
    out.mkdir(parents=True, exist_ok=True)
    files = rendered if rendered is not None else figure_bytes(data, res)
    written = []
    for name, b in files.items():
        write_atomic(out / name, b)
        written.append(out / name)
    manifest = {"environment": render_environment(),
                "files": {name: hashlib.sha256(b).hexdigest() for name, b in sorted(files.items())},
                "note": "bytes are reproducible with the same render environment (matplotlib, FreeType, Pillow)"}
    write_atomic(out / "render.json", dumps(manifest))
    written.append(out / "render.json")
    return written
