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
from evidence.traces.analyses import DEFAULT_RULES, analyze_trace, load_rules
from evidence.traces.analyses.geometry import path_totals
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
# Rendering
# ---------------------------------------------------------------------------

def _ms(ns: Any) -> str:
    return "-" if ns is None else f"{ns / 1e6:,.3f}"


def _us(ns: Any) -> str:
    return "-" if ns is None else f"{ns / 1e3:,.2f}"


def _pct(x: Any) -> str:
    return "-" if x is None else f"{100 * x:.2f}%"


def _num(v: Any) -> str:
    return f"{v:,}" if isinstance(v, int) else f"{v:,.2f}"


def _dist(d: dict, fmt=_num) -> str:
    if not d or not d.get("n"):
        return "-"
    return f"min {fmt(d['min'])}  p50 {fmt(d['p50'])}  mean {fmt(d['mean'])}  max {fmt(d['max'])}  (n={d['n']})"


def render(r: dict[str, Any], out: Console) -> None:
    t = r["trace"]
    out.print(f"[bold]{t['path']}[/]  ({t['format']})", markup=True)
    out.print(f"kernels {t['kernels']:,}  graph-replayed {t['graph_kernels']:,}  steps {t['steps']}  "
              f"streams {', '.join(f'{d}/{s}' for d, s in t['streams']) or '-'}  SMs {t['num_sms'] or '-'}")
    for n in t["notes"]:
        out.print(f"note: {n}", markup=False)
    if "absent" in r.get("kernel_active", {}):
        out.print(f"kernel analyses: {r['kernel_active']['absent']}", markup=False)
    else:
        _render_kernels(r, out)
    _render_steps(r["steps"], out)


def _render_kernels(r: dict[str, Any], out: Console) -> None:
    w = r["window"]
    ka = r["kernel_active"]
    out.print()
    out.print(f"[bold]Kernel-active[/] window {w['start_ns']}..{w['end_ns']} ns ({_ms(w['end_ns'] - w['start_ns'])} ms, {w['source']})")
    out.print(f"  active {_ms(ka['active_ns'])} ms of {_ms(w['end_ns'] - w['start_ns'])} ms = [bold]{_pct(ka['fraction'])}[/]"
              f"   (sum of durations {_ms(ka['sum_kernel_ns'])} ms; overlap across streams {_ms(ka['overlap_ns'])} ms)")

    f = r["families"]
    tab = Table(title="Kernel families (first matching rule wins)", title_justify="left")
    for c in ("family", "rules", "count", "total ms", "mean us", "share", "us / output token"):
        tab.add_column(c, justify="left" if c in ("family", "rules") else "right")
    for row in list(f["families"]) + [f["total"]]:
        tab.add_row(row["family"], ", ".join(row["rules"]) if row["family"] != "total" else "", f"{row['count']:,}",
                    _ms(row["total_ns"]), _us(row["mean_ns"]), _pct(row["share"]), _us(row["per_token_ns"]))
    out.print()
    out.print(tab)
    if f["per_token_reason"]:
        out.print(f"  per token: {f['per_token_reason']}", markup=False)

    for g in r["geometry"]:
        groups = g["groups"]
        if g["geometry"][g["select"]] == "opaque":  # nothing to interpret: one line, the groups are in --json
            n = sum(x["count"] for x in groups)
            out.print()
            out.print(f"[bold]Launch geometry[/]: {g['select']}: {n:,} launches in {len(groups)} grid groups, "
                      "no declared meaning for its grid (all groups are in --json)")
            continue
        tab = Table(title=f"Launch geometry: {g['select']} ({g['geometry'][g['select']]})", title_justify="left")
        for c in ("grid", "replay", "count", "total ms", "mean us", "us / tok", "meaning"):
            tab.add_column(c, justify="left" if c in ("grid", "replay", "meaning") else "right")
        shown = sorted(groups, key=lambda x: -x["total_ns"])[:12]
        shown_set = {id(x) for x in shown}
        for x in groups:
            if id(x) in shown_set:
                tab.add_row("(" + ", ".join(map(str, x["grid"])) + ")", x["replay"], f"{x['count']:,}", _ms(x["total_ns"]),
                            _us(x["mean_ns"]), _us(x["per_token_ns"]), x["meaning"])
        out.print()
        out.print(tab)
        if len(groups) > len(shown):
            out.print(f"  ... {len(groups) - len(shown)} smaller grid groups not shown (all are in --json)")
        if g.get("heads"):
            out.print(f"  heads {g['heads']} ({g['heads_source']})")

    _render_paths(r.get("paths"), out)

    fw = r["forwards"]
    out.print()
    if "absent" in fw:
        out.print(f"[bold]Forwards[/]: {fw['absent']}")
    else:
        out.print(f"[bold]Forwards[/] of {fw['n_layers']} layers from {fw['rule']} launches on device {fw['device']} "
                  f"stream {fw['stream']}: {fw['marker_launches']:,} launches, {fw['segments']} segments")
        acc = fw["forwards"]
        by_path: dict[tuple, int] = {}
        for x in acc:
            by_path[(x["path"] or "unknown", x["replay"])] = by_path.get((x["path"] or "unknown", x["replay"]), 0) + 1
        out.print(f"  accepted {len(acc)} ({', '.join(f'{p}/{rp} {c}' for (p, rp), c in sorted(by_path.items())) or 'none'}); "
                  f"split from multiples: {fw['split_segments']} segment(s); rejected {len(fw['rejected'])} segment(s), "
                  f"{fw['rejected_launches']} launches {fw['rejected_by_code'] or ''}")
        b = fw["boundaries"]
        out.print("  boundaries: " + ", ".join(f"{k} {v}" for k, v in b.items())
                  + f"; median in-forward gap {_us(fw['median_gap_ns'])} us, gap factor {fw['gap_factor']}")
        if acc:
            checks = sorted({x["sequence_check"] for x in acc})
            srcs = sorted({x["sequences_source"] or "unknown" for x in acc})
            out.print(f"  sequence dimension: {'; '.join(checks)}; sequences from {', '.join(srcs)}")
        for rej in fw["rejected"][:10]:
            out.print(f"  rejected segment {rej['segment']} [{rej['code']}]: {rej['reason']}", markup=False)
        if len(fw["rejected"]) > 10:
            out.print(f"  ... {len(fw['rejected']) - 10} more rejected segments (all are in --json)")
        for note in fw["notes"]:
            out.print(f"  note: {note}", markup=False)

    sus = r["sustained"]
    out.print()
    if "absent" in sus:
        out.print(f"[bold]Sustained regime[/]: {sus['absent']}")
    else:
        for path, s in sus.items():
            if s["present"]:
                out.print(f"[bold]Sustained regime[/] ({path} path): {s['forwards']} forwards "
                          f"(#{s['first_forward']}..#{s['last_forward']}, {s['ramp_forwards_before']} before, "
                          f"{s['drain_forwards_after']} after), mean population [bold]{s['mean_sequences']:.2f}[/] "
                          f"({s['min_sequences']}-{s['max_sequences']}), mean attention kernel "
                          f"[bold]{_us(s['mean_kernel_ns'])} us[/] ({_us(s['min_kernel_ns'])}-{_us(s['max_kernel_ns'])})")
            else:
                out.print(f"[bold]Sustained regime[/] ({path} path): none - {s['reason']}")


