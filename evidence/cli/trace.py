"""`evidence trace FILE`: every kernel-trace analysis on one trace file.

The main CLI calls `register(app)`; this module owns the command, its option
parsing and its rendering. Bad input (unreadable trace, bad window, bad rules
file) is one paragraph on stderr and exit 2, never a traceback.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console
from rich.table import Table

from evidence.canon import dumps
from evidence.cli.console import make_console
from evidence.traces.analyses import ANALYSES, DEFAULT_RULES, analyze_trace, load_rules
from evidence.traces.analyses.geometry import path_totals
from evidence.traces.analyses.text import Block, Line
from evidence.traces.load import load_trace
from evidence.traces.model import TraceError

_UNITS = {"ns": 1, "us": 1_000, "ms": 1_000_000, "s": 1_000_000_000}
_REL = re.compile(r"^\+(\d+(?:\.\d+)?)(ns|us|ms|s)?$")

HELP = """Analyze one GPU kernel trace: an Nsight Systems SQLite export (nsys export --type sqlite)
or a PyTorch-profiler (Kineto) Chrome trace (.json / .json.gz); the format is detected from the content.

Reports: kernel-active fraction (union of kernel intervals over the window, all streams);
kernel families by ordered regex rules (first match wins) with per-output-token cost when
--tokens is given; launch-geometry split of attention kernels (graph replays apart from eager
launches; FA2 split-KV gridX read as the longest query chunk, persistent FA3 grids not
interpreted); attention per path (gridX=1 decode-oriented, gridX>1 mixed/prefill-containing,
summed over grid rows: launches, total and mean time, per output token) in the window and in
the accepted forwards; model forwards rebuilt from per-layer attention launches (--layers); the
sustained regime (plateau of forward population and attention duration); and vLLM engine
steps (execute_context_N(T)_generation_M(G) annotations) with token-budget use (--budget).

Profiled runs are diagnostics: the profiler perturbs the engine, so never quote them as
performance measurements. Exit 0 on success, 2 on bad input."""


def parse_window(text: str | None, first_kernel_ns: int | None = None) -> tuple[int | None, int | None] | None:
    """'START:END' in absolute ns; either side may be empty (default) or '+<n>[ns|us|ms|s]'
    relative to the first kernel's start. Raises ValueError with a readable message."""
    if text is None:
        return None
    if text.count(":") != 1:
        raise ValueError(f"--window {text!r} must be START:END (ns; either side may be empty or +<n>[ns|us|ms|s])")
    out: list[int | None] = []
    for side in text.split(":"):
        side = side.strip()
        if not side:
            out.append(None)
            continue
        m = _REL.match(side)
        if m:
            if first_kernel_ns is None:
                raise ValueError("a relative --window needs at least one kernel in the trace")
            out.append(first_kernel_ns + round(float(m.group(1)) * _UNITS[m.group(2) or "ns"]))
            continue
        try:
            out.append(int(side))
        except ValueError:
            raise ValueError(
                f"--window side {side!r} is neither an integer of nanoseconds nor +<n>[ns|us|ms|s]"
            ) from None
    if out[0] is not None and out[1] is not None and out[1] <= out[0]:
        raise ValueError(f"--window end {out[1]} is not after its start {out[0]}")
    return out[0], out[1]


