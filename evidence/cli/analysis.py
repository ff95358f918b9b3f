"""CLI: `evidence analyze RUN`, `evidence report RUN`, `evidence compare A B`."""

from __future__ import annotations

import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import typer
from rich.table import Table

from evidence.analysis.model import Analysis
from evidence.canon import dumps
from evidence.cli.console import make_console

out = make_console()
err = make_console(stderr=True)


@contextmanager
def _status(message: str, enabled: bool = True) -> Iterator[None]:
    """A spinner on stderr (so --json output on stdout stays clean); silent when stderr is not a terminal."""
    if enabled and err.is_terminal:
        with err.status(message):
            yield
    else:
        yield


def _fail(e: Exception) -> None:
    """Same output and exit code as cli.fail() under main(), but also under `python -m` and CliRunner."""
    err.print(f"evidence: error: {e}", markup=False)
    raise typer.Exit(2)


def _points_table(res: Analysis) -> Table:
    from evidence.analysis.numbers import pct_text

    t = Table(title=f"{res.spec.name}: output throughput per point ({res.spec.cv} CV)")
    for col in ("point", "mean tok/s", "steady-state tok/s", "CV", "min", "max", "repeats", "failed req.", "flags"):
        t.add_column(col, justify="left" if col in ("point", "flags") else "right")
    within = {w.point: w for w in res.within.points}
    for p in res.points:
        tp = p.output_throughput
        w = within.get(p.point)
        st = w.steady_throughput_mean if w else None
        t.add_row(p.label, f"{tp.mean:,.2f}" if tp.mean is not None else "n/a",
                  f"{st:,.2f}" if st is not None else "n/a", pct_text(tp.cv),
                  f"{tp.min:,.2f}" if tp.min is not None else "n/a",
                  f"{tp.max:,.2f}" if tp.max is not None else "n/a",
                  f"{p.repeats_measured}/{p.repeats_planned}", str(p.failed if p.failed is not None else "n/a"),
                  "; ".join(p.flags)[:120])
    return t


def _comparisons_table(res: Analysis) -> Table:
    """Every declared comparison: the win count beside the interval, p and MDE it must not outrun."""
    from evidence.analysis.findings import p_text
    from evidence.analysis.numbers import interval_text, pct_text

    t = Table(title="paired comparisons (output throughput; paired t on ln(a/b), Holm over the declared ones)")
    for col in ("comparison", "verdict", "wins a-b", "n", "effect", "95% CI", "p", "p (Holm)", "MDE"):
        t.add_column(col, justify="left" if col in ("comparison", "verdict") else "right")
    for c in res.comparisons:
        t.add_row(c.name, c.verdict, f"{c.wins_a}-{c.wins_b}", f"{c.n_units} {c.unit}s",
                  pct_text(c.effect, 1, signed=True),
                  interval_text(c.ci95) if c.ci95 else "n/a",
                  p_text(c.p_value), p_text(c.p_adjusted), pct_text(c.mde, 1))
    return t


def _print_findings(res: Analysis) -> None:
    out.print(_points_table(res))
    if res.comparisons:
        out.print(_comparisons_table(res))
    for c in res.comparisons:
        out.print(f"[bold]{c.name}[/]: {c.statement}", markup=True)
    o = res.ordering
    if o.statement:
        out.print(f"ordering: {o.statement} (held in {o.held_in_repeats}/{o.repeats_planned} repeats; "
                  f"supported: {o.supported_statement})")
    for dom in res.dominance.pairs:
        out.print(f"dominance: {dom.verdict_statement} (held in {dom.held_in_repeats}/{dom.repeats_planned} repeats)")
    comp = res.completeness
    if comp.missing or comp.with_failures or comp.zero_completed:
        out.print(f"[yellow]caution[/]: missing {comp.missing or 'none'}; failed requests in "
                  f"{comp.with_failures or 'none'}", markup=True)


def _enclosing_release(p: Path) -> Path | None:
    """The release folder (bagit.txt + release.json) that p is or sits in, if any."""
    p = Path(p).resolve()
    for d in (p, *p.parents):
        if (d / "bagit.txt").is_file() and (d / "release.json").is_file():
            return d
    return None