def _render_paths(p: dict[str, Any] | None, out: Console) -> None:
    """Attention time per path (gridX=1 decode-oriented, gridX>1 mixed/prefill-containing), the seed article's
    table: in the capture window, and in the accepted forwards."""
    if not p:
        return
    for part, title in (("window", "in the capture window"), ("forwards", "in the accepted forwards")):
        rows = p[part]
        out.print()
        if not rows:
            out.print(f"[bold]Attention by path[/] {title}: {p[part + '_absent']}")
            continue
        tab = Table(title=f"Attention by path {title}", title_justify="left")
        cols = ("rule", "path") + (("forwards",) if part == "forwards" else ("grid groups",)) + \
            ("launches", "total ms", "mean us", "us / output token")
        for c in cols:
            tab.add_column(c, justify="left" if c in ("rule", "path") else "right")
        for x in rows:
            n = x["forwards"] if part == "forwards" else x["grid_groups"]
            tab.add_row(str(x["rule"]), x["path"], f"{n:,}", f"{x['launches']:,}", _ms(x["total_ns"]),
                        _us(x["mean_ns"]), _us(x["per_token_ns"]))
        out.print(tab)
    if p["per_token_reason"]:
        out.print(f"  per token: {p['per_token_reason']}", markup=False)


def _render_steps(st: dict[str, Any], out: Console) -> None:
    out.print()
    if "absent" in st:
        out.print(f"[bold]Engine steps[/]: {st['absent']}")
        return
    out.print(f"[bold]Engine steps[/]: {st['steps']} ({st['steps_in_window']} in the window, "
              f"{st['steps_partly_outside']} cut by it): {st['steps_with_prefill']} with prefill, "
              f"{st['decode_only_steps']} decode-only")
    tab = Table(show_header=False, box=None, pad_edge=False)
    tab.add_row("prefill requests / step", _dist(st["prefill_requests"]))
    tab.add_row("prefill tokens / step", _dist(st["prefill_tokens"]))
    tab.add_row("decode population (decode-only)", _dist(st["decode_population_decode_only"]))
    tab.add_row("decode population (with prefill)", _dist(st["decode_population_with_prefill"]))
    tab.add_row("tokens (T+G) / step", _dist(st["tokens"]))
    if st["budget"] is not None:
        tab.add_row("budget", f"{st['budget']}: {st['prefill_steps_at_budget']} prefill steps use it exactly, "
                              f"{st['prefill_steps_below_budget']} below, {st['steps_over_budget']} steps over")
    else:
        tab.add_row("budget", st["budget_reason"])
    tab.add_row("kernels", f"{st['kernels_placed']:,} placed under a step, {st['kernels_unplaced']:,} outside any "
                           f"({_ms(st['unplaced_kernel_ns'])} ms)")
    tab.add_row("kernel ms / prefill step", _dist(st["kernel_ns_per_step_prefill"], lambda v: f"{v / 1e6:.3f}"))
    tab.add_row("kernel ms / decode step", _dist(st["kernel_ns_per_step_decode"], lambda v: f"{v / 1e6:.3f}"))
    tab.add_row("kernel-active within step", _dist(st["active_fraction_per_step"], lambda v: f"{100 * v:.1f}%"))
    out.print(tab)
    for b in st["below_budget"][:10]:
        out.print(f"  step {b['step']} below budget: N={b['N']} T={b['T']} M={b['M']} G={b['G']} -> {b['tokens']} tokens")
