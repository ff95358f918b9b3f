"""The `evidence` command line. Each stage's commands live beside their stage
(the modules beside it register themselves); this file holds the app, the shared
error handling and the spec commands (validate, plan).

Exit codes: 0 success, 1 the thing checked failed (a verify check, an incomplete
run), 2 bad input or could not proceed (reported in one paragraph, no traceback).
"""

from __future__ import annotations

import sys
from pathlib import Path

import typer
from rich.table import Table

from evidence import __version__
from evidence.canon import dumps
from evidence.spec.plan import design_claim, make_plan
from evidence.cli import analysis as analysis_cmds, engine as engine_cmds, execute as execute_cmds
from evidence.cli import interop as interop_cmds, release as release_cmds, run as run_cmds, spec as spec_cmds
from evidence.cli import trace as trace_cmds
from evidence.cli.common import UserError, err, fail, load_spec_or_exit, out  # noqa: F401 (importable from here)
from evidence.cli.console import JsonGuard, wants_json

app = typer.Typer(
    name="evidence",
    help=(
        "Publishable, auditable performance evidence for LLM serving engines.\n\n"
        "Pipeline: validate a YAML spec -> plan the trials -> run them against a real engine "
        "-> analyze -> report -> freeze a tagged, checksummed release -> verify it."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # click's own help layout: paragraphs re-wrapped to the terminal, flags shown as --x / --no-x
    # (rich's panels kept the docstrings' line breaks, wrapped raggedly at 80 columns and printed <bool>)
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)

def _version(value: bool) -> None:
    if value:
        out.print(f"evidence {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version and exit."),
) -> None:
    pass


@app.command()
def validate(
    spec: Path = typer.Argument(..., help="The experiment spec (YAML)."),
    as_json: bool = typer.Option(False, "--json", help="Print a machine-readable result."),
) -> None:
    """Check a spec and summarize the experiment it describes.

    Every problem is reported at once, with file, line, column and the dotted field
    path; unknown keys get the closest known key as a suggestion; duplicate keys are
    errors. Exit 0 when valid, 2 otherwise.
    """
    import json
    import os

    s = load_spec_or_exit(spec, as_json, check_launch=True)
    plan = make_plan(s)
    key_env = s.engine.api_key_env_name()
    summary = {
        "ok": True,
        "name": s.name,
        "title": s.title,
        "engine": f"{s.engine.kind} {s.engine.version or '(any version)'}",
        "model": s.model.id + (f"@{s.model.revision[:12]}" if s.model.revision else ""),
        "hardware": f"{s.hardware.count} x {s.hardware.accelerator}" if s.hardware.accelerator else "no accelerator expected",
        "points": list(s.sweep.points),
        "prompts_per_point": {str(p): s.sweep.prompts_at(p) for p in s.sweep.points},
        "repeats": s.sweep.repeats,
        "order": s.sweep.order,
        "order_note": plan.note,
        "trials": s.trial_count,
        "prompts_total": s.total_prompts,
        "warmup_requests": s.sweep.warmup.requests,
        "sessions": s.sweep.sessions,
        "request_timeout_s": s.workload.request_timeout_s,
        "extra_body": s.workload.extra_body,
        # The variable's name and whether it is set; its value is never printed.
        "api_key_env": key_env,
        "api_key_set": bool(os.environ.get(key_env)),
        "article_commit": s.code.article_commit,
        "profile": ({"tool": s.profile.tool, "points": list(s.profile.points)} if s.profile.enabled else None),
        "comparisons": [f"C{c.a} vs C{c.b}" for c in s.analysis.comparisons],
        "design": design_claim(s),  # what its verdicts can claim before it runs: unit, n, df, scope
        # the repeats and server starts the spec did not give, and the defaults they took
        "design_defaults": _design_defaults(spec),
    }
    if as_json:
        sys.stdout.write(dumps(summary))
        return
    out.print(f"[bold green]valid[/] {spec}: [bold]{s.name}[/] - {s.title}")
    t = Table(show_header=False, box=None, pad_edge=False)
    for k in ("engine", "model", "hardware"):
        t.add_row(k, str(summary[k]))
    t.add_row("points", ", ".join(f"C{p} ({s.sweep.prompts_at(p)} prompts)" for p in s.sweep.points))
    t.add_row("repeats", f"{s.sweep.repeats}, order {s.sweep.order}: {plan.note}")
    t.add_row("trials", f"{s.trial_count} ({s.total_prompts} prompts in total, plus {s.sweep.warmup.requests} warm-up)")
    t.add_row("workload", f"{s.workload.dataset} {s.workload.input_len} in / {s.workload.output_len} out, rate {s.workload.request_rate}, seed {s.workload.seed}")
    if s.workload.extra_body:
        t.add_row("extra body", json.dumps(s.workload.extra_body, sort_keys=True))
    if s.sweep.sessions > 1:
        t.add_row("sessions", f"{s.sweep.sessions} engine (re)starts, the repeats split between them")
    filled = _design_defaults(spec)
    if filled:
        given = ", ".join(f"sweep.{k} {v}" for k, v in sorted(filled.items()))
        t.add_row("defaults", f"{given}: not in the spec, so the design that can speak for the configuration "
                              "(one repeat per server start; an endpoint keeps its one server); write them to change it")
    t.add_row("api key", f"${key_env} " + ("is set (sent as Authorization: Bearer)" if summary["api_key_set"] else "is not set (no key sent)"))
    if s.code.article_commit:
        t.add_row("article commit", f"{s.code.article_commit} (provenance, not a pin)")
    if summary["profile"]:
        t.add_row("profile", f"{s.profile.tool} at {', '.join(f'C{p}' for p in s.profile.points)} (separate diagnostic run)")
    if summary["comparisons"]:
        t.add_row("comparisons", ", ".join(summary["comparisons"]))
    t.add_row("can claim", summary["design"]["text"])
    out.print(t)


