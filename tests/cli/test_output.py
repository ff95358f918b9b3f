"""What a machine reads: --json puts exactly one JSON document on stdout, errors included; off a terminal,
tables never cut a number. What a person reads: --help at 80 columns, flags shown plainly."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from clirun import ev
from rich.table import Table

from evidence.cli.console import keep_numbers, make_console, wants_json


@pytest.mark.parametrize(
    "args",
    [
        ["analyze", "no-such-run", "--json"],
        ["analyze", "--json", "--no-such-option"],
        ["validate", "no-such-spec.yaml", "--json"],
        ["import", "vllm-bench", "NOTJSON", "--out", "x", "--json"],
        ["trace", "no-such-trace.json", "--json"],
    ],
)
def test_json_errors_are_one_json_document_on_stdout(tmp_path: Path, args: list[str]) -> None:
    bad = tmp_path / "bad.txt"
    bad.write_text("not json")
    p = ev(*[str(bad) if a == "NOTJSON" else a for a in args], cwd=tmp_path)
    assert p.returncode == 2
    doc = json.loads(p.stdout)  # exactly one document: json.loads refuses trailing text
    assert doc["ok"] is False
    assert (doc.get("error") or doc.get("errors")) and "Traceback" not in p.stdout + p.stderr
    if "error" in doc:  # validate's own document lists every spec problem ("errors")
        assert p.stderr.strip(), "the human message still goes to stderr"
        assert "│" not in doc["error"] and not doc["error"].startswith("evidence: error")


def test_without_json_errors_stay_plain_text(tmp_path: Path) -> None:
    p = ev("analyze", "no-such-run", cwd=tmp_path)
    assert p.returncode == 2 and p.stdout == "" and "not a folder" in p.stderr


def test_wants_json_reads_options_only() -> None:
    assert wants_json(["run", "s.yaml", "--json"]) and not wants_json(["run", "s.yaml"])
    assert not wants_json(["run", "--", "--json"])


def test_tables_off_a_terminal_never_cut_numbers(monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    monkeypatch.delenv("COLUMNS", raising=False)
    buf = io.StringIO()
    con = make_console()
    con._file = buf  # not a terminal
    t = Table()
    numbers = [f"{1000 + i * 7919.123:,.2f}" for i in range(12)]
    for i in range(12):
        t.add_column(f"a fairly long column header {i}", justify="right")
    t.add_row(*numbers)
    con.print(t)
    text = buf.getvalue()
    assert "…" not in text
    for n in numbers:
        assert n in text


def test_keep_numbers_gives_each_column_room_for_its_longest_number() -> None:
    t = Table()
    t.add_column("x")
    t.add_column("text")
    t.add_row("-97.3% to +12162.7%", "words only here")
    keep_numbers(t)
    assert t.columns[0].min_width == len("+12162.7%") and not t.columns[1].min_width


@pytest.mark.parametrize("cmd", [[], ["run"], ["analyze"], ["import", "vllm-bench"], ["trace"], ["validate"]])
def test_help_reads_at_80_columns(tmp_path: Path, cmd: list[str]) -> None:
    p = ev(*cmd, "--help", cwd=tmp_path, env={"COLUMNS": "80"})
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert max(len(ln) for ln in lines) <= 80
    assert "<bool>" not in p.stdout and "╭" not in p.stdout
    # paragraphs are re-wrapped: no line of prose ends far short of the width only to go on in the next line
    prose = [ln for ln in lines if ln.startswith("  ") and not ln.lstrip().startswith("-")]
    short = [
        a
        for a, b in zip(prose, prose[1:])
        if 0 < len(a.strip()) < 30 and b.strip() and a.strip()[-1] not in ".:)" and re.match(r"^  [a-z]", b)
    ]
    assert not short, short


def test_json_guard_writes_one_document_only_when_the_command_wrote_none(monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    from evidence.cli.console import JsonGuard

    for code, wrote, expect in ((2, "", True), (1, '{"ok": true}\n', False), (0, "", False)):
        out, err = io.StringIO(), io.StringIO()
        monkeypatch.setattr("sys.stdout", out)
        monkeypatch.setattr("sys.stderr", err)
        g = JsonGuard()
        print("evidence: error: it broke", file=sys.stderr)
        sys.stdout.write(wrote)
        g.finish(code)
        assert sys.stdout is out and sys.stderr is err
        if expect:
            assert json.loads(out.getvalue()) == {"ok": False, "exit_code": code, "error": "it broke"}
        else:
            assert out.getvalue() == wrote
