"""`evidence sweep`, and the executor options `evidence run` shares: runs on Slurm through submitit."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Sequence

import typer

from evidence.canon import dumps

EXECUTOR_HELP = ("Where to run: 'local' (here, the default), 'debug' (in this process, through submitit's "
                 "debug executor) or 'slurm' (one exclusive job per host or per spec, submitted with submitit).")


def run_elsewhere(mode: str, specs: Sequence[Path], *, hosts: int, executor: str, partition: str | None,
                  gres: str | None, time_min: int, runs_dir: Path, run_id: str | None, run_args: Sequence[str],
                  as_json: bool) -> int:
    """Submit, wait, gather; print one line per slot (or the JSON) and return the exit code:
    0 every slot's run complete, 1 any not complete (each says why)."""
    import datetime as dt

    from evidence.cli.common import err, fail, out
    from evidence.execute.backends import ExecuteError, Settings
    from evidence.execute.jobs import execute, host_slots, spec_slots, summary_rows

    settings = Settings(kind=executor, partition=partition, gres=gres, time_min=time_min)
    try:
        slots = host_slots(specs[0], hosts) if mode == "replicate" else spec_slots(specs)
        if run_id is None:
            stem = slots[0].name if mode == "sweep" and len(slots) == 1 else (
                specs[0].stem if mode == "replicate" else "sweep")
            run_id = f"{stem}-{mode}-{dt.datetime.now(dt.timezone.utc).strftime('%Y%m%dT%H%M%SZ')}"
        parent = runs_dir / run_id
        doc = execute(mode, slots, parent, settings, repo_root=Path.cwd(), run_args=run_args,
                      say=lambda s: err.print(s, markup=False))
    except ExecuteError as e:
        fail(str(e))
    rows = summary_rows(doc, parent)
    if as_json:
        sys.stdout.write(dumps({"parent": str(parent), "mode": mode, "slots": rows}))  # exact bytes: no console
    else:
        for r in rows:
            line = f"{r['slot']:<16} {r['state']:<12} node {r['node'] or '?':<10} run {r['run_status'] or 'none'}"
            out.print(line, markup=False)
            if r["error"] and r["run_status"] != "complete":
                out.print("    " + r["error"].splitlines()[-1][:300], markup=False)
        nxt = f"evidence compare {parent}" if mode == "replicate" else f"evidence report {parent}/<spec>"
        out.print(f"next: {nxt}   (rerun the same command to resubmit what is not complete)", markup=False)
    return 0 if all(r["run_status"] == "complete" for r in rows) else 1


def register(app: typer.Typer) -> None:
    @app.command()
    def sweep(
        specs: list[Path] = typer.Argument(..., help="Specs to run, one job each (one job array on Slurm)."),
        executor: str = typer.Option("local", "--executor", help=EXECUTOR_HELP),
        partition: str = typer.Option(None, "--partition", help="Slurm partition."),
        gres: str = typer.Option(None, "--gres", help="Slurm generic resources per job, e.g. gpu:h200:1."),
        time_min: int = typer.Option(60, "--time", help="Time limit per job, minutes."),
        runs_dir: Path = typer.Option(Path("runs"), "--runs-dir", help="Where the sweep's parent folder is created."),
        run_id: str = typer.Option(None, "--run-id", help="Name of the parent folder; the same name resumes it."),
        allow_drift: bool = typer.Option(False, "--allow-drift", help="Passed to every run (see evidence run)."),
        as_json: bool = typer.Option(False, "--json", help="Print the outcome per spec as JSON."),
    ) -> None:
        """Run several specs at once: one job per spec, each an ordinary run directory under one parent.

        Running the same command again (same --run-id) submits only the specs whose run is not complete: a lost, cancelled, preempted or timed-out job resumes where it was cut, and a complete one is never run again. Every outcome (job id, node, scheduler state, the runner's exit and message) is kept in <parent>/execution.json.
        """
        code = run_elsewhere("sweep", specs, hosts=1, executor=executor, partition=partition, gres=gres,
                             time_min=time_min, runs_dir=runs_dir, run_id=run_id,
                             run_args=["--allow-drift"] if allow_drift else [], as_json=as_json)
        raise typer.Exit(code)
