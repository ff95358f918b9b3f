"""`evidence import` and `evidence export`: results of `vllm bench serve` in and out."""

from __future__ import annotations

from pathlib import Path

import typer

from evidence.canon import dumps
from evidence.rundir import RUN_JSON


def register(app: typer.Typer) -> None:
    imp = typer.Typer(help="Bring results of other tools in as run directories.", no_args_is_help=True)

    @imp.command("vllm-bench")
    def import_vllm_bench(
        files: list[Path] = typer.Argument(..., help="Result files of `vllm bench serve --save-result` (one trial each; "
                                           "with --save-detailed they carry every request)."),
        out: Path = typer.Option(..., "--out", help="The run directory to create (never overwritten)."),
        name: str = typer.Option(None, "--name", help="Spec name of the imported experiment (default: from --out)."),
        as_json: bool = typer.Option(False, "--json", help="Print what was imported as JSON."),
    ) -> None:
        """Turn `vllm bench serve` result files into a run that analyze, report, compare and freeze accept.

        Points are the files' max_concurrency; repeats are their order in time. Per-request
        lists (--save-detailed) become request records; what vLLM does not record (intended
        send time, slot wait, HTTP status) is named absent in each trial's meta.json; a file
        without per-request lists keeps its aggregates and its trial is reported missing.
        The original files are kept byte for byte under imported/.
        """
        from evidence.canon import read_json
        from evidence.cli.common import fail, out as console
        from evidence.interop.vllm_bench import InteropError, import_vllm_bench as do_import

        try:
            run = do_import(files, out, name=name)
        except InteropError as e:
            fail(str(e))
        info = read_json(run / RUN_JSON)
        if as_json:
            console.print(dumps({"run": str(run), **info}), markup=False)
            return
        n = len(info["imported"]["files"])
        console.print(f"imported {n} file(s) into {run} (status {info['status']})", markup=False)
        for s in info["imported"]["without_requests"]:
            console.print(f"  no per-request records: {s}", markup=False)
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
            console.print(dumps({"files": [str(p) for p in files]}), markup=False)
        else:
            console.print(f"wrote {len(files)} file(s) to {out}", markup=False)
