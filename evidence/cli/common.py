"""What every command module shares: the consoles, the one-paragraph error (UserError, fail) and
loading a spec or exiting 2. Command modules import this, never evidence.cli.main, which imports them."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import NoReturn

import typer

from evidence.canon import dumps
from evidence.spec.model import SpecError, Spec, load_spec

from evidence.cli.console import make_console

out = make_console()
err = make_console(stderr=True)


class UserError(Exception):
    """An error the user can act on: printed as one paragraph, exit 2 (or the given code)."""

    def __init__(self, message: str, code: int = 2):
        super().__init__(message)
        self.code = code


def fail(message: str, code: int = 2) -> NoReturn:
    raise UserError(message, code)


def load_spec_or_exit(path: Path, as_json: bool = False, *, check_launch: bool = False) -> Spec:
    """The validated spec, or exit 2 with every problem. check_launch: also that this machine can start the
    engine's launch.command from the current folder (what `run` does), a check of the machine, not the spec."""
    from evidence.engines import adapter_class

    try:
        s = load_spec(path)
        local = adapter_class(s.engine.kind).local_process
        # the engine's launch and every arm's own (another build): each is started by this run
        launches = [("engine.launch.command", s.engine.launch)] + [
            (f"arms.{i}.launch.command", a.launch) for i, a in enumerate(s.arms) if a.launch is not None
        ]
        bad = [
            (None, f, why)
            for f, la in launches
            if check_launch and local
            for why in [la.missing_program(Path.cwd())]
            if why
        ]
        if bad:
            raise SpecError(str(path), bad)
        return s
    except SpecError as e:
        if as_json:
            sys.stdout.write(dumps({"ok": False, "errors": e.as_json()}))
        else:
            err.print(e.render(), markup=False)
        raise typer.Exit(2)
