"""The command line: one module per command group; main builds the typer app."""

from evidence.cli.main import main

__all__ = ["main"]
