"""What the user sees while a run goes on: a progress bar, or one line per trial."""

from __future__ import annotations

import time

from evidence.spec.plan import Trial


class Progress:
    """A rich progress bar: overall trials, and the current trial with live output tok/s."""

    def __init__(self, total: int, done: int, enabled: bool):
        self.enabled = enabled
        if not enabled:
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress as RichProgress, TextColumn, TimeElapsedColumn

        self.p = RichProgress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                              TextColumn("{task.fields[rate]}"), TimeElapsedColumn(), transient=False)
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
        if not self.enabled:
            return
        thr = summary.get("output_throughput")
        self.p.update(self.cur, rate=(f"{thr:,.1f} tok/s" if thr is not None else "no throughput")
                      + (f", {summary['failed']} failed" if summary.get("failed") else ""))
        self.p.advance(self.overall)

    def close(self) -> None:
        if self.enabled:
            self.p.stop()
