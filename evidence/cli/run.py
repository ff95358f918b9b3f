"""`evidence run`: execute a spec against a real engine into runs/<run-id>/."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from evidence.canon import dumps
from evidence.cli.execute import EXECUTOR_HELP, run_elsewhere


def register(app: typer.Typer) -> None:
    @app.command()
    def run(
        spec: Path = typer.Argument(..., help="The experiment spec (YAML)."),
        runs_dir: Path = typer.Option(Path("runs"), "--runs-dir", help="Where run directories are created."),
        run_id: str = typer.Option(None, "--run-id", help="Name of the run directory (default: <spec name>-<UTC time>). "
                                   "An existing run of the same spec under this name is continued."),
        resume: Path = typer.Option(None, "--resume", help="Continue this run directory (same spec required)."),
        new: bool = typer.Option(False, "--new", help="Start a new run even if an unfinished run of this spec exists."),
        allow_drift: bool = typer.Option(False, "--allow-drift", help="Run even when the environment does not match the "
                                         "spec's pins (GPU, engine version, model revision, code commit, clean tree); "
                                         "the mismatches are recorded in provenance.json."),
        code_commit: str = typer.Option(None, "--code-commit", envvar="EVIDENCE_CODE_COMMIT",
                                        help="The commit this checkout is at, when it has no .git (e.g. a copied tree)."),
        no_profile: bool = typer.Option(False, "--no-profile", help="Skip the diagnostic profiling run even if the spec enables it."),
        no_progress: bool = typer.Option(False, "--no-progress", help="No progress bars (for logs and CI)."),
        interleave: str = typer.Option(None, "--interleave", help="A shell command run against the same server right "
                                       "after each trial (e.g. `vllm bench serve ...`), to compare another client on "
                                       "the same server and workload. Placeholders: {base_url} {model} {point} "
                                       "{prompts} {trial} {out} {input_len} {output_len} {seed}. Its output goes to "
                                       "interleaved/<trial>/, never into the trial's records."),
        http_stack: str = typer.Option("auto", "--http-stack", help="HTTP client under the streaming load generator: "
                                       "'aiohttp' (one ClientSession; the default, which 'auto' means) or 'h1' (our "
                                       "keep-alive HTTP/1.1 client, http:// only; opt-in for client-bound sweeps: "
                                       "1.2-1.6x less client CPU per token, bench/RESULTS-client.md). Both share one "
                                       "SSE parser and one test suite; the stack used is recorded in each trial's "
                                       "meta.json."),
        until_decided: bool = typer.Option(False, "--until-decided", help="After the planned repeats, add balanced "
                                           "blocks (one repeat of every point, Latin-square order) until every "
                                           "comparison in analysis.comparisons is decided by a group-sequential "
                                           "test (O'Brien-Fleming alpha spending), or --max-repeats is reached. "
                                           "Every look and the stopping rule are recorded in looks.jsonl."),
        max_repeats: int = typer.Option(None, "--max-repeats", min=1, help="With --until-decided: the most repeats "
                                        "of every point, planned ones included (the budget)."),
        executor: str = typer.Option("local", "--executor", help=EXECUTOR_HELP),
        hosts: int = typer.Option(1, "--hosts", min=1, help="Run the same spec on this many hosts (one exclusive job "
                                  "each, through --executor slurm), each its own run directory under one parent; "
                                  "then `evidence compare <parent>` answers whether the ordering survived."),
        partition: str = typer.Option(None, "--partition", help="Slurm partition (with --executor slurm)."),
        gres: str = typer.Option(None, "--gres", help="Slurm generic resources per job, e.g. gpu:h200:1."),
        time_min: int = typer.Option(60, "--time", help="Slurm time limit per job, minutes."),
        as_json: bool = typer.Option(False, "--json", help="Print the outcome as JSON at the end."),
    ) -> None:
        """Run the spec's sweep against a real engine and record every request.

        Starts the engine with the spec's arguments (or uses an external endpoint), checks the
        environment against the spec's pins, warms up, then runs each trial of the plan in order
        with an aiohttp streaming client, recording per-request timestamps, tokens and errors,
        engine telemetry, the engine's resolved settings and full provenance.

        Interrupted (Ctrl-C, SIGTERM)? Sending stops between requests, the cut trial's completed
        requests are kept in aborted/, and the same command continues: complete trials are kept
        and never repeated. Ends with a table per point and the next command.
        Exit codes: 0 complete, 1 complete with failed requests or incomplete, 2 could not run,
        130 interrupted.
        """
        from evidence.run.signals import install_early

        install_early()  # SIGTERM/SIGUSR2 stop cleanly (exit 130) from here to the exit, never by default action
        from evidence.cli.common import err, fail, load_spec_or_exit, out
        from evidence.run.progress import next_command, results_table
        from evidence.run.runner import RunError, run_experiment

        load_spec_or_exit(spec, as_json, check_launch=executor == "local" and hosts == 1)
        if executor != "local" or hosts > 1:
            # Elsewhere: one job per host runs this same command on its node (evidence.execute).
            if resume or new or interleave or until_decided:
                fail("--resume, --new, --interleave and --until-decided run on one host; with --executor or "
                     "--hosts, rerun the same command (same --run-id) to resume what is not complete.")
            args = (["--allow-drift"] if allow_drift else []) + (["--no-profile"] if no_profile else []) + \
                (["--code-commit", code_commit] if code_commit else []) + ["--http-stack", http_stack]
            raise typer.Exit(run_elsewhere("replicate", [spec], hosts=hosts, executor=executor, partition=partition,
                                           gres=gres, time_min=time_min, runs_dir=runs_dir, run_id=run_id,
                                           run_args=args, as_json=as_json))
        if http_stack not in ("auto", "h1", "aiohttp"):
            fail(f"--http-stack must be auto, h1 or aiohttp, not {http_stack!r}.")
        if max_repeats is not None and not until_decided:
            fail("--max-repeats is the budget of --until-decided; give both, or neither.")
        look = None
        if until_decided:
            from evidence.analysis.sequential import look
        if resume and (run_id or new):
            fail("--resume names the run to continue; it cannot be combined with --run-id or --new.")
        if new and run_id is None:
            from evidence.spec.model import load_spec
            import datetime as dt

            run_id = f"{load_spec(spec).name}-{dt.datetime.now(dt.timezone.utc).strftime('%Y%m%dT%H%M%SZ')}"
        repo_root = Path.cwd()
        try:
            outcome = run_experiment(spec, runs_dir=runs_dir, repo_root=repo_root, run_id=run_id, resume=resume,
                                     allow_drift=allow_drift, code_commit=code_commit, progress=not no_progress,
                                     profile=not no_profile, console=err, interleave=interleave, http_stack=http_stack,
                                     until_decided=look, max_repeats=max_repeats)
        except RunError as e:
            fail(str(e), e.code)
        res = {
            "run_dir": str(outcome.run_dir),
            "status": outcome.status,
            "resumed": outcome.resumed,
            "trials_done": outcome.trials_done,
            "trials_with_failed_requests": outcome.trials_failed,
            "message": outcome.message,
            "exit_code": outcome.exit_code,
            "points": outcome.points,
            "next": next_command(outcome.status, outcome.run_dir, spec),
        }
        if as_json:
            sys.stdout.write(dumps(res))
        else:
            colour = "green" if outcome.exit_code == 0 else "yellow"
            if outcome.points:
                out.print(results_table(outcome.points))
            out.print(f"[{colour}]{outcome.status}[/]: {outcome.run_dir} ({len(outcome.trials_done)} trials recorded)")
            if outcome.trials_failed:
                out.print(f"[yellow]trials with failed requests:[/] {', '.join(outcome.trials_failed)}")
            if outcome.message:
                out.print(outcome.message)
            out.print(res["next"], highlight=False)
        raise typer.Exit(outcome.exit_code)
