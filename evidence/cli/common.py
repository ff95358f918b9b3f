"""What every command module shares: the consoles, the one-paragraph error (UserError, fail) and
loading a spec or exiting 2. Command modules import this, never evidence.cli.main, which imports them."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import NoReturn

import typer
from rich.console import Console

from evidence.canon import dumps
from evidence.spec.model import SpecError, Spec, load_spec

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)


class UserError(Exception):
    """An error the user can act on: printed as one paragraph, exit 2 (or the given code)."""

    def __init__(self, message: str, code: int = 2):
        super().__init__(message)
        self.code = code


def fail(message: str, code: int = 2) -> NoReturn:
    raise UserError(message, code)


def load_spec_or_exit(path: Path, as_json: bool = False) -> Spec:
    try:
        return load_spec(path)
    except SpecError as e:
        if as_json:
            sys.stdout.write(dumps({"ok": False, "errors": e.as_json()}))
        else:
            err.print(e.render(), markup=False)
        raise typer.Exit(2)