def register(app: typer.Typer) -> None:
    """Add the `trace` command to the given app."""

    @app.command("trace", help=HELP)
    def trace(
        file: Path = typer.Argument(..., help="The trace: nsys .sqlite export, or Kineto .json / .json.gz."),
        layers: Optional[int] = typer.Option(
            None, "--layers", min=1,
            help="Transformer layers per forward (36 for Qwen2.5-3B); needed to rebuild forwards."),
        window: Optional[str] = typer.Option(
            None, "--window", metavar="START:END",
            help="Analysis window: absolute ns, or an offset from the first kernel such as +250ms or +1.5s "
                 "(units ns, us, ms, s); an empty side keeps the default (first kernel start to last kernel end)."),
        rules: Optional[Path] = typer.Option(
            None, "--rules", help="Kernel-family rules (YAML/JSON): a list of {name, pattern, family?, geometry?, "
                                  "layer_marker?} or name: pattern pairs, in match order. Default: built-in rules."),
        tokens: Optional[int] = typer.Option(
            None, "--tokens", min=1, help="Output tokens generated inside the window (for per-token cost)."),
        budget: Optional[int] = typer.Option(
            None, "--budget", min=1, help="Scheduler token budget per step (max_num_batched_tokens), e.g. 2048."),
        heads: Optional[int] = typer.Option(
            None, "--heads", min=1, help="Query heads, to read FA2 split-KV grid_z (default: inferred)."),
        gap_factor: float = typer.Option(
            5.0, "--gap-factor", min=1.0, help="A layer-to-layer gap above this x the median ends a forward."),
        tol: float = typer.Option(0.05, "--tol", min=0.0, help="Plateau tolerance: sequence counts within max <= min x (1 + tol)."),
        min_forwards: int = typer.Option(5, "--min-forwards", min=1, help="Shortest plateau, in forwards."),
        device: Optional[int] = typer.Option(None, "--device", help="Only kernels on this GPU."),
        pid: Optional[int] = typer.Option(None, "--pid", help="Only kernels launched by this process."),
        as_json: bool = typer.Option(False, "--json", help="Print canonical JSON (sorted keys) instead of tables."),
    ) -> None:
        err = Console(stderr=True, highlight=False, soft_wrap=True)
        try:
            rule_set = load_rules(rules) if rules else DEFAULT_RULES
            tr = load_trace(file)
            first = int(tr.kernels["start_ns"].min()) if len(tr.kernels) else None
            win = parse_window(window, first)
            result = analyze_trace(tr, n_layers=layers, window=win, rules=rule_set, output_tokens=tokens,
                                   budget=budget, heads=heads, gap_factor=gap_factor, rel_tol=tol,
                                   min_forwards=min_forwards, device=device, pid=pid)
        except (TraceError, ValueError) as e:
            err.print(f"error: {e}", markup=False)
            raise typer.Exit(2)
        if "absent" not in result.get("kernel_active", {}):
            result["paths"] = path_totals(result)  # the article's per-path grouping, derived from the above
        if as_json:
            sys.stdout.write(dumps(result))
            return
        render(result, make_console())


# ---------------------------------------------------------------------------
# Rendering: the trace's header, then each analysis's text in the registry's order
# ---------------------------------------------------------------------------

def render(r: dict[str, Any], out: Console) -> None:
    t = r["trace"]
    out.print(f"[bold]{t['path']}[/]  ({t['format']})", markup=True)
    out.print(f"kernels {t['kernels']:,}  graph-replayed {t['graph_kernels']:,}  steps {t['steps']}  "
              f"streams {', '.join(f'{d}/{s}' for d, s in t['streams']) or '-'}  SMs {t['num_sms'] or '-'}")
    for n in t["notes"]:
        out.print(f"note: {n}", markup=False)
    no_kernels = "absent" in r.get("kernel_active", {})
    if no_kernels:  # one line for every analysis that needs kernels
        out.print(f"kernel analyses: {r['kernel_active']['absent']}", markup=False)
    for a in ANALYSES:
        if a.render is None or (no_kernels and "kernels" in a.needs):
            continue
        for block in a.render(r):
            _print(block, out)


def _print(block: Block, out: Console) -> None:
    if isinstance(block, Line):
        out.print(block.text, markup=block.markup)
        return
    if block.title is None:  # a header-less two-column list
        tab = Table(show_header=False, box=None, pad_edge=False)
    else:
        tab = Table(title=block.title, title_justify="left")
        for c in block.columns:
            tab.add_column(c, justify="left" if c in block.left else "right")
    for row in block.rows:
        tab.add_row(*row)
    out.print(tab)
