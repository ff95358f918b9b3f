"""`evidence import` and `evidence export`: results of `vllm bench serve` in and out."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from evidence.canon import dumps
from evidence.rundir import RUN_JSON


def register(app: typer.Typer) -> None:
    imp = typer.Typer(help="Bring results of other tools in as run directories.", no_args_is_help=True)

    @imp.command("vllm-bench")
    def import_vllm_bench(
        files: list[Path] = typer.Argument(..., help="Result files of `vllm bench serve --save-result` (one trial each; "
                                           "with --save-detailed they carry every request; a file written with "
                                           "--append-result is one trial per line)."),
        out: Path = typer.Option(..., "--out", help="The run directory to create (never overwritten)."),
        name: str = typer.Option(None, "--name", help="Spec name of the imported experiment (default: from --out)."),
        mapping: Path = typer.Option(None, "--map", help="CSV with a header 'file,repeat,session' and one line per "
                                     "file (its name or path as given): which repeat and engine session each "
                                     "file is. Default: r2 / s1 words in the file or folder names, else the "
                                     "files' order in time."),
        as_json: bool = typer.Option(False, "--json", help="Print what was imported as JSON."),
    ) -> None:
        """Turn `vllm bench serve` result files into a run that analyze, report, compare and freeze accept.

        Points are the files' max_concurrency; repeats and sessions come from --map, else
        from the names (r2, s1), else from the order in time; adjacent points are compared.
        Per-request lists (--save-detailed) become request records (queue_times: the slot
        wait); what vLLM does not record is named absent in each trial's meta.json. A file
        without them is an aggregate-only trial: its own throughput, counts and latency
        percentiles feed the throughput verdicts and per-point latency, marked as such.
        The original files are kept byte for byte under imported/.
        """
        from evidence.canon import read_json
        from evidence.cli.common import fail, out as console
        from evidence.interop.vllm_bench import InteropError, import_vllm_bench as do_import

        try:
            run = do_import(files, out, name=name, mapping=mapping)
        except InteropError as e:
            fail(str(e))
        info = read_json(run / RUN_JSON)
        if as_json:
            sys.stdout.write(dumps({"run": str(run), **info}))
            return
        imp = info["imported"]
        console.print(f"imported {len(imp['files'])} result(s) from {len(files)} file(s) into {run}; repeats from "
                      f"{imp['repeats_from']}", markup=False)
        if imp["aggregate_only"]:
            console.print(f"  aggregate-only (no per-request lists; the file's own numbers are used): "
                          f"{', '.join(imp['aggregate_only'])}", markup=False)
        console.print(f"next: evidence report {run}", markup=False)

    app.add_typer(imp, name="import")

    @app.command("export")
    def export(
        run: Path = typer.Argument(..., help="A run directory."),
        fmt: str = typer.Option("vllm-bench", "--format", help="Output format: vllm-bench (vLLM's result JSON)."),
        out: Path = typer.Option(..., "--out", help="Folder for the exported files."),
        as_json: bool = typer.Option(False, "--json", help="Print the written files as JSON."),
    ) -> None:
        """Write each trial of a run in another tool's format (vLLM's result JSON, with its definitions)."""
        from evidence.cli.common import fail, out as console
        from evidence.interop.vllm_bench import InteropError, export_vllm_bench

        if fmt != "vllm-bench":
            fail(f"--format {fmt!r} is not known; the formats are: vllm-bench.")
        try:
            files = export_vllm_bench(run, out)
        except InteropError as e:
            fail(str(e))
        if as_json:
            sys.stdout.write(dumps({"files": [str(p) for p in files]}))
        else:
            console.print(f"wrote {len(files)} file(s) to {out}", markup=False)
