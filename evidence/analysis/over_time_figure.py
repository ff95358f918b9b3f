"""The figure of each trial's throughput over time (evidence.figures registers and renders it, under its fixed rc
settings): output tok/s, requests in flight and running, the steady-state window (evidence.analysis.timeseries)
shaded. It lives beside the analysis it draws; matplotlib is imported only by whoever imports this module
(evidence.figures), never by the analysis itself.
"""

from __future__ import annotations

from typing import Callable

from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from evidence.analysis.model import Analysis, Steady
from evidence.analysis.panels import absent_panel


def throughput_over_time(a: Analysis, *, title: Callable[..., None]) -> Figure:
    """One panel per trial: output tok/s (left axis), in-flight and server-running requests (right axis), the
    steady-state window shaded; the panel title says the window's throughput, or that there is none."""
    pts = a.spec.points
    R = a.spec.repeats
    fig = Figure(figsize=(min(3.6 * len(pts), 15.0), 2.4 * R + 0.8), layout="constrained")
    rows = {(w.repeat, w.point): w for w in a.within.trials}
    axes = fig.subplots(R, len(pts), squeeze=False)
    for r in range(1, R + 1):
        for j, P in enumerate(pts):
            ax = axes[r - 1][j]
            w = rows.get((r, P))
            if not w or w.status != "present":
                ax.set_title(w.trial if w else f"r{r}-c{P} (not planned)", fontsize=8)
                absent_panel(ax, (w.absent or "") if w else "not planned")
                continue
            se, st = w.series, w.steady or Steady()  # series: t, output_tps, in_flight, running per bin
            t = [x + (w.bin_s or 0.0) / 2 for x in se["t"]]  # each bin drawn at its middle
            ax.plot(t, se["output_tps"], color="#1f77b4", lw=0.9)
            ax.axvspan(st.start_s, st.end_s, color="#2ca02c", alpha=0.13, lw=0)
            if st.throughput is not None:
                ax.hlines(st.throughput, st.start_s, st.end_s, colors="#2ca02c", lw=1.2, linestyles="--")
            ax.set_ylim(bottom=0)
            ax2 = ax.twinx()
            ax2.plot(t, se["in_flight"], color="#ff7f0e", lw=0.9)
            if se["running"]:
                rt = [(a, v) for a, v in zip(t, se["running"]) if v is not None]
                ax2.plot([a for a, _ in rt], [v for _, v in rt], color="#7f7f7f", lw=0.8, ls=":")
            ax2.set_ylim(bottom=0)
            ax2.grid(False)
            ax2.tick_params(labelsize=7)
            if st.steady:
                seen = st.detectable_drift  # an older analysis has none
                state = f"steady {st.throughput:,.0f} tok/s" + (
                    f", ±{100 * seen:.0f}% drift would show" if seen is not None else ""
                )
            elif st.needed_s is not None:
                state = "no steady state (trend)"
            else:
                state = "too short to tell"
            wave = "; waves" if w.waves else ""
            ax.set_title(f"{w.trial}: {state}{wave}", fontsize=7.5)
            if r == R:
                ax.set_xlabel("seconds since trial t0", fontsize=7.5)
            if j == 0:
                ax.set_ylabel("output tok/s", fontsize=7.5)
            if j == len(pts) - 1:
                ax2.set_ylabel("requests", fontsize=7.5)
    handles = [
        Line2D([], [], color="#1f77b4", lw=0.9, label="output tok/s (left)"),
        Line2D([], [], color="#ff7f0e", lw=0.9, label="in flight, client (right)"),
        Line2D([], [], color="#7f7f7f", lw=0.8, ls=":", label="running, server /metrics (right)"),
        Patch(color="#2ca02c", alpha=0.13, label="steady-state window (MSER-5); dashed: its mean"),
    ]
    fig.legend(handles=handles, loc="outside lower center", ncols=4, frameon=False, fontsize=7.5)
    title(
        fig,
        f"{a.spec.name}: throughput and requests in flight over time, per trial ({a.within.bin_s:g} s bins)",
        a,
        size=9.5,
    )
    return fig