def register(app: typer.Typer) -> None:
    @app.command("analyze")
    def analyze(
        run: Path = typer.Argument(..., help="A run directory (runs/<run-id>/)."),
        as_json: bool = typer.Option(False, "--json", help="Print analysis.json to stdout instead of the summary."),
        out_dir: Path = typer.Option(None, "--out", help="Where to write the tables (default: RUN/analysis)."),
    ) -> None:
        """Compute the analysis tables of a run from its raw records.

        Writes analysis.json and CSVs (per trial, per point, paired comparisons
        with verdicts, latency per point with 95% intervals, latency side by side,
        dominance, ordering, telemetry, goodput) to RUN/analysis/. A pure function
        of the raw files: running it twice gives the same bytes. In Python the same
        tables are typed pandas DataFrames: evidence.analysis.frames(analysis_json).
        Exit 2 when RUN is not a run directory.
        """
        from evidence.analysis.analyze import analyze_run, default_out_dir
        from evidence.analysis.load import NotARunDir

        target = Path(out_dir) if out_dir is not None else default_out_dir(run)
        rel = _enclosing_release(target)
        if rel is not None:
            _fail(ValueError(f"{target} is inside the release {rel}: `evidence analyze` never writes into a release "
                             "(its derived files are published, checksummed and regenerated by `evidence verify`). "
                             "Give --out DIR to write the tables elsewhere."))
        try:
            with _status(f"analyzing {run}"):
                res = analyze_run(run, out_dir)
        except NotARunDir as e:
            _fail(e)
        if as_json:
            sys.stdout.write(dumps(res))
            return
        typed = Analysis.from_dict(res)
        _print_findings(typed)
        out.print(f"wrote {len(typed.files)} files to {target}/: {', '.join(typed.files)}")

    @app.command("report")
    def report(
        run: Path = typer.Argument(..., help="A run directory (runs/<run-id>/)."),
        templates: Path = typer.Option(None, "--templates", help="Folder with report.md.j2 and report.html.j2 "
                                       "(default: the repository's templates/, or $EVIDENCE_TEMPLATES)."),
        out_dir: Path = typer.Option(None, "--out", help="Write analysis/, figures/ and report/ under this folder "
                                     "(default: RUN itself). Never inside a release."),
    ) -> None:
        """Analyze a run, render its figures, and write the report.

        Writes RUN/analysis/ (tables), RUN/figures/ (PNG + SVG, byte-identical across
        runs with the same render stack) and RUN/report/ (report.md and a
        self-contained report.html: figures embedded, CSS inline, no network).
        """
        from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn

        from evidence.analysis.load import NotARunDir
        from evidence.derive import STEPS, derive_run
        from evidence.report.context import TemplateNotFound

        run = Path(run)
        target = Path(out_dir) if out_dir is not None else run
        rel = _enclosing_release(target)
        if rel is not None:
            _fail(ValueError(f"{target} is inside the release {rel}: `evidence report` never writes into a release (its "
                             "derived files are published, checksummed and regenerated by `evidence verify`). Give "
                             "--out DIR to write the analysis, figures and report elsewhere."))
        try:
            with Progress(TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(), TimeElapsedColumn(),
                          console=err, transient=True, disable=not err.is_terminal) as prog:
                task = prog.add_task(STEPS[0], total=len(STEPS))
                seen: list[str] = []

                def step(s: str) -> None:
                    prog.update(task, advance=1 if seen else 0, description=s)
                    seen.append(s)

                d = derive_run(run, target, templates_dir=templates, step=step)
                prog.update(task, completed=len(STEPS))
        except (NotARunDir, TemplateNotFound) as e:
            _fail(e)
        _print_findings(Analysis.from_dict(d.analysis))
        out.print(f"analysis: {len(d.files['analysis'])} files in {target / 'analysis'}/")
        out.print(f"figures:  {len(d.files['figures'])} files in {target / 'figures'}/")
        for p in d.files["report"]:
            out.print(f"report:   {p}")

    @app.command("compare", short_help="Compare two runs (e.g. canonical vs clean-room), or a replication's hosts.")
    def compare(
        a: Path = typer.Argument(..., help="First run directory, or a release folder (its run is under data/raw/)."),
        b: Path = typer.Argument(None, help="Second run directory or release folder (leave out for a replication "
                                 "folder: `evidence run --hosts N` writes one)."),
        as_json: bool = typer.Option(False, "--json", help="Print the comparison as JSON."),
        allow_partial: bool = typer.Option(False, "--allow-partial", help="A replication with lost hosts (a run "
                                           "not complete) still exits 0; they are named either way."),
    ) -> None:
        """Compare two runs of the same experiment (e.g. canonical vs clean-room), or the hosts of a replication.

        Per point: both mean throughputs and the shift; whether the ordering of points
        is the same; each run's paired advantages and verdicts; and what differs
        between them (spec without its name, resolved engine settings, engine and
        package versions, accelerator, pins). Given one replication folder (the same spec
        on N hosts): per host its verdicts, across hosts the paired test with the host as
        the unit ("same direction on k of N hosts"), and the within- and between-host variance.
        """
        from evidence.analysis.load import NotARunDir
        from evidence.analysis.numbers import interval_text, pct_text
        from evidence.analysis.compare import compare_runs, summary_lines

        if b is None:
            from evidence.analysis.hosts import compare_hosts, summary_lines as host_lines
            from evidence.rundir import EXECUTION_JSON, PLAN_JSON

            if not (a / EXECUTION_JSON).is_file():
                _fail(NotARunDir(f"{a} is not a replication folder (no {EXECUTION_JSON}); give two runs to compare, "
                                 "or the parent folder `evidence run --hosts N` wrote."))
            from evidence.analysis.hosts import lost_hosts
            from evidence.canon import read_json

            hosts = sorted(p for p in a.iterdir() if p.is_dir() and (p / PLAN_JSON).is_file())
            lost = lost_hosts(read_json(a / EXECUTION_JSON), a)
            try:
                res = compare_hosts(hosts, lost=lost)
            except NotARunDir as e:
                _fail(NotARunDir(f"{e} Lost: " + "; ".join(f"{h['host']} ({h['state']})" for h in lost))
                      if lost else e)
            if as_json:
                sys.stdout.write(dumps(res))
            else:
                for line in host_lines(res):
                    out.print(line, markup=False)
            if lost and not allow_partial:
                raise typer.Exit(1)  # a lost host is data: the partial answer is printed, and the exit says so
            return
        try:
            with _status(f"comparing {a} and {b}"):
                c = compare_runs(a, b)
        except NotARunDir as e:
            _fail(e)
        if as_json:
            sys.stdout.write(dumps(c))
            return
        t = Table(title="mean output throughput per point (tok/s)")
        for col in ("point", "a", "b", "shift (b-a)/a", "95% CI (Welch, logs)", "verdict", "CV a", "CV b", "repeats a",
                    "repeats b"):
            t.add_column(col, justify="left" if col in ("point", "verdict") else "right")
        for p in c["points"]:
            ci = p["shift_ci95"]
            t.add_row(p["label"], f"{p['a_mean']:,.2f}" if p["a_mean"] is not None else "n/a",
                      f"{p['b_mean']:,.2f}" if p["b_mean"] is not None else "n/a", pct_text(p["shift"], signed=True),
                      interval_text(ci) if ci else "n/a",
                      p["shift_verdict"], pct_text(p["a_cv"]), pct_text(p["b_cv"]), p["a_repeats"], p["b_repeats"])
        out.print(t)
        for line in summary_lines(c):
            out.print(line)
        diffs = [("spec (excluding name)", [f"{d['path']}: {d['a']!r} -> {d['b']!r}" for d in c["spec_diff"]]),
                 ("engine resolved", [f"{d['name']}: {d['a']!r} -> {d['b']!r}" for d in c["engine_resolved_diff"]])]
        for k, ds in sorted(c["provenance_diff"].items()):
            diffs.append((f"provenance {k}", [f"{d['path']}: {d['a']!r} -> {d['b']!r}" for d in ds]))
        for title, lines in diffs:
            if lines:
                out.print(f"[bold]{title}[/] differs: " + "; ".join(lines[:10]) + (" ..." if len(lines) > 10 else ""),
                          markup=True)
            else:
                out.print(f"{title}: same")
        for cv in c["caveats"]:
            out.print(f"[yellow]caveat[/]: {cv}", markup=True)
