"""`evidence spec --schema | --markdown`: the spec's reference, generated from its models.

The main CLI calls `register(app)`; the work is in evidence/spec/docs.py.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from evidence.canon import dumps


def register(app: typer.Typer) -> None:
    @app.command("spec")
    def spec(
        schema: bool = typer.Option(False, "--schema", help="Print the JSON Schema of a spec (for editors and linters)."),
        as_json: bool = typer.Option(False, "--json", help="Same as --schema: machine-readable JSON."),
        markdown: bool = typer.Option(False, "--markdown", help="Print the field reference (docs/spec.md) as Markdown."),
        write: Optional[Path] = typer.Option(None, "--write", help="Write the Markdown reference to this file instead."),
    ) -> None:
        """The spec's reference: every field with its type, default, unit and meaning.

        Generated from the pydantic models, so it cannot drift from what `validate`
        accepts. docs/spec.md is this command's --markdown output.
        """
        from evidence.cli.common import fail
        from evidence.spec.docs import spec_reference_md, spec_schema

        if sum([schema or as_json, markdown, write is not None]) != 1:
            fail("give one of --schema (or --json), --markdown, --write FILE", code=2)
        if schema or as_json:
            sys.stdout.write(dumps(spec_schema()))
        elif markdown:
            sys.stdout.write(spec_reference_md())
        else:
            assert write is not None
            try:
                write.write_text(spec_reference_md(), encoding="utf-8")
            except OSError as exc:
                fail(f"cannot write {write}: {exc.strerror or exc}", code=2)
            typer.echo(f"wrote {write}")
