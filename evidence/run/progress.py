"""What the user sees while a run goes on (a progress bar, or one line per trial) and when it ends
(a short table per point and the next command)."""

from __future__ import annotations

import shlex
import statistics
import time
from pathlib import Path
from typing import Any, Callable

from evidence.canon import read_json
from evidence.rundir import SUMMARY, RunDir
from evidence.spec.plan import Trial


class SweepProgress:
    """A rich progress bar: overall trials, and the current trial with live output tok/s."""

    def __init__(self, total: int, done: int, enabled: bool, say: Callable[..., Any] | None = None):
        from rich.console import Console

        # The bar is drawn on stderr, and only on a terminal: stdout is the result's (one JSON document
        # under --json), and a log gets one line per trial instead.
        console = Console(stderr=True)
        self.enabled = enabled and console.is_terminal
        self.total, self.done = total, done
        self.say = say  # without a bar: one line per trial through say
        if not self.enabled:
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress as RichProgress, TextColumn, TimeElapsedColumn

        self.p = RichProgress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                              TextColumn("{task.fields[rate]}"), TimeElapsedColumn(), transient=False,
                              console=console)
        self.p.start()
        self.overall = self.p.add_task("trials", total=total, completed=done, rate="")
        self.cur = None

    def start_trial(self, t: Trial) -> None:
        self.t0 = time.perf_counter()
        self.tokens = 0
        if self.enabled:
            self.cur = self.p.add_task(f"{t.id} (C{t.point})", total=t.prompts, rate="")

    def request_done(self, rec) -> None:
        if not self.enabled or self.cur is None:
            return
        self.tokens += rec.completion_tokens or 0
        dt = time.perf_counter() - self.t0
        self.p.update(self.cur, advance=1, rate=f"{self.tokens / dt:,.0f} tok/s" if dt > 0 else "")

    def end_trial(self, t: Trial, summary: dict) -> None:
        self.done += 1
        if not self.enabled:
            if self.say is not None:
                self.say(trial_line(t, summary, self.done, self.total), highlight=False)
            return
        thr = summary.get("output_throughput")
        self.p.update(self.cur, rate=(f"{thr:,.1f} tok/s" if thr is not None else "no throughput")
                      + (f", {summary['failed']} failed" if summary.get("failed") else ""))
        self.p.advance(self.overall)

    def close(self) -> None:
        if self.enabled:
            self.p.stop()


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:,.1f}"


def trial_line(t: Trial, summary: dict, k: int, total: int) -> str:
    """One line per finished trial (for logs and CI, --no-progress)."""
    thr = summary.get("output_throughput")
    ttft = (summary.get("ttft_ms") or {}).get("p50")
    tpot = (summary.get("tpot_ms") or {}).get("p50")
    return (f"[{k}/{total}] {t.id} (C{t.point}): "
            + (f"{thr:,.1f} tok/s" if thr is not None else "no throughput")
            + f", TTFT p50 {_ms(ttft)} ms, TPOT p50 {_ms(tpot)} ms, {summary.get('completed', 0)} ok, "
            f"{summary.get('failed', 0)} failed, {summary.get('duration_s') or 0:.1f} s")


def _median(xs: list[float]) -> float | None:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def point_rows(rd: RunDir, trials: list[Trial]) -> list[dict[str, Any]]:
    """Per point, the median over its complete trials of each trial's number (failures summed)."""
    done = set(rd.completed_trials())
    by_point: dict[int, list[dict]] = {}
    for t in trials:
        if t.id in done:
            by_point.setdefault(t.point, []).append(read_json(rd.trial_dir(t.id) / SUMMARY))
    rows = []
    for point in sorted(by_point):
        ss = by_point[point]

        def pct(metric: str, q: str) -> float | None:
            return _median([(s.get(metric) or {}).get(q) for s in ss])

        rows.append({"point": point, "trials": len(ss),
                     "output_tok_s": _median([s.get("output_throughput") for s in ss]),
                     "ttft_p50_ms": pct("ttft_ms", "p50"), "ttft_p99_ms": pct("ttft_ms", "p99"),
                     "tpot_p50_ms": pct("tpot_ms", "p50"), "tpot_p99_ms": pct("tpot_ms", "p99"),
                     "failed": sum(s.get("failed", 0) for s in ss), "requests": sum(s.get("requests", 0) for s in ss)})
    return rows


def results_table(rows: list[dict[str, Any]]):
    """The rows as a rich table (medians over each point's trials; '-' where a percentile was not computed)."""
    from rich.table import Table

    tab = Table(title="per point: medians over its n trials (output tok/s; TTFT and TPOT in ms)", title_justify="left")
    for col in ("point", "n", "tok/s", "TTFT p50", "TTFT p99", "TPOT p50", "TPOT p99", "failed"):
        tab.add_column(col, justify="right", no_wrap=True)
    for r in rows:
        tab.add_row(f"C{r['point']}", str(r["trials"]),
                    "-" if r["output_tok_s"] is None else f"{r['output_tok_s']:,.1f}",
                    _ms(r["ttft_p50_ms"]), _ms(r["ttft_p99_ms"]), _ms(r["tpot_p50_ms"]), _ms(r["tpot_p99_ms"]),
                    f"{r['failed']}/{r['requests']}")
    return tab


def next_command(status: str, run_dir: Path, spec_path: Path) -> str:
    """What to type next: analyze and report a complete run, or continue an unfinished one."""
    rd = shlex.quote(str(run_dir))
    if status == "complete":
        return f"next: evidence report {rd}   (or evidence analyze {rd} for the tables alone)"
    return f"next: evidence run {shlex.quote(str(spec_path))} --resume {rd}   (completed trials are kept, never rerun)"