def _design_defaults(path: Path) -> dict[str, int]:
    """What evidence.spec.design.design_fill filled in for this (already valid) spec file."""
    from evidence.spec.design import design_fill
    from evidence.spec.yamlsrc import read_yaml

    return design_fill(read_yaml(path).data)


@app.command()
def plan(
    spec: Path = typer.Argument(..., help="The experiment spec (YAML)."),
    as_json: bool = typer.Option(False, "--json", help="Print the plan as JSON."),
    from_run: Path | None = typer.Option(None, "--from", help="A finished run of the same points: plan the repeats "
                                         "(and sessions) its observed noise needs."),
    effect: str = typer.Option("5%", "--effect", help="With --from: the relative difference to resolve, e.g. 5% "
                               "(the interval's half-width, and the true effect to find with 80% power)."),
) -> None:
    """Show the trials in execution order (deterministic for a given spec).

    'balanced' rotates the points in each repeat (a cyclic Latin square) so every point
    takes every position; 'fixed' always runs ascending; 'shuffled' draws seeded
    permutations. With --from RUN: for each declared comparison, from the sd of the run's
    paired log ratios ln(a/b) of output throughput, the repeats a +-effect 95% interval needs
    and the repeats for 80% power at a true effect (paired t; Bonferroni alpha over the
    comparisons); with several sessions in the run, the between-session variance decides
    whether the session is the unit.
    """
    s = load_spec_or_exit(spec, as_json)
    p = make_plan(s)
    if from_run is not None:
        import json

        from evidence.analysis.stats import plan_noise, run_costs, run_log_ratios
        from evidence.canon import read_json
        from evidence.rundir import SUMMARY, RunDir, is_run_dir

        text = effect.strip()
        try:
            eff = float(text[:-1]) / 100 if text.endswith("%") else float(text)
        except ValueError:
            fail(f"--effect {effect!r} is not a number: give a relative difference such as 5% or 0.05")
        if not (0 < eff < 10):
            fail(f"--effect {effect!r}: the relative difference must be above 0% and below 1000%")
        if not is_run_dir(from_run):
            fail(f"--from {from_run}: not a run directory (no run.json); give a folder `evidence run` wrote")
        rd = RunDir(Path(from_run))
        try:
            trials = read_json(rd.plan_json)["trials"]
            values = {}
            for tid in rd.completed_trials():
                v = read_json(rd.trial_dir(tid) / SUMMARY).get("output_throughput")
                if isinstance(v, (int, float)):
                    values[tid] = float(v)
        except (OSError, ValueError, KeyError, TypeError) as e:
            fail(f"--from {from_run}: cannot read its plan and trial summaries ({e})")
        events = []
        if rd.events.is_file():  # the measured cost of a server start and of a repeat, for the starts x repeats design
            for line in rd.events.read_text(encoding="utf-8").splitlines():
                try:
                    events.append(json.loads(line))
                except ValueError:
                    continue
        costs = run_costs(events)
        comps = [(c.a, c.b) for c in s.analysis.comparisons]
        declared = bool(comps)
        if not comps:
            pts = list(s.sweep.points)
            comps = list(zip(pts[:-1], pts[1:]))
        alpha = 0.05 / max(1, len(comps))
        rows = []
        # with arms, each arm's own starts: a comparison of points is never pooled over the arms
        arm_names: list[str | None] = [x.name for x in getattr(s, "arms", [])] or [None]
        for arm in arm_names:
            ts = trials if arm is None else [t for t in trials if t.get("arm") == arm]
            for a, b in comps:
                d, sess = run_log_ratios(ts, values, a, b)
                row: dict = {"a": a, "b": b, "metric": "output_throughput", **({"arm": arm} if arm else {})}
                try:
                    row.update(plan_noise(d, sess, effect=eff, alpha=alpha, costs=costs))
                except ValueError as e:
                    row.update(n_pairs=len(d), note=str(e))
                rows.append(row)
        res = {"spec": s.name, "run": rd.id, "effect": eff, "alpha": alpha, "power": 0.8,
               "comparisons_declared": declared, "planned_repeats": s.sweep.repeats,
               "planned_sessions": int(getattr(s.sweep, "sessions", 1) or 1), "comparisons": rows}
        if as_json:
            sys.stdout.write(dumps(res))
            return
        t = Table(title=f"{s.name}: repeats needed for +-{eff:.1%} from the noise of run {rd.id}")
        for col in ("comparison", "pairs", "sd ln(a/b)", "unit", f"+-{eff:.1%} interval", f"80% power at {eff:.1%}"):
            t.add_column(col, justify="left" if col in ("comparison", "unit") else "right")
        for r in rows:
            unit = r.get("unit", "-")
            if unit == "session":
                hw = f"{r['sessions_halfwidth']} sessions x {r['repeats_per_session']}"
                pw = f"{r['sessions_power']} sessions x {r['repeats_per_session']}"
            elif "repeats_halfwidth" in r:
                hw, pw = f"{r['repeats_halfwidth']} repeats", f"{r['repeats_power']} repeats"
            else:
                hw = pw = "-"
            sd = r.get("sd_session", r.get("sd_log"))
            t.add_row(f"C{r['a']} vs C{r['b']}" + (f" in arm {r['arm']}" if r.get("arm") else ""),
                      str(r.get("n_pairs", 0)), f"{sd:.4f}" if sd is not None else "-",
                      unit, hw, pw)
        out.print(t)
        out.print(f"alpha {alpha:.4g} per comparison (0.05 over {len(comps)} comparison(s), Bonferroni); the spec plans "
                  f"{res['planned_repeats']} repeat(s) in {res['planned_sessions']} session(s)"
                  + ("" if declared else "; the spec declares no comparisons, so adjacent points are shown"))
        for r in rows:
            name = f"C{r['a']} vs C{r['b']}" + (f" in arm {r['arm']}" if r.get("arm") else "")
            if r.get("note"):
                out.print(f"{name}: {r['note']}")
            upper = ("the starts' sd" if "components" not in r else "the between-start sd") + "'s 95% interval"
            for key, what in (("design", "at the estimated sd"), ("design_upper", f"at the upper end of {upper}")):
                dz = r.get(key)
                if dz:
                    tm = f", about {dz['time_s'] / 3600:.1f} h" if dz.get("time_s") else ""
                    out.print(f"{name}: 80% power at {eff:.1%} {what}: {dz['starts']} server starts x "
                              f"{dz['repeats_per_start']} repeat(s){tm}")
        if costs.get("start_s") and costs.get("repeat_s"):
            out.print(f"measured costs: a server start (with warm-up) {costs['start_s']:.0f} s, a repeat of every "
                      f"point {costs['repeat_s']:.0f} s")
        return
    if as_json:
        sys.stdout.write(dumps(p.as_dict()))
        return
    t = Table(title=f"{s.name}: {len(p.trials)} trials, order {p.order}")
    cols = ("#", "trial", "repeat", "concurrency", "position", "prompts") + (("session",) if p.sessions > 1 else ())
    for col in cols:
        t.add_column(col, justify="right" if col != "trial" else "left")
    for tr in p.trials:
        t.add_row(str(tr.index + 1), tr.id, str(tr.repeat), str(tr.point), str(tr.position), str(tr.prompts),
                  *((str(tr.session),) if p.sessions > 1 else ()))
    out.print(t)
    out.print(p.note)
    out.print("can claim: " + design_claim(s)["text"])
    counts = p.position_counts()
    out.print("positions taken: " + "; ".join(
        f"C{pt}: " + ", ".join(f"#{pos} x{n}" for pos, n in sorted(c.items())) for pt, c in sorted(counts.items())))


