"""Per-user against total output throughput: the curve a vLLM user reads a knee on (issue 25), from the raw records
only (evidence.figures registers and renders the figure under its fixed rc settings).

Per request (measured, completed, with output tokens): its output tokens (usage.completion_tokens) over its own
time, send to last token-bearing chunk (E2EL as evidence.metrics defines it): the tokens/s one user sees. Per point:
the mean of that over every such request of the point's trials (repeats pooled), against the mean over its trials of
the trial's output throughput (evidence.metrics.trial_metrics, the one definition). One marker per point, labelled
with its concurrency, joined in increasing concurrency: where the total stops growing while each user's rate keeps
falling is the knee. The figure states no knee; it draws the numbers.

matplotlib is imported only by whoever imports this module (evidence.figures), never by the analysis itself.
"""

from __future__ import annotations

from typing import Callable

from matplotlib.figure import Figure

from evidence.analysis.load import RunData
from evidence.analysis.model import Analysis, as_analysis
from evidence.analysis.numbers import label
from evidence.metrics import trial_metrics


def user_vs_total(data: RunData) -> list[dict]:
    """Per point, in the spec's order: mean per-request output tok/s ('per_user'), mean trial output throughput
    ('total'), and how many requests and trials each mean is over (None where nothing was measured)."""
    out = []
    for P in data.spec.sweep.points:
        rates: list[float] = []
        totals: list[float] = []
        for t in data.trials:
            if not t.present or t.point != P:
                continue
            recs = [r for r in t.records if r.phase == "measure"]
            tp = trial_metrics(recs).get("output_throughput")
            if isinstance(tp, (int, float)):
                totals.append(float(tp))
            rates += [
                r.completion_tokens / (r.chunk_s[-1] - r.send_s)
                for r in recs
                if r.ok and r.chunk_s and r.completion_tokens and r.chunk_s[-1] > r.send_s
            ]
        out.append(
            {
                "point": P,
                "per_user": sum(rates) / len(rates) if rates else None,
                "total": sum(totals) / len(totals) if totals else None,
                "requests": len(rates),
                "trials": len(totals),
            }
        )
    return out


def user_vs_total_figure(res: Analysis | dict, data: RunData, *, title: Callable[..., None]) -> Figure:
    """One marker per point at (total output tok/s, per-user output tok/s), labelled with its concurrency, joined in
    increasing concurrency; points with nothing measured are named, not drawn."""
    rows = sorted(user_vs_total(data), key=lambda r: r["point"])
    have = [r for r in rows if r["per_user"] is not None and r["total"] is not None]
    fig = Figure(figsize=(7.0, 4.4), layout="constrained")
    ax = fig.add_subplot()
    if len(have) > 1:
        ax.plot(
            [r["total"] for r in have],
            [r["per_user"] for r in have],
            color="#555555",
            lw=0.9,
            zorder=2,
            gid="user-vs-total-path",
            label="concurrency increasing",
        )
    ax.scatter(
        [r["total"] for r in have],
        [r["per_user"] for r in have],
        s=46,
        color="#1f77b4",
        zorder=3,
        gid="user-vs-total-points",
        label="one point (mean over its requests and repeats)",
    )
    for r in have:
        ax.annotate(
            label(r["point"]), (r["total"], r["per_user"]), textcoords="offset points", xytext=(6, 5), fontsize=8
        )
    gone = [label(r["point"]) for r in rows if r not in have]
    if gone:
        ax.text(
            0.99,
            0.02,
            "nothing measured at " + ", ".join(gone),
            transform=ax.transAxes,
            ha="right",
            va="bottom",
            fontsize=7.5,
            color="#a0201a",
        )
    if not have:
        ax.text(0.5, 0.5, "no completed request at any point", transform=ax.transAxes, ha="center", va="center")
    else:
        ax.set_xlim(0, max(r["total"] for r in have) * 1.12)
        ax.set_ylim(0, max(r["per_user"] for r in have) * 1.15)
        ax.legend(loc="lower left", frameon=False)  # low concurrency sits top left, high bottom right
    ax.set_xlabel("total output throughput (tok/s; mean over repeats)")
    ax.set_ylabel("output tok/s per user (per request)")
    title(
        fig,
        f"{as_analysis(res).spec.name}: output tokens/s per user against total output tokens/s\nper user: each "
        "request's output tokens / its send-to-last-token time (mean over requests)",
        res,
    )
    return fig
