"""The figure of the host telemetry (evidence.figures registers and renders it, under its fixed rc settings, for
runs with host telemetry only): per trial on the trial clock, CPU in cores of each engine process role and of the
client, the GPU's busy fraction, output tok/s, and the trial's bottleneck reading in the panel title.

It lives beside the reading it draws (evidence.analysis.bottleneck); matplotlib is imported only by whoever
imports this module (evidence.figures), never by the analysis itself.
"""

from __future__ import annotations

from typing import Callable

from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from evidence.analysis.bottleneck import rate_series
from evidence.analysis.load import RunData
from evidence.analysis.model import Analysis, as_analysis
from evidence.analysis.panels import absent_panel

ROLE_STYLE = {
    "api_server": ("#d62728", "-"),
    "engine_core": ("#9467bd", "-"),
    "worker": ("#8c564b", "-."),
    "client": ("#7f7f7f", ":"),
}


def host_over_time(res: Analysis | dict, data: RunData, *, title: Callable[..., None]) -> Figure:
    """One panel per trial, on the trial clock: CPU in cores of each engine process role and of the client, the
    GPU's busy fraction (left axis), output tok/s (right axis); the title gives the trial's bottleneck reading."""
    a = as_analysis(res)
    pts = a.spec.points
    R = a.spec.repeats
    fig = Figure(figsize=(min(3.6 * len(pts), 15.0), 2.4 * R + 0.9), layout="constrained")
    neck = {(t["repeat"], t["point"]): t for t in (a.bottleneck or {})["trials"]}  # the reading: a dict
    within = {(w.repeat, w.point): w for w in a.within.trials}
    tds = {(t.repeat, t.point): t for t in data.trials}
    roles_drawn: list[str] = []
    axes = fig.subplots(R, len(pts), squeeze=False)
    for r in range(1, R + 1):
        for j, P in enumerate(pts):
            ax = axes[r - 1][j]
            td, b, w = tds.get((r, P)), neck.get((r, P)), within.get((r, P))
            if not td or not b or b["status"] != "present" or not td.telemetry:
                ax.set_title(td.id if td else f"r{r}-c{P} (not planned)", fontsize=8)
                why = (
                    "trial missing"
                    if td is None or not td.present
                    else ((b or {}).get("absent", {}).get("processes") or "no telemetry samples")
                )
                absent_panel(ax, why)
                continue
            rows = td.telemetry
            for role in sorted(
                {k[5:-6] for x in rows for k in x if k.startswith("proc_") and k.endswith("_cpu_s")},
                key=lambda q: (list(ROLE_STYLE).index(q) if q in ROLE_STYLE else 9, q),
            ):
                t, v = rate_series(rows, f"proc_{role}_cpu_s")
                if t:
                    color, ls = ROLE_STYLE.get(role, ("#bcbd22", "--"))
                    ax.plot(t, v, color=color, ls=ls, lw=0.9)
                    if role not in roles_drawn:
                        roles_drawn.append(role)
            g = [(x["t_s"], x["gpu_util_pct"] / 100.0) for x in rows if isinstance(x.get("gpu_util_pct"), (int, float))]
            if g:
                ax.plot([a for a, _ in g], [v for _, v in g], color="#2ca02c", lw=0.9)
            if b.get("window_s"):
                ax.axvspan(b["window_s"][0], b["window_s"][1], color="#999999", alpha=0.12, lw=0)
            ax.set_ylim(bottom=0)
            if w and w.status == "present":
                ax2 = ax.twinx()
                ax2.plot(
                    [x + (w.bin_s or 0.0) / 2 for x in w.series["t"]],
                    w.series["output_tps"],
                    color="#1f77b4",
                    lw=0.7,
                    alpha=0.6,
                )
                ax2.set_ylim(bottom=0)
                ax2.grid(False)
                ax2.tick_params(labelsize=7)
                if j == len(pts) - 1:
                    ax2.set_ylabel("output tok/s", fontsize=7.5)
            ax.set_title(f"{td.id}: {b['reading']}", fontsize=7.5)
            if r == R:
                ax.set_xlabel("seconds since trial t0", fontsize=7.5)
            if j == 0:
                ax.set_ylabel("cores / GPU busy", fontsize=7.5)
    handles = [
        Line2D(
            [],
            [],
            color=ROLE_STYLE.get(q, ("#bcbd22", "--"))[0],
            ls=ROLE_STYLE.get(q, ("", "--"))[1],
            lw=0.9,
            label=f"{q.replace('_', ' ')} CPU (cores)",
        )
        for q in roles_drawn
    ]
    if any(isinstance(x.get("gpu_util_pct"), (int, float)) for t in data.trials for x in t.telemetry or []):
        handles.append(Line2D([], [], color="#2ca02c", lw=0.9, label="GPU busy (fraction)"))
    handles.append(Line2D([], [], color="#1f77b4", lw=0.7, alpha=0.6, label="output tok/s (right)"))
    fig.legend(handles=handles, loc="outside lower center", ncols=min(len(handles), 4), frameon=False, fontsize=7.5)
    title(
        fig,
        f"{a.spec.name}: engine processes' CPU, GPU busy and throughput per trial "
        "(grey: plateau window of the reading)",
        res,
        size=9.5,
    )
    return fig