# Each stage's commands, imported by name (a missing module is an ImportError, never skipped) and
# registered in pipeline order, which is the order `evidence --help` shows them in.
COMMAND_MODULES = (spec_cmds, run_cmds, execute_cmds, analysis_cmds, trace_cmds, release_cmds, interop_cmds,
                   engine_cmds)
for _mod in COMMAND_MODULES:
    _mod.register(app)


def main() -> None:
    from evidence.run import signals

    signals.OWN_PROCESS = True  # `evidence run` may keep its stop-signal handlers to the process's last instruction
    # --json: stdout is one JSON document whatever happens; an error that wrote none gets one
    guard = JsonGuard() if wants_json(sys.argv[1:]) else None
    code: int | None = 0
    message = None
    try:
        app(standalone_mode=True)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) or e.code is None else 1
    except UserError as e:
        err.print(f"evidence: error: {e}", markup=False)
        code, message = e.code, str(e)
    except KeyboardInterrupt:
        err.print("evidence: interrupted", markup=False)
        code, message = 130, "interrupted"
    except Exception as e:  # a bug: the traceback follows on stderr, and --json still gets its document
        code, message = 1, f"internal error: {type(e).__name__}: {e}"
        raise
    finally:
        if guard is not None:
            guard.finish(code, message)
    sys.exit(code)

